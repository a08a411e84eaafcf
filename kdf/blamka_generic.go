package kdf

import "math/bits"

// processBlockGeneric is the compression function G of RFC 9106 section
// 3.5: R = X xor Y, the permutation P over R's eight rows and then its
// eight columns, and out = P(R) xor R (xored into out when xor is set).
func processBlockGeneric(out, x, y *block, xor bool) {
	var r, q block
	for i := range r {
		r[i] = x[i] ^ y[i]
	}
	q = r
	// Rows: 16 consecutive words each.
	for i := 0; i < blockWords; i += 16 {
		v := (*[16]uint64)(q[i : i+16])
		v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15] = permute(
			v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15])
	}
	// Columns: the 16-byte registers at 2i of every row.
	for i := 0; i < 16; i += 2 {
		q[i], q[i+1], q[i+16], q[i+17], q[i+32], q[i+33], q[i+48], q[i+49],
			q[i+64], q[i+65], q[i+80], q[i+81], q[i+96], q[i+97], q[i+112], q[i+113] = permute(
			q[i], q[i+1], q[i+16], q[i+17], q[i+32], q[i+33], q[i+48], q[i+49],
			q[i+64], q[i+65], q[i+80], q[i+81], q[i+96], q[i+97], q[i+112], q[i+113])
	}
	if xor {
		for i := range out {
			out[i] ^= q[i] ^ r[i]
		}
	} else {
		for i := range out {
			out[i] = q[i] ^ r[i]
		}
	}
}

// permute is P: the BLAKE2b round with the multiplication of BlaMka,
// on a 4x4 matrix of words, columns then diagonals.
func permute(v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15 uint64) (
	uint64, uint64, uint64, uint64, uint64, uint64, uint64, uint64,
	uint64, uint64, uint64, uint64, uint64, uint64, uint64, uint64) {
	v0, v4, v8, v12 = gb(v0, v4, v8, v12)
	v1, v5, v9, v13 = gb(v1, v5, v9, v13)
	v2, v6, v10, v14 = gb(v2, v6, v10, v14)
	v3, v7, v11, v15 = gb(v3, v7, v11, v15)
	v0, v5, v10, v15 = gb(v0, v5, v10, v15)
	v1, v6, v11, v12 = gb(v1, v6, v11, v12)
	v2, v7, v8, v13 = gb(v2, v7, v8, v13)
	v3, v4, v9, v14 = gb(v3, v4, v9, v14)
	return v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15
}

// gb is BLAKE2b's G with each addition a+b replaced by
// a + b + 2*lo32(a)*lo32(b).
func gb(a, b, c, d uint64) (uint64, uint64, uint64, uint64) {
	a += b + 2*uint64(uint32(a))*uint64(uint32(b))
	d = bits.RotateLeft64(d^a, -32)
	c += d + 2*uint64(uint32(c))*uint64(uint32(d))
	b = bits.RotateLeft64(b^c, -24)
	a += b + 2*uint64(uint32(a))*uint64(uint32(b))
	d = bits.RotateLeft64(d^a, -16)
	c += d + 2*uint64(uint32(c))*uint64(uint32(d))
	b = bits.RotateLeft64(b^c, -63)
	return a, b, c, d
}
