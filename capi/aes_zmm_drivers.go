package capi

import "github.com/blkcrypt/blkcrypt/internal/aes"

// registerZMMCBC adds the CBC drivers of an implementation that
// aes_drivers.go registers for xts(aes) only: vaes-avx512 has its own
// multi-buffer CBC encryption (16 sectors in four ZMM registers) and a
// fused ESSIV batch kernel, so its cbc(aes) and essiv(cbc(aes),sha256)
// drivers rank above the vaes ones. Single requests and decryption run the
// vaes kernels, so these drivers never lose to them.
func registerZMMCBC(impl string, base *Alg, newBlock func([]byte) (*aes.Block, error)) {
	mustRegister(&Alg{Name: "cbc(aes)", Driver: "cbc-aes-" + impl, Base: base, Priority: PriorityVAES + 10, Type: TypeSkcipher,
		BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
		NewSkcipher: func(k []byte) (Skcipher, error) {
			b, err := newBlock(k)
			return aesCBC{b}, err
		}})
	mustRegister(&Alg{Name: "essiv(cbc(aes),sha256)", Driver: "essiv-cbc-aes-sha256-" + impl, Base: base, Priority: PriorityFused + 110,
		Type: TypeSkcipher, Fused: true, BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
		NewSkcipher: func(k []byte) (Skcipher, error) { return newAESESSIV(newBlock, k) }})
}
