package fvault2

import (
	"crypto/aes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
)

// AES key wrap (RFC 3394, NIST SP 800-38F algorithm KW with the default
// initial value A6A6A6A6A6A6A6A6). FileVault 2 wraps its key-encrypting
// key and its volume key this way; golang.org/x/crypto has no key wrap.

var (
	errWrapLength = errors.New("keywrap: key data must be a multiple of 8 bytes, at least 16")
	// errUnwrap means the integrity check failed: a wrong KEK, or damaged
	// wrapped data.
	errUnwrap = errors.New("keywrap: integrity check failed")
)

var defaultIV = [8]byte{0xa6, 0xa6, 0xa6, 0xa6, 0xa6, 0xa6, 0xa6, 0xa6}

// wrapKey wraps key (n 64-bit blocks, n >= 2) with kek; the result is
// 8 bytes longer.
func wrapKey(kek, key []byte) ([]byte, error) {
	if len(key) < 16 || len(key)%8 != 0 {
		return nil, errWrapLength
	}
	b, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	n := len(key) / 8
	out := make([]byte, 8+len(key))
	copy(out, defaultIV[:])
	copy(out[8:], key)
	var blk [16]byte
	for j := 0; j < 6; j++ {
		for i := 1; i <= n; i++ {
			copy(blk[:8], out[:8])
			copy(blk[8:], out[8*i:8*i+8])
			b.Encrypt(blk[:], blk[:])
			t := uint64(n*j + i)
			binary.BigEndian.PutUint64(out[:8], binary.BigEndian.Uint64(blk[:8])^t)
			copy(out[8*i:], blk[8:])
		}
	}
	clear(blk[:])
	return out, nil
}

// unwrapKey reverses wrapKey and checks the integrity value.
func unwrapKey(kek, wrapped []byte) ([]byte, error) {
	if len(wrapped) < 24 || len(wrapped)%8 != 0 {
		return nil, errWrapLength
	}
	b, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	n := len(wrapped)/8 - 1
	var a [8]byte
	copy(a[:], wrapped[:8])
	r := append([]byte(nil), wrapped[8:]...)
	var blk [16]byte
	for j := 5; j >= 0; j-- {
		for i := n; i >= 1; i-- {
			t := uint64(n*j + i)
			binary.BigEndian.PutUint64(blk[:8], binary.BigEndian.Uint64(a[:])^t)
			copy(blk[8:], r[8*(i-1):8*i])
			b.Decrypt(blk[:], blk[:])
			copy(a[:], blk[:8])
			copy(r[8*(i-1):], blk[8:])
		}
	}
	clear(blk[:])
	if subtle.ConstantTimeCompare(a[:], defaultIV[:]) != 1 {
		clear(r)
		return nil, errUnwrap
	}
	return r, nil
}
