package serpent

import (
	"crypto/subtle"
	"encoding/binary"
)

// XTS is IEEE 1619 XTS over Serpent as the kernel's xts(serpent): k1
// encrypts the data, k2 the tweak, and a partial last block is handled by
// ciphertext stealing.
type XTS struct {
	k1, k2 *Cipher
}

// NewXTS pairs a data cipher and a tweak cipher. The bulk work follows
// k1's implementation.
func NewXTS(k1, k2 *Cipher) *XTS { return &XTS{k1: k1, k2: k2} }

// tweak is an XTS tweak as two little-endian halves.
type tweak struct{ lo, hi uint64 }

func loadTweak(b []byte) tweak {
	return tweak{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
}

// next multiplies t by x in GF(2^128).
func (t *tweak) next() {
	c := t.hi >> 63
	t.hi = t.hi<<1 | t.lo>>63
	t.lo = t.lo<<1 ^ c*0x87
}

// fill writes the next len(tw)/16 tweaks into tw and advances t past them.
func (t *tweak) fill(tw []byte) {
	for i := 0; i+16 <= len(tw); i += 16 {
		binary.LittleEndian.PutUint64(tw[i:], t.lo)
		binary.LittleEndian.PutUint64(tw[i+8:], t.hi)
		t.next()
	}
}

// Encrypt encrypts src (at least 16 bytes) with the IV iv.
func (x *XTS) Encrypt(dst, src []byte, iv *[BlockSize]byte) {
	x.crypt(dst, src, iv[:], true)
}

// Decrypt decrypts src (at least 16 bytes) with the IV iv.
func (x *XTS) Decrypt(dst, src []byte, iv *[BlockSize]byte) {
	x.crypt(dst, src, iv[:], false)
}

func (x *XTS) crypt(dst, src, iv []byte, enc bool) {
	if len(src) < BlockSize {
		panic("serpent: xts input shorter than a block")
	}
	check(dst, src, 1)
	var tb [BlockSize]byte
	x.k2.Encrypt(tb[:], iv)
	t := loadTweak(tb[:])
	x.cryptTweak(dst, src, t, enc)
}

// cryptTweak runs XTS from the encrypted tweak t.
func (x *XTS) cryptTweak(dst, src []byte, t tweak, enc bool) {
	n := len(src)
	full := n &^ 15
	if n%16 != 0 {
		full -= 16 // the last whole block takes part in stealing
	}
	x.blocks(dst[:full], src[:full], &t, enc)
	if n%16 == 0 {
		return
	}
	// Ciphertext stealing (IEEE 1619 5.3): the last whole block is
	// processed with the later tweak first when decrypting.
	tail := n - full - 16
	t1 := t
	t2 := t
	t2.next()
	first, second := t1, t2
	if !enc {
		first, second = t2, t1
	}
	var cc, pp [BlockSize]byte
	x.one(cc[:], src[full:full+16], first, enc)
	copy(pp[:], src[full+16:n])
	copy(pp[tail:], cc[tail:])
	copy(dst[full+16:n], cc[:tail])
	x.one(dst[full:full+16], pp[:], second, enc)
	clear(cc[:])
	clear(pp[:])
}

// one runs a single block with tweak t.
func (x *XTS) one(dst, src []byte, t tweak, enc bool) {
	var tb [BlockSize]byte
	t.fill(tb[:])
	subtle.XORBytes(dst[:16], src[:16], tb[:])
	if enc {
		x.k1.Encrypt(dst, dst)
	} else {
		x.k1.Decrypt(dst, dst)
	}
	subtle.XORBytes(dst[:16], dst[:16], tb[:])
}

// blocks runs whole blocks from tweak t and leaves t at the next block's
// tweak.
func (x *XTS) blocks(dst, src []byte, t *tweak, enc bool) {
	n := len(src) / BlockSize
	k := &x.k1.k
	i := 0
	if x.k1.avx2 {
		var tw [16 * BlockSize]byte
		if g := n / 16; g > 0 {
			if enc {
				encXTSLoop16AVX2(k, &dst[0], &src[0], g, t, &tw[0])
			} else {
				decXTSLoop16AVX2(k, &dst[0], &src[0], g, t, &tw[0])
			}
			i = 16 * g
		}
		if n-i >= 8 {
			t.fill(tw[:128])
			if enc {
				encXTS8AVX2(k, &dst[16*i], &src[16*i], &tw[0])
			} else {
				decXTS8AVX2(k, &dst[16*i], &src[16*i], &tw[0])
			}
			i += 8
		}
		if r := n - i; r >= tailKernel {
			var buf [8 * BlockSize]byte
			copy(buf[:], src[16*i:16*n])
			t.fill(tw[:16*r])
			if enc {
				encXTS8AVX2(k, &buf[0], &buf[0], &tw[0])
			} else {
				decXTS8AVX2(k, &buf[0], &buf[0], &tw[0])
			}
			copy(dst[16*i:16*n], buf[:])
			clear(buf[:])
			i = n
		}
	}
	for ; i < n; i++ {
		x.one(dst[16*i:], src[16*i:], *t, enc)
		t.next()
	}
}

// EncryptSectors encrypts len(src)/sectorSize requests, request i with the
// IV at ivs[16i:]. All the tweaks are encrypted in one ECB pass, into ivs.
func (x *XTS) EncryptSectors(dst, src []byte, sectorSize int, ivs []byte) {
	x.sectors(dst, src, sectorSize, ivs, true)
}

// DecryptSectors is EncryptSectors' inverse; ivs is overwritten likewise.
func (x *XTS) DecryptSectors(dst, src []byte, sectorSize int, ivs []byte) {
	x.sectors(dst, src, sectorSize, ivs, false)
}

func (x *XTS) sectors(dst, src []byte, sectorSize int, ivs []byte, enc bool) {
	if sectorSize < BlockSize {
		panic("serpent: xts sector shorter than a block")
	}
	ns := checkSectors(dst, src, sectorSize, ivs, 1)
	x.k2.EncryptBlocks(ivs[:16*ns], ivs[:16*ns])
	for s := 0; s < ns; s++ {
		x.cryptTweak(dst[s*sectorSize:(s+1)*sectorSize], src[s*sectorSize:(s+1)*sectorSize], loadTweak(ivs[16*s:]), enc)
	}
}
