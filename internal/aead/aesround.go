package aead

// One AES encryption round (the AESENC instruction: SubBytes, ShiftRows,
// MixColumns, then the round key xored in), the building block of AEGIS.
// The S-box is computed at start-up from its definition (inverse in
// GF(2^8), then the affine map) rather than written out.

var sbox [256]byte

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
}

func rotl8(x byte, n uint) byte { return x<<n | x>>(8-n) }

func xtime(x byte) byte { return x<<1 ^ byte(int8(x)>>7)&0x1b }

// aesRound sets dst to AESENC(src, key). dst may alias src or key.
func aesRound(dst, src, key *block) {
	var t block
	for c := range 4 {
		for r := range 4 {
			t[4*c+r] = sbox[src[4*((c+r)&3)+r]]
		}
	}
	for c := range 4 {
		a0, a1, a2, a3 := t[4*c], t[4*c+1], t[4*c+2], t[4*c+3]
		all := a0 ^ a1 ^ a2 ^ a3
		dst[4*c] = a0 ^ all ^ xtime(a0^a1) ^ key[4*c]
		dst[4*c+1] = a1 ^ all ^ xtime(a1^a2) ^ key[4*c+1]
		dst[4*c+2] = a2 ^ all ^ xtime(a2^a3) ^ key[4*c+2]
		dst[4*c+3] = a3 ^ all ^ xtime(a3^a0) ^ key[4*c+3]
	}
}
