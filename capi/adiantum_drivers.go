package capi

import (
	"slices"

	"github.com/blkcrypt/blkcrypt/internal/adiantum"
	"github.com/blkcrypt/blkcrypt/internal/aes"
)

// The internal/adiantum implementations, one driver per implementation and
// stream cipher, named as the kernel names its adiantum template instances
// (stream cipher, block cipher, hash). The parts are not registered on
// their own: nothing else in blkcrypt uses XChaCha or NHPoly1305.
//
// Priorities follow the kernel's rule for an adiantum instance,
// (4·stream + 2·block + hash)/7, over the priorities the parts would have:
// generic 100; the avx2 parts and aes-aesni 300; the avx512 parts 400.
var adiantumParts = map[string]struct {
	stream, hash string
	streamPri    int
	hashPri      int
}{
	"generic": {"generic", "generic", PriorityGeneric, PriorityGeneric},
	"avx2":    {"avx2", "avx2", PriorityAESNI, PriorityAESNI},
	"avx512":  {"avx512", "avx512", PriorityModeNI, PriorityModeNI},
}

func init() {
	// The block cipher encrypts one block per request: AES-NI where the
	// vector implementations run, the generic Go AES beside the generic
	// stream and hash (as the kernel's reference instance pairs them).
	fastAES, fastAESPri := "generic", PriorityGeneric
	if slices.Contains(aes.Impls(), "aesni") {
		fastAES, fastAESPri = "aesni", PriorityAESNI
	}
	for _, impl := range adiantum.Impls() {
		parts := adiantumParts[impl]
		aesImpl, aesPri := fastAES, fastAESPri
		if impl == "generic" {
			aesImpl, aesPri = "generic", PriorityGeneric
		}
		newBlock := func(k []byte) (*aes.Block, error) { return aes.NewImpl(aesImpl, k) }
		for _, rounds := range []int{12, 20} {
			impl, rounds := impl, rounds
			stream := "xchacha12"
			if rounds == 20 {
				stream = "xchacha20"
			}
			mustRegister(&Alg{
				Name:     "adiantum(" + stream + ",aes)",
				Driver:   "adiantum(" + stream + "-" + parts.stream + ",aes-" + aesImpl + ",nhpoly1305-" + parts.hash + ")",
				Priority: (4*parts.streamPri + 2*aesPri + parts.hashPri) / 7,
				Type:     TypeSkcipher, BlockSize: 16, MinLen: adiantum.MinLen, IVSize: adiantum.TweakSize,
				KeySizes: []int{adiantum.KeySize},
				NewSkcipher: func(k []byte) (Skcipher, error) {
					c, err := adiantum.NewImpl(impl, rounds, k, newBlock)
					if err != nil {
						return nil, err
					}
					return adiantumMode{c}, nil
				}})
		}
	}
}

// adiantumMode is a keyed internal/adiantum cipher; it holds no request
// state, so a Tfm over it is safe for concurrent use.
type adiantumMode struct{ c *adiantum.Cipher }

func (m adiantumMode) Encrypt(dst, src, iv []byte) { m.c.Encrypt(dst, src, iv) }
func (m adiantumMode) Decrypt(dst, src, iv []byte) { m.c.Decrypt(dst, src, iv) }
func (m adiantumMode) Wipe()                       { m.c.Wipe() }
