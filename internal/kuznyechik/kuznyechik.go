// Package kuznyechik is the GOST R 34.12-2015 128-bit block cipher
// "Kuznyechik" (RFC 7801): 128-bit blocks, 256-bit keys. Bytes are in the
// order of RFC 7801's test vectors (the first byte of a block is the most
// significant). Written from the RFC's description; table-driven, not
// constant-time.
package kuznyechik

import (
	"crypto/cipher"
	"fmt"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/gost"
)

// BlockSize and KeySize in bytes.
const (
	BlockSize = 16
	KeySize   = 32
)

// lc are the coefficients of the linear function l (RFC 7801 section 4.2),
// for block bytes 0..15 in memory order.
var lc = [16]byte{148, 32, 133, 16, 194, 192, 1, 251, 1, 192, 194, 16, 133, 32, 148, 1}

var (
	piInv [256]byte
	// lt[i][x]: L applied to a block that is x at byte i and zero
	// elsewhere (L is linear); likewise ltInv for L^-1. ls and lsInv fold
	// the substitution in.
	ls, lsInv [16][256][16]byte
	cs        [32][16]byte
)

// mul is multiplication in GF(2^8) modulo x^8 + x^7 + x^6 + x + 1.
func mul(a, b byte) byte {
	var p byte
	for b != 0 {
		if b&1 != 0 {
			p ^= a
		}
		hi := a & 0x80
		a <<= 1
		if hi != 0 {
			a ^= 0xc3
		}
		b >>= 1
	}
	return p
}

// r is one step of R: shift the block one byte towards the end and put
// l(block) in front.
func r(b *[16]byte) {
	var t byte
	for i := 0; i < 16; i++ {
		t ^= mul(b[i], lc[i])
	}
	copy(b[1:], b[:15])
	b[0] = t
}

func rInv(b *[16]byte) {
	t := b[0]
	copy(b[:15], b[1:])
	for i := 0; i < 15; i++ {
		t ^= mul(b[i], lc[i])
	}
	b[15] = t
}

func lin(b *[16]byte) {
	for i := 0; i < 16; i++ {
		r(b)
	}
}

func linInv(b *[16]byte) {
	for i := 0; i < 16; i++ {
		rInv(b)
	}
}

// tablesOnce builds the tables on first use, not in init: they take tens
// of milliseconds, paid by every blkcrypt command otherwise, and few
// volumes use Kuznyechik.
var tablesOnce sync.Once

func buildTables() {
	for i, v := range gost.Pi {
		piInv[v] = byte(i)
	}
	for i := 0; i < 16; i++ {
		for x := 0; x < 256; x++ {
			var b [16]byte
			b[i] = gost.Pi[x]
			lin(&b)
			ls[i][x] = b
			b = [16]byte{}
			b[i] = byte(x)
			linInv(&b)
			lsInv[i][x] = b
		}
	}
	for i := 0; i < 32; i++ {
		var b [16]byte
		b[15] = byte(i + 1)
		lin(&b)
		cs[i] = b
	}
}

// lsx computes L(S(a ^ k)).
func lsx(a, k *[16]byte) [16]byte {
	var out [16]byte
	for i := 0; i < 16; i++ {
		t := &ls[i][a[i]^k[i]]
		for j := range out {
			out[j] ^= t[j]
		}
	}
	return out
}

type kuz struct{ k [10][16]byte }

// KeySizeError is returned for a key that is not 32 bytes.
type KeySizeError int

func (k KeySizeError) Error() string { return fmt.Sprintf("kuznyechik: invalid key size %d", int(k)) }

// NewCipher returns a Kuznyechik cipher.Block for a 32-byte key.
func NewCipher(key []byte) (cipher.Block, error) {
	if len(key) != KeySize {
		return nil, KeySizeError(len(key))
	}
	tablesOnce.Do(buildTables)
	c := &kuz{}
	copy(c.k[0][:], key[:16])
	copy(c.k[1][:], key[16:])
	a, b := c.k[0], c.k[1]
	for i := 0; i < 4; i++ {
		for j := 0; j < 8; j++ {
			t := lsx(&a, &cs[8*i+j])
			for n := range t {
				t[n] ^= b[n]
			}
			a, b = t, a
		}
		c.k[2+2*i], c.k[3+2*i] = a, b
	}
	return c, nil
}

func (c *kuz) BlockSize() int { return BlockSize }

func (c *kuz) Encrypt(dst, src []byte) {
	if len(src) < BlockSize || len(dst) < BlockSize {
		panic("kuznyechik: input not full block")
	}
	var b [16]byte
	copy(b[:], src)
	for i := 0; i < 9; i++ {
		b = lsx(&b, &c.k[i])
	}
	for n := range b {
		dst[n] = b[n] ^ c.k[9][n]
	}
}

func (c *kuz) Decrypt(dst, src []byte) {
	if len(src) < BlockSize || len(dst) < BlockSize {
		panic("kuznyechik: input not full block")
	}
	var b [16]byte
	copy(b[:], src)
	for i := 9; i > 0; i-- {
		// b = S^-1(L^-1(b ^ k[i]))
		var t [16]byte
		for n := 0; n < 16; n++ {
			u := &lsInv[n][b[n]^c.k[i][n]]
			for m := range t {
				t[m] ^= u[m]
			}
		}
		for n := range t {
			b[n] = piInv[t[n]]
		}
	}
	for n := range b {
		dst[n] = b[n] ^ c.k[0][n]
	}
}

// Wipe zeroes the round keys.
func (c *kuz) Wipe() { *c = kuz{} }
