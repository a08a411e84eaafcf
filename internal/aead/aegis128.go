// Package aead holds the authenticated ciphers of dm-crypt's per-sector
// AEAD modes that neither the standard library nor golang.org/x/crypto
// provide: AEGIS-128 as the kernel's crypto/aegis128 computes it (16-byte
// key and nonce, tags of 1 to 16 bytes). The ciphers satisfy
// crypto/cipher.AEAD, so package sector treats them like GCM.
package aead

import (
	"crypto/cipher"
	"crypto/subtle"
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
	generic bool // tests: the Go code even where AES-NI is used
}

// NewAEGIS128 returns AEGIS-128 under a 16-byte key with tagSize-byte
// tags (1 to 16; the kernel's crypto_aead_setauthsize range).
func NewAEGIS128(key []byte, tagSize int) (cipher.AEAD, error) {
	if len(key) != AEGIS128KeySize {
		return nil, errors.New("aead: AEGIS-128 takes a 16-byte key, not " + strconv.Itoa(len(key)))
	}
	if tagSize < 1 || tagSize > 16 {
		return nil, errors.New("aead: AEGIS-128 tag size must be 1 to 16 bytes")
	}
	return &aegis128{key: load(key), tagSize: tagSize}, nil
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

func (a *aegis128) init(nonce []byte) *aegisState {
	kn := xor(a.key, load(nonce))
	s := aegisState{kn, aegisConst[1], aegisConst[0], xor(a.key, aegisConst[0]), xor(a.key, aegisConst[1])}
	for range 5 {
		s.update(a.key)
		s.update(kn)
	}
	return &s
}

func (s *aegisState) ad(ad []byte) {
	for len(ad) > 0 {
		s.update(load(ad[:min(16, len(ad))]))
		ad = ad[min(16, len(ad)):]
	}
}

// keystream is the block that encrypts the next 16 bytes.
func (s *aegisState) keystream() words {
	var z words
	for i := range z {
		z[i] = s[1][i] ^ s[4][i] ^ s[2][i]&s[3][i]
	}
	return z
}

func (s *aegisState) final(adLen, msgLen int) [16]byte {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(adLen)*8)
	binary.LittleEndian.PutUint64(b[8:], uint64(msgLen)*8)
	t := xor(load(b[:]), s[3])
	for range 7 {
		s.update(t)
	}
	store(b[:], xor(xor(xor(s[0], s[1]), xor(s[2], s[3])), s[4]))
	return b
}

func (a *aegis128) checkNonce(nonce []byte) {
	if len(nonce) != AEGIS128NonceSize {
		panic("aead: AEGIS-128 nonce must be 16 bytes")
	}
}

// Seal appends the encryption of plaintext and the tag to dst.
func (a *aegis128) Seal(dst, nonce, plaintext, additionalData []byte) []byte {
	a.checkNonce(nonce)
	s := a.init(nonce)
	s.ad(additionalData)
	ret, out := sliceForAppend(dst, len(plaintext)+a.tagSize)
	p, o := plaintext, out
	if nb := len(p) / 16; nb > 0 && useAESNI && !a.generic {
		aegisEncAESNI(s, &o[0], &p[0], nb)
		p, o = p[nb*16:], o[nb*16:]
	}
	for len(p) >= 16 {
		m := load(p)
		store(o, xor(m, s.keystream()))
		s.update(m)
		p, o = p[16:], o[16:]
	}
	if len(p) > 0 {
		m := load(p)
		var c [16]byte
		store(c[:], xor(m, s.keystream()))
		copy(o, c[:len(p)])
		s.update(m)
	}
	tag := s.final(len(additionalData), len(plaintext))
	copy(out[len(plaintext):], tag[:a.tagSize])
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
	want := ciphertext[n:]
	s := a.init(nonce)
	s.ad(additionalData)
	ret, out := sliceForAppend(dst, n)
	c, o := ciphertext[:n], out
	if nb := len(c) / 16; nb > 0 && useAESNI && !a.generic {
		aegisDecAESNI(s, &o[0], &c[0], nb)
		c, o = c[nb*16:], o[nb*16:]
	}
	for len(c) >= 16 {
		m := xor(load(c), s.keystream())
		store(o, m)
		s.update(m)
		c, o = c[16:], o[16:]
	}
	if len(c) > 0 {
		var b [16]byte
		store(b[:], xor(load(c), s.keystream()))
		clear(b[len(c):])
		copy(o, b[:len(c)])
		s.update(load(b[:]))
	}
	tag := s.final(len(additionalData), n)
	if subtle.ConstantTimeCompare(tag[:a.tagSize], want) != 1 {
		clear(out)
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
