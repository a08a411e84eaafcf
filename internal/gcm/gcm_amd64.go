//go:build amd64 && !purego

package gcm

import (
	"crypto/subtle"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAsm: the kernels use EVEX-encoded VAES and VPCLMULQDQ on ZMM
// registers (AVX512F), the same on XMM registers 16-31 (AVX512VL), and
// EVEX VPSHUFB (AVX512BW); x/sys/cpu reports the AVX-512 features only
// when the OS saves ZMM state. AESENCLAST in subWord is AES-NI.
var useAsm = cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ &&
	cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512VAES && cpu.X86.HasAVX512VPCLMULQDQ

//go:noescape
func subWord(x uint32) uint32

//go:noescape
func gcmInitAVX512(table *[304]byte, h *[16]byte)

// gcmAVX512 is one whole Seal (enc) or Open: see gcm_amd64.s.
//
//go:noescape
func gcmAVX512(xk *byte, nr int, table *[304]byte, j0 *[16]byte, ad *byte, adLen int, dst, src *byte, n int, tag *[16]byte, enc bool)

func (g *GCM) initAsm(key []byte) {
	// subWord is AESENCLAST, so the schedule takes no table lookups
	// indexed by key bytes.
	g.expandKey(key, subWord)
	var h [16]byte
	g.block.Encrypt(h[:], h[:])
	gcmInitAVX512(&g.table, &h)
	clear(h[:])
}

func (g *GCM) seal(out, nonce, plaintext, ad []byte) {
	g.sealDetached(out[:len(plaintext)], out[len(plaintext):], nonce, plaintext, ad)
}

func (g *GCM) sealDetached(out, tag, nonce, plaintext, ad []byte) {
	ctr := j0(nonce)
	var t [TagSize]byte
	gcmAVX512(&g.xk[0], g.nr, &g.table, &ctr, unsafe.SliceData(ad), len(ad),
		unsafe.SliceData(out), unsafe.SliceData(plaintext), len(plaintext), &t, true)
	copy(tag, t[:])
}

// open decrypts into out and reports whether the tag verified.
func (g *GCM) open(out, nonce, ciphertext, ad []byte) bool {
	ct := ciphertext[:len(ciphertext)-TagSize]
	var tag [TagSize]byte
	copy(tag[:], ciphertext[len(ct):])
	return g.openDetached(out, nonce, ct, tag[:], ad)
}

func (g *GCM) openDetached(out, nonce, ct, tag, ad []byte) bool {
	ctr := j0(nonce)
	var got [TagSize]byte
	gcmAVX512(&g.xk[0], g.nr, &g.table, &ctr, unsafe.SliceData(ad), len(ad),
		unsafe.SliceData(out), unsafe.SliceData(ct), len(ct), &got, false)
	return subtle.ConstantTimeCompare(got[:], tag) == 1
}
