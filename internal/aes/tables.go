package aes

import "math/bits"

// The S-box, its inverse and the T-tables are computed once at start-up from
// the definition of the AES S-box (multiplicative inverse in GF(2^8) followed
// by the affine map), so no large literal tables are needed.
var (
	sbox    [256]byte
	invSbox [256]byte
	te0     [256]uint32 // encryption round table, (2s, s, s, 3s) as a big-endian word
	td0     [256]uint32 // decryption round table, (14t, 9t, 13t, 11t), t = invSbox[x]
)

// gmul multiplies in GF(2^8) modulo x^8+x^4+x^3+x+1.
func gmul(a, b byte) byte {
	var p byte
	for b != 0 {
		if b&1 != 0 {
			p ^= a
		}
		hi := a & 0x80
		a <<= 1
		if hi != 0 {
			a ^= 0x1b
		}
		b >>= 1
	}
	return p
}

func init() {
	// Build exp/log tables over the generator 3.
	var exp [256]byte
	var log [256]byte
	x := byte(1)
	for i := 0; i < 255; i++ {
		exp[i] = x
		log[x] = byte(i)
		x ^= gmul(x, 2) // x *= 3
	}
	for i := 0; i < 256; i++ {
		var inv byte
		if i != 0 {
			inv = exp[(255-int(log[i]))%255]
		}
		s := inv ^ bits.RotateLeft8(inv, 1) ^ bits.RotateLeft8(inv, 2) ^
			bits.RotateLeft8(inv, 3) ^ bits.RotateLeft8(inv, 4) ^ 0x63
		sbox[i] = s
		invSbox[s] = byte(i)
	}
	for i := 0; i < 256; i++ {
		s := sbox[i]
		te0[i] = uint32(gmul(s, 2))<<24 | uint32(s)<<16 | uint32(s)<<8 | uint32(gmul(s, 3))
		t := invSbox[i]
		td0[i] = uint32(gmul(t, 14))<<24 | uint32(gmul(t, 9))<<16 | uint32(gmul(t, 13))<<8 | uint32(gmul(t, 11))
	}
}
