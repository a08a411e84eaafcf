package adiantum

import (
	"encoding/binary"
	"math/bits"
)

// The ChaCha constants "expand 32-byte k".
const (
	c0 = 0x61707865
	c1 = 0x3320646e
	c2 = 0x79622d32
	c3 = 0x6b206574
)

func quarter(a, b, c, d uint32) (uint32, uint32, uint32, uint32) {
	a += b
	d = bits.RotateLeft32(d^a, 16)
	c += d
	b = bits.RotateLeft32(b^c, 12)
	a += b
	d = bits.RotateLeft32(d^a, 8)
	c += d
	b = bits.RotateLeft32(b^c, 7)
	return a, b, c, d
}

// permute runs rounds (even) ChaCha rounds over x in place. The state is
// held in locals so that the compiler keeps it in registers rather than
// loading and storing through x at every quarter round.
func permute(x *[16]uint32, rounds int) {
	x0, x1, x2, x3 := x[0], x[1], x[2], x[3]
	x4, x5, x6, x7 := x[4], x[5], x[6], x[7]
	x8, x9, x10, x11 := x[8], x[9], x[10], x[11]
	x12, x13, x14, x15 := x[12], x[13], x[14], x[15]
	for i := 0; i < rounds; i += 2 {
		x0, x4, x8, x12 = quarter(x0, x4, x8, x12)
		x1, x5, x9, x13 = quarter(x1, x5, x9, x13)
		x2, x6, x10, x14 = quarter(x2, x6, x10, x14)
		x3, x7, x11, x15 = quarter(x3, x7, x11, x15)
		x0, x5, x10, x15 = quarter(x0, x5, x10, x15)
		x1, x6, x11, x12 = quarter(x1, x6, x11, x12)
		x2, x7, x8, x13 = quarter(x2, x7, x8, x13)
		x3, x4, x9, x14 = quarter(x3, x4, x9, x14)
	}
	*x = [16]uint32{x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15}
}

// hchacha derives XChaCha's subkey from the key and the first 16 bytes of
// the 24-byte nonce: the permuted state's first and last rows, with no
// feed-forward.
func hchacha(key *[8]uint32, nonce []byte, rounds int) [8]uint32 {
	x := [16]uint32{c0, c1, c2, c3}
	copy(x[4:12], key[:])
	for i := range 4 {
		x[12+i] = binary.LittleEndian.Uint32(nonce[4*i:])
	}
	permute(&x, rounds)
	sub := [8]uint32{x[0], x[1], x[2], x[3], x[12], x[13], x[14], x[15]}
	clear(x[:])
	return sub
}

// streamState is the ChaCha state after XChaCha's subkey derivation: the
// whole input block of the first keystream block. Word 12 is the block
// counter; like the kernel's chacha, only that 32-bit word counts.
type streamState [16]uint32

// xchachaState builds the state for key and a 32-byte Linux xchacha IV:
// the 24-byte nonce followed by the 64-bit stream position (zero here).
func xchachaState(key *[8]uint32, nonce *[24]byte, rounds int) streamState {
	sub := hchacha(key, nonce[:16], rounds)
	var s streamState
	s[0], s[1], s[2], s[3] = c0, c1, c2, c3
	copy(s[4:12], sub[:])
	clear(sub[:])
	s[14] = binary.LittleEndian.Uint32(nonce[16:])
	s[15] = binary.LittleEndian.Uint32(nonce[20:])
	return s
}

// chachaBlock writes the keystream block of s into out.
func chachaBlock(s *streamState, out *[64]byte, rounds int) {
	x := [16]uint32(*s)
	permute(&x, rounds)
	for i := range 16 {
		binary.LittleEndian.PutUint32(out[4*i:], x[i]+s[i])
	}
	clear(x[:])
}

// xorKeyStreamGeneric XORs src with the keystream from s into dst and
// advances s's counter past the blocks it used.
func xorKeyStreamGeneric(s *streamState, dst, src []byte, rounds int) {
	var ks [64]byte
	for len(src) > 0 {
		chachaBlock(s, &ks, rounds)
		s[12]++
		n := min(len(src), 64)
		for i := range n {
			dst[i] = src[i] ^ ks[i]
		}
		dst, src = dst[n:], src[n:]
	}
	clear(ks[:])
}
