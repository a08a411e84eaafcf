// Package camellia is the Camellia block cipher (RFC 3713): 128-bit
// blocks, 128-, 192- and 256-bit keys. Written from the RFC's description;
// it is table-driven and not constant-time.
package camellia

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// BlockSize is the Camellia block size in bytes.
const BlockSize = 16

// sbox1 is SBOX1 of RFC 3713, section 2.4.4.
var sbox1 = [256]byte{
	112, 130, 44, 236, 179, 39, 192, 229, 228, 133, 87, 53, 234, 12, 174, 65,
	35, 239, 107, 147, 69, 25, 165, 33, 237, 14, 79, 78, 29, 101, 146, 189,
	134, 184, 175, 143, 124, 235, 31, 206, 62, 48, 220, 95, 94, 197, 11, 26,
	166, 225, 57, 202, 213, 71, 93, 61, 217, 1, 90, 214, 81, 86, 108, 77,
	139, 13, 154, 102, 251, 204, 176, 45, 116, 18, 43, 32, 240, 177, 132, 153,
	223, 76, 203, 194, 52, 126, 118, 5, 109, 183, 169, 49, 209, 23, 4, 215,
	20, 88, 58, 97, 222, 27, 17, 28, 50, 15, 156, 22, 83, 24, 242, 34,
	254, 68, 207, 178, 195, 181, 122, 145, 36, 8, 232, 168, 96, 252, 105, 80,
	170, 208, 160, 125, 161, 137, 98, 151, 84, 91, 30, 149, 224, 255, 100, 210,
	16, 196, 0, 72, 163, 247, 117, 219, 138, 3, 230, 218, 9, 63, 221, 148,
	135, 92, 131, 2, 205, 74, 144, 51, 115, 103, 246, 243, 157, 127, 191, 226,
	82, 155, 216, 38, 200, 55, 198, 59, 129, 150, 111, 75, 19, 190, 99, 46,
	233, 121, 167, 140, 159, 110, 188, 142, 41, 245, 249, 182, 47, 253, 180, 89,
	120, 152, 6, 106, 231, 70, 113, 186, 212, 37, 171, 66, 136, 162, 141, 250,
	114, 7, 185, 85, 248, 238, 172, 10, 54, 73, 42, 104, 60, 56, 241, 164,
	64, 40, 211, 123, 187, 201, 67, 193, 21, 227, 173, 244, 119, 199, 128, 158,
}

// sp[i][x] is the contribution of byte i (0 = most significant) of the F
// input to the output of P(S(·)), precomputed from the S-boxes and P.
var sp [8][256]uint64

func init() {
	var s [4][256]byte
	for x := 0; x < 256; x++ {
		v := sbox1[x]
		s[0][x] = v
		s[1][x] = bits.RotateLeft8(v, 1)
		s[2][x] = bits.RotateLeft8(v, 7)
		s[3][x] = sbox1[bits.RotateLeft8(byte(x), 1)]
	}
	// Which S-box each input byte goes through, and the P-function of
	// RFC 3713 section 2.4.3: output byte y(j+1) is the XOR of the listed
	// t(i+1).
	box := [8]int{0, 1, 2, 3, 1, 2, 3, 0}
	p := [8][]int{
		{0, 2, 3, 5, 6, 7}, {0, 1, 3, 4, 6, 7}, {0, 1, 2, 4, 5, 7}, {1, 2, 3, 4, 5, 6},
		{0, 1, 5, 6, 7}, {1, 2, 4, 6, 7}, {2, 3, 4, 5, 7}, {0, 3, 4, 5, 6},
	}
	var into [8]byte // bit 7-j set: t(i+1) goes into y(j+1)
	for j, ts := range p {
		for _, i := range ts {
			into[i] |= 0x80 >> j
		}
	}
	for i := 0; i < 8; i++ {
		for x := 0; x < 256; x++ {
			t := uint64(s[box[i]][x])
			var v uint64
			for j := 0; j < 8; j++ {
				if into[i]&(0x80>>j) != 0 {
					v |= t << (56 - 8*j)
				}
			}
			sp[i][x] = v
		}
	}
}

func f(x, k uint64) uint64 {
	x ^= k
	return sp[0][x>>56] ^ sp[1][byte(x>>48)] ^ sp[2][byte(x>>40)] ^ sp[3][byte(x>>32)] ^
		sp[4][byte(x>>24)] ^ sp[5][byte(x>>16)] ^ sp[6][byte(x>>8)] ^ sp[7][byte(x)]
}

func fl(x, k uint64) uint64 {
	x1, x2 := uint32(x>>32), uint32(x)
	k1, k2 := uint32(k>>32), uint32(k)
	x2 ^= bits.RotateLeft32(x1&k1, 1)
	x1 ^= x2 | k2
	return uint64(x1)<<32 | uint64(x2)
}

func flInv(y, k uint64) uint64 {
	y1, y2 := uint32(y>>32), uint32(y)
	k1, k2 := uint32(k>>32), uint32(k)
	y1 ^= y2 | k2
	y2 ^= bits.RotateLeft32(y1&k1, 1)
	return uint64(y1)<<32 | uint64(y2)
}

// schedule holds the subkeys in the order one direction uses them.
type schedule struct {
	kw     [4]uint64 // pre- and post-whitening
	k      [24]uint64
	ke     [6]uint64
	groups int // 3 (128-bit keys) or 4 groups of six rounds
}

type camellia struct{ enc, dec schedule }

// KeySizeError is returned for a key that is not 16, 24 or 32 bytes.
type KeySizeError int

func (k KeySizeError) Error() string { return fmt.Sprintf("camellia: invalid key size %d", int(k)) }

type u128 struct{ hi, lo uint64 }

func (a u128) xor(b u128) u128 { return u128{a.hi ^ b.hi, a.lo ^ b.lo} }

// rot rotates left by n bits (0 <= n < 128).
func (a u128) rot(n uint) u128 {
	if n >= 64 {
		a = u128{a.lo, a.hi}
		n -= 64
	}
	if n == 0 {
		return a
	}
	return u128{a.hi<<n | a.lo>>(64-n), a.lo<<n | a.hi>>(64-n)}
}

var sigma = [6]uint64{0xA09E667F3BCC908B, 0xB67AE8584CAA73B2, 0xC6EF372FE94F82BE,
	0x54FF53A5F1D36F1C, 0x10E527FADE682D1D, 0xB05688C2B3E6C1FD}

// NewCipher returns a Camellia cipher.Block for a 16-, 24- or 32-byte key.
func NewCipher(key []byte) (cipher.Block, error) {
	var kl, kr u128
	be := binary.BigEndian
	switch len(key) {
	case 16:
		kl = u128{be.Uint64(key), be.Uint64(key[8:])}
	case 24:
		kl = u128{be.Uint64(key), be.Uint64(key[8:])}
		r := be.Uint64(key[16:])
		kr = u128{r, ^r}
	case 32:
		kl = u128{be.Uint64(key), be.Uint64(key[8:])}
		kr = u128{be.Uint64(key[16:]), be.Uint64(key[24:])}
	default:
		return nil, KeySizeError(len(key))
	}
	d := kl.xor(kr)
	d.lo ^= f(d.hi, sigma[0])
	d.hi ^= f(d.lo, sigma[1])
	d = d.xor(kl)
	d.lo ^= f(d.hi, sigma[2])
	d.hi ^= f(d.lo, sigma[3])
	ka := d
	d = ka.xor(kr)
	d.lo ^= f(d.hi, sigma[4])
	d.hi ^= f(d.lo, sigma[5])
	kb := d

	c := &camellia{}
	e := &c.enc
	// Subkeys as (source, rotation) pairs; each gives two 64-bit words.
	type src struct {
		k *u128
		n uint
	}
	var words []uint64
	put := func(ss ...src) {
		for _, s := range ss {
			r := s.k.rot(s.n)
			words = append(words, r.hi, r.lo)
		}
	}
	if len(key) == 16 {
		e.groups = 3
		// kw1 kw2 | k1..k6 | ke1 ke2 | k7..k12 | ke3 ke4 | k13..k18 | kw3 kw4
		put(src{&kl, 0}, src{&ka, 0}, src{&kl, 15}, src{&ka, 15}, src{&ka, 30},
			src{&kl, 45}, src{&ka, 45}, src{&kl, 60}, src{&ka, 60}, src{&kl, 77},
			src{&kl, 94}, src{&ka, 94}, src{&kl, 111}, src{&ka, 111})
		// words: kw1 kw2 k1 k2 k3 k4 k5 k6 ke1 ke2 k7 k8 k9 - - k10 k11 k12
		//        ke3 ke4 k13 k14 k15 k16 k17 k18 kw3 kw4
		w := words
		e.kw = [4]uint64{w[0], w[1], w[26], w[27]}
		copy(e.k[0:6], w[2:8])
		e.ke[0], e.ke[1] = w[8], w[9]
		e.k[6], e.k[7], e.k[8], e.k[9], e.k[10], e.k[11] = w[10], w[11], w[12], w[15], w[16], w[17]
		e.ke[2], e.ke[3] = w[18], w[19]
		copy(e.k[12:18], w[20:26])
	} else {
		e.groups = 4
		put(src{&kl, 0}, src{&kb, 0}, src{&kr, 15}, src{&ka, 15}, src{&kr, 30},
			src{&kb, 30}, src{&kl, 45}, src{&ka, 45}, src{&kl, 60}, src{&kr, 60},
			src{&kb, 60}, src{&kl, 77}, src{&ka, 77}, src{&kr, 94}, src{&ka, 94},
			src{&kl, 111}, src{&kb, 111})
		// words: kw1 kw2 k1 k2 k3 k4 k5 k6 ke1 ke2 k7 k8 k9 k10 k11 k12
		//        ke3 ke4 k13 k14 k15 k16 k17 k18 ke5 ke6 k19 k20 k21 k22
		//        k23 k24 kw3 kw4
		w := words
		e.kw = [4]uint64{w[0], w[1], w[32], w[33]}
		copy(e.k[0:6], w[2:8])
		e.ke[0], e.ke[1] = w[8], w[9]
		copy(e.k[6:12], w[10:16])
		e.ke[2], e.ke[3] = w[16], w[17]
		copy(e.k[12:18], w[18:24])
		e.ke[4], e.ke[5] = w[24], w[25]
		copy(e.k[18:24], w[26:32])
	}
	clear(words)
	// Decryption runs the same network with the subkeys reversed.
	dd := &c.dec
	dd.groups = e.groups
	dd.kw = [4]uint64{e.kw[2], e.kw[3], e.kw[0], e.kw[1]}
	n := 6 * e.groups
	for i := 0; i < n; i++ {
		dd.k[i] = e.k[n-1-i]
	}
	for g := 0; g < e.groups-1; g++ {
		dd.ke[2*g] = e.ke[2*(e.groups-2-g)+1]
		dd.ke[2*g+1] = e.ke[2*(e.groups-2-g)]
	}
	return c, nil
}

func (c *camellia) BlockSize() int { return BlockSize }

func crypt(s *schedule, dst, src []byte) {
	if len(src) < BlockSize || len(dst) < BlockSize {
		panic("camellia: input not full block")
	}
	be := binary.BigEndian
	d1, d2 := be.Uint64(src)^s.kw[0], be.Uint64(src[8:])^s.kw[1]
	for g := 0; g < s.groups; g++ {
		k := s.k[6*g : 6*g+6]
		d2 ^= f(d1, k[0])
		d1 ^= f(d2, k[1])
		d2 ^= f(d1, k[2])
		d1 ^= f(d2, k[3])
		d2 ^= f(d1, k[4])
		d1 ^= f(d2, k[5])
		if g < s.groups-1 {
			d1 = fl(d1, s.ke[2*g])
			d2 = flInv(d2, s.ke[2*g+1])
		}
	}
	d2 ^= s.kw[2]
	d1 ^= s.kw[3]
	be.PutUint64(dst, d2)
	be.PutUint64(dst[8:], d1)
}

func (c *camellia) Encrypt(dst, src []byte) { crypt(&c.enc, dst, src) }
func (c *camellia) Decrypt(dst, src []byte) { crypt(&c.dec, dst, src) }

// Wipe zeroes the subkeys.
func (c *camellia) Wipe() { *c = camellia{} }
