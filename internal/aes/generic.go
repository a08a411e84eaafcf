package aes

import (
	"encoding/binary"
	"math/bits"
)

// Pure Go implementation ("generic"): T-table AES plus the modes. It is the
// reference every other implementation is tested against, and the only one
// built under the purego tag or on other architectures.

func genEncBlock(b *Block, dst, src []byte) {
	k := b.enc[:4*(b.rounds+1)]
	_ = src[15]
	_ = dst[15]
	s0 := binary.BigEndian.Uint32(src[0:]) ^ k[0]
	s1 := binary.BigEndian.Uint32(src[4:]) ^ k[1]
	s2 := binary.BigEndian.Uint32(src[8:]) ^ k[2]
	s3 := binary.BigEndian.Uint32(src[12:]) ^ k[3]
	i := 4
	for r := 1; r < b.rounds; r++ {
		t0 := te0[s0>>24] ^ bits.RotateLeft32(te0[s1>>16&0xff], -8) ^ bits.RotateLeft32(te0[s2>>8&0xff], -16) ^ bits.RotateLeft32(te0[s3&0xff], -24) ^ k[i]
		t1 := te0[s1>>24] ^ bits.RotateLeft32(te0[s2>>16&0xff], -8) ^ bits.RotateLeft32(te0[s3>>8&0xff], -16) ^ bits.RotateLeft32(te0[s0&0xff], -24) ^ k[i+1]
		t2 := te0[s2>>24] ^ bits.RotateLeft32(te0[s3>>16&0xff], -8) ^ bits.RotateLeft32(te0[s0>>8&0xff], -16) ^ bits.RotateLeft32(te0[s1&0xff], -24) ^ k[i+2]
		t3 := te0[s3>>24] ^ bits.RotateLeft32(te0[s0>>16&0xff], -8) ^ bits.RotateLeft32(te0[s1>>8&0xff], -16) ^ bits.RotateLeft32(te0[s2&0xff], -24) ^ k[i+3]
		s0, s1, s2, s3 = t0, t1, t2, t3
		i += 4
	}
	t0 := uint32(sbox[s0>>24])<<24 | uint32(sbox[s1>>16&0xff])<<16 | uint32(sbox[s2>>8&0xff])<<8 | uint32(sbox[s3&0xff])
	t1 := uint32(sbox[s1>>24])<<24 | uint32(sbox[s2>>16&0xff])<<16 | uint32(sbox[s3>>8&0xff])<<8 | uint32(sbox[s0&0xff])
	t2 := uint32(sbox[s2>>24])<<24 | uint32(sbox[s3>>16&0xff])<<16 | uint32(sbox[s0>>8&0xff])<<8 | uint32(sbox[s1&0xff])
	t3 := uint32(sbox[s3>>24])<<24 | uint32(sbox[s0>>16&0xff])<<16 | uint32(sbox[s1>>8&0xff])<<8 | uint32(sbox[s2&0xff])
	binary.BigEndian.PutUint32(dst[0:], t0^k[i])
	binary.BigEndian.PutUint32(dst[4:], t1^k[i+1])
	binary.BigEndian.PutUint32(dst[8:], t2^k[i+2])
	binary.BigEndian.PutUint32(dst[12:], t3^k[i+3])
}

func genDecBlock(b *Block, dst, src []byte) {
	k := b.dec[:4*(b.rounds+1)]
	_ = src[15]
	_ = dst[15]
	s0 := binary.BigEndian.Uint32(src[0:]) ^ k[0]
	s1 := binary.BigEndian.Uint32(src[4:]) ^ k[1]
	s2 := binary.BigEndian.Uint32(src[8:]) ^ k[2]
	s3 := binary.BigEndian.Uint32(src[12:]) ^ k[3]
	i := 4
	for r := 1; r < b.rounds; r++ {
		t0 := td0[s0>>24] ^ bits.RotateLeft32(td0[s3>>16&0xff], -8) ^ bits.RotateLeft32(td0[s2>>8&0xff], -16) ^ bits.RotateLeft32(td0[s1&0xff], -24) ^ k[i]
		t1 := td0[s1>>24] ^ bits.RotateLeft32(td0[s0>>16&0xff], -8) ^ bits.RotateLeft32(td0[s3>>8&0xff], -16) ^ bits.RotateLeft32(td0[s2&0xff], -24) ^ k[i+1]
		t2 := td0[s2>>24] ^ bits.RotateLeft32(td0[s1>>16&0xff], -8) ^ bits.RotateLeft32(td0[s0>>8&0xff], -16) ^ bits.RotateLeft32(td0[s3&0xff], -24) ^ k[i+2]
		t3 := td0[s3>>24] ^ bits.RotateLeft32(td0[s2>>16&0xff], -8) ^ bits.RotateLeft32(td0[s1>>8&0xff], -16) ^ bits.RotateLeft32(td0[s0&0xff], -24) ^ k[i+3]
		s0, s1, s2, s3 = t0, t1, t2, t3
		i += 4
	}
	t0 := uint32(invSbox[s0>>24])<<24 | uint32(invSbox[s3>>16&0xff])<<16 | uint32(invSbox[s2>>8&0xff])<<8 | uint32(invSbox[s1&0xff])
	t1 := uint32(invSbox[s1>>24])<<24 | uint32(invSbox[s0>>16&0xff])<<16 | uint32(invSbox[s3>>8&0xff])<<8 | uint32(invSbox[s2&0xff])
	t2 := uint32(invSbox[s2>>24])<<24 | uint32(invSbox[s1>>16&0xff])<<16 | uint32(invSbox[s0>>8&0xff])<<8 | uint32(invSbox[s3&0xff])
	t3 := uint32(invSbox[s3>>24])<<24 | uint32(invSbox[s2>>16&0xff])<<16 | uint32(invSbox[s1>>8&0xff])<<8 | uint32(invSbox[s0&0xff])
	binary.BigEndian.PutUint32(dst[0:], t0^k[i])
	binary.BigEndian.PutUint32(dst[4:], t1^k[i+1])
	binary.BigEndian.PutUint32(dst[8:], t2^k[i+2])
	binary.BigEndian.PutUint32(dst[12:], t3^k[i+3])
}

func genECB(b *Block, enc bool, dst, src []byte) {
	for i := 0; i < len(src); i += 16 {
		if enc {
			genEncBlock(b, dst[i:i+16], src[i:i+16])
		} else {
			genDecBlock(b, dst[i:i+16], src[i:i+16])
		}
	}
}

func xor16(dst, a, b []byte) {
	x := binary.LittleEndian.Uint64(a[0:]) ^ binary.LittleEndian.Uint64(b[0:])
	y := binary.LittleEndian.Uint64(a[8:]) ^ binary.LittleEndian.Uint64(b[8:])
	binary.LittleEndian.PutUint64(dst[0:], x)
	binary.LittleEndian.PutUint64(dst[8:], y)
}

func genEncCBC(b *Block, dst, src []byte, iv *[16]byte) {
	var c [16]byte
	c = *iv
	for i := 0; i < len(src); i += 16 {
		xor16(c[:], c[:], src[i:i+16])
		genEncBlock(b, c[:], c[:])
		copy(dst[i:i+16], c[:])
	}
	*iv = c
}

func genDecCBC(b *Block, dst, src []byte, iv *[16]byte) {
	prev := *iv
	var c, p [16]byte
	for i := 0; i < len(src); i += 16 {
		copy(c[:], src[i:i+16])
		genDecBlock(b, p[:], c[:])
		xor16(dst[i:i+16], p[:], prev[:])
		prev = c
	}
	*iv = prev
}

// mulx multiplies the XTS tweak by x in GF(2^128) (little-endian convention,
// polynomial x^128+x^7+x^2+x+1).
func mulx(t *[16]byte) {
	lo := binary.LittleEndian.Uint64(t[0:])
	hi := binary.LittleEndian.Uint64(t[8:])
	carry := hi >> 63
	hi = hi<<1 | lo>>63
	lo = lo<<1 ^ (0x87 & -carry)
	binary.LittleEndian.PutUint64(t[0:], lo)
	binary.LittleEndian.PutUint64(t[8:], hi)
}

// genXTS processes whole blocks with tweak t and leaves t multiplied by x
// once per block.
func genXTS(b *Block, enc bool, dst, src []byte, t *[16]byte) {
	var x [16]byte
	for i := 0; i < len(src); i += 16 {
		xor16(x[:], src[i:i+16], t[:])
		if enc {
			genEncBlock(b, x[:], x[:])
		} else {
			genDecBlock(b, x[:], x[:])
		}
		xor16(dst[i:i+16], x[:], t[:])
		mulx(t)
	}
}
