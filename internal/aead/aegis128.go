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

type block = [16]byte

// The two constants of the AEGIS specification (the Fibonacci sequence
// mod 256).
var aegisConst = [2]block{
	{0x00, 0x01, 0x01, 0x02, 0x03, 0x05, 0x08, 0x0d, 0x15, 0x22, 0x37, 0x59, 0x90, 0xe9, 0x79, 0x62},
	{0xdb, 0x3d, 0x18, 0x55, 0x6d, 0xc2, 0x2f, 0xf1, 0x20, 0x11, 0x31, 0x42, 0x73, 0xb5, 0x28, 0xdd},
}

type aegis128 struct {
	key     block
	tagSize int
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
	a := &aegis128{tagSize: tagSize}
	copy(a.key[:], key)
	return a, nil
}

func (a *aegis128) NonceSize() int { return AEGIS128NonceSize }
func (a *aegis128) Overhead() int  { return a.tagSize }

type aegisState [5]block

func xorBlock(d *block, s *block) {
	binary.LittleEndian.PutUint64(d[:8], binary.LittleEndian.Uint64(d[:8])^binary.LittleEndian.Uint64(s[:8]))
	binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(d[8:])^binary.LittleEndian.Uint64(s[8:]))
}

// update is the AEGIS state update with message block m: every block
// becomes one AES round of its predecessor keyed with itself, then m is
// xored into block 0.
func (s *aegisState) update(m *block) {
	t := s[4]
	aesRound(&s[4], &s[3], &s[4])
	aesRound(&s[3], &s[2], &s[3])
	aesRound(&s[2], &s[1], &s[2])
	aesRound(&s[1], &s[0], &s[1])
	aesRound(&s[0], &t, &s[0])
	xorBlock(&s[0], m)
}

func (a *aegis128) init(nonce []byte) *aegisState {
	var s aegisState
	var kn block
	copy(kn[:], nonce)
	xorBlock(&kn, &a.key)
	s[0] = kn
	s[1] = aegisConst[1]
	s[2] = aegisConst[0]
	s[3] = a.key
	xorBlock(&s[3], &aegisConst[0])
	s[4] = a.key
	xorBlock(&s[4], &aegisConst[1])
	for range 5 {
		s.update(&a.key)
		s.update(&kn)
	}
	return &s
}

func (s *aegisState) ad(ad []byte) {
	for len(ad) > 0 {
		var m block
		copy(m[:], ad)
		s.update(&m)
		ad = ad[min(16, len(ad)):]
	}
}

// keystream is the block that encrypts the next 16 bytes.
func (s *aegisState) keystream(z *block) {
	for i := range z {
		z[i] = s[1][i] ^ s[4][i] ^ s[2][i]&s[3][i]
	}
}

func (s *aegisState) final(adLen, msgLen int) block {
	var t block
	binary.LittleEndian.PutUint64(t[:8], uint64(adLen)*8)
	binary.LittleEndian.PutUint64(t[8:], uint64(msgLen)*8)
	xorBlock(&t, &s[3])
	for range 7 {
		s.update(&t)
	}
	var tag block
	for i := range s {
		xorBlock(&tag, &s[i])
	}
	return tag
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
	p := plaintext
	o := out
	for len(p) > 0 {
		var m, z block
		n := copy(m[:], p)
		s.keystream(&z)
		for i := range n {
			o[i] = m[i] ^ z[i]
		}
		s.update(&m)
		p, o = p[n:], o[n:]
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
	c := ciphertext[:n]
	s := a.init(nonce)
	s.ad(additionalData)
	ret, out := sliceForAppend(dst, n)
	o := out
	for len(c) > 0 {
		var m, z block
		s.keystream(&z)
		k := copy(m[:], c)
		for i := range k {
			m[i] ^= z[i]
		}
		clear(m[k:])
		copy(o, m[:k])
		s.update(&m)
		c, o = c[k:], o[k:]
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
