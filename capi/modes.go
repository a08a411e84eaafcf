package capi

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// InexactOverlap reports whether x and y share memory at different offsets,
// which no driver supports (exact aliasing, in place, is fine). Callers of
// the unchecked paths (Tfm.UncheckedPlain64) use it to keep that promise.
func InexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs <= ys+uintptr(len(y)-1) && ys <= xs+uintptr(len(x)-1)
}

// The generic modes below work on any 8- or 16-byte block cipher through
// cipher.Block, one block per call, and take the block size from it (the
// templates give them nothing else). They are the reference every faster
// driver is compared with, and the fallback for serpent, twofish and the
// 64-bit-block ciphers.

type ecbMode struct{ b cipher.Block }

func (m ecbMode) Encrypt(dst, src, _ []byte) {
	bs := m.b.BlockSize()
	for i := 0; i < len(src); i += bs {
		m.b.Encrypt(dst[i:i+bs], src[i:i+bs])
	}
}

func (m ecbMode) Decrypt(dst, src, _ []byte) {
	bs := m.b.BlockSize()
	for i := 0; i < len(src); i += bs {
		m.b.Decrypt(dst[i:i+bs], src[i:i+bs])
	}
}

type cbcMode struct{ b cipher.Block }

// The loops below pass only caller memory (dst, src, iv) to the block
// cipher: a local array handed to an interface method escapes to the heap,
// and the data path must not allocate.

func (m cbcMode) Encrypt(dst, src, iv []byte) {
	bs := m.b.BlockSize()
	prev := iv
	for i := 0; i < len(src); i += bs {
		d := dst[i : i+bs]
		subtle.XORBytes(d, src[i:i+bs], prev)
		m.b.Encrypt(d, d)
		prev = d
	}
}

func (m cbcMode) Decrypt(dst, src, iv []byte) {
	bs := m.b.BlockSize()
	var prev, cur [16]byte
	copy(prev[:bs], iv)
	for i := 0; i < len(src); i += bs {
		copy(cur[:bs], src[i:i+bs])
		m.b.Decrypt(dst[i:i+bs], src[i:i+bs])
		subtle.XORBytes(dst[i:i+bs], dst[i:i+bs], prev[:bs])
		prev = cur
	}
}

// ctrMode is the kernel's ctr(): the IV is a big-endian counter as wide as
// the block, wrapping as crypto_inc does.
type ctrMode struct{ b cipher.Block }

func (m ctrMode) Encrypt(dst, src, iv []byte) {
	bs := m.b.BlockSize()
	var ctr, ks [16]byte
	copy(ctr[:bs], iv)
	for i := 0; i < len(src); i += bs {
		m.b.Encrypt(ks[:bs], ctr[:bs])
		end := min(i+bs, len(src))
		subtle.XORBytes(dst[i:end], src[i:end], ks[:end-i])
		for j := bs - 1; j >= 0; j-- {
			ctr[j]++
			if ctr[j] != 0 {
				break
			}
		}
	}
}

func (m ctrMode) Decrypt(dst, src, iv []byte) { m.Encrypt(dst, src, iv) }

// mulX multiplies the XTS tweak by x in GF(2^128), little-endian convention.
func mulX(t *[16]byte) {
	lo, hi := binary.LittleEndian.Uint64(t[:8]), binary.LittleEndian.Uint64(t[8:])
	carry := hi >> 63
	hi = hi<<1 | lo>>63
	lo = lo<<1 ^ carry*0x87
	binary.LittleEndian.PutUint64(t[:8], lo)
	binary.LittleEndian.PutUint64(t[8:], hi)
}

// xtsMode is IEEE 1619 XTS with ciphertext stealing for a partial last block.
type xtsMode struct{ k1, k2 cipher.Block }

// tweak computes E_k2(iv) through dst's first block, so that no local
// array escapes to the heap; src's first block is saved and put back, which
// keeps in-place calls correct.
func (m xtsMode) tweak(t *[16]byte, dst, src, iv []byte) {
	var p0 [16]byte
	copy(p0[:], src[:16])
	m.k2.Encrypt(dst[:16], iv)
	copy(t[:], dst[:16])
	copy(dst[:16], p0[:])
}

func xtsBlocks(b cipher.Block, enc bool, dst, src []byte, t *[16]byte) {
	for i := 0; i < len(src); i += 16 {
		d := dst[i : i+16]
		subtle.XORBytes(d, src[i:i+16], t[:])
		if enc {
			b.Encrypt(d, d)
		} else {
			b.Decrypt(d, d)
		}
		subtle.XORBytes(d, d, t[:])
		mulX(t)
	}
}

func (m xtsMode) Encrypt(dst, src, iv []byte) {
	var t [16]byte
	m.tweak(&t, dst, src, iv)
	n := len(src)
	full := n &^ 15
	if n%16 != 0 {
		full -= 16 // the last whole block takes part in stealing
	}
	xtsBlocks(m.k1, true, dst[:full], src[:full], &t)
	if n%16 != 0 {
		m.encryptCTS(dst[full:n], src[full:n], &t)
	}
}

// encryptCTS handles the last whole block and the partial one (IEEE 1619
// ciphertext stealing): CC = E(P_{m-1}) under T_{m-1}; the short last block
// takes CC's head; the whole-block slot gets E(P_m || CC's tail) under T_m.
func (m xtsMode) encryptCTS(dst, src []byte, t *[16]byte) {
	tail := len(src) - 16
	var cc, pp [16]byte
	xtsBlocks(m.k1, true, cc[:], src[:16], t)
	copy(pp[:], src[16:])
	copy(pp[tail:], cc[tail:])
	copy(dst[16:], cc[:tail])
	xtsBlocks(m.k1, true, dst[:16], pp[:], t)
}

func (m xtsMode) Decrypt(dst, src, iv []byte) {
	var t [16]byte
	m.tweak(&t, dst, src, iv)
	n := len(src)
	full := n &^ 15
	if n%16 != 0 {
		full -= 16
	}
	xtsBlocks(m.k1, false, dst[:full], src[:full], &t)
	if n%16 != 0 {
		m.decryptCTS(dst[full:n], src[full:n], &t)
	}
}

// decryptCTS undoes encryptCTS: the whole-block slot is decrypted with the
// later tweak T_m first.
func (m xtsMode) decryptCTS(dst, src []byte, t *[16]byte) {
	tail := len(src) - 16
	t2 := *t
	mulX(&t2)
	var pp, cc [16]byte
	xtsBlocks(m.k1, false, pp[:], src[:16], &t2)
	copy(cc[:], src[16:])
	copy(cc[tail:], pp[tail:])
	copy(dst[16:], pp[:tail])
	xtsBlocks(m.k1, false, dst[:16], cc[:], t)
}

// gf128BE is an element of GF(2^128) in LRW's big-endian convention: hi
// holds bytes 0-7, the most significant coefficients.
type gf128BE struct{ hi, lo uint64 }

func (a gf128BE) double() gf128BE {
	c := a.hi >> 63
	return gf128BE{a.hi<<1 | a.lo>>63, a.lo<<1 ^ c*0x87}
}

func gfMulBE(a, b gf128BE) gf128BE {
	var r gf128BE
	for i := 127; i >= 0; i-- {
		r = r.double()
		var bit uint64
		if i >= 64 {
			bit = b.hi >> (i - 64) & 1
		} else {
			bit = b.lo >> i & 1
		}
		m := -bit
		r.hi ^= a.hi & m
		r.lo ^= a.lo & m
	}
	return r
}

// lrwMode is LRW-AES as the kernel's lrw(): T_j = K2 ⊗ (I + j), with the
// 128-bit big-endian block index I taken from the IV. Stepping from index I
// to I+1 flips the low k+1 bits, k being I's trailing ones, so
// T_{j+1} = T_j ⊕ K2⊗(2^{k+1}-1) from a 128-entry table.
type lrwMode struct {
	b     cipher.Block
	k2    gf128BE
	table [128]gf128BE
}

func newLRW(b cipher.Block, k2 []byte) *lrwMode {
	m := &lrwMode{b: b, k2: gf128BE{binary.BigEndian.Uint64(k2[:8]), binary.BigEndian.Uint64(k2[8:])}}
	var ones gf128BE
	for k := 0; k < 128; k++ {
		if k < 64 {
			ones.lo |= 1 << k
		} else {
			ones.hi |= 1 << (k - 64)
		}
		m.table[k] = gfMulBE(m.k2, ones)
	}
	return m
}

func (m *lrwMode) crypt(dst, src, iv []byte, enc bool) {
	idx := gf128BE{binary.BigEndian.Uint64(iv[:8]), binary.BigEndian.Uint64(iv[8:])}
	t := gfMulBE(m.k2, idx)
	var tb [16]byte
	for i := 0; i < len(src); i += 16 {
		binary.BigEndian.PutUint64(tb[:8], t.hi)
		binary.BigEndian.PutUint64(tb[8:], t.lo)
		d := dst[i : i+16]
		subtle.XORBytes(d, src[i:i+16], tb[:])
		if enc {
			m.b.Encrypt(d, d)
		} else {
			m.b.Decrypt(d, d)
		}
		subtle.XORBytes(d, d, tb[:])
		// step idx and t
		var k int
		if ^idx.lo != 0 {
			k = bits.TrailingZeros64(^idx.lo)
		} else {
			k = 64 + bits.TrailingZeros64(^idx.hi)
		}
		if k > 127 {
			k = 127
		}
		t.hi ^= m.table[k].hi
		t.lo ^= m.table[k].lo
		idx.lo++
		if idx.lo == 0 {
			idx.hi++
		}
	}
}

func (m *lrwMode) Encrypt(dst, src, iv []byte) { m.crypt(dst, src, iv, true) }
func (m *lrwMode) Decrypt(dst, src, iv []byte) { m.crypt(dst, src, iv, false) }

// wipeBlock zeroes a cipher's key schedule where it can.
func wipeBlock(b cipher.Block) {
	if w, ok := b.(Wiper); ok {
		w.Wipe()
	}
}

func (m ecbMode) Wipe()  { wipeBlock(m.b) }
func (m cbcMode) Wipe()  { wipeBlock(m.b) }
func (m ctrMode) Wipe()  { wipeBlock(m.b) }
func (m xtsMode) Wipe()  { wipeBlock(m.k1); wipeBlock(m.k2) }
func (m *lrwMode) Wipe() { wipeBlock(m.b); m.k2 = gf128BE{}; clear(m.table[:]) }
