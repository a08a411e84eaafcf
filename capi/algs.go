package capi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/sha512"
	"hash"

	"github.com/blkcrypt/blkcrypt/internal/serpent"
	"github.com/blkcrypt/blkcrypt/internal/whirlpool"
	"golang.org/x/crypto/blake2b"
	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/ripemd160" //nolint:staticcheck // LUKS1 volumes use ripemd160
	"golang.org/x/crypto/twofish"
)

// Driver priorities, following the kernel's habit: generic C code 100,
// instruction-set drivers 300 and up, dedicated mode drivers above the
// template instances built on the same instructions.
const (
	PriorityGeneric = 100
	PriorityStdlib  = 200
	PriorityAESNI   = 300
	PriorityModeNI  = 400
	PriorityVAES    = 500
	PriorityFused   = 600
)

var aesKeySizes = []int{16, 24, 32}

func init() {
	mustRegister(&Alg{Name: "aes", Driver: "aes-stdlib", Priority: PriorityStdlib, Type: TypeCipher,
		BlockSize: 16, KeySizes: aesKeySizes, NewCipher: aes.NewCipher})
	mustRegister(&Alg{Name: "twofish", Driver: "twofish-generic", Priority: PriorityGeneric, Type: TypeCipher,
		BlockSize: 16, KeySizes: aesKeySizes,
		NewCipher: func(k []byte) (cipher.Block, error) { return twofish.NewCipher(k) }})

	mustRegister(&Alg{Name: "serpent", Driver: "serpent-generic", Priority: PriorityGeneric, Type: TypeCipher,
		BlockSize: 16, KeySizes: aesKeySizes,
		NewCipher: func(k []byte) (cipher.Block, error) { return serpent.NewCipher(k) }})

	for _, h := range []struct {
		name string
		size int
		blk  int
		f    func() hash.Hash
	}{
		{"sha1", 20, 64, sha1.New},
		{"sha224", 28, 64, sha256.New224},
		{"sha256", 32, 64, sha256.New},
		{"sha384", 48, 128, sha512.New384},
		{"sha512", 64, 128, sha512.New},
		{"ripemd160", 20, 64, ripemd160.New},
		{"wp512", 64, 64, whirlpool.New},
		{"wp384", 48, 64, whirlpool.New384},
		{"wp256", 32, 64, whirlpool.New256},
		{"sha3-224", 28, 144, func() hash.Hash { return sha3.New224() }},
		{"sha3-256", 32, 136, func() hash.Hash { return sha3.New256() }},
		{"sha3-384", 48, 104, func() hash.Hash { return sha3.New384() }},
		{"sha3-512", 64, 72, func() hash.Hash { return sha3.New512() }},
		{"blake2b-512", 64, 128, func() hash.Hash { h, _ := blake2b.New512(nil); return h }},
		{"blake2b-256", 32, 128, func() hash.Hash { h, _ := blake2b.New256(nil); return h }},
		{"blake2s-256", 32, 64, func() hash.Hash { h, _ := blake2s.New256(nil); return h }},
	} {
		mustRegister(&Alg{Name: h.name, Driver: h.name + "-generic", Priority: PriorityGeneric, Type: TypeHash,
			BlockSize: h.blk, DigestSize: h.size, NewHash: h.f})
	}
}
