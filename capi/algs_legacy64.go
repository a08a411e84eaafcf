package capi

import (
	"crypto/cipher"
	"crypto/des"

	"golang.org/x/crypto/cast5" //nolint:staticcheck // TrueCrypt 1.x volumes and old plain-mode setups use CAST5
)

// The 64-bit-block ciphers of TrueCrypt 1.x (cast5-cbc-tcw, des3_ede-cbc-tcw)
// and of old plain dm-crypt setups. They are slow and weak and are here only
// so that such volumes open; the ecb, cbc and ctr templates take them, xts
// and lrw refuse them as the kernel does. Neither package exposes its key
// schedule, so Wipe cannot clear it, as for twofish.

// cast5KeySizes are the kernel's 5-16 byte CAST5 keys less 5-10: RFC 2144
// runs keys of 80 bits or less with 12 rounds, which x/crypto/cast5 cannot
// do (it has 16 rounds and takes 16-byte keys only). Longer keys are
// zero-padded to 16 bytes, as the RFC and the kernel's cast5_setkey do.
var cast5KeySizes = []int{11, 12, 13, 14, 15, 16}

func newCAST5(key []byte) (cipher.Block, error) {
	var k [16]byte
	copy(k[:], key)
	defer clear(k[:])
	return cast5.NewCipher(k[:])
}

func init() {
	mustRegister(&Alg{Name: "cast5", Driver: "cast5-generic", Priority: PriorityGeneric, Type: TypeCipher,
		BlockSize: cast5.BlockSize, KeySizes: cast5KeySizes, NewCipher: newCAST5})
	// Like the kernel without CRYPTO_TFM_REQ_FORBID_WEAK_KEYS (dm-crypt
	// never sets it), weak and degenerate keys are accepted.
	mustRegister(&Alg{Name: "des", Driver: "des-generic", Priority: PriorityGeneric, Type: TypeCipher,
		BlockSize: des.BlockSize, KeySizes: []int{8}, NewCipher: des.NewCipher})
	mustRegister(&Alg{Name: "des3_ede", Driver: "des3_ede-generic", Priority: PriorityGeneric, Type: TypeCipher,
		BlockSize: des.BlockSize, KeySizes: []int{24}, NewCipher: des.NewTripleDESCipher})
}
