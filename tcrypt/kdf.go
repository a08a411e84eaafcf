package tcrypt

import (
	"crypto/hmac"
	"encoding"
	"fmt"
	"hash"
	"reflect"
	"strings"

	"github.com/blkcrypt/blkcrypt/capi"
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

// hmacState is HMAC with its keyed inner and outer states saved, so an
// iteration costs the compressions of its message only. Hashes that do not
// marshal their state (ripemd160, whirlpool) are copied as plain structs
// when they are pointers to pointer-free structs, which both are.
type hmacState struct {
	inner, outer   hash.Hash
	innerS, outerS snapshot
	size           int
}

type snapshot interface{ restore(h hash.Hash) }

type structSnap struct{ v reflect.Value }

func (s structSnap) restore(h hash.Hash) { reflect.ValueOf(h).Elem().Set(s.v) }

type marshalSnap struct{ st []byte }

func (s marshalSnap) restore(h hash.Hash) {
	if h.(encoding.BinaryUnmarshaler).UnmarshalBinary(s.st) != nil {
		panic("tcrypt: hash state does not restore")
	}
}

type padSnap struct{ pad []byte }

func (s padSnap) restore(h hash.Hash) { h.Reset(); h.Write(s.pad) }

func plainStruct(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	case reflect.Array:
		return plainStruct(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if !plainStruct(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

func takeSnapshot(h hash.Hash, pad []byte) snapshot {
	v := reflect.ValueOf(h)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct && plainStruct(v.Elem().Type()) {
		c := reflect.New(v.Elem().Type()).Elem()
		c.Set(v.Elem())
		return structSnap{c}
	}
	if m, ok := h.(encoding.BinaryMarshaler); ok {
		if _, ok := h.(encoding.BinaryUnmarshaler); ok {
			if st, err := m.MarshalBinary(); err == nil {
				return marshalSnap{st}
			}
		}
	}
	return padSnap{append([]byte(nil), pad...)}
}

func newHMACState(newHash func() hash.Hash, key []byte) *hmacState {
	m := &hmacState{inner: newHash(), outer: newHash()}
	bs := m.inner.BlockSize()
	m.size = m.inner.Size()
	k := key
	if len(k) > bs {
		m.inner.Write(k)
		k = m.inner.Sum(nil)
		m.inner.Reset()
		defer clear(k)
	}
	ipad, opad := make([]byte, bs), make([]byte, bs)
	copy(ipad, k)
	copy(opad, k)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	m.inner.Write(ipad)
	m.outer.Write(opad)
	m.innerS, m.outerS = takeSnapshot(m.inner, ipad), takeSnapshot(m.outer, opad)
	clear(ipad)
	clear(opad)
	return m
}

func (m *hmacState) sum(out []byte, parts ...[]byte) []byte {
	m.innerS.restore(m.inner)
	for _, p := range parts {
		m.inner.Write(p)
	}
	out = m.inner.Sum(out[:0])
	m.outerS.restore(m.outer)
	m.outer.Write(out)
	return m.outer.Sum(out[:0])
}

func (m *hmacState) wipe() {
	m.inner.Reset()
	m.outer.Reset()
	for _, s := range []snapshot{m.innerS, m.outerS} {
		switch s := s.(type) {
		case padSnap:
			clear(s.pad)
		case structSnap:
			s.v.SetZero()
		case marshalSnap:
			clear(s.st)
		}
	}
}

// pbkdf2Block computes block b (1-based) of PBKDF2, reporting the running
// XOR after each iteration count in stops (ascending) through at, and
// giving up when stop returns true (checked every 1024 iterations).
type pbkdf2Block struct {
	m    *hmacState
	u, t []byte
	done uint32 // iterations so far
}

func newPBKDF2Block(newHash func() hash.Hash, password, salt []byte, b uint32) *pbkdf2Block {
	m := newHMACState(newHash, password)
	blk := &pbkdf2Block{m: m, t: make([]byte, m.size)}
	idx := []byte{byte(b >> 24), byte(b >> 16), byte(b >> 8), byte(b)}
	blk.u = m.sum(make([]byte, 0, m.size), salt, idx)
	copy(blk.t, blk.u)
	blk.done = 1
	return blk
}

// run iterates up to n iterations in total; false if stopped.
func (b *pbkdf2Block) run(n uint32, stop func() bool) bool {
	for b.done < n {
		end := min(n, b.done+1024)
		for ; b.done < end; b.done++ {
			b.u = b.m.sum(b.u, b.u)
			subtle_xor(b.t, b.u)
		}
		if stop != nil && stop() {
			return false
		}
	}
	return true
}

func (b *pbkdf2Block) wipe() {
	b.m.wipe()
	clear(b.u)
	clear(b.t)
}

func subtle_xor(dst, src []byte) { //nolint:revive // mirrors crypto/subtle.XORBytes
	for i := range dst {
		dst[i] ^= src[i]
	}
}

// pbkdf2 is plain PBKDF2-HMAC, for tests and key files: one block after
// another.
func pbkdf2(newHash func() hash.Hash, password, salt []byte, iter uint32, keyLen int) []byte {
	var out []byte
	for b := uint32(1); len(out) < keyLen; b++ {
		blk := newPBKDF2Block(newHash, password, salt, b)
		blk.run(iter, nil)
		out = append(out, blk.t...)
		blk.wipe()
	}
	clear(out[keyLen:])
	return out[:keyLen]
}

var _ = hmac.Equal
