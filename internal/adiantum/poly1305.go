package adiantum

import (
	"encoding/binary"
	"math/bits"
)

// Adiantum uses Poly1305 as a bare polynomial hash: the accumulator is
// reduced mod 2^130-5 and its low 128 bits are the result, with no
// one-time pad added (the kernel's poly1305_core_emit with a nil nonce).

// polyKey is a clamped r, as two 64-bit limbs.
type polyKey [2]uint64

// polyState is the accumulator h, 130 bits in three 64-bit limbs (h[2] is
// small: it stays below 8 between blocks).
type polyState [3]uint64

func newPolyKey(b []byte) polyKey {
	return polyKey{
		binary.LittleEndian.Uint64(b[0:]) & 0x0ffffffc0fffffff,
		binary.LittleEndian.Uint64(b[8:]) & 0x0ffffffc0ffffffc,
	}
}

// polyBlocksGeneric adds each 16-byte block of msg, with the 2^128 bit set,
// to h and multiplies by r modulo 2^130-5 (partially reduced).
func polyBlocksGeneric(h *polyState, r *polyKey, msg []byte) {
	h0, h1, h2 := h[0], h[1], h[2]
	r0, r1 := r[0], r[1]
	for len(msg) >= 16 {
		var c uint64
		h0, c = bits.Add64(h0, binary.LittleEndian.Uint64(msg[0:]), 0)
		h1, c = bits.Add64(h1, binary.LittleEndian.Uint64(msg[8:]), c)
		h2 += c + 1

		// h·r as four limbs t0..t3; h2 < 8 and r's limbs < 2^60, so h2·r
		// fits a limb and the column sums cannot overflow 128 bits.
		h0r0hi, h0r0lo := bits.Mul64(h0, r0)
		h1r0hi, h1r0lo := bits.Mul64(h1, r0)
		h0r1hi, h0r1lo := bits.Mul64(h0, r1)
		h1r1hi, h1r1lo := bits.Mul64(h1, r1)
		h2r0 := h2 * r0
		h2r1 := h2 * r1

		t0 := h0r0lo
		t1, c := bits.Add64(h0r0hi, h1r0lo, 0)
		m2hi := c
		t1, c = bits.Add64(t1, h0r1lo, 0)
		m2hi += c
		t2, c := bits.Add64(h1r0hi, h0r1hi, 0)
		t3 := c
		t2, c = bits.Add64(t2, h1r1lo, 0)
		t3 += c
		t2, c = bits.Add64(t2, h2r0, 0)
		t3 += c
		t2, c = bits.Add64(t2, m2hi, 0)
		t3 += c
		t3 += h1r1hi + h2r1

		// 2^130 ≡ 5: fold the bits above 130 back in as 4x + x.
		h0, h1, h2 = t0, t1, t2&3
		cc0, cc1 := t2&^3, t3
		h0, c = bits.Add64(h0, cc0, 0)
		h1, c = bits.Add64(h1, cc1, c)
		h2 += c
		cc0, cc1 = cc0>>2|cc1<<62, cc1>>2
		h0, c = bits.Add64(h0, cc0, 0)
		h1, c = bits.Add64(h1, cc1, c)
		h2 += c
		msg = msg[16:]
	}
	h[0], h[1], h[2] = h0, h1, h2
}

// polyEmit reduces h fully and returns its low 128 bits.
func polyEmit(h *polyState) (lo, hi uint64) {
	h0, h1, h2 := h[0], h[1], h[2]
	// h < 2·(2^130-5), so one conditional subtraction of p suffices.
	t0, b := bits.Sub64(h0, 0xfffffffffffffffb, 0)
	t1, b := bits.Sub64(h1, 0xffffffffffffffff, b)
	_, b = bits.Sub64(h2, 3, b)
	mask := b - 1 // all ones when there was no borrow: h >= p
	return h0 ^ (mask & (h0 ^ t0)), h1 ^ (mask & (h1 ^ t1))
}
