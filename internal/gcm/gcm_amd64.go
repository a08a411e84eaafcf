//go:build amd64 && !purego

package gcm

import "golang.org/x/sys/cpu"

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
func gcmInitAVX512(table *[256]byte, h *[16]byte)

//go:noescape
func ghashAVX512(table *[256]byte, acc *[16]byte, data *byte, n int)

//go:noescape
func gcmEncAVX512(xk *byte, nr int, table *[256]byte, ctr *[16]byte, acc *[16]byte, dst, src *byte, n int)

//go:noescape
func gcmDecAVX512(xk *byte, nr int, table *[256]byte, ctr *[16]byte, acc *[16]byte, dst, src *byte, n int)

func (g *GCM) initAsm(key []byte) {
	// subWord is AESENCLAST, so the schedule takes no table lookups
	// indexed by key bytes.
	g.expandKey(key, subWord)
	var h [16]byte
	g.block.Encrypt(h[:], h[:])
	gcmInitAVX512(&g.table, &h)
	clear(h[:])
}

// ghash absorbs data (whole blocks) into acc.
func (g *GCM) ghash(acc *[16]byte, data []byte) {
	ghashAVX512(&g.table, acc, &data[0], len(data)/16)
}

// encBlocks encrypts whole blocks from the counter block ctr and absorbs
// the ciphertext into acc.
func (g *GCM) encBlocks(ctr, acc *[16]byte, dst, src []byte) {
	gcmEncAVX512(&g.xk[0], g.nr, &g.table, ctr, acc, &dst[0], &src[0], len(src)/16)
}

// decBlocks absorbs whole blocks of ciphertext into acc and decrypts them.
func (g *GCM) decBlocks(ctr, acc *[16]byte, dst, src []byte) {
	gcmDecAVX512(&g.xk[0], g.nr, &g.table, ctr, acc, &dst[0], &src[0], len(src)/16)
}
