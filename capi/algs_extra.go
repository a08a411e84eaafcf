package capi

import (
	"crypto/cipher"

	"github.com/blkcrypt/blkcrypt/internal/camellia"
	"github.com/blkcrypt/blkcrypt/internal/kuznyechik"
)

// Block ciphers VeraCrypt uses besides AES, Serpent and Twofish. Camellia
// is checked against the kernel's and cryptsetup's ecb(camellia) vectors
// on first use; Kuznyechik has no vectors here (its package tests RFC
// 7801's) and runs the self-test's consistency checks only.
func init() {
	mustRegister(&Alg{Name: "camellia", Driver: "camellia-generic", Priority: PriorityGeneric, Type: TypeCipher,
		BlockSize: 16, KeySizes: aesKeySizes, NewCipher: camellia.NewCipher})
	mustRegister(&Alg{Name: "kuznyechik", Driver: "kuznyechik-generic", Priority: PriorityGeneric, Type: TypeCipher,
		BlockSize: 16, KeySizes: []int{32},
		NewCipher: func(k []byte) (cipher.Block, error) { return kuznyechik.NewCipher(k) }})
}
