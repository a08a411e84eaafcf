// Package whirlpool implements the Whirlpool hash function, final (2003)
// version as standardised in ISO/IEC 10118-3:2004, which is what the Linux
// kernel calls "wp512" and OpenSSL "whirlpool". It also provides the
// kernel's "wp384" and "wp256", which are the wp512 digest truncated to its
// first 48 and 32 bytes.
//
// The S-box and the diffusion tables are computed at start-up from their
// definition in the Whirlpool specification (Barreto, Rijmen: "The
// WHIRLPOOL Hashing Function"): the S-box is built from the 4-bit mini-boxes
// E, E^-1 and R, the diffusion layer is multiplication by the circulant
// matrix cir(1, 1, 4, 1, 8, 5, 2, 9) over GF(2^8) with reduction polynomial
// x^8 + x^4 + x^3 + x^2 + 1.
package whirlpool

import (
	"encoding/binary"
	"hash"
	"math/bits"
)

// Size is the size of a Whirlpool (wp512) digest in bytes.
const Size = 64

// Size384 and Size256 are the digest sizes of the kernel's truncated
// variants wp384 and wp256.
const (
	Size384 = 48
	Size256 = 32
)

// BlockSize is the Whirlpool block size in bytes.
const BlockSize = 64

const rounds = 10

var (
	sbox [256]uint8
	// tab[j][x] is the contribution of S-box input x in column j of a row
	// to that row after the S-box, the permutation and the diffusion
	// layer, as a big-endian 64-bit row (byte 0 most significant).
	tab [8][256]uint64
	// rc[r] is the round constant of round r+1 (only row 0 is non-zero).
	rc [rounds]uint64
)

func init() {
	// Mini-boxes from the specification.
	e := [16]uint8{0x1, 0xB, 0x9, 0xC, 0xD, 0x6, 0xF, 0x3, 0xE, 0x8, 0x7, 0x4, 0xA, 0x2, 0x5, 0x0}
	r := [16]uint8{0x7, 0xC, 0xB, 0xD, 0xE, 0x4, 0x9, 0xF, 0x6, 0x3, 0x8, 0xA, 0x2, 0x5, 0x1, 0x0}
	var einv [16]uint8
	for i, v := range e {
		einv[v] = uint8(i)
	}
	for u := 0; u < 256; u++ {
		a := e[u>>4]
		b := einv[u&15]
		t := r[a^b]
		sbox[u] = e[a^t]<<4 | einv[b^t]
	}

	// GF(2^8) multiplication modulo x^8+x^4+x^3+x^2+1 (0x11d).
	mul := func(a, b uint8) uint8 {
		var p uint8
		for b != 0 {
			if b&1 != 0 {
				p ^= a
			}
			hi := a & 0x80
			a <<= 1
			if hi != 0 {
				a ^= 0x1d
			}
			b >>= 1
		}
		return p
	}
	c := [8]uint8{1, 1, 4, 1, 8, 5, 2, 9} // first row of the circulant matrix
	for x := 0; x < 256; x++ {
		s := sbox[x]
		var v uint64
		for k := 0; k < 8; k++ {
			v = v<<8 | uint64(mul(s, c[k]))
		}
		for j := 0; j < 8; j++ {
			tab[j][x] = bits.RotateLeft64(v, -8*j)
		}
	}
	for i := range rc {
		rc[i] = binary.BigEndian.Uint64(sbox[8*i : 8*i+8])
	}
}

// rho applies the S-box, the cyclical permutation and the linear diffusion
// to the state in; the caller XORs in the round key.
func rho(out, in *[8]uint64) {
	a0, a1, a2, a3, a4, a5, a6, a7 := in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]
	out[0] = tab[0][uint8(a0>>56)] ^
		tab[1][uint8(a7>>48)] ^
		tab[2][uint8(a6>>40)] ^
		tab[3][uint8(a5>>32)] ^
		tab[4][uint8(a4>>24)] ^
		tab[5][uint8(a3>>16)] ^
		tab[6][uint8(a2>>8)] ^
		tab[7][uint8(a1)]
	out[1] = tab[0][uint8(a1>>56)] ^
		tab[1][uint8(a0>>48)] ^
		tab[2][uint8(a7>>40)] ^
		tab[3][uint8(a6>>32)] ^
		tab[4][uint8(a5>>24)] ^
		tab[5][uint8(a4>>16)] ^
		tab[6][uint8(a3>>8)] ^
		tab[7][uint8(a2)]
	out[2] = tab[0][uint8(a2>>56)] ^
		tab[1][uint8(a1>>48)] ^
		tab[2][uint8(a0>>40)] ^
		tab[3][uint8(a7>>32)] ^
		tab[4][uint8(a6>>24)] ^
		tab[5][uint8(a5>>16)] ^
		tab[6][uint8(a4>>8)] ^
		tab[7][uint8(a3)]
	out[3] = tab[0][uint8(a3>>56)] ^
		tab[1][uint8(a2>>48)] ^
		tab[2][uint8(a1>>40)] ^
		tab[3][uint8(a0>>32)] ^
		tab[4][uint8(a7>>24)] ^
		tab[5][uint8(a6>>16)] ^
		tab[6][uint8(a5>>8)] ^
		tab[7][uint8(a4)]
	out[4] = tab[0][uint8(a4>>56)] ^
		tab[1][uint8(a3>>48)] ^
		tab[2][uint8(a2>>40)] ^
		tab[3][uint8(a1>>32)] ^
		tab[4][uint8(a0>>24)] ^
		tab[5][uint8(a7>>16)] ^
		tab[6][uint8(a6>>8)] ^
		tab[7][uint8(a5)]
	out[5] = tab[0][uint8(a5>>56)] ^
		tab[1][uint8(a4>>48)] ^
		tab[2][uint8(a3>>40)] ^
		tab[3][uint8(a2>>32)] ^
		tab[4][uint8(a1>>24)] ^
		tab[5][uint8(a0>>16)] ^
		tab[6][uint8(a7>>8)] ^
		tab[7][uint8(a6)]
	out[6] = tab[0][uint8(a6>>56)] ^
		tab[1][uint8(a5>>48)] ^
		tab[2][uint8(a4>>40)] ^
		tab[3][uint8(a3>>32)] ^
		tab[4][uint8(a2>>24)] ^
		tab[5][uint8(a1>>16)] ^
		tab[6][uint8(a0>>8)] ^
		tab[7][uint8(a7)]
	out[7] = tab[0][uint8(a7>>56)] ^
		tab[1][uint8(a6>>48)] ^
		tab[2][uint8(a5>>40)] ^
		tab[3][uint8(a4>>32)] ^
		tab[4][uint8(a3>>24)] ^
		tab[5][uint8(a2>>16)] ^
		tab[6][uint8(a1>>8)] ^
		tab[7][uint8(a0)]
}

// block runs the compression function (W in Miyaguchi-Preneel mode) over
// each 64-byte block of p.
func block(h *[8]uint64, p []byte) {
	var m, k, s, t [8]uint64
	for len(p) >= BlockSize {
		for i := 0; i < 8; i++ {
			m[i] = binary.BigEndian.Uint64(p[8*i:])
			k[i] = h[i]
			s[i] = m[i] ^ k[i]
		}
		for r := 0; r < rounds; r++ {
			rho(&t, &k)
			t[0] ^= rc[r]
			k = t
			rho(&t, &s)
			for i := 0; i < 8; i++ {
				s[i] = t[i] ^ k[i]
			}
		}
		for i := 0; i < 8; i++ {
			h[i] ^= s[i] ^ m[i]
		}
		p = p[BlockSize:]
	}
}

// digest is the running state; size selects wp512/wp384/wp256 output.
type digest struct {
	h      [8]uint64
	x      [BlockSize]byte
	nx     int
	length uint64 // bytes hashed so far (messages below 2^64 bytes)
	size   int
}

// New returns a Whirlpool (wp512) hash.Hash.
func New() hash.Hash { return newDigest(Size) }

// New384 returns the kernel's wp384: the first 48 bytes of Whirlpool.
func New384() hash.Hash { return newDigest(Size384) }

// New256 returns the kernel's wp256: the first 32 bytes of Whirlpool.
func New256() hash.Hash { return newDigest(Size256) }

func newDigest(size int) *digest {
	return &digest{size: size}
}

// Sum512 returns the Whirlpool digest of data.
func Sum512(data []byte) [Size]byte {
	var d digest
	d.size = Size
	d.Write(data)
	return d.checkSum()
}

func (d *digest) Reset() {
	d.h = [8]uint64{}
	d.x = [BlockSize]byte{}
	d.nx = 0
	d.length = 0
}

func (d *digest) Size() int      { return d.size }
func (d *digest) BlockSize() int { return BlockSize }

// Clone returns an independent copy of the running hash (hash.Cloner).
func (d *digest) Clone() (hash.Cloner, error) {
	c := *d
	return &c, nil
}

func (d *digest) Write(p []byte) (int, error) {
	n := len(p)
	d.length += uint64(n)
	if d.nx > 0 {
		k := copy(d.x[d.nx:], p)
		d.nx += k
		p = p[k:]
		if d.nx == BlockSize {
			block(&d.h, d.x[:])
			d.nx = 0
		}
	}
	if len(p) >= BlockSize {
		k := len(p) &^ (BlockSize - 1)
		block(&d.h, p[:k])
		p = p[k:]
	}
	if len(p) > 0 {
		d.nx = copy(d.x[:], p)
	}
	return n, nil
}

func (d *digest) Sum(in []byte) []byte {
	c := *d // Sum must not change the running state
	sum := c.checkSum()
	return append(in, sum[:d.size]...)
}

func (d *digest) checkSum() [Size]byte {
	// Padding: a 1 bit, zeros up to 32 bytes before a block boundary, then
	// the message length in bits as a 256-bit big-endian integer.
	bitsLo := d.length << 3
	bitsHi := d.length >> 61
	var pad [2 * BlockSize]byte
	pad[0] = 0x80
	n := 1
	for (d.nx+n)%BlockSize != BlockSize-32 {
		n++
	}
	// The length field: 32 bytes, big-endian; only the low 128 bits can
	// be non-zero here.
	binary.BigEndian.PutUint64(pad[n+16:], bitsHi)
	binary.BigEndian.PutUint64(pad[n+24:], bitsLo)
	d.Write(pad[:n+32])
	if d.nx != 0 {
		panic("whirlpool: padding did not end on a block boundary")
	}
	var out [Size]byte
	for i, v := range d.h {
		binary.BigEndian.PutUint64(out[8*i:], v)
	}
	return out
}
