// Command _asm generates ../adiantum_amd64.s, the amd64 kernels of package
// adiantum: the ChaCha keystream 8 blocks at a time in ymm registers (AVX2)
// and 16 at a time in zmm registers (AVX-512F), NH in ymm registers, and
// Poly1305 in scalar 64-bit arithmetic. It prints fixed, fully unrolled
// instruction sequences, so each kernel's register use is visible here.
//
// Run with: cd internal/adiantum/_asm && go run . -out ../adiantum_amd64.s
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
)

type gen struct {
	buf   bytes.Buffer
	args  map[string]int
	label int
}

func (g *gen) p(format string, a ...any) { fmt.Fprintf(&g.buf, "\t"+format+"\n", a...) }

func (g *gen) lbl(l string) { fmt.Fprintf(&g.buf, "%s:\n", l) }

func (g *gen) newLabel(prefix string) string {
	g.label++
	return fmt.Sprintf("%s_%d", prefix, g.label)
}

// begin starts a function whose arguments are all 8 bytes wide.
func (g *gen) begin(name string, frame int, doc string, args ...string) {
	g.args = map[string]int{}
	for i, a := range args {
		g.args[a] = 8 * i
	}
	fmt.Fprintf(&g.buf, "\n// func %s(%s)\n", name, strings.Join(args, ", "))
	for _, l := range strings.Split(doc, "\n") {
		fmt.Fprintf(&g.buf, "// %s\n", l)
	}
	flags := "NOSPLIT, "
	if frame > 256 {
		flags = "" // large frame: let the assembler insert the stack check
	}
	fmt.Fprintf(&g.buf, "TEXT ·%s(SB), %s$%d-%d\n", name, flags, frame, 8*len(args))
}

func (g *gen) arg(name, reg string) {
	off, ok := g.args[name]
	if !ok {
		log.Fatalf("unknown arg %s", name)
	}
	g.p("MOVQ %s+%d(FP), %s", name, off, reg)
}

func (g *gen) data() {
	// VPSHUFB masks rotating each 32-bit lane left by 16 and by 8.
	rot := func(name string, r int) {
		for i := 0; i < 32; i += 4 {
			var v uint32
			for b := 0; b < 4; b++ {
				v |= uint32(i+(b-r/8+4)%4) << (8 * b)
			}
			g.buf.WriteString(fmt.Sprintf("DATA %s<>+%d(SB)/4, $0x%08x\n", name, i, v))
		}
		g.buf.WriteString(fmt.Sprintf("GLOBL %s<>(SB), RODATA|NOPTR, $32\n\n", name))
	}
	rot("rot16", 16)
	rot("rot8", 8)
	// Block counter offsets of the lanes.
	for i := 0; i < 16; i++ {
		g.buf.WriteString(fmt.Sprintf("DATA iota<>+%d(SB)/4, $%d\n", 4*i, i))
	}
	g.buf.WriteString("GLOBL iota<>(SB), RODATA|NOPTR, $64\n")
}

// chachaAVX512 emits NAME(s *[16]uint32, dst, src *byte, n, rounds int):
// n blocks of src (a multiple of the blocks per iteration) XORed with the
// keystream starting at s's counter, into dst. With zmm registers an
// iteration makes 16 blocks; with ymm (AVX-512VL: 32 registers and VPROLD)
// 8, for short messages. Registers 0..15 hold one state word each,
// register 31 the counters, 16..27 the feed-forward's and transpose's
// temporaries.
func (g *gen) chachaAVX512(name string, zmm bool) {
	r, blocks, step := "Y", 8, "eight"
	if zmm {
		r, blocks, step = "Z", 16, "sixteen"
	}
	z := func(i int) string { return fmt.Sprintf("%s%d", r, i) }
	g.begin(name, 0, fmt.Sprintf("%d blocks per iteration, one state word per register.", blocks), "s", "dst", "src", "n", "rounds")
	g.arg("s", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.arg("rounds", "DX")
	g.p("SHRQ $1, DX")
	g.p("VPBROADCASTD 48(AX), %s", z(31))
	g.p("VPADDD iota<>(SB), %s, %s", z(31), z(31))
	loop, dr := g.newLabel("blocks"), g.newLabel("dround")
	g.lbl(loop)
	for w := 0; w < 16; w++ {
		if w == 12 {
			g.p("VMOVDQA64 %s, %s", z(31), z(12))
			continue
		}
		g.p("VPBROADCASTD %d(AX), %s", 4*w, z(w))
	}
	g.p("MOVQ DX, BX")
	g.lbl(dr)
	qr := func(q [4][4]int) {
		step := func(dst, src, x int, rot int) {
			for _, c := range q {
				g.p("VPADDD %s, %s, %s", z(c[src]), z(c[dst]), z(c[dst]))
			}
			for _, c := range q {
				g.p("VPXORD %s, %s, %s", z(c[dst]), z(c[x]), z(c[x]))
			}
			for _, c := range q {
				g.p("VPROLD $%d, %s, %s", rot, z(c[x]), z(c[x]))
			}
		}
		// a += b; d ^= a; d <<<= 16; c += d; b ^= c; b <<<= 12; ...
		step(0, 1, 3, 16)
		step(2, 3, 1, 12)
		step(0, 1, 3, 8)
		step(2, 3, 1, 7)
	}
	qr([4][4]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}})
	qr([4][4]int{{0, 5, 10, 15}, {1, 6, 11, 12}, {2, 7, 8, 13}, {3, 4, 9, 14}})
	g.p("DECQ BX")
	g.p("JNZ %s", dr)
	// Feed-forward.
	for w := 0; w < 16; w++ {
		if w == 12 {
			g.p("VPADDD %s, %s, %s", z(31), z(12), z(12))
			continue
		}
		g.p("VPBROADCASTD %d(AX), %s", 4*w, z(16))
		g.p("VPADDD %s, %s, %s", z(16), z(w), z(w))
	}
	// Transpose: first 4x4 dwords within each 128-bit lane per group of
	// four words, then the 128-bit lanes across the groups.
	for gr := 0; gr < 4; gr++ {
		x0, x1, x2, x3 := z(4*gr), z(4*gr+1), z(4*gr+2), z(4*gr+3)
		g.p("VPUNPCKLDQ %s, %s, %s", x1, x0, z(16))
		g.p("VPUNPCKHDQ %s, %s, %s", x1, x0, z(17))
		g.p("VPUNPCKLDQ %s, %s, %s", x3, x2, z(18))
		g.p("VPUNPCKHDQ %s, %s, %s", x3, x2, z(19))
		g.p("VPUNPCKLQDQ %s, %s, %s", z(18), z(16), x0)
		g.p("VPUNPCKHQDQ %s, %s, %s", z(18), z(16), x1)
		g.p("VPUNPCKLQDQ %s, %s, %s", z(19), z(17), x2)
		g.p("VPUNPCKHQDQ %s, %s, %s", z(19), z(17), x3)
	}
	store := func(o string, off int) {
		g.p("VPXORD %d(SI), %s, %s", off, o, o)
		g.p("VMOVDQU64 %s, %d(DI)", o, off)
	}
	for j := 0; j < 4; j++ {
		a, b, c, d := z(j), z(4+j), z(8+j), z(12+j)
		if !zmm {
			// Lane l of the four registers is block 4l+j.
			for l, imm := range []string{"0x00", "0x03"} {
				g.p("VSHUFI32X4 $%s, %s, %s, %s", imm, b, a, z(20))
				g.p("VSHUFI32X4 $%s, %s, %s, %s", imm, d, c, z(21))
				store(z(20), 64*(4*l+j))
				store(z(21), 64*(4*l+j)+32)
			}
			continue
		}
		g.p("VSHUFI32X4 $0x88, %s, %s, Z20", b, a)
		g.p("VSHUFI32X4 $0xdd, %s, %s, Z21", b, a)
		g.p("VSHUFI32X4 $0x88, %s, %s, Z22", d, c)
		g.p("VSHUFI32X4 $0xdd, %s, %s, Z23", d, c)
		g.p("VSHUFI32X4 $0x88, Z22, Z20, Z24")
		g.p("VSHUFI32X4 $0x88, Z23, Z21, Z25")
		g.p("VSHUFI32X4 $0xdd, Z22, Z20, Z26")
		g.p("VSHUFI32X4 $0xdd, Z23, Z21, Z27")
		for l, o := range []string{"Z24", "Z25", "Z26", "Z27"} {
			store(o, 64*(4*l+j))
		}
	}
	g.p("VPBROADCASTD %s<>(SB), %s", step, z(16))
	g.p("VPADDD %s, %s, %s", z(16), z(31), z(31))
	g.p("ADDQ $%d, SI", 64*blocks)
	g.p("ADDQ $%d, DI", 64*blocks)
	g.p("SUBQ $%d, CX", blocks)
	g.p("JNZ %s", loop)
	g.p("VZEROUPPER")
	g.p("RET")
}

// chachaAVX2 emits chacha8AVX2(s *[16]uint32, dst, src *byte, n, rounds int):
// as chacha16AVX512 with 8 blocks per iteration. The 16 state words fill
// Y0..Y15, so the rotations by 12 and 7 borrow the register of a word the
// current pair of quarter rounds does not touch, spilled to the frame.
//
// Frame: 16 × 32 bytes of initial state (word w at 32w), then 16 × 32
// bytes of spill slots.
func (g *gen) chachaAVX2() {
	const orig, spill = 0, 512
	g.begin("chacha8AVX2", 1024, "8 blocks per iteration, one state word per ymm register.", "s", "dst", "src", "n", "rounds")
	g.arg("s", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.arg("rounds", "DX")
	g.p("SHRQ $1, DX")
	y := func(i int) string { return fmt.Sprintf("Y%d", i) }
	for w := 0; w < 16; w++ {
		g.p("VPBROADCASTD %d(AX), Y0", 4*w)
		if w == 12 {
			g.p("VPADDD iota<>(SB), Y0, Y0")
		}
		g.p("VMOVDQU Y0, %d(SP)", orig+32*w)
	}
	loop, dr := g.newLabel("blocks8"), g.newLabel("dround8")
	g.lbl(loop)
	for w := 0; w < 16; w++ {
		g.p("VMOVDQU %d(SP), Y%d", orig+32*w, w)
	}
	g.p("MOVQ DX, BX")
	g.lbl(dr)
	// pair runs two quarter rounds interleaved with register t (spilled
	// word) as the temporary.
	pair := func(q [2][4]int, t int) {
		rotMask := func(x int, mask string) {
			for _, c := range q {
				g.p("VPSHUFB %s<>(SB), %s, %s", mask, y(c[x]), y(c[x]))
			}
		}
		rotShift := func(x, r int) {
			for _, c := range q {
				g.p("VPSLLD $%d, %s, %s", r, y(c[x]), y(t))
				g.p("VPSRLD $%d, %s, %s", 32-r, y(c[x]), y(c[x]))
				g.p("VPOR %s, %s, %s", y(t), y(c[x]), y(c[x]))
			}
		}
		addXor := func(dst, src, x int) {
			for _, c := range q {
				g.p("VPADDD %s, %s, %s", y(c[src]), y(c[dst]), y(c[dst]))
			}
			for _, c := range q {
				g.p("VPXOR %s, %s, %s", y(c[dst]), y(c[x]), y(c[x]))
			}
		}
		addXor(0, 1, 3)
		rotMask(3, "rot16")
		addXor(2, 3, 1)
		rotShift(1, 12)
		addXor(0, 1, 3)
		rotMask(3, "rot8")
		addXor(2, 3, 1)
		rotShift(1, 7)
	}
	sp := func(w int) string { return fmt.Sprintf("%d(SP)", spill+32*w) }
	// Word 15 is in its spill slot on entry to each double round.
	g.p("VMOVDQU Y15, %s", sp(15))
	pair([2][4]int{{0, 4, 8, 12}, {1, 5, 9, 13}}, 15)
	g.p("VMOVDQU Y0, %s", sp(0))
	g.p("VMOVDQU %s, Y15", sp(15))
	pair([2][4]int{{2, 6, 10, 14}, {3, 7, 11, 15}}, 0)
	g.p("VMOVDQU Y2, %s", sp(2))
	g.p("VMOVDQU %s, Y0", sp(0))
	pair([2][4]int{{0, 5, 10, 15}, {1, 6, 11, 12}}, 2)
	g.p("VMOVDQU Y0, %s", sp(0))
	g.p("VMOVDQU %s, Y2", sp(2))
	pair([2][4]int{{2, 7, 8, 13}, {3, 4, 9, 14}}, 0)
	g.p("VMOVDQU %s, Y0", sp(0))
	g.p("DECQ BX")
	g.p("JNZ %s", dr)
	for w := 0; w < 16; w++ {
		g.p("VPADDD %d(SP), Y%d, Y%d", orig+32*w, w, w)
	}
	// Words 8..15 wait in the spill slots while 0..7 are transposed.
	for w := 8; w < 16; w++ {
		g.p("VMOVDQU Y%d, %s", w, sp(w))
	}
	for half := 0; half < 2; half++ {
		if half == 1 {
			for w := 8; w < 16; w++ {
				g.p("VMOVDQU %s, Y%d", sp(w), w-8)
			}
		}
		for gr := 0; gr < 2; gr++ {
			x0, x1, x2, x3 := y(4*gr), y(4*gr+1), y(4*gr+2), y(4*gr+3)
			g.p("VPUNPCKLDQ %s, %s, Y8", x1, x0)
			g.p("VPUNPCKHDQ %s, %s, Y9", x1, x0)
			g.p("VPUNPCKLDQ %s, %s, Y10", x3, x2)
			g.p("VPUNPCKHDQ %s, %s, Y11", x3, x2)
			g.p("VPUNPCKLQDQ Y10, Y8, %s", x0)
			g.p("VPUNPCKHQDQ Y10, Y8, %s", x1)
			g.p("VPUNPCKLQDQ Y11, Y9, %s", x2)
			g.p("VPUNPCKHQDQ Y11, Y9, %s", x3)
		}
		for j := 0; j < 4; j++ {
			for l, imm := range []string{"0x20", "0x31"} {
				off := 64*(4*l+j) + 32*half
				g.p("VPERM2I128 $%s, %s, %s, Y12", imm, y(4+j), y(j))
				g.p("VPXOR %d(SI), Y12, Y12", off)
				g.p("VMOVDQU Y12, %d(DI)", off)
			}
		}
	}
	// The next 8 blocks' counters.
	g.p("VMOVDQU %d(SP), Y0", orig+32*12)
	g.p("VPBROADCASTD eight<>(SB), Y1")
	g.p("VPADDD Y1, Y0, Y0")
	g.p("VMOVDQU Y0, %d(SP)", orig+32*12)
	g.p("ADDQ $512, SI")
	g.p("ADDQ $512, DI")
	g.p("SUBQ $8, CX")
	g.p("JNZ %s", loop)
	g.p("VZEROUPPER")
	g.p("RET")
}

// nh emits NAME(kx *nhKeyX, msg *byte, n int, out *byte): NH of each
// 1024-byte piece of msg (n a multiple of 16), 32 bytes per piece to out.
// Two 16-byte units per ymm (four per zmm with avx512): the message words
// are shuffled into the even lanes VPMULUDQ reads, (m0, m1) and (m2, m3),
// and the key is stored pre-shuffled the same way (nhKeyX), so a pass
// costs two adds, one multiply and one accumulate. Y0..Y3 (Z0..Z3)
// accumulate the four passes; narrower steps handle the last units, their
// VEX results clearing the upper lanes so that the full-width accumulate
// adds zero there.
func (g *gen) nh(name string, avx512 bool) {
	const kb = 1072 // offset of nhKeyX.b
	doc := "NH over 1024-byte pieces, two units per ymm register."
	if avx512 {
		doc = "NH over 1024-byte pieces, four units per zmm register."
	}
	g.begin(name, 0, doc, "kx", "msg", "n", "out")
	g.arg("kx", "AX")
	g.arg("msg", "SI")
	g.arg("n", "CX")
	g.arg("out", "DI")
	acc := "Y"
	if avx512 {
		acc = "Z"
	}
	chunk, fold, done := g.newLabel("nhchunk"), g.newLabel("nhfold"), g.newLabel("nhdone")
	g.lbl(chunk)
	g.p("TESTQ CX, CX")
	g.p("JZ %s", done)
	g.p("MOVQ $1024, BX")
	g.p("CMPQ CX, BX")
	g.p("CMOVQLT CX, BX")
	g.p("SUBQ BX, CX")
	g.p("MOVQ AX, R8")
	for p := 0; p < 4; p++ {
		if avx512 {
			g.p("VPXORQ Z%d, Z%d, Z%d", p, p, p)
		} else {
			g.p("VPXOR Y%d, Y%d, Y%d", p, p, p)
		}
	}
	// step emits one iteration over units×16 bytes in registers of
	// width reg (X, Y or Z).
	step := func(reg string, bytes int, loop bool) {
		lbl, next := g.newLabel("nhstep"), g.newLabel("nhnext")
		g.lbl(lbl)
		g.p("CMPQ BX, $%d", bytes)
		g.p("JLT %s", next)
		mov := "VMOVDQU"
		if reg == "Z" {
			mov = "VMOVDQU64"
		}
		g.p("%s (SI), %s4", mov, reg)
		g.p("VPSHUFD $0x50, %s4, %s5", reg, reg)
		g.p("VPSHUFD $0xfa, %s4, %s6", reg, reg)
		for p := 0; p < 4; p++ {
			g.p("VPADDD %d(R8), %s5, %s7", 16*p, reg, reg)
			g.p("VPADDD %d(R8), %s6, %s8", kb+16*p, reg, reg)
			g.p("VPMULUDQ %s8, %s7, %s7", reg, reg, reg)
			g.p("VPADDQ %s7, %s%d, %s%d", acc, acc, p, acc, p)
		}
		g.p("ADDQ $%d, SI", bytes)
		g.p("ADDQ $%d, R8", bytes)
		g.p("SUBQ $%d, BX", bytes)
		if loop {
			g.p("JMP %s", lbl)
		}
		g.lbl(next)
	}
	if avx512 {
		step("Z", 64, true)
		step("Y", 32, false)
	} else {
		step("Y", 32, true)
	}
	step("X", 16, false)
	g.lbl(fold)
	for p := 0; p < 4; p++ {
		if avx512 {
			g.p("VEXTRACTI64X4 $1, Z%d, Y7", p)
			g.p("VPADDQ Y7, Y%d, Y%d", p, p)
		}
		g.p("VEXTRACTI128 $1, Y%d, X7", p)
		g.p("VPADDQ X7, X%d, X%d", p, p)
	}
	g.p("VPUNPCKLQDQ X1, X0, X8")
	g.p("VPUNPCKHQDQ X1, X0, X9")
	g.p("VPADDQ X9, X8, X8")
	g.p("VMOVDQU X8, (DI)")
	g.p("VPUNPCKLQDQ X3, X2, X8")
	g.p("VPUNPCKHQDQ X3, X2, X9")
	g.p("VPADDQ X9, X8, X8")
	g.p("VMOVDQU X8, 16(DI)")
	g.p("ADDQ $32, DI")
	g.p("JMP %s", chunk)
	g.lbl(done)
	g.p("VZEROUPPER")
	g.p("RET")
}

// poly1305 emits poly1305Blocks(h *polyState, r *polyKey, msg *byte, n int):
// for each 16-byte block (n a multiple of 16), h = (h + block + 2^128)·r
// mod 2^130-5, partially reduced, in 64-bit limbs as the generic code.
// h0..h2 live in R9..R11, r0 and r1 in R12 and R13, the product t0..t3 in
// R14, R15, BX and R8.
func (g *gen) poly1305() {
	g.begin("poly1305Blocks", 0, "Poly1305 blocks with 64-bit limbs (MULQ).", "h", "r", "msg", "n")
	g.arg("h", "DI")
	g.arg("r", "R8")
	g.arg("msg", "SI")
	g.arg("n", "CX")
	loop, done := g.newLabel("polyloop"), g.newLabel("polydone")
	g.p("MOVQ 0(R8), R12")
	g.p("MOVQ 8(R8), R13")
	g.p("MOVQ 0(DI), R9")
	g.p("MOVQ 8(DI), R10")
	g.p("MOVQ 16(DI), R11")
	g.p("TESTQ CX, CX")
	g.p("JZ %s", done)
	g.lbl(loop)
	g.p("ADDQ 0(SI), R9")
	g.p("ADCQ 8(SI), R10")
	g.p("ADCQ $1, R11")
	g.p("XORQ R8, R8") // before the carry chain: XOR clears the flags
	// h0·r0
	g.p("MOVQ R12, AX")
	g.p("MULQ R9")
	g.p("MOVQ AX, R14")
	g.p("MOVQ DX, R15")
	// h1·r0
	g.p("MOVQ R12, AX")
	g.p("MULQ R10")
	g.p("ADDQ AX, R15")
	g.p("ADCQ $0, DX")
	g.p("MOVQ DX, BX")
	// h0·r1
	g.p("MOVQ R13, AX")
	g.p("MULQ R9")
	g.p("ADDQ AX, R15")
	g.p("ADCQ DX, BX")
	g.p("ADCQ $0, R8")
	// h1·r1
	g.p("MOVQ R13, AX")
	g.p("MULQ R10")
	g.p("ADDQ AX, BX")
	g.p("ADCQ DX, R8")
	// h2·r0 and h2·r1 fit 64 bits: h2 < 8, r's limbs < 2^60.
	g.p("MOVQ R12, AX")
	g.p("IMULQ R11, AX")
	g.p("ADDQ AX, BX")
	g.p("ADCQ $0, R8")
	g.p("MOVQ R13, AX")
	g.p("IMULQ R11, AX")
	g.p("ADDQ AX, R8")
	// Fold the bits above 130 back in as 4x + x (2^130 ≡ 5).
	g.p("MOVQ R14, R9")
	g.p("MOVQ R15, R10")
	g.p("MOVQ BX, R11")
	g.p("ANDQ $3, R11")
	g.p("ANDQ $-4, BX")
	g.p("ADDQ BX, R9")
	g.p("ADCQ R8, R10")
	g.p("ADCQ $0, R11")
	g.p("SHRQ $2, R8, BX")
	g.p("SHRQ $2, R8")
	g.p("ADDQ BX, R9")
	g.p("ADCQ R8, R10")
	g.p("ADCQ $0, R11")
	g.p("ADDQ $16, SI")
	g.p("SUBQ $16, CX")
	g.p("JNZ %s", loop)
	g.p("MOVQ R9, 0(DI)")
	g.p("MOVQ R10, 8(DI)")
	g.p("MOVQ R11, 16(DI)")
	g.lbl(done)
	g.p("RET")
}

func main() {
	out := flag.String("out", "../adiantum_amd64.s", "output file")
	flag.Parse()
	g := &gen{}
	g.buf.WriteString("// Code generated by internal/adiantum/_asm. DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	g.data()
	g.buf.WriteString("\nDATA eight<>+0(SB)/4, $8\nGLOBL eight<>(SB), RODATA|NOPTR, $4\n")
	g.buf.WriteString("\nDATA sixteen<>+0(SB)/4, $16\nGLOBL sixteen<>(SB), RODATA|NOPTR, $4\n")
	g.chachaAVX512("chacha16AVX512", true)
	g.chachaAVX512("chacha8AVX512VL", false)
	g.chachaAVX2()
	g.nh("nhAVX2", false)
	g.nh("nhAVX512", true)
	g.poly1305()
	if err := os.WriteFile(*out, g.buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
