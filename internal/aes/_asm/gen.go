// Command _asm generates ../aes_amd64.s, the AES-NI and VAES kernels of
// package aes. It is a plain text emitter: each Go helper below prints a
// fixed, fully unrolled instruction sequence, so the structure of every
// kernel (blocks in flight, register use, key handling) is visible here.
//
// Run with: cd internal/aes/_asm && go run . -out ../aes_amd64.s
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
	label int
	args  map[string]int
	// afterRound, if set, is called by rounds after each of the rounds
	// that every key size executes (back = 9..1 from the last), to
	// interleave independent work with the AES instructions.
	afterRound func(back int)
}

func (g *gen) p(format string, a ...any) {
	fmt.Fprintf(&g.buf, "\t"+format+"\n", a...)
}

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

func xr(i int) string { return fmt.Sprintf("X%d", i) }
func yr(i int) string { return fmt.Sprintf("Y%d", i) }

func regs(f func(int) string, from, n int) []string {
	var r []string
	for i := 0; i < n; i++ {
		r = append(r, f(from+i))
	}
	return r
}

// keyEnd emits ke = k + nr*stride: a pointer to the last round key.
func (g *gen) keyEnd(ke, k, nr string, stride int) {
	g.p("MOVQ %s, %s", nr, ke)
	if stride == 16 {
		g.p("SHLQ $4, %s", ke)
	} else {
		g.p("SHLQ $5, %s", ke)
	}
	g.p("ADDQ %s, %s", k, ke)
}

// rounds emits AES rounds 1..nr on the state registers (round key 0 must
// already be applied). ke points at the last round key, nr holds 10, 12 or
// 14, stride is the distance between round keys (16, or 32 for the
// duplicated YMM schedule). With a non-empty kreg every round key is first
// loaded into kreg; otherwise it is used as a memory operand (VEX only).
// vex selects three-operand VAES* forms (for XMM or YMM states).
//
// Rounds are addressed backwards from the last key so that the three key
// sizes share one instruction stream: AES-256 starts 4 rounds earlier and
// AES-192 2 rounds earlier than AES-128.
func (g *gen) rounds(op string, state []string, ke, nr string, stride int, kreg string, vex bool) {
	l10, l12 := g.newLabel("r10"), g.newLabel("r12")
	mov := "MOVOU"
	if vex {
		mov = "VMOVDQU"
		if stride == 16 && strings.HasPrefix(kreg, "Y") {
			mov = "VBROADCASTI128"
		}
	}
	round := func(back int, last bool) {
		o := op
		if last {
			o = op + "LAST"
		}
		if vex {
			o = "V" + o
		}
		key := fmt.Sprintf("%d(%s)", -back*stride, ke)
		if back == 0 {
			key = fmt.Sprintf("(%s)", ke)
		}
		if kreg != "" {
			g.p("%s %s, %s", mov, key, kreg)
			key = kreg
		}
		for _, s := range state {
			if vex {
				g.p("%s %s, %s, %s", o, key, s, s)
			} else {
				g.p("%s %s, %s", o, key, s)
			}
		}
	}
	g.p("CMPQ %s, $12", nr)
	g.p("JB %s", l10)
	g.p("JEQ %s", l12)
	round(13, false)
	round(12, false)
	g.lbl(l12)
	round(11, false)
	round(10, false)
	g.lbl(l10)
	for back := 9; back >= 1; back-- {
		round(back, false)
		if g.afterRound != nil {
			g.afterRound(back)
		}
	}
	round(0, true)
}

// ---------------------------------------------------------------------------
// AES-NI (SSE encoding, XMM registers)

func (g *gen) blockAESNI(name, op string) {
	g.begin(name, 0, "One block. xk points at the round keys (encryption or decryption schedule).",
		"nr", "xk", "dst", "src")
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.keyEnd("R11", "DX", "AX", 16)
	g.p("MOVOU (SI), X0")
	g.p("MOVOU (DX), X1")
	g.p("PXOR X1, X0")
	g.rounds(op, []string{"X0"}, "R11", "AX", 16, "X1", false)
	g.p("MOVOU X0, (DI)")
	g.p("RET")
}

func (g *gen) ecbAESNI(name, op string) {
	g.begin(name, 0, "n blocks, 8 in flight.", "nr", "xk", "dst", "src", "n")
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 16)
	loop8, tail, done := g.newLabel("loop8"), g.newLabel("tail"), g.newLabel("done")
	g.lbl(loop8)
	g.p("CMPQ CX, $8")
	g.p("JB %s", tail)
	g.p("MOVOU (DX), X8")
	for i := 0; i < 8; i++ {
		g.p("MOVOU %d(SI), X%d", 16*i, i)
		g.p("PXOR X8, X%d", i)
	}
	g.rounds(op, regs(xr, 0, 8), "R11", "AX", 16, "X8", false)
	for i := 0; i < 8; i++ {
		g.p("MOVOU X%d, %d(DI)", i, 16*i)
	}
	g.p("ADDQ $128, SI")
	g.p("ADDQ $128, DI")
	g.p("SUBQ $8, CX")
	g.p("JMP %s", loop8)
	g.lbl(tail)
	g.p("TESTQ CX, CX")
	g.p("JEQ %s", done)
	g.p("MOVOU (SI), X0")
	g.p("MOVOU (DX), X8")
	g.p("PXOR X8, X0")
	g.rounds(op, []string{"X0"}, "R11", "AX", 16, "X8", false)
	g.p("MOVOU X0, (DI)")
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("DECQ CX")
	g.p("JMP %s", tail)
	g.lbl(done)
	g.p("RET")
}

// essivIV computes X0 = E(ivxk, *iv) using X1 as key register.
func (g *gen) essivIV(dst string) {
	g.arg("ivnr", "R8")
	g.arg("ivxk", "R9")
	g.arg("iv", "BX")
	g.keyEnd("R10", "R9", "R8", 16)
	g.p("MOVOU (BX), %s", dst)
	g.p("MOVOU (R9), X1")
	g.p("PXOR X1, %s", dst)
	g.rounds("AESENC", []string{dst}, "R10", "R8", 16, "X1", false)
}

// cbcEncAESNI: serial CBC encryption. With essiv the chaining value starts as
// E(ivxk, iv) and iv is left untouched; otherwise iv is read and updated.
func (g *gen) cbcEncAESNI(name string, essiv bool) {
	if essiv {
		g.begin(name, 0, "CBC encryption of n blocks with IV = E(ivxk, *iv); *iv is not modified.",
			"nr", "xk", "ivnr", "ivxk", "dst", "src", "n", "iv")
	} else {
		g.begin(name, 0, "CBC encryption of n blocks; *iv is updated to the last ciphertext block.",
			"nr", "xk", "dst", "src", "n", "iv")
	}
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 16)
	if essiv {
		g.essivIV("X0")
	} else {
		g.arg("iv", "BX")
		g.p("MOVOU (BX), X0")
	}
	g.p("MOVOU (DX), X15")
	loop, done := g.newLabel("loop"), g.newLabel("done")
	g.lbl(loop)
	g.p("MOVOU (SI), X2")
	g.p("PXOR X15, X2")
	g.p("PXOR X2, X0")
	g.rounds("AESENC", []string{"X0"}, "R11", "AX", 16, "X1", false)
	g.p("MOVOU X0, (DI)")
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("DECQ CX")
	g.p("JNE %s", loop)
	if !essiv {
		g.p("MOVOU X0, (BX)")
	}
	g.lbl(done)
	g.p("RET")
}

// cbcDecAESNI: CBC decryption with 8 blocks in flight; chaining value in X9.
func (g *gen) cbcDecAESNI(name string, essiv, sectors bool) {
	if sectors {
		g.begin(name, 0, "CBC decryption of n/(8*ips) consecutive sectors of 128*ips bytes; sector i\nstarts from the IV at ivs+16*i. 8 blocks in flight across sector boundaries.",
			"nr", "xk", "dst", "src", "n", "ips", "ivs")
	} else if essiv {
		g.begin(name, 0, "CBC decryption of n blocks with IV = E(ivxk, *iv); *iv is not modified.\nxk is the decryption schedule, ivxk an encryption schedule.",
			"nr", "xk", "ivnr", "ivxk", "dst", "src", "n", "iv")
	} else {
		g.begin(name, 0, "CBC decryption of n blocks, 8 in flight; *iv is updated to the last ciphertext block.",
			"nr", "xk", "dst", "src", "n", "iv")
	}
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 16)
	if sectors {
		g.arg("ips", "R14")
		g.arg("ivs", "R13")
		g.p("MOVQ $1, R12")
	} else if essiv {
		g.essivIV("X9")
	} else {
		g.arg("iv", "BX")
		g.p("MOVOU (BX), X9")
	}
	loop8, tail, done := g.newLabel("loop8"), g.newLabel("tail"), g.newLabel("done")
	g.lbl(loop8)
	g.p("CMPQ CX, $8")
	g.p("JB %s", tail)
	if sectors {
		// A new sector every ips iterations: its IV replaces the chain.
		same := g.newLabel("same")
		g.p("DECQ R12")
		g.p("JNE %s", same)
		g.p("MOVOU (R13), X9")
		g.p("ADDQ $16, R13")
		g.p("MOVQ R14, R12")
		g.lbl(same)
	}
	g.p("MOVOU (DX), X8")
	for i := 0; i < 8; i++ {
		g.p("MOVOU %d(SI), X%d", 16*i, i)
		g.p("PXOR X8, X%d", i)
	}
	g.rounds("AESDEC", regs(xr, 0, 8), "R11", "AX", 16, "X8", false)
	// All source loads happen before the first store (in-place safe).
	g.p("PXOR X9, X0")
	for i := 1; i < 8; i++ {
		g.p("MOVOU %d(SI), X10", 16*(i-1))
		g.p("PXOR X10, X%d", i)
	}
	g.p("MOVOU 112(SI), X9")
	for i := 0; i < 8; i++ {
		g.p("MOVOU X%d, %d(DI)", i, 16*i)
	}
	g.p("ADDQ $128, SI")
	g.p("ADDQ $128, DI")
	g.p("SUBQ $8, CX")
	g.p("JMP %s", loop8)
	g.lbl(tail)
	g.p("TESTQ CX, CX")
	g.p("JEQ %s", done)
	g.p("MOVOU (SI), X0")
	g.p("MOVO X0, X10")
	g.p("MOVOU (DX), X8")
	g.p("PXOR X8, X0")
	g.rounds("AESDEC", []string{"X0"}, "R11", "AX", 16, "X8", false)
	g.p("PXOR X9, X0")
	g.p("MOVO X10, X9")
	g.p("MOVOU X0, (DI)")
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("DECQ CX")
	g.p("JMP %s", tail)
	g.lbl(done)
	if !essiv && !sectors {
		g.p("MOVOU X9, (BX)")
	}
	g.p("RET")
}

// laneAddr returns the address of lane j (j < 8) relative to base, using
// BX = ss, CX = 3*ss, DX = 5*ss, R8 = 7*ss.
func laneAddr(base string, j int) string {
	switch j {
	case 0:
		return fmt.Sprintf("(%s)", base)
	case 1:
		return fmt.Sprintf("(%s)(BX*1)", base)
	case 2:
		return fmt.Sprintf("(%s)(BX*2)", base)
	case 3:
		return fmt.Sprintf("(%s)(CX*1)", base)
	case 4:
		return fmt.Sprintf("(%s)(BX*4)", base)
	case 5:
		return fmt.Sprintf("(%s)(DX*1)", base)
	case 6:
		return fmt.Sprintf("(%s)(CX*2)", base)
	case 7:
		return fmt.Sprintf("(%s)(R8*1)", base)
	}
	panic("lane")
}

// laneSetup loads ss into BX and derives CX, DX, R8.
func (g *gen) laneSetup() {
	g.arg("ss", "BX")
	g.p("LEAQ (BX)(BX*2), CX")
	g.p("LEAQ (BX)(BX*4), DX")
	g.p("LEAQ (CX)(BX*4), R8")
}

// cbcMBAESNI: multi-buffer CBC encryption of L consecutive sectors of ss
// bytes: lane j works on sector j, so every AESENC of a round is independent.
func (g *gen) cbcMBAESNI(name string, L int) {
	g.begin(name, 0, fmt.Sprintf("CBC encryption of %d consecutive sectors of ss bytes (ss > 0, multiple of 16),\none lane per sector; ivs holds the %d IVs.", L, L),
		"nr", "xk", "dst", "src", "ss", "ivs")
	g.arg("nr", "AX")
	g.arg("xk", "R12")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("ivs", "R13")
	g.laneSetup()
	g.keyEnd("R11", "R12", "AX", 16)
	g.p("MOVQ BX, R9")
	g.p("SHRQ $4, R9")
	for j := 0; j < L; j++ {
		g.p("MOVOU %d(R13), X%d", 16*j, j)
	}
	g.p("MOVOU (R12), X15")
	loop := g.newLabel("loop")
	g.lbl(loop)
	for j := 0; j < L; j++ {
		g.p("MOVOU %s, X8", laneAddr("SI", j))
		g.p("PXOR X15, X8")
		g.p("PXOR X8, X%d", j)
	}
	g.rounds("AESENC", regs(xr, 0, L), "R11", "AX", 16, "X9", false)
	for j := 0; j < L; j++ {
		g.p("MOVOU X%d, %s", j, laneAddr("DI", j))
	}
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("DECQ R9")
	g.p("JNE %s", loop)
	g.p("RET")
}

// cbcMBStagedAESNI is cbcMBAESNI (8 lanes) with cache-line staging: 64
// bytes of every lane at a time go through 512-byte stack buffers (two,
// used in turn), so that lanes 4 KiB apart do not evict each other's lines
// from L1. ss must be a multiple of 64.
func (g *gen) cbcMBStagedAESNI(name string) {
	g.begin(name, 1024, "CBC encryption of 8 consecutive sectors of ss bytes (ss a multiple of 64),\nstaged one cache line per lane at a time; ivs holds the 8 IVs.",
		"nr", "xk", "dst", "src", "ss", "ivs")
	g.arg("nr", "AX")
	g.arg("xk", "R12")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("ivs", "R13")
	g.laneSetup()
	g.keyEnd("R11", "R12", "AX", 16)
	for j := 0; j < 8; j++ {
		g.p("MOVOU %d(R13), X%d", 16*j, j)
	}
	g.p("MOVOU (R12), X15")
	g.p("MOVQ BX, R14")
	g.p("SHRQ $6, R14")
	g.p("LEAQ 0(SP), R12")
	g.p("LEAQ 512(SP), R13")
	at := func(off int, a string) string {
		if off == 0 {
			return a
		}
		return fmt.Sprintf("%d%s", off, a)
	}
	tmp := 0
	nextTmp := func() int { tmp = (tmp + 1) % 5; return 10 + tmp }
	fill := func(j int, buf string, off int) {
		for s := 0; s < 4; s++ {
			t := nextTmp()
			g.p("MOVOU %s, X%d", at(off+16*s, laneAddr("SI", j)), t)
			g.p("MOVOU X%d, %d(%s)", t, 128*s+16*j, buf)
		}
	}
	drain := func(j int, buf string, off int) {
		for s := 0; s < 4; s++ {
			t := nextTmp()
			g.p("MOVOU %d(%s), X%d", 128*s+16*j, buf, t)
			g.p("MOVOU X%d, %s", t, at(off+16*s, laneAddr("DI", j)))
		}
	}
	for j := 0; j < 8; j++ {
		fill(j, "R12", 0)
	}
	loop := g.newLabel("loop")
	g.lbl(loop)
	var pieces []func()
	for j := 0; j < 8; j++ {
		j := j
		pieces = append(pieces, func() {
			skip := g.newLabel("nodrain")
			g.p("CMPQ DI, dst+16(FP)")
			g.p("JEQ %s", skip)
			drain(j, "R13", -64)
			g.lbl(skip)
		}, func() {
			skip := g.newLabel("nofill")
			g.p("CMPQ R14, $1")
			g.p("JEQ %s", skip)
			fill(j, "R13", 64)
			g.lbl(skip)
		})
	}
	for s := 0; s < 4; s++ {
		for j := 0; j < 8; j++ {
			g.p("MOVOU %d(R12), X9", 128*s+16*j)
			g.p("PXOR X15, X9")
			g.p("PXOR X9, X%d", j)
		}
		g.afterRound = func(back int) {
			if back%2 == 1 && back >= 3 && len(pieces) > 0 {
				pieces[0]()
				pieces = pieces[1:]
			}
		}
		g.rounds("AESENC", regs(xr, 0, 8), "R11", "AX", 16, "X8", false)
		g.afterRound = nil
		for j := 0; j < 8; j++ {
			g.p("MOVOU X%d, %d(R12)", j, 128*s+16*j)
		}
	}
	if len(pieces) != 0 {
		log.Fatal("staged: pieces left over")
	}
	g.p("ADDQ $64, SI")
	g.p("ADDQ $64, DI")
	g.p("XCHGQ R12, R13")
	g.p("DECQ R14")
	g.p("JNE %s", loop)
	for j := 0; j < 8; j++ {
		drain(j, "R13", -64)
	}
	g.p("RET")
}

// mulxSSE multiplies the XTS tweak in t by x; mask holds dwords
// {0x87, 0, 1, 0}; tmp is clobbered.
func (g *gen) mulxSSE(t, mask, tmp string) {
	g.p("PSHUFD $0x13, %s, %s", t, tmp)
	g.p("PSRAL $31, %s", tmp)
	g.p("PAND %s, %s", mask, tmp)
	g.p("PADDQ %s, %s", t, t)
	g.p("PXOR %s, %s", tmp, t)
}

// xtsAESNI: XTS on n whole blocks, 8 in flight. The running tweak lives in
// X9; the tweaks of the current 8 blocks are kept in the stack frame.
func (g *gen) xtsAESNI(name, op string) {
	g.begin(name, 128, "XTS on n whole blocks, 8 in flight. *tweak is the encrypted tweak of the first\nblock and is advanced to that of the block after the last.",
		"nr", "xk", "dst", "src", "n", "tweak")
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.arg("tweak", "BX")
	g.keyEnd("R11", "DX", "AX", 16)
	g.p("MOVOU (BX), X9")
	g.p("MOVOU xtsMask<>(SB), X10")
	loop8, tail, done := g.newLabel("loop8"), g.newLabel("tail"), g.newLabel("done")
	g.lbl(loop8)
	g.p("CMPQ CX, $8")
	g.p("JB %s", tail)
	g.p("MOVOU (DX), X8")
	for i := 0; i < 8; i++ {
		g.p("MOVOU %d(SI), X%d", 16*i, i)
		g.p("MOVOU X9, %d(SP)", 16*i)
		g.p("PXOR X9, X%d", i)
		g.p("PXOR X8, X%d", i)
		g.mulxSSE("X9", "X10", "X11")
	}
	g.rounds(op, regs(xr, 0, 8), "R11", "AX", 16, "X8", false)
	for i := 0; i < 8; i++ {
		g.p("MOVOU %d(SP), X12", 16*i)
		g.p("PXOR X12, X%d", i)
		g.p("MOVOU X%d, %d(DI)", i, 16*i)
	}
	g.p("ADDQ $128, SI")
	g.p("ADDQ $128, DI")
	g.p("SUBQ $8, CX")
	g.p("JMP %s", loop8)
	g.lbl(tail)
	g.p("TESTQ CX, CX")
	g.p("JEQ %s", done)
	g.p("MOVOU (SI), X0")
	g.p("PXOR X9, X0")
	g.p("MOVOU (DX), X8")
	g.p("PXOR X8, X0")
	g.rounds(op, []string{"X0"}, "R11", "AX", 16, "X8", false)
	g.p("PXOR X9, X0")
	g.p("MOVOU X0, (DI)")
	g.mulxSSE("X9", "X10", "X11")
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("DECQ CX")
	g.p("JMP %s", tail)
	g.lbl(done)
	g.p("MOVOU X9, (BX)")
	g.p("RET")
}

// xtsRingAESNI: XTS on n >= 16 whole blocks, 8 in flight, with the tweaks
// generated by scalar code two iterations ahead into a page ring in the
// stack frame, as xtsVAES does (see there). This leaves the vector unit to
// the AES rounds and three XORs per block. A remainder of up to 7 blocks is
// done one at a time with the tweaks already in the ring.
//
// With sectors set it is the multi-sector form (as for xtsVAES): sectors of
// 128*ips bytes (ips >= 2), tweak chain restarted from tws every ips
// iterations (R12 counts down, R13 walks tws); n is a multiple of 8.
func (g *gen) xtsRingAESNI(name, op string, sectors bool) {
	const ring = 16
	if sectors {
		g.begin(name, ring+4096+128, "XTS over n/(8*ips) consecutive sectors of 128*ips bytes (ips >= 2), 8 blocks in\nflight across sector boundaries; tws holds the encrypted tweak of every sector\nfollowed by one spare readable entry.",
			"nr", "xk", "dst", "src", "n", "ips", "tws")
	} else {
		g.begin(name, ring+4096+128, "XTS on n >= 16 whole blocks, 8 in flight. *tweak is the encrypted tweak of the\nfirst block and is advanced to that of the block after the last.",
			"nr", "xk", "dst", "src", "n", "tweak")
	}
	ringAt := func(reg string, off int) {
		g.p("LEAQ %d(SI), %s", off, reg)
		g.p("LEAQ %d(SP), R10", ring)
		g.p("SUBQ R10, %s", reg)
		g.p("ANDQ $4095, %s", reg)
		g.p("ADDQ R10, %s", reg)
	}
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 16)
	g.p("MOVOU (DX), X15")
	if sectors {
		g.arg("ips", "R12")
		g.p("MOVQ R12, 0(SP)")
		g.p("SUBQ $2, R12")
		g.arg("tws", "R13")
		g.p("MOVOU (R13), X9")
		g.p("ADDQ $16, R13")
	} else {
		g.arg("tweak", "BX")
		g.p("MOVOU (BX), X9")
	}
	g.p("MOVOU xtsMask<>(SB), X10")
	ringAt("R14", 256) // iteration 0
	ringAt("DX", 384)  // iteration 1
	for j := 0; j < 16; j++ {
		if j < 8 {
			g.p("MOVOU X9, %d(R14)", 16*j)
		} else {
			g.p("MOVOU X9, %d(DX)", 16*(j-8))
		}
		g.mulxSSE("X9", "X10", "X11")
	}
	g.p("MOVQ X9, R8")
	g.p("PSHUFD $0x4e, X9, X11")
	g.p("MOVQ X11, R9")
	loop, tail, tail1, out := g.newLabel("loop"), g.newLabel("tail"), g.newLabel("tail1"), g.newLabel("out")
	g.lbl(loop)
	ringAt("DX", 512) // iteration k+2
	for i := 0; i < 8; i++ {
		t := xr(9 + i%6)
		g.p("MOVOU %d(SI), X%d", 16*i, i)
		g.p("MOVOU %d(R14), %s", 16*i, t)
		g.p("PXOR %s, X%d", t, i)
		g.p("PXOR X15, X%d", i)
	}
	g.afterRound = func(back int) {
		if back >= 2 {
			j := 9 - back
			if j == 0 && sectors {
				ok := g.newLabel("same")
				g.p("TESTQ R12, R12")
				g.p("JNE %s", ok)
				g.p("MOVQ (R13), R8")
				g.p("MOVQ 8(R13), R9")
				g.p("ADDQ $16, R13")
				g.p("MOVQ 0(SP), R12")
				g.lbl(ok)
				g.p("DECQ R12")
			}
			g.p("MOVQ R8, %d(DX)", 16*j)
			g.p("MOVQ R9, %d(DX)", 16*j+8)
			g.p("MOVQ R9, R10")
			g.p("SARQ $63, R10")
			g.p("ADDQ R8, R8")
			g.p("ADCQ R9, R9")
			g.p("ANDQ $0x87, R10")
			g.p("XORQ R10, R8")
		}
	}
	g.rounds(op, regs(xr, 0, 8), "R11", "AX", 16, "X8", false)
	g.afterRound = nil
	for i := 0; i < 8; i++ {
		t := xr(9 + i%6)
		g.p("MOVOU %d(R14), %s", 16*i, t)
		g.p("PXOR %s, X%d", t, i)
		g.p("MOVOU X%d, %d(DI)", i, 16*i)
	}
	g.p("ADDQ $128, SI")
	g.p("ADDQ $128, DI")
	ringAt("R14", 256) // the next iteration's tweaks
	g.p("SUBQ $8, CX")
	g.p("CMPQ CX, $8")
	g.p("JAE %s", loop)
	g.lbl(tail)
	g.p("TESTQ CX, CX")
	g.p("JEQ %s", out)
	g.lbl(tail1)
	g.p("MOVOU (SI), X0")
	g.p("MOVOU (R14), X9")
	g.p("PXOR X9, X0")
	g.p("PXOR X15, X0")
	g.rounds(op, []string{"X0"}, "R11", "AX", 16, "X8", false)
	g.p("PXOR X9, X0")
	g.p("MOVOU X0, (DI)")
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("ADDQ $16, R14")
	g.p("DECQ CX")
	g.p("JNE %s", tail1)
	g.lbl(out)
	if !sectors {
		g.p("MOVQ (R14), R8")
		g.p("MOVQ 8(R14), R9")
		g.p("MOVQ R8, (BX)")
		g.p("MOVQ R9, 8(BX)")
	}
	g.p("RET")
}

// ---------------------------------------------------------------------------
// VAES (VEX-encoded, YMM registers, two blocks per register)

func (g *gen) ecbVAES(name, op string) {
	g.begin(name, 0, "n blocks, 16 in flight (8 YMM registers). yk is a duplicated 256-bit schedule.",
		"nr", "yk", "dst", "src", "n")
	g.arg("nr", "AX")
	g.arg("yk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 32)
	loop16, loop2, tail, done := g.newLabel("loop16"), g.newLabel("loop2"), g.newLabel("tail"), g.newLabel("done")
	g.lbl(loop16)
	g.p("CMPQ CX, $16")
	g.p("JB %s", loop2)
	g.p("VMOVDQU (DX), Y8")
	for i := 0; i < 8; i++ {
		g.p("VPXOR %d(SI), Y8, Y%d", 32*i, i)
	}
	g.rounds(op, regs(yr, 0, 8), "R11", "AX", 32, "Y8", true)
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU Y%d, %d(DI)", i, 32*i)
	}
	g.p("ADDQ $256, SI")
	g.p("ADDQ $256, DI")
	g.p("SUBQ $16, CX")
	g.p("JMP %s", loop16)
	g.lbl(loop2)
	g.p("CMPQ CX, $2")
	g.p("JB %s", tail)
	g.p("VMOVDQU (SI), Y0")
	g.p("VPXOR (DX), Y0, Y0")
	g.rounds(op, []string{"Y0"}, "R11", "AX", 32, "", true)
	g.p("VMOVDQU Y0, (DI)")
	g.p("ADDQ $32, SI")
	g.p("ADDQ $32, DI")
	g.p("SUBQ $2, CX")
	g.p("JMP %s", loop2)
	g.lbl(tail)
	g.p("TESTQ CX, CX")
	g.p("JEQ %s", done)
	g.p("VMOVDQU (SI), X0")
	g.p("VPXOR (DX), X0, X0")
	g.rounds(op, []string{"X0"}, "R11", "AX", 32, "", true)
	g.p("VMOVDQU X0, (DI)")
	g.lbl(done)
	g.p("VZEROUPPER")
	g.p("RET")
}

// essivChainX9 encrypts the IV in X9 with the ESSIV key (arguments ivnr,
// ivxk; xmm, keys from memory): the chain a CBC-ESSIV decryption starts
// from. It uses R8-R10.
func (g *gen) essivChainX9() {
	g.arg("ivnr", "R8")
	g.arg("ivxk", "R9")
	g.keyEnd("R10", "R9", "R8", 16)
	g.p("VPXOR (R9), X9, X9")
	g.rounds("AESENC", []string{"X9"}, "R10", "R8", 16, "", true)
}

// cbcDecVAES: CBC decryption, 16 blocks in flight; n must be a multiple of 16.
// With essiv the chain starts from E(ivxk, *iv): that encryption (xmm, keys
// from memory) does not feed the first iteration's rounds, only their final
// xor, so it overlaps them instead of preceding the call.
func (g *gen) cbcDecVAES(name string, sectors, essiv bool) {
	switch {
	case sectors:
		g.begin(name, 0, "CBC decryption of n/(16*ips) consecutive sectors of 256*ips bytes; sector i\nstarts from the IV at ivs+16*i. 16 blocks in flight across sector boundaries.",
			"nr", "yk", "dst", "src", "n", "ips", "ivs")
	case essiv:
		g.begin(name, 0, "CBC decryption of n blocks (n a multiple of 16), 16 in flight, with IV = E(ivxk, *iv);\n*iv is not modified.",
			"nr", "yk", "ivnr", "ivxk", "dst", "src", "n", "iv")
	default:
		g.begin(name, 0, "CBC decryption of n blocks (n a multiple of 16), 16 in flight; *iv is updated.",
			"nr", "yk", "dst", "src", "n", "iv")
	}
	g.arg("nr", "AX")
	g.arg("yk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 32)
	if sectors {
		g.arg("ips", "R14")
		g.arg("ivs", "R13")
		g.p("MOVQ $1, R12")
	} else {
		g.arg("iv", "BX")
		g.p("VMOVDQU (BX), X9")
	}
	if essiv {
		g.essivChainX9()
	}
	loop, done := g.newLabel("loop16"), g.newLabel("done")
	g.lbl(loop)
	g.p("CMPQ CX, $16")
	g.p("JB %s", done)
	if sectors {
		// A new sector every ips iterations: its IV replaces the chain.
		same := g.newLabel("same")
		g.p("DECQ R12")
		g.p("JNE %s", same)
		g.p("VMOVDQU (R13), X9")
		g.p("ADDQ $16, R13")
		g.p("MOVQ R14, R12")
		g.lbl(same)
	}
	g.p("VMOVDQU (DX), Y8")
	for i := 0; i < 8; i++ {
		g.p("VPXOR %d(SI), Y8, Y%d", 32*i, i)
	}
	g.rounds("AESDEC", regs(yr, 0, 8), "R11", "AX", 32, "Y8", true)
	// Previous ciphertexts: [iv, C0] for the first pair, then unaligned
	// 32-byte loads at -16. All loads precede the stores.
	g.p("VINSERTI128 $1, (SI), Y9, Y10")
	g.p("VPXOR Y10, Y0, Y0")
	for i := 1; i < 8; i++ {
		g.p("VPXOR %d(SI), Y%d, Y%d", 32*i-16, i, i)
	}
	g.p("VMOVDQU 240(SI), X9")
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU Y%d, %d(DI)", i, 32*i)
	}
	g.p("ADDQ $256, SI")
	g.p("ADDQ $256, DI")
	g.p("SUBQ $16, CX")
	g.p("JMP %s", loop)
	g.lbl(done)
	if !sectors && !essiv {
		g.p("VMOVDQU X9, (BX)")
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// cbcMBVAES: multi-buffer CBC encryption over 16 consecutive sectors; YMM
// register i carries sectors 2i (low lane) and 2i+1 (high lane).
//
// Sectors 8..15 run lag bytes behind, as in cbcMBZMM (see there): at 4 KiB
// sectors this keeps the lanes' cache lines from piling into one L1 set.
// It replaced a kernel that staged cache lines through stack buffers for
// the same reason: that one ran 4 KiB sectors at 12.9 GB/s against 16.9
// here, 512-byte ones at 15.5 against 17.7, and its speed depended on where
// the stack fell relative to the data (4 KiB aliasing).
func (g *gen) cbcMBVAES(name string) {
	g.begin(name, 0, "CBC encryption of 16 consecutive sectors of ss bytes (ss > 0, multiple of 16),\ntwo sectors per YMM register; ivs holds the 16 IVs. Sectors 8..15 run lag bytes (a\nmultiple of 16, at most ss) behind.",
		"nr", "yk", "dst", "src", "ss", "ivs", "lag")
	g.arg("nr", "AX")
	g.arg("yk", "R12")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("ivs", "R13")
	g.laneSetup()
	g.keyEnd("R11", "R12", "AX", 32)
	g.p("LEAQ (SI)(BX*8), R9")
	g.p("LEAQ (DI)(BX*8), R10")
	g.p("MOVQ BX, R14")
	g.p("SHRQ $4, R14")
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU %d(R13), Y%d", 32*i, i)
	}
	g.p("VMOVDQU (R12), Y15")
	// R12: the lag in steps; R13 counts steps up, R14 down. Y10..Y13 keep
	// the IVs of the delayed half.
	g.arg("lag", "R12")
	g.p("SUBQ R12, R9")
	g.p("SUBQ R12, R10")
	g.p("SHRQ $4, R12")
	g.p("ADDQ R12, R14")
	g.p("XORQ R13, R13")
	for i := 4; i < 8; i++ {
		g.p("VMOVDQA Y%d, Y%d", i, i+6)
	}
	lane := func(src, hi string, j int) string {
		if j < 8 {
			return laneAddr(src, j)
		}
		return laneAddr(hi, j-8)
	}
	loop := g.newLabel("loop")
	g.lbl(loop)
	// The delayed half starts from its IVs once its real data begins.
	norestore := g.newLabel("norestore")
	g.p("CMPQ R13, R12")
	g.p("JNE %s", norestore)
	for i := 4; i < 8; i++ {
		g.p("VMOVDQA Y%d, Y%d", i+6, i)
	}
	g.lbl(norestore)
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU %s, X9", lane("SI", "R9", 2*i))
		g.p("VINSERTI128 $1, %s, Y9, Y9", lane("SI", "R9", 2*i+1))
		g.p("VPXOR Y15, Y9, Y9")
		g.p("VPXOR Y9, Y%d, Y%d", i, i)
	}
	g.rounds("AESENC", regs(yr, 0, 8), "R11", "AX", 32, "Y8", true)
	skipA, skipB := g.newLabel("skiplo"), g.newLabel("skiphi")
	for i := 0; i < 8; i++ {
		if i == 0 {
			g.p("CMPQ R14, R12")
			g.p("JLE %s", skipA)
		}
		if i == 4 {
			g.lbl(skipA)
			g.p("CMPQ R13, R12")
			g.p("JB %s", skipB)
		}
		g.p("VMOVDQU X%d, %s", i, lane("DI", "R10", 2*i))
		g.p("VEXTRACTI128 $1, Y%d, %s", i, lane("DI", "R10", 2*i+1))
	}
	g.lbl(skipB)
	g.p("INCQ R13")
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("ADDQ $16, R9")
	g.p("ADDQ $16, R10")
	g.p("DECQ R14")
	g.p("JNE %s", loop)
	g.p("VZEROUPPER")
	g.p("RET")
}

// mulxPow emits dst = src * x^k (per 128-bit lane, 1 <= k <= 56) using
// VPCLMULQDQ for the reduction; t0..t2 are clobbered.
func (g *gen) mulxPow(src, dst string, k int, t0, t1, t2 string) {
	g.p("VPSLLQ $%d, %s, %s", k, src, t0)
	g.p("VPSRLQ $%d, %s, %s", 64-k, src, t1)
	g.p("VPSLLDQ $8, %s, %s", t1, t2)
	g.p("VPSRLDQ $8, %s, %s", t1, t1)
	g.p("VPCLMULQDQ $0x00, xtsPoly<>(SB), %s, %s", t1, t1)
	g.p("VPXOR %s, %s, %s", t2, t0, t0)
	g.p("VPXOR %s, %s, %s", t1, t0, dst)
}

// xtsVAES: XTS on n whole blocks (n a multiple of 16), 16 blocks in flight
// in Y0..Y7 (register i: blocks 2i, 2i+1).
//
// VPCLMULQDQ and the vector shuffles needed to step tweaks compete with
// VAESENC for the same vector pipes, so the tweaks are generated with
// scalar instructions instead (multiply by x: add-with-carry and a masked
// 0x87), interleaved with the AES rounds, two iterations ahead: iteration k
// reads the 256 bytes of tweaks written during iteration k-2 (a 32-byte load
// that needs several in-flight 8-byte stores cannot be forwarded and would
// stall). The first two iterations' tweaks are computed with vector
// instructions.
//
// Where the tweaks go matters: a load whose address matches an in-flight
// store in the low 12 bits is held back as if it depended on it. The tweak
// buffers therefore live in a page-sized ring in the stack frame, each at the
// page offset of the source data 512 bytes after the iteration that reads
// it, so they never alias the source loads or (in place) the stores around
// them, wherever src and the stack happen to be.
//
// With sectors set it is the multi-sector form: consecutive sectors of
// 256*ips bytes (ips >= 2) whose encrypted tweaks are at tws (one 16-byte
// entry per sector plus one readable spare). The data side does not see
// sector boundaries; the scalar generator restarts from the next entry of
// tws every ips iterations (R12 counts down, R13 walks tws).
//
// Registers: Y8 round key, Y9 round key 0; R8:R9 scalar tweak (lo:hi), R10
// scratch, R14 tweaks read by this iteration, DX tweaks being written.
func (g *gen) xtsVAES(name, op string, sectors bool) {
	const ring = 16 // frame offset of the ring (below: ips)
	const frame = ring + 4096 + 256
	if sectors {
		g.begin(name, frame, "XTS over n/(16*ips) consecutive sectors of 256*ips bytes (ips >= 2), 16 blocks\nin flight across sector boundaries; tws holds the encrypted tweak of every sector\nfollowed by one spare readable entry.",
			"nr", "yk", "dst", "src", "n", "ips", "tws")
	} else {
		g.begin(name, frame, "XTS on n whole blocks (n a multiple of 16), 16 in flight. *tweak is the encrypted\ntweak of the first block and is advanced to that of the block after the last.",
			"nr", "yk", "dst", "src", "n", "tweak")
	}
	// ringAt sets reg to the ring slot with the page offset of SI+off.
	ringAt := func(reg string, off int) {
		g.p("LEAQ %d(SI), %s", off, reg)
		g.p("LEAQ %d(SP), R10", ring)
		g.p("SUBQ R10, %s", reg)
		g.p("ANDQ $4095, %s", reg)
		g.p("ADDQ R10, %s", reg)
	}
	g.arg("nr", "AX")
	g.arg("yk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 32)
	g.p("VMOVDQU (DX), Y9")
	if sectors {
		g.arg("ips", "R12")
		g.p("MOVQ R12, 0(SP)")
		g.p("SUBQ $2, R12")
		g.arg("tws", "R13")
		g.p("VMOVDQU (R13), X10")
		g.p("ADDQ $16, R13")
	} else {
		g.arg("tweak", "BX")
		g.p("VMOVDQU (BX), X10")
	}
	ringAt("R14", 512) // tweaks of iteration 0
	ringAt("DX", 768)  // tweaks of iteration 1
	// Iteration 0: Y10 = [T, T*x], pair i = Y10 * x^(2i).
	g.p("VPSHUFD $0x13, X10, X0")
	g.p("VPSRAD $31, X0, X0")
	g.p("VPAND xtsMask<>(SB), X0, X0")
	g.p("VPADDQ X10, X10, X1")
	g.p("VPXOR X0, X1, X1")
	g.p("VINSERTI128 $1, X1, Y10, Y10")
	g.p("VMOVDQU Y10, 0(R14)")
	pairs := []string{"Y10", "Y11", "Y12", "Y13", "Y14", "Y15", "Y3", "Y4"}
	for i := 1; i < 8; i++ {
		g.mulxPow("Y10", pairs[i], 2*i, "Y0", "Y1", "Y2")
		g.p("VMOVDQU %s, %d(R14)", pairs[i], 32*i)
	}
	// Iteration 1: every pair of iteration 0 times x^16.
	mul16 := func(src, dst, tmp string) {
		g.p("VPSRLDQ $14, %s, %s", src, tmp)
		g.p("VPSLLDQ $2, %s, %s", src, dst)
		g.p("VPCLMULQDQ $0x00, xtsPoly<>(SB), %s, %s", tmp, tmp)
		g.p("VPXOR %s, %s, %s", tmp, dst, dst)
	}
	for i := 0; i < 8; i++ {
		d := yr(5 + i%3)
		mul16(pairs[i], d, "Y8")
		g.p("VMOVDQU %s, %d(DX)", d, 32*i)
		if i == 0 {
			// Scalar generator state: T * x^32.
			mul16("X5", "X1", "X2")
		}
	}
	g.p("VMOVQ X1, R8")
	g.p("VPEXTRQ $1, X1, R9")
	loop, done := g.newLabel("loop"), g.newLabel("done")
	g.lbl(loop)
	ringAt("DX", 1024) // tweaks of iteration k+2
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU %d(SI), Y%d", 32*i, i)
		g.p("VPXOR %d(R14), Y%d, Y%d", 32*i, i, i)
		g.p("VPXOR Y9, Y%d, Y%d", i, i)
	}
	step := func(j int) {
		if j == 0 && sectors {
			// Next sector's tweak once this one's are all generated.
			ok := g.newLabel("same")
			g.p("TESTQ R12, R12")
			g.p("JNE %s", ok)
			g.p("MOVQ (R13), R8")
			g.p("MOVQ 8(R13), R9")
			g.p("ADDQ $16, R13")
			g.p("MOVQ 0(SP), R12")
			g.lbl(ok)
			g.p("DECQ R12")
		}
		g.p("MOVQ R8, %d(DX)", 16*j)
		g.p("MOVQ R9, %d(DX)", 16*j+8)
		g.p("MOVQ R9, R10")
		g.p("SARQ $63, R10")
		g.p("ADDQ R8, R8")
		g.p("ADCQ R9, R9")
		g.p("ANDQ $0x87, R10")
		g.p("XORQ R10, R8")
	}
	g.afterRound = func(back int) {
		if back >= 2 {
			j := 2 * (9 - back)
			step(j)
			step(j + 1)
		}
	}
	g.rounds(op, regs(yr, 0, 8), "R11", "AX", 32, "Y8", true)
	g.afterRound = nil
	for i := 0; i < 8; i++ {
		g.p("VPXOR %d(R14), Y%d, Y%d", 32*i, i, i)
		g.p("VMOVDQU Y%d, %d(DI)", i, 32*i)
	}
	g.p("ADDQ $256, SI")
	g.p("ADDQ $256, DI")
	ringAt("R14", 512) // tweaks of the next iteration
	g.p("SUBQ $16, CX")
	g.p("JNE %s", loop)
	g.lbl(done)
	if !sectors {
		g.p("MOVQ 0(R14), R8")
		g.p("MOVQ 8(R14), R9")
		g.p("MOVQ R8, (BX)")
		g.p("MOVQ R9, 8(BX)")
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// xtsUnitVAES is the short data-unit form of XTS (n = 16..48 whole blocks,
// a multiple of 16, e.g. one 512-byte sector): latency matters more than
// throughput there, so it encrypts the tweak itself (tnr/txk: the tweak
// key's 128-bit schedule) and keeps the 16 tweaks of an iteration in
// registers (Y8..Y15, Y8 = [T, T*x], Y(8+i) = Y8*x^(2i)), stepping them by
// x^16 with VPCLMULQDQ: no stack round trip before the first AES round.
// During the rounds Y15's tweak is parked in the stack frame so that Y15 can
// hold the round key. On return *tweak is the tweak of block n.
func (g *gen) xtsUnitVAES(name, op string) {
	g.begin(name, 32, "XTS on n whole blocks (n a multiple of 16) of a data unit with IV *iv: the\ntweak is E(txk, *iv); *tweak receives the tweak of block n.",
		"nr", "yk", "tnr", "txk", "dst", "src", "n", "iv", "tweak")
	g.arg("tnr", "R8")
	g.arg("txk", "R9")
	g.arg("iv", "BX")
	g.keyEnd("R10", "R9", "R8", 16)
	g.p("VMOVDQU (BX), X8")
	g.p("VPXOR (R9), X8, X8")
	g.rounds("AESENC", []string{"X8"}, "R10", "R8", 16, "", true)
	g.arg("nr", "AX")
	g.arg("yk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.arg("tweak", "BX")
	g.keyEnd("R11", "DX", "AX", 32)
	g.p("VPSHUFD $0x13, X8, X0")
	g.p("VPSRAD $31, X0, X0")
	g.p("VPAND xtsMask<>(SB), X0, X0")
	g.p("VPADDQ X8, X8, X1")
	g.p("VPXOR X0, X1, X1")
	g.p("VINSERTI128 $1, X1, Y8, Y8")
	for i := 1; i < 8; i++ {
		g.mulxPow("Y8", yr(8+i), 2*i, "Y0", "Y1", "Y2")
	}
	loop := g.newLabel("loop16")
	g.lbl(loop)
	g.p("VMOVDQU Y15, (SP)")
	for i := 0; i < 7; i++ {
		g.p("VPXOR %d(SI), Y%d, Y%d", 32*i, 8+i, i)
	}
	g.p("VMOVDQU 224(SI), Y7")
	g.p("VPXOR Y15, Y7, Y7")
	g.p("VMOVDQU (DX), Y15")
	for i := 0; i < 8; i++ {
		g.p("VPXOR Y15, Y%d, Y%d", i, i)
	}
	g.rounds(op, regs(yr, 0, 8), "R11", "AX", 32, "Y15", true)
	g.p("VMOVDQU (SP), Y15")
	for i := 0; i < 8; i++ {
		g.p("VPXOR Y%d, Y%d, Y%d", 8+i, i, i)
		g.p("VMOVDQU Y%d, %d(DI)", i, 32*i)
	}
	// Advance every tweak by x^16: a 2-byte left shift per lane, with the
	// 16 bits shifted out folded back in by a carry-less multiply by 0x87.
	for i := 0; i < 8; i++ {
		t := yr(8 + i)
		tmp := yr(i % 4)
		g.p("VPSRLDQ $14, %s, %s", t, tmp)
		g.p("VPSLLDQ $2, %s, %s", t, t)
		g.p("VPCLMULQDQ $0x00, xtsPoly<>(SB), %s, %s", tmp, tmp)
		g.p("VPXOR %s, %s, %s", tmp, t, t)
	}
	g.p("ADDQ $256, SI")
	g.p("ADDQ $256, DI")
	g.p("SUBQ $16, CX")
	g.p("JNE %s", loop)
	g.p("VMOVDQU X8, (BX)")
	g.p("VZEROUPPER")
	g.p("RET")
}

func (g *gen) cpuid() {
	fmt.Fprintf(&g.buf, `
// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
`)
}

func (g *gen) data() {
	fmt.Fprintf(&g.buf, `
// Dword mask {0x87, 0, 1, 0} for multiplying an XTS tweak by x with SSE2.
DATA xtsMask<>+0(SB)/4, $0x87
DATA xtsMask<>+4(SB)/4, $0
DATA xtsMask<>+8(SB)/4, $1
DATA xtsMask<>+12(SB)/4, $0
GLOBL xtsMask<>(SB), RODATA|NOPTR, $16

// The reduction constant 0x87 in the low quadword of each 128-bit lane.
DATA xtsPoly<>+0(SB)/8, $0x87
DATA xtsPoly<>+8(SB)/8, $0
DATA xtsPoly<>+16(SB)/8, $0x87
DATA xtsPoly<>+24(SB)/8, $0
GLOBL xtsPoly<>(SB), RODATA|NOPTR, $32
`)
}

func main() {
	out := flag.String("out", "../aes_amd64.s", "output file")
	flag.Parse()
	g := &gen{}
	g.buf.WriteString("// Code generated by internal/aes/_asm. DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	g.data()
	g.cpuid()
	g.blockAESNI("encBlockAESNI", "AESENC")
	g.blockAESNI("decBlockAESNI", "AESDEC")
	g.ecbAESNI("encECBAESNI", "AESENC")
	g.ecbAESNI("decECBAESNI", "AESDEC")
	g.cbcEncAESNI("encCBCAESNI", false)
	g.cbcEncAESNI("encESSIVCBCAESNI", true)
	g.cbcDecAESNI("decCBCAESNI", false, false)
	g.cbcDecAESNI("decESSIVCBCAESNI", true, false)
	g.cbcDecAESNI("decCBCSectorsAESNI", false, true)
	g.cbcMBAESNI("encCBCMB8AESNI", 8)
	g.cbcMBStagedAESNI("encCBCMB8StagedAESNI")
	g.cbcMBAESNI("encCBCMB4AESNI", 4)
	g.cbcMBAESNI("encCBCMB2AESNI", 2)
	g.xtsAESNI("xtsEncAESNI", "AESENC")
	g.xtsAESNI("xtsDecAESNI", "AESDEC")
	g.xtsRingAESNI("xtsEncRingAESNI", "AESENC", false)
	g.xtsRingAESNI("xtsDecRingAESNI", "AESDEC", false)
	g.xtsRingAESNI("xtsEncSectorsAESNI", "AESENC", true)
	g.xtsRingAESNI("xtsDecSectorsAESNI", "AESDEC", true)
	g.ecbVAES("encECBVAES", "AESENC")
	g.ecbVAES("decECBVAES", "AESDEC")
	g.cbcDecVAES("decCBCVAES", false, false)
	g.cbcDecVAES("decESSIVCBCVAES", false, true)
	g.cbcDecVAES("decCBCSectorsVAES", true, false)
	g.cbcMBVAES("encCBCMB16VAES")
	g.cbcMBZMM("encCBCMB16ZMM", false)
	g.cbcMBZMM("encESSIVCBCMB16ZMM", true)
	g.cbcMB32ZMM("encCBCMB32ZMM", false)
	g.cbcMB32ZMM("encESSIVCBCMB32ZMM", true)
	g.cbcDecZMM("decCBCZMM", false)
	g.cbcDecZMM("decESSIVCBCZMM", true)
	g.xtsVAES("xtsEncVAES", "AESENC", false)
	g.xtsVAES("xtsDecVAES", "AESDEC", false)
	g.xtsVAES("xtsEncSectorsVAES", "AESENC", true)
	g.xtsVAES("xtsDecSectorsVAES", "AESDEC", true)
	g.xtsUnitVAES("xtsEncUnitVAES", "AESENC")
	g.xtsUnitVAES("xtsDecUnitVAES", "AESDEC")
	g.genXTSZMM()
	if err := os.WriteFile(*out, g.buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
