// Package aead holds the authenticated ciphers of dm-crypt's per-sector
// AEAD modes that neither the standard library nor golang.org/x/crypto
// provide: AEGIS-128 as the kernel's crypto/aegis128 computes it (16-byte
// key and nonce, tags of 1 to 16 bytes). The ciphers satisfy
// crypto/cipher.AEAD, so package sector treats them like GCM, and
// Sectors, which seals or opens many sectors in one call so that the
// VAES kernel can run them side by side (sectors.go).
//
// Implementations: Go (any platform, and the purego tag), VEX AES-NI
// with one state, and AVX-512 VAES with four or eight states, one per
// 128-bit lane (aegis_amd64.s); the CPU's features pick them, and one
// conformance suite (sectors_test.go) checks each against the
// specification's answers and the Go code.
package aead

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"strconv"
)

// ErrOpen is the error of a ciphertext whose tag does not verify.
var ErrOpen = errors.New("aead: message authentication failed")

// AEGIS128KeySize and AEGIS128NonceSize are AEGIS-128's key and nonce
// lengths in bytes.
const (
	AEGIS128KeySize   = 16
	AEGIS128NonceSize = 16
)

// The two constants of the AEGIS specification (the Fibonacci sequence
// mod 256), as column words.
var aegisConst = [2]words{
	load([]byte{0x00, 0x01, 0x01, 0x02, 0x03, 0x05, 0x08, 0x0d, 0x15, 0x22, 0x37, 0x59, 0x90, 0xe9, 0x79, 0x62}),
	load([]byte{0xdb, 0x3d, 0x18, 0x55, 0x6d, 0xc2, 0x2f, 0xf1, 0x20, 0x11, 0x31, 0x42, 0x73, 0xb5, 0x28, 0xdd}),
}

// load reads a 16-byte block (zero-padded when shorter).
func load(b []byte) words {
	if len(b) < 16 {
		var t [16]byte
		copy(t[:], b)
		b = t[:]
	}
	return words{binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])}
}

func store(b []byte, w words) {
	binary.LittleEndian.PutUint32(b, w[0])
	binary.LittleEndian.PutUint32(b[4:], w[1])
	binary.LittleEndian.PutUint32(b[8:], w[2])
	binary.LittleEndian.PutUint32(b[12:], w[3])
}

func xor(a, b words) words { return words{a[0] ^ b[0], a[1] ^ b[1], a[2] ^ b[2], a[3] ^ b[3]} }

type aegis128 struct {
	key     words
	tagSize int
	plan    []kernel // the kernels Seal and Open use (tests pick others)
}

// NewAEGIS128 returns AEGIS-128 under a 16-byte key with tagSize-byte
// tags (1 to 16; the kernel's crypto_aead_setauthsize range). The AEAD
// also satisfies Sectors.
func NewAEGIS128(key []byte, tagSize int) (cipher.AEAD, error) {
	if len(key) != AEGIS128KeySize {
		return nil, errors.New("aead: AEGIS-128 takes a 16-byte key, not " + strconv.Itoa(len(key)))
	}
	if tagSize < 1 || tagSize > 16 {
		return nil, errors.New("aead: AEGIS-128 tag size must be 1 to 16 bytes")
	}
	return &aegis128{key: load(key), tagSize: tagSize, plan: defaultPlan}, nil
}

func (a *aegis128) NonceSize() int { return AEGIS128NonceSize }
func (a *aegis128) Overhead() int  { return a.tagSize }

type aegisState [5]words

// update is the AEGIS state update with message block m: every block
// becomes one AES round of its predecessor keyed with itself, then m is
// xored into block 0.
func (s *aegisState) update(m words) {
	t := s[4]
	s[4] = aesRound(s[3], s[4])
	s[3] = aesRound(s[2], s[3])
	s[2] = aesRound(s[1], s[2])
	s[1] = aesRound(s[0], s[1])
	s[0] = xor(aesRound(t, s[0]), m)
}

// keystream is the block that encrypts the next 16 bytes.
func (s *aegisState) keystream() words {
	var z words
	for i := range z {
		z[i] = s[1][i] ^ s[4][i] ^ s[2][i]&s[3][i]
	}
	return z
}

func (a *aegis128) checkNonce(nonce []byte) {
	if len(nonce) != AEGIS128NonceSize {
		panic("aead: AEGIS-128 nonce must be 16 bytes")
	}
}

// Seal appends the encryption of plaintext and the tag to dst.
func (a *aegis128) Seal(dst, nonce, plaintext, additionalData []byte) []byte {
	a.checkNonce(nonce)
	ret, out := sliceForAppend(dst, len(plaintext)+a.tagSize)
	if inexactOverlap(out, plaintext) {
		panic("aead: invalid buffer overlap")
	}
	a.run(a.plan, false, out[:len(plaintext)], out[len(plaintext):], plaintext, nonce, additionalData, 1)
	return ret
}

// Open checks the tag and appends the plaintext to dst; on a bad tag it
// returns ErrOpen and leaves nothing of the plaintext in dst's new bytes.
func (a *aegis128) Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error) {
	a.checkNonce(nonce)
	if len(ciphertext) < a.tagSize {
		return nil, ErrOpen
	}
	n := len(ciphertext) - a.tagSize
	ret, out := sliceForAppend(dst, n)
	if inexactOverlap(out, ciphertext[:n]) {
		panic("aead: invalid buffer overlap")
	}
	if a.run(a.plan, true, out, ciphertext[n:], ciphertext[:n], nonce, additionalData, 1) != nil {
		return nil, ErrOpen
	}
	return ret, nil
}

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
