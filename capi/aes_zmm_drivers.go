package capi

import (
	"slices"

	"github.com/blkcrypt/blkcrypt/internal/aes"
)

// registerZMMCBC adds the CBC drivers of an implementation that
// aes_drivers.go registers for xts(aes) only: vaes-avx512 has its own
// multi-buffer CBC encryption (16 sectors in four ZMM registers) and a
// fused ESSIV batch kernel, so its cbc(aes) and essiv(cbc(aes),sha256)
// drivers rank above the vaes ones. Single requests and decryption run the
// vaes kernels, so these drivers never lose to them.
//
// On the CPUs that lower their clock under zmm code internal/aes lists
// vaes first, and these rank below the vaes drivers, as xts-aes-vaes-avx512
// does there.
func registerZMMCBC(impl string, base *Alg, newBlock func([]byte) (*aes.Block, error)) {
	mode, fused := PriorityVAES+10, PriorityFused+110
	if impls := aes.Impls(); slices.Index(impls, impl) > slices.Index(impls, "vaes") {
		mode, fused = PriorityVAES-10, PriorityFused+90
	}
	mustRegister(&Alg{Name: "cbc(aes)", Driver: "cbc-aes-" + impl, Base: base, Priority: mode, Type: TypeSkcipher,
		BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
		NewSkcipher: func(k []byte) (Skcipher, error) {
			b, err := newBlock(k)
			return aesCBC{b}, err
		}})
	mustRegister(&Alg{Name: "essiv(cbc(aes),sha256)", Driver: "essiv-cbc-aes-sha256-" + impl, Base: base, Priority: fused,
		Type: TypeSkcipher, Fused: true, BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
		NewSkcipher: func(k []byte) (Skcipher, error) { return newAESESSIV(newBlock, k) }})
}
