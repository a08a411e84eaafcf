// Package gcm is AES-GCM (NIST SP 800-38D) with 12-byte nonces and
// 16-byte tags, the kernel's gcm(aes) as dm-crypt's aes-gcm-random uses
// it on every sector.
//
// On amd64 CPUs with AVX-512 VAES and VPCLMULQDQ (Intel Ice Lake and
// later, AMD Zen 4 and later) Seal and Open run one assembly pass that
// encrypts four blocks a ZMM register, 16 blocks at a time, and hashes
// them with precomputed powers of the hash key (one GHASH reduction per
// 16 blocks). Elsewhere, and with the purego build tag, they are Go's
// crypto/cipher GCM, which is also what the tests hold the assembly to.
package gcm

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"strconv"
	"unsafe"
)

const (
	// NonceSize is the size of the nonce (IV) Seal and Open take.
	NonceSize = 12
	// TagSize is the size of the authentication tag Seal appends.
	TagSize = 16

	// maxPlaintext is GCM's limit with a 96-bit nonce: 2^32-2 blocks
	// (the 32-bit counter must not wrap into the tag's block J0).
	maxPlaintext = (1<<32 - 2) * 16
)

var errOpen = errors.New("gcm: message authentication failed")

// GCM is an AES-GCM key. It satisfies crypto/cipher.AEAD and is safe for
// concurrent use.
type GCM struct {
	// block is Go's AES with the same key: the assembly's hash key
	// H = E(0) comes from it.
	block cipher.Block
	// generic is Go's GCM: the implementation where there is no assembly.
	generic cipher.AEAD
	// fast selects the assembly; the fields below are its key material.
	fast bool
	// xk holds the 16-byte AES round keys 0..nr.
	xk [16 * 15]byte
	nr int
	// table holds H^16..H^1 in the assembly's GHASH form, then 48 zero
	// bytes (the assembly loads four powers from table+256-16*b for the
	// last b < 4 blocks).
	table [16*16 + 48]byte
}

// New returns AES-GCM keyed with a 16-, 24- or 32-byte key (AES-128,
// AES-192, AES-256), in the fastest implementation this CPU runs.
func New(key []byte) (*GCM, error) {
	return newGCM(key, useAsm)
}

func newGCM(key []byte, asm bool) (*GCM, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, errors.New("gcm: invalid AES key size " + strconv.Itoa(len(key)))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	a := &GCM{block: b, generic: g}
	if asm {
		a.initAsm(key)
		a.fast = true
	}
	return a, nil
}

// Impl names the implementation: "vaes-avx512" or "generic".
func (g *GCM) Impl() string {
	if g.fast {
		return "vaes-avx512"
	}
	return "generic"
}

// NonceSize returns 12.
func (g *GCM) NonceSize() int { return NonceSize }

// Overhead returns the tag size, 16.
func (g *GCM) Overhead() int { return TagSize }

// Seal encrypts and authenticates plaintext, authenticates
// additionalData, and appends the ciphertext and tag to dst. As
// crypto/cipher's GCM, it panics on a nonce that is not 12 bytes, on a
// plaintext over 2^32-2 blocks, and on dst overlapping plaintext other
// than exactly.
func (g *GCM) Seal(dst, nonce, plaintext, additionalData []byte) []byte {
	if !g.fast {
		return g.generic.Seal(dst, nonce, plaintext, additionalData)
	}
	if len(nonce) != NonceSize {
		panic("gcm: incorrect nonce length given to GCM")
	}
	if uint64(len(plaintext)) > maxPlaintext {
		panic("gcm: message too large for GCM")
	}
	ret, out := sliceForAppend(dst, len(plaintext)+TagSize)
	if inexactOverlap(out, plaintext) {
		panic("gcm: invalid buffer overlap of output and input")
	}
	if anyOverlap(out, additionalData) {
		panic("gcm: invalid buffer overlap of output and additional data")
	}
	g.seal(out, nonce, plaintext, additionalData)
	return ret
}

// Open authenticates ciphertext (with its tag) and additionalData and,
// if they verify, appends the plaintext to dst. On failure it returns an
// error and leaves the output zeroed.
func (g *GCM) Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error) {
	if !g.fast {
		return g.generic.Open(dst, nonce, ciphertext, additionalData)
	}
	if len(nonce) != NonceSize {
		panic("gcm: incorrect nonce length given to GCM")
	}
	if len(ciphertext) < TagSize || uint64(len(ciphertext)) > maxPlaintext+TagSize {
		return nil, errOpen
	}
	ret, out := sliceForAppend(dst, len(ciphertext)-TagSize)
	if inexactOverlap(out, ciphertext) {
		panic("gcm: invalid buffer overlap of output and input")
	}
	if anyOverlap(out, additionalData) {
		panic("gcm: invalid buffer overlap of output and additional data")
	}
	if !g.open(out, nonce, ciphertext, additionalData) {
		clear(out)
		return nil, errOpen
	}
	return ret, nil
}

// SealDetached is Seal with the tag apart: it encrypts plaintext into
// dst[:len(plaintext)] and writes the 16-byte tag into tag, the form of
// dm-crypt's sectors (the tag goes to the dm-integrity metadata). dst
// may be plaintext exactly; tag must not overlap either.
func (g *GCM) SealDetached(dst, tag, nonce, plaintext, additionalData []byte) {
	if len(dst) < len(plaintext) || len(tag) < TagSize {
		panic("gcm: output smaller than input")
	}
	if !g.fast {
		out := g.generic.Seal(make([]byte, 0, len(plaintext)+TagSize), nonce, plaintext, additionalData)
		copy(dst, out[:len(plaintext)])
		copy(tag, out[len(plaintext):])
		return
	}
	if len(nonce) != NonceSize {
		panic("gcm: incorrect nonce length given to GCM")
	}
	if uint64(len(plaintext)) > maxPlaintext {
		panic("gcm: message too large for GCM")
	}
	out := dst[:len(plaintext)]
	if inexactOverlap(out, plaintext) || anyOverlap(out, additionalData) ||
		anyOverlap(tag[:TagSize], out) || anyOverlap(tag[:TagSize], plaintext) {
		panic("gcm: invalid buffer overlap")
	}
	g.sealDetached(out, tag[:TagSize], nonce, plaintext, additionalData)
}

// OpenDetached is Open with the tag apart: it verifies tag and decrypts
// ciphertext into dst[:len(ciphertext)]. If the tag does not verify it
// returns an error and leaves those bytes zero. dst may be ciphertext
// exactly.
func (g *GCM) OpenDetached(dst, nonce, ciphertext, tag, additionalData []byte) error {
	if len(dst) < len(ciphertext) {
		panic("gcm: output smaller than input")
	}
	if len(tag) != TagSize {
		return errOpen
	}
	if !g.fast {
		ct := append(append(make([]byte, 0, len(ciphertext)+TagSize), ciphertext...), tag...)
		if _, err := g.generic.Open(dst[:0], nonce, ct, additionalData); err != nil {
			clear(dst[:len(ciphertext)])
			return err
		}
		return nil
	}
	if len(nonce) != NonceSize {
		panic("gcm: incorrect nonce length given to GCM")
	}
	if uint64(len(ciphertext)) > maxPlaintext {
		return errOpen
	}
	out := dst[:len(ciphertext)]
	if inexactOverlap(out, ciphertext) || anyOverlap(out, additionalData) {
		panic("gcm: invalid buffer overlap")
	}
	if !g.openDetached(out, nonce, ciphertext, tag, additionalData) {
		clear(out)
		return errOpen
	}
	return nil
}

// Wipe clears the key material the assembly uses (Go's AES and GCM keep
// their own copies, which they do not let us clear). g must not be used
// afterwards.
func (g *GCM) Wipe() {
	clear(g.xk[:])
	clear(g.table[:])
	g.fast = false
}

// expandKey is FIPS-197's key expansion into xk; subWord is the S-box
// on the four bytes of a word.
func (g *GCM) expandKey(key []byte, subWord func(uint32) uint32) {
	nk := len(key) / 4
	g.nr = nk + 6
	var w [4 * 15]uint32
	n := 4 * (g.nr + 1)
	for i := range nk {
		w[i] = binary.BigEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := nk; i < n; i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			t = subWord(t<<8|t>>24) ^ rcon<<24
			rcon <<= 1
			if rcon == 0x100 {
				rcon = 0x1b
			}
		case nk > 6 && i%nk == 4:
			t = subWord(t)
		}
		w[i] = w[i-nk] ^ t
	}
	for i := range n {
		binary.BigEndian.PutUint32(g.xk[4*i:], w[i])
	}
	clear(w[:])
}

// j0 is the counter block J0 of a 12-byte nonce: nonce || 1.
func j0(nonce []byte) (b [16]byte) {
	copy(b[:], nonce)
	b[15] = 1
	return b
}

// sliceForAppend extends in by n bytes, reallocating if needed, and
// returns the whole slice and the new n bytes.
func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	tail = head[len(in):]
	return
}

// anyOverlap reports whether x and y share memory.
func anyOverlap(x, y []byte) bool {
	return len(x) > 0 && len(y) > 0 &&
		uintptr(unsafe.Pointer(&x[0])) <= uintptr(unsafe.Pointer(&y[len(y)-1])) &&
		uintptr(unsafe.Pointer(&y[0])) <= uintptr(unsafe.Pointer(&x[len(x)-1]))
}

// inexactOverlap reports whether x and y share memory at different
// offsets (cipher.AEAD allows exact overlap only).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs := uintptr(unsafe.Pointer(&x[0]))
	ys := uintptr(unsafe.Pointer(&y[0]))
	return xs <= ys+uintptr(len(y)-1) && ys <= xs+uintptr(len(x)-1)
}
