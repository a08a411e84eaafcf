package capi

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/sha512"
	"hash"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/serpent"
	"github.com/blkcrypt/blkcrypt/internal/whirlpool"
	"golang.org/x/crypto/blake2b"
	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/ripemd160" //nolint:staticcheck // LUKS1 volumes use ripemd160
	"golang.org/x/crypto/twofish"
	"lukechampine.com/adiantum"
	"lukechampine.com/adiantum/hbsh"
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

	for _, v := range []struct {
		name string
		new  func([]byte) *hbsh.HBSH
	}{
		{"adiantum(xchacha12,aes)", adiantum.New},
		{"adiantum(xchacha20,aes)", adiantum.New20},
	} {
		v := v
		mustRegister(&Alg{Name: v.name, Driver: v.name[:len(v.name)-5] + "-generic,aes-generic,nhpoly1305-generic)",
			Priority: PriorityGeneric, Type: TypeSkcipher, BlockSize: 16, MinLen: 16, IVSize: 32, KeySizes: []int{32},
			// The module keeps a reference to the key, and callers wipe theirs.
			NewSkcipher: func(k []byte) (Skcipher, error) { return &adiantumMode{h: v.new(bytes.Clone(k))}, nil }})
	}
}

// adiantumMode adapts lukechampine.com/adiantum, which keeps scratch state
// in the cipher, so requests are serialised.
type adiantumMode struct {
	mu sync.Mutex
	h  *hbsh.HBSH
}

func (m *adiantumMode) Encrypt(dst, src, iv []byte) {
	copy(dst, src)
	m.mu.Lock()
	m.h.Encrypt(dst, iv)
	m.mu.Unlock()
}

func (m *adiantumMode) Decrypt(dst, src, iv []byte) {
	copy(dst, src)
	m.mu.Lock()
	m.h.Decrypt(dst, iv)
	m.mu.Unlock()
}
