package tcrypt

import (
	"fmt"
	"hash"
	"strings"

	"github.com/blkcrypt/blkcrypt/capi"
	"github.com/blkcrypt/blkcrypt/kdf"
)

// KDF is one header-key derivation TrueCrypt or VeraCrypt uses. The search
// tries them in the order of KDFs, as cryptsetup's tcrypt_kdf table does.
type KDF struct {
	// Name is "pbkdf2" or "argon2id".
	Name string
	// Hash is the PBKDF2 hash in cryptsetup's spelling (ripemd160, sha512,
	// whirlpool, sha256, sha1, blake2s-256, stribog512); empty for Argon2id.
	Hash string
	// Iterations is the PBKDF2 iteration count, or the Argon2id time cost,
	// without a PIM.
	Iterations uint32
	// MemoryKiB and Parallel are the Argon2id costs without a PIM.
	MemoryKiB, Parallel uint32
	// Legacy marks TrueCrypt's pre-5.0 derivation (PBKDF2-SHA1).
	Legacy bool
	// VeraCrypt marks derivations only VeraCrypt uses.
	VeraCrypt bool
	// PIMConst and PIMMult give the iterations for a VeraCrypt PIM:
	// PIMConst + PIMMult*PIM. PIMConst 0 marks the system (boot) variant.
	PIMConst, PIMMult uint32
}

// KDFs is the search order, the same as cryptsetup 2.8's.
var KDFs = []KDF{
	{Name: "pbkdf2", Hash: "ripemd160", Iterations: 2000},
	{Name: "pbkdf2", Hash: "ripemd160", Iterations: 1000},
	{Name: "pbkdf2", Hash: "sha512", Iterations: 1000},
	{Name: "pbkdf2", Hash: "whirlpool", Iterations: 1000},
	{Name: "pbkdf2", Hash: "sha1", Iterations: 2000, Legacy: true},
	{Name: "pbkdf2", Hash: "sha512", Iterations: 500000, VeraCrypt: true, PIMConst: 15000, PIMMult: 1000},
	{Name: "pbkdf2", Hash: "whirlpool", Iterations: 500000, VeraCrypt: true, PIMConst: 15000, PIMMult: 1000},
	{Name: "pbkdf2", Hash: "sha256", Iterations: 500000, VeraCrypt: true, PIMConst: 15000, PIMMult: 1000},
	{Name: "pbkdf2", Hash: "sha256", Iterations: 200000, VeraCrypt: true, PIMMult: 2048}, // boot only
	{Name: "argon2id", Iterations: 6, MemoryKiB: 425984, Parallel: 1, VeraCrypt: true},
	{Name: "pbkdf2", Hash: "blake2s-256", Iterations: 500000, VeraCrypt: true, PIMConst: 15000, PIMMult: 1000},
	{Name: "pbkdf2", Hash: "blake2s-256", Iterations: 200000, VeraCrypt: true, PIMMult: 2048}, // boot only
	{Name: "pbkdf2", Hash: "ripemd160", Iterations: 655331, VeraCrypt: true, PIMConst: 15000, PIMMult: 1000},
	{Name: "pbkdf2", Hash: "ripemd160", Iterations: 327661, VeraCrypt: true, PIMMult: 2048}, // boot only
	{Name: "pbkdf2", Hash: "stribog512", Iterations: 500000, VeraCrypt: true, PIMConst: 15000, PIMMult: 1000},
}

// capiHash maps cryptsetup's hash names to crypto API names.
var capiHash = map[string]string{
	"ripemd160":   "ripemd160",
	"sha512":      "sha512",
	"whirlpool":   "wp512",
	"sha1":        "sha1",
	"sha256":      "sha256",
	"blake2s-256": "blake2s-256",
	"stribog512":  "streebog512",
}

// String names the derivation as cryptsetup's debug log does.
func (k KDF) String() string {
	if k.Name == "argon2id" {
		return "argon2id"
	}
	return fmt.Sprintf("%s-%s-%d", k.Name, k.Hash, k.Iterations)
}

// HashName is what cryptsetup reports as the PBKDF2 hash (or "argon2id").
func (k KDF) HashName() string {
	if k.Hash == "" {
		return k.Name
	}
	return k.Hash
}

// Available reports whether blkcrypt can compute the derivation.
func (k KDF) Available() bool {
	if k.Name == "argon2id" {
		return true
	}
	_, err := k.hashFunc()
	return err == nil
}

func (k KDF) hashFunc() (func() hash.Hash, error) {
	n, ok := capiHash[k.Hash]
	if !ok {
		return nil, fmt.Errorf("%w: hash %s", ErrUnsupported, k.Hash)
	}
	f, err := capi.HashFunc(n)
	if err != nil {
		return nil, fmt.Errorf("%w: PBKDF2 hash %s is not available", ErrUnsupported, k.Hash)
	}
	return f, nil
}

// matches is cryptsetup's --hash filter: a substring of the hash, or of
// the KDF name where there is no hash.
func (k KDF) matches(filter string) bool {
	if filter == "" {
		return true
	}
	if k.Hash != "" {
		return strings.Contains(k.Hash, filter)
	}
	return strings.Contains(k.Name, filter)
}

// costs returns the iterations (time cost) and memory for a PIM (0: none).
func (k KDF) costs(pim uint32) (iter, memKiB uint32) {
	if pim == 0 || !k.VeraCrypt {
		return k.Iterations, k.MemoryKiB
	}
	if k.Name == "argon2id" {
		if pim <= 31 {
			return (pim-1)/3 + 3, 1024 * (64 + (pim-1)*32)
		}
		return pim - 18, 1024 * 1024
	}
	return k.PIMConst + k.PIMMult*pim, 0
}

// pbkdf2Block is one PBKDF2 output block, run a stretch of iterations
// at a time by the search (kdf's PBKDF2, the only one in blkcrypt); t is
// the running XOR the search copies out, kdf's buffer itself.
type pbkdf2Block struct {
	*kdf.PBKDF2Block
	t []byte
}

func newPBKDF2Block(newHash func() hash.Hash, password, salt []byte, b uint32) *pbkdf2Block {
	k := kdf.NewPBKDF2Block(newHash, password, salt, b)
	return &pbkdf2Block{PBKDF2Block: k, t: k.Sum()}
}

// run iterates up to n iterations in total, polling stop every few
// hundred; false if stopped.
func (b *pbkdf2Block) run(n uint32, stop func() bool) bool { return b.Run(n, stop) }

func (b *pbkdf2Block) wipe() { b.Wipe() }

// pbkdf2 is plain PBKDF2-HMAC, for tests: kdf.PBKDF2Key, which fails
// only on parameters tcrypt never uses.
func pbkdf2(newHash func() hash.Hash, password, salt []byte, iter uint32, keyLen int) []byte {
	k, err := kdf.PBKDF2Key(newHash, password, salt, int(iter), keyLen)
	if err != nil {
		panic("tcrypt: " + err.Error())
	}
	return k
}

// argon2id derives the header key with VeraCrypt's Argon2id, giving up
// (nil) once stop returns true, as the PBKDF2 blocks do. It is also nil
// when the memory cannot be mapped: that derivation then matches nothing,
// where x/crypto's argon2 used to end the process.
func argon2id(password, salt []byte, iter, memKiB, parallel uint32, keyLen int, stop func() bool) []byte {
	k, err := kdf.Argon2KeyStop(stop, kdf.Argon2id, password, salt, iter, memKiB, parallel, keyLen)
	if err != nil {
		return nil
	}
	return k
}

// subtle_xor is dst ^= src, for the CBC chains (ciphers.go).
func subtle_xor(dst, src []byte) { //nolint:revive // mirrors crypto/subtle.XORBytes
	for i := range dst {
		dst[i] ^= src[i]
	}
}
