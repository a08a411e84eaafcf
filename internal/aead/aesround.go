package aead

import "math/bits"

// One AES encryption round (the AESENC instruction: SubBytes, ShiftRows,
// MixColumns, then the round key xored in), the building block of AEGIS,
// on a state of four little-endian column words. The S-box and the round
// tables are computed at start-up from the S-box's definition (inverse
// in GF(2^8), then the affine map) rather than written out.

var (
	sbox [256]byte
	te   [4][256]uint32 // te[r][x]: MixColumns of sbox[x] in row r, as a column word
)

func init() {
	// p runs over GF(2^8)* by multiplication by 3, q over the inverses by
	// division by 3.
	var p, q byte = 1, 1
	for {
		p = p ^ p<<1 ^ byte(int8(p)>>7)&0x1b
		q ^= q << 1
		q ^= q << 2
		q ^= q << 4
		q ^= byte(int8(q)>>7) & 0x09
		x := q ^ rotl8(q, 1) ^ rotl8(q, 2) ^ rotl8(q, 3) ^ rotl8(q, 4)
		sbox[p] = x ^ 0x63
		if p == 1 {
			break
		}
	}
	sbox[0] = 0x63
	for x := range 256 {
		s := sbox[x]
		w := uint32(xtime(s)) | uint32(s)<<8 | uint32(s)<<16 | uint32(xtime(s)^s)<<24
		for r := range 4 {
			te[r][x] = bits.RotateLeft32(w, 8*r)
		}
	}
}

func rotl8(x byte, n uint) byte { return x<<n | x>>(8-n) }

func xtime(x byte) byte { return x<<1 ^ byte(int8(x)>>7)&0x1b }

// words is a 16-byte block as four little-endian column words.
type words = [4]uint32

// aesRound returns AESENC(s, k).
func aesRound(s, k words) words {
	return words{
		te[0][byte(s[0])] ^ te[1][byte(s[1]>>8)] ^ te[2][byte(s[2]>>16)] ^ te[3][byte(s[3]>>24)] ^ k[0],
		te[0][byte(s[1])] ^ te[1][byte(s[2]>>8)] ^ te[2][byte(s[3]>>16)] ^ te[3][byte(s[0]>>24)] ^ k[1],
		te[0][byte(s[2])] ^ te[1][byte(s[3]>>8)] ^ te[2][byte(s[0]>>16)] ^ te[3][byte(s[1]>>24)] ^ k[2],
		te[0][byte(s[3])] ^ te[1][byte(s[0]>>8)] ^ te[2][byte(s[1]>>16)] ^ te[3][byte(s[2]>>24)] ^ k[3],
	}
}
