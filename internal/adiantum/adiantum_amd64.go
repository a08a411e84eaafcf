//go:build amd64 && !purego

package adiantum

import (
	"crypto/subtle"

	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd _asm && go run . -out ../adiantum_amd64.s"

// x/sys/cpu reports AVX2 and AVX-512 only when the OS saves the registers.
var (
	hasAVX2   = cpu.X86.HasAVX2
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL
)

//go:noescape
func chacha16AVX512(s *streamState, dst, src *byte, n, rounds int)

//go:noescape
func chacha8AVX512VL(s *streamState, dst, src *byte, n, rounds int)

//go:noescape
func chacha8AVX2(s *streamState, dst, src *byte, n, rounds int)

//go:noescape
func nhAVX2(kx *nhKeyX, msg *byte, n int, out *byte)

//go:noescape
func poly1305Blocks(h *polyState, r *polyKey, msg *byte, n int)

//go:noescape
func nhAVX512(kx *nhKeyX, msg *byte, n int, out *byte)

func init() {
	if hasAVX2 {
		impls = append([]implID{implAVX2}, impls...)
	}
	if hasAVX2 && hasAVX512 {
		impls = append([]implID{implAVX512}, impls...)
	}
}

func xorStream(im implID, s *streamState, dst, src []byte, rounds int) {
	switch im {
	case implAVX512:
		xorAVX512(s, dst, src, rounds)
	case implAVX2:
		xorAVX2(s, dst, src, rounds)
	default:
		xorKeyStreamGeneric(s, dst, src, rounds)
	}
}

func nhChunks(c *Cipher, msg, out []byte) {
	switch {
	case len(msg) == 0:
	case c.im == implAVX512:
		nhAVX512(&c.nhKeyX, &msg[0], len(msg), &out[0])
	case c.im == implAVX2:
		nhAVX2(&c.nhKeyX, &msg[0], len(msg), &out[0])
	default:
		nhChunksGeneric(c, msg, out)
	}
}

func polyBlocks(im implID, h *polyState, r *polyKey, msg []byte) {
	if im == implGeneric {
		polyBlocksGeneric(h, r, msg)
	} else if n := len(msg) &^ 15; n > 0 {
		poly1305Blocks(h, r, &msg[0], n)
	}
}

// zeros is the source of keystream-only calls, for the tail of a message.
var zeros [1024]byte

func xorAVX512(s *streamState, dst, src []byte, rounds int) {
	full := len(src) &^ 1023
	if full > 0 {
		chacha16AVX512(s, &dst[0], &src[0], full/64, rounds)
		s[12] += uint32(full / 64)
	}
	if len(src) == full {
		return
	}
	if len(src)-full <= 512 {
		var ks [512]byte
		chacha8AVX512VL(s, &ks[0], &zeros[0], 8, rounds)
		n := subtle.XORBytes(dst[full:], src[full:], ks[:])
		s[12] += uint32((n + 63) / 64)
		clear(ks[:])
		return
	}
	var ks [1024]byte
	chacha16AVX512(s, &ks[0], &zeros[0], 16, rounds)
	n := subtle.XORBytes(dst[full:], src[full:], ks[:])
	s[12] += uint32((n + 63) / 64)
	clear(ks[:])
}

func xorAVX2(s *streamState, dst, src []byte, rounds int) {
	for len(src) >= 512 {
		full := len(src) &^ 511
		chacha8AVX2(s, &dst[0], &src[0], full/64, rounds)
		s[12] += uint32(full / 64)
		dst, src = dst[full:], src[full:]
	}
	if len(src) == 0 {
		return
	}
	var ks [512]byte
	chacha8AVX2(s, &ks[0], &zeros[0], 8, rounds)
	n := subtle.XORBytes(dst, src, ks[:])
	s[12] += uint32((n + 63) / 64)
	clear(ks[:])
}
