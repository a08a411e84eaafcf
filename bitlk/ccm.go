package bitlk

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
)

// CCM (Counter with CBC-MAC, RFC 3610 and NIST SP 800-38C) over any 16-byte
// block cipher. BitLocker wraps every key (VMK, FVEK, the metadata
// validation datum) with AES-CCM, a 12-byte nonce and a 16-byte tag; the
// standard library has no CCM, so this file implements the mode generally
// (nonce 7..13 bytes, tag 4..16 bytes, with or without associated data) and
// is tested with the RFC 3610 and SP 800-38C examples.

var errCCMAuth = errors.New("ccm: message authentication failed")

// ccm implements cipher.AEAD. Seal appends the tag after the ciphertext, as
// RFC 3610 does; BitLocker stores it in front and open() takes it apart.
type ccm struct {
	b        cipher.Block
	nonceLen int
	tagLen   int
}

func newCCM(b cipher.Block, nonceLen, tagLen int) (*ccm, error) {
	if b.BlockSize() != 16 {
		return nil, errors.New("ccm: needs a 128-bit block cipher")
	}
	if nonceLen < 7 || nonceLen > 13 {
		return nil, errors.New("ccm: nonce must be 7 to 13 bytes")
	}
	if tagLen < 4 || tagLen > 16 || tagLen%2 != 0 {
		return nil, errors.New("ccm: tag must be 4, 6, …, 16 bytes")
	}
	return &ccm{b: b, nonceLen: nonceLen, tagLen: tagLen}, nil
}

func (c *ccm) NonceSize() int { return c.nonceLen }
func (c *ccm) Overhead() int  { return c.tagLen }

// l is the width of the length field (and of the counter).
func (c *ccm) l() int { return 15 - c.nonceLen }

func (c *ccm) maxLen() uint64 {
	if c.l() >= 8 {
		return 1<<63 - 1
	}
	return 1<<(8*uint(c.l())) - 1
}

// mac computes the unencrypted CBC-MAC T over the formatted B0, the
// associated data and the message (RFC 3610 section 2.2).
func (c *ccm) mac(tag *[16]byte, nonce, msg, ad []byte) {
	var b0 [16]byte
	flags := byte((c.tagLen-2)/2) << 3
	flags |= byte(c.l() - 1)
	if len(ad) > 0 {
		flags |= 0x40
	}
	b0[0] = flags
	copy(b0[1:], nonce)
	n := uint64(len(msg))
	for i := 15; i > c.nonceLen; i-- {
		b0[i] = byte(n)
		n >>= 8
	}
	x := tag
	c.b.Encrypt(x[:], b0[:])

	var blk [16]byte
	if len(ad) > 0 {
		// The length of a, then a, padded with zeros to whole blocks.
		var hdr []byte
		switch la := uint64(len(ad)); {
		case la < 0xff00:
			hdr = binary.BigEndian.AppendUint16(blk[:0], uint16(la))
		case la <= 0xffffffff:
			hdr = binary.BigEndian.AppendUint32(append(blk[:0], 0xff, 0xfe), uint32(la))
		default:
			hdr = binary.BigEndian.AppendUint64(append(blk[:0], 0xff, 0xff), la)
		}
		h := len(hdr)
		k := copy(blk[h:], ad)
		clear(blk[h+k:])
		c.cbcBlock(x, &blk)
		c.cbcData(x, ad[k:])
	}
	c.cbcData(x, msg)
}

func (c *ccm) cbcBlock(x, b *[16]byte) {
	subtle.XORBytes(x[:], x[:], b[:])
	c.b.Encrypt(x[:], x[:])
}

// cbcData runs the CBC-MAC over p padded with zeros to whole blocks.
func (c *ccm) cbcData(x *[16]byte, p []byte) {
	var blk [16]byte
	for len(p) > 0 {
		k := copy(blk[:], p)
		clear(blk[k:])
		c.cbcBlock(x, &blk)
		p = p[k:]
	}
}

// ctr XORs src with the key stream S_1, S_2, … into dst, and returns S_0.
func (c *ccm) ctr(s0 *[16]byte, nonce, dst, src []byte) {
	var a, s [16]byte
	a[0] = byte(c.l() - 1)
	copy(a[1:], nonce)
	c.b.Encrypt(s0[:], a[:])
	ctr := uint64(1)
	for len(src) > 0 {
		n := ctr
		for i := 15; i > c.nonceLen; i-- {
			a[i] = byte(n)
			n >>= 8
		}
		c.b.Encrypt(s[:], a[:])
		k := subtle.XORBytes(dst, src, s[:])
		dst, src = dst[k:], src[k:]
		ctr++
	}
	clear(s[:])
}

// Seal encrypts and authenticates plaintext and appends the result to dst.
func (c *ccm) Seal(dst, nonce, plaintext, ad []byte) []byte {
	if len(nonce) != c.nonceLen {
		panic("ccm: wrong nonce length")
	}
	if uint64(len(plaintext)) > c.maxLen() {
		panic("ccm: message too long for the nonce length")
	}
	var t, s0 [16]byte
	c.mac(&t, nonce, plaintext, ad)
	ret, out := sliceForAppend(dst, len(plaintext)+c.tagLen)
	c.ctr(&s0, nonce, out, plaintext)
	subtle.XORBytes(out[len(plaintext):], t[:c.tagLen], s0[:c.tagLen])
	return ret
}

// Open authenticates and decrypts ciphertext (with the tag at its end) and
// appends the plaintext to dst. Nothing is appended if authentication fails.
func (c *ccm) Open(dst, nonce, ciphertext, ad []byte) ([]byte, error) {
	if len(nonce) != c.nonceLen {
		return nil, errors.New("ccm: wrong nonce length")
	}
	if len(ciphertext) < c.tagLen {
		return nil, errCCMAuth
	}
	n := len(ciphertext) - c.tagLen
	if uint64(n) > c.maxLen() {
		return nil, errCCMAuth
	}
	var s0, t [16]byte
	ret, out := sliceForAppend(dst, n)
	c.ctr(&s0, nonce, out, ciphertext[:n])
	c.mac(&t, nonce, out, ad)
	subtle.XORBytes(t[:c.tagLen], t[:c.tagLen], s0[:c.tagLen])
	if subtle.ConstantTimeCompare(t[:c.tagLen], ciphertext[n:]) != 1 {
		clear(out)
		return nil, errCCMAuth
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
	return head, head[len(in):]
}
