package aes

import (
	"encoding/binary"
	"math/bits"
)

// maxRounds is the number of rounds of AES-256.
const maxRounds = 14

// expandKey fills b.enc/b.dec (32-bit words, FIPS-197 order) and the byte
// schedules used by the assembly kernels. len(key) must be 16, 24 or 32.
//
// The decryption schedule is the one of the "equivalent inverse cipher":
// round keys in reverse order, with InvMixColumns applied to all but the
// first and last. This is the form AESDEC/VAESDEC expect.
func (b *Block) expandKey(key []byte) {
	nk := len(key) / 4
	nr := nk + 6
	b.rounds = nr
	n := 4 * (nr + 1)
	w := b.enc[:n]
	for i := 0; i < nk; i++ {
		w[i] = binary.BigEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := nk; i < n; i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			t = subWord(bits.RotateLeft32(t, 8)) ^ rcon<<24
			rcon = uint32(gmul(byte(rcon), 2))
		case nk > 6 && i%nk == 4:
			t = subWord(t)
		}
		w[i] = w[i-nk] ^ t
	}
	d := b.dec[:n]
	for r := 0; r <= nr; r++ {
		for j := 0; j < 4; j++ {
			x := w[4*(nr-r)+j]
			if r != 0 && r != nr {
				x = invMixColumn(x)
			}
			d[4*r+j] = x
		}
	}
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint32(b.xk[4*i:], w[i])
		binary.BigEndian.PutUint32(b.xk[xkDecOff+4*i:], d[i])
	}
	// 256-bit schedules: every 16-byte round key twice, for VAES on ymm.
	for r := 0; r <= nr; r++ {
		copy(b.yk[32*r:], b.xk[16*r:16*r+16])
		copy(b.yk[32*r+16:], b.xk[16*r:16*r+16])
		copy(b.yk[ykDecOff+32*r:], b.xk[xkDecOff+16*r:xkDecOff+16*r+16])
		copy(b.yk[ykDecOff+32*r+16:], b.xk[xkDecOff+16*r:xkDecOff+16*r+16])
	}
}

func subWord(x uint32) uint32 {
	return uint32(sbox[x>>24])<<24 | uint32(sbox[x>>16&0xff])<<16 |
		uint32(sbox[x>>8&0xff])<<8 | uint32(sbox[x&0xff])
}

// invMixColumn applies InvMixColumns to one column given as a big-endian word.
func invMixColumn(x uint32) uint32 {
	a0, a1, a2, a3 := byte(x>>24), byte(x>>16), byte(x>>8), byte(x)
	r0 := gmul(a0, 14) ^ gmul(a1, 11) ^ gmul(a2, 13) ^ gmul(a3, 9)
	r1 := gmul(a0, 9) ^ gmul(a1, 14) ^ gmul(a2, 11) ^ gmul(a3, 13)
	r2 := gmul(a0, 13) ^ gmul(a1, 9) ^ gmul(a2, 14) ^ gmul(a3, 11)
	r3 := gmul(a0, 11) ^ gmul(a1, 13) ^ gmul(a2, 9) ^ gmul(a3, 14)
	return uint32(r0)<<24 | uint32(r1)<<16 | uint32(r2)<<8 | uint32(r3)
}
