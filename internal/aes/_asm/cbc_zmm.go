package main

import "fmt"

// CBC kernels of the vaes-avx512 implementation: EVEX-encoded VAES on ZMM
// registers, four blocks per register, with every round key held in a
// register (AVX-512 has 32 of them). They read the plain 128-bit schedule
// (xk) and broadcast each round key to the four lanes once per call.

func zr(i int) string { return fmt.Sprintf("Z%d", i) }

// zmmKeyReg is the register holding the round key `back` rounds before the
// last one (back = 0..13); round key 0 is always in Z31 so that the whitening
// step does not depend on the key size.
func zmmKeyReg(back int) string { return zr(16 + back) }

// zmmKeys broadcasts the schedule at k (nr rounds, ke = k + 16*nr) into
// Z31 (round key 0) and Z16.. (see zmmKeyReg). Only the keys the key size has
// are read: the 128-bit schedule is not padded in front.
func (g *gen) zmmKeys(k, ke, nr string) {
	l10, l12 := g.newLabel("k10"), g.newLabel("k12")
	g.p("VBROADCASTI32X4 (%s), Z31", k)
	g.p("CMPQ %s, $12", nr)
	g.p("JB %s", l10)
	g.p("JEQ %s", l12)
	for _, back := range []int{13, 12} {
		g.p("VBROADCASTI32X4 %d(%s), %s", -16*back, ke, zmmKeyReg(back))
	}
	g.lbl(l12)
	for _, back := range []int{11, 10} {
		g.p("VBROADCASTI32X4 %d(%s), %s", -16*back, ke, zmmKeyReg(back))
	}
	g.lbl(l10)
	for back := 9; back >= 1; back-- {
		g.p("VBROADCASTI32X4 %d(%s), %s", -16*back, ke, zmmKeyReg(back))
	}
	g.p("VBROADCASTI32X4 (%s), %s", ke, zmmKeyReg(0))
}

// zmmRounds emits rounds 1..nr on the ZMM states with the keys of zmmKeys,
// calling g.afterRound as rounds does.
func (g *gen) zmmRounds(op string, state []string, nr string) {
	l10, l12 := g.newLabel("r10"), g.newLabel("r12")
	round := func(back int) {
		o := "V" + op
		if back == 0 {
			o += "LAST"
		}
		for _, s := range state {
			g.p("%s %s, %s, %s", o, zmmKeyReg(back), s, s)
		}
	}
	g.p("CMPQ %s, $12", nr)
	g.p("JB %s", l10)
	g.p("JEQ %s", l12)
	round(13)
	round(12)
	g.lbl(l12)
	round(11)
	round(10)
	g.lbl(l10)
	for back := 9; back >= 1; back-- {
		round(back)
		if g.afterRound != nil {
			g.afterRound(back)
		}
	}
	round(0)
}

// cbcMBZMM is multi-buffer CBC encryption of 16 consecutive sectors with
// ZMM register i (i < 4) carrying sectors 4i..4i+3, reading and writing the
// sectors in place (one 16-byte block per lane per step, gathered with
// VINSERTI32X4 and scattered with VEXTRACTI32X4 on the shuffle port, which
// the AES rounds do not use).
//
// lag (0 or 128 bytes) delays sectors 8..15 by that many bytes. With
// sectors 4 KiB apart every lane's current cache line falls into the same
// L1 set, and 16 lines overflow its 12 ways: each store then misses. A lag
// of two lines keeps at most 8 per set (one line measured far slower: the
// lines in use overlap in time), at the cost of lag/16 extra steps in which
// one half computes a result that is thrown away (its loads stay inside the
// batch: the neighbouring half's sectors).
//
// Why ZMM: a ZMM VAESENC does four blocks in one uop on one port, so the 16
// chains need only four AES uops per round and the round keys stay in
// registers (no key load per round as in the YMM kernels). The whitening XOR
// of key 0, the plaintext and the chaining value is one VPTERNLOGD. With
// four registers in flight each chain's next round issues four cycles after
// its previous one, above the three-cycle VAESENC latency. Staging cache
// lines through the stack instead of the lag measured slower: the copies
// cost more than the lane shuffles, which run on a port the rounds leave
// idle.
//
// With essiv the 16 IVs are first encrypted with the ESSIV key (ivnr/ivxk),
// in registers, so a batch needs no separate ECB pass over its IVs.
func (g *gen) cbcMBZMM(name string, essiv bool) {
	args := []string{"nr", "xk", "dst", "src", "ss", "ivs", "lag"}
	doc := "CBC encryption of 16 consecutive sectors of ss bytes (ss > 0, multiple of 16),\nfour sectors per ZMM register; ivs holds the 16 IVs; lag is 0 or 128."
	if essiv {
		args = append(args, "ivnr", "ivxk")
		doc = "ESSIV-CBC encryption of 16 consecutive sectors of ss bytes (ss > 0, multiple of 16):\nthe CBC IVs are the 16 IVs at ivs encrypted with ivxk (ivnr rounds); ivs is not\nmodified. Four sectors per ZMM register; lag is 0 or 128."
	}
	g.begin(name, 0, doc, args...)
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("ivs", "R13")
	for i := 0; i < 4; i++ {
		g.p("VMOVDQU64 %d(R13), Z%d", 64*i, i)
	}
	if essiv {
		g.arg("ivnr", "AX")
		g.arg("ivxk", "R12")
		g.keyEnd("R11", "R12", "AX", 16)
		g.zmmKeys("R12", "R11", "AX")
		for i := 0; i < 4; i++ {
			g.p("VPXORD Z31, Z%d, Z%d", i, i)
		}
		g.zmmRounds("AESENC", regs(zr, 0, 4), "AX")
	}
	g.p("VMOVDQA64 Z2, Z4")
	g.p("VMOVDQA64 Z3, Z5")
	g.arg("nr", "AX")
	g.arg("xk", "R12")
	g.keyEnd("R11", "R12", "AX", 16)
	g.zmmKeys("R12", "R11", "AX")
	g.laneSetup()
	// R9/R10: sector 8 of src/dst, lag bytes early. R12: the lag in
	// steps; R11 counts steps up, R14 down from ss/16 + lag/16.
	g.arg("lag", "R12")
	g.p("LEAQ (SI)(BX*8), R9")
	g.p("LEAQ (DI)(BX*8), R10")
	g.p("SUBQ R12, R9")
	g.p("SUBQ R12, R10")
	g.p("SHRQ $4, R12")
	g.p("MOVQ BX, R14")
	g.p("SHRQ $4, R14")
	g.p("ADDQ R12, R14")
	g.p("XORQ R11, R11")
	base := func(i int, lo, hi string) (string, int) {
		if i < 2 {
			return lo, 4 * i
		}
		return hi, 4 * (i - 2)
	}
	loop, norestore := g.newLabel("loop"), g.newLabel("norestore")
	g.lbl(loop)
	// The delayed half starts from its IVs once its real data begins.
	g.p("CMPQ R11, R12")
	g.p("JNE %s", norestore)
	g.p("VMOVDQA64 Z4, Z2")
	g.p("VMOVDQA64 Z5, Z3")
	g.lbl(norestore)
	for i := 0; i < 4; i++ {
		b, j := base(i, "SI", "R9")
		t := 6 + i
		g.p("VMOVDQU %s, X%d", laneAddr(b, j), t)
		for h := 1; h < 4; h++ {
			g.p("VINSERTI32X4 $%d, %s, Z%d, Z%d", h, laneAddr(b, j+h), t, t)
		}
		g.p("VPTERNLOGD $0x96, Z%d, Z31, Z%d", t, i)
	}
	g.zmmRounds("AESENC", regs(zr, 0, 4), "AX")
	skipA, skipB := g.newLabel("skiplo"), g.newLabel("skiphi")
	store := func(i int) {
		b, j := base(i, "DI", "R10")
		g.p("VMOVDQU X%d, %s", i, laneAddr(b, j))
		for h := 1; h < 4; h++ {
			g.p("VEXTRACTI32X4 $%d, Z%d, %s", h, i, laneAddr(b, j+h))
		}
	}
	// Sectors 0..7 are done once R14 <= lag steps remain.
	g.p("CMPQ R14, R12")
	g.p("JLE %s", skipA)
	store(0)
	store(1)
	g.lbl(skipA)
	g.p("CMPQ R11, R12")
	g.p("JB %s", skipB)
	store(2)
	store(3)
	g.lbl(skipB)
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("ADDQ $16, R9")
	g.p("ADDQ $16, R10")
	g.p("INCQ R11")
	g.p("DECQ R14")
	g.p("JNE %s", loop)
	// No Go code uses Z16..Z31: round keys left there would stay until
	// the next AVX-512 kernel, so clear them (zero idioms, almost free).
	for r := 16; r <= 31; r++ {
		g.p("VPXORQ Z%d, Z%d, Z%d", r, r, r)
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// cbcDecZMM is CBC decryption of n blocks (n a multiple of 32), 32 in
// flight in eight ZMM registers with every round key in a register, as the
// ZMM XTS kernels keep them. The YMM kernel (cbcDecVAES) loads a round key
// from memory for each round and keeps 16 blocks in flight: 17.9 GB/s at
// 4 KiB (AES-256) against 18.35 here, and an ESSIV sector of 4 KiB through
// capi at 1.00x the Linux kernel's best XTS decryption against 1.06x (Intel
// Xeon VM, 2026-12-01).
//
// Each register's previous ciphertexts are one unaligned 64-byte load at
// -16, except register 0's, whose first lane is the chain value: Z9 holds
// the chain in its top lane, and VALIGNQ shifts it in front of C0..C2.
// With essiv the chain starts from E(ivxk, *iv) (xmm, keys from memory)
// and *iv is not modified; without, *iv is updated.
func (g *gen) cbcDecZMM(name string, essiv bool) {
	args := []string{"nr", "xk", "dst", "src", "n", "iv"}
	doc := "CBC decryption of n blocks (n a multiple of 32), 32 in flight; *iv is updated."
	if essiv {
		args = []string{"nr", "xk", "ivnr", "ivxk", "dst", "src", "n", "iv"}
		doc = "CBC decryption of n blocks (n a multiple of 32), 32 in flight, with IV = E(ivxk, *iv);\n*iv is not modified."
	}
	g.begin(name, 0, doc, args...)
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.arg("iv", "BX")
	g.p("VMOVDQU (BX), X9")
	if essiv {
		g.essivChainX9()
	}
	g.p("VSHUFI64X2 $0, Z9, Z9, Z9")
	g.arg("nr", "AX")
	g.arg("xk", "R12")
	g.keyEnd("R11", "R12", "AX", 16)
	g.zmmKeys("R12", "R11", "AX")
	loop, done := g.newLabel("loop32"), g.newLabel("done")
	g.lbl(loop)
	g.p("CMPQ CX, $32")
	g.p("JB %s", done)
	for i := 0; i < 8; i++ {
		g.p("VPXORQ %d(SI), Z31, Z%d", 64*i, i)
	}
	g.zmmRounds("AESDEC", regs(zr, 0, 8), "AX")
	// All loads precede the stores, so dst may be src.
	g.p("VMOVDQU64 (SI), Z10")
	g.p("VALIGNQ $6, Z9, Z10, Z10")
	g.p("VPXORQ Z10, Z0, Z0")
	for i := 1; i < 8; i++ {
		g.p("VPXORQ %d(SI), Z%d, Z%d", 64*i-16, i, i)
	}
	g.p("VMOVDQU64 448(SI), Z9")
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU64 Z%d, %d(DI)", i, 64*i)
	}
	g.p("ADDQ $512, SI")
	g.p("ADDQ $512, DI")
	g.p("SUBQ $32, CX")
	g.p("JMP %s", loop)
	g.lbl(done)
	if !essiv {
		g.p("VEXTRACTI32X4 $3, Z9, (BX)")
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// cbcMB32ZMM is cbcMBZMM with twice the chains: 32 consecutive sectors,
// eight ZMM registers, register i carrying sectors 4i..4i+3.
//
// Why: on Zen 5 the AES unit runs two ZMM VAESENC per cycle (the peers'
// clockaes: 9.7 bytes per cycle for AES-256, a latency of about 5 cycles),
// so four registers of chains leave it about half idle (the 16-sector
// kernel ran at 0.53x the XTS batch there). Eight come near it; sixteen
// (64 sectors, tried) ran only 2% faster at 512-byte sectors, and at 1 KiB
// 64 lanes overflow the L1 sets (0.4x), so the remaining gap is the lane
// copies below, not the latency. On Intel (one ZMM VAESENC per cycle) four
// registers already suffice, so the dispatch picks this kernel by CPU.
//
// The 32 sectors are four groups of eight (two registers each); with lag
// (0, or a multiple of 16 bytes) group q runs q*lag bytes behind group 0,
// for the L1 reason of cbcMBZMM: with sectors 4 KiB apart all 32 current
// lines would fall into one set. A group outside its span computes on
// neighbouring sectors' bytes (inside the batch) and stores nothing; it
// starts from its IVs (kept in Z8..Z13) at its first step.
//
// Frame: the four groups' src and dst pointers (lag applied), their first
// and end steps, the staging limit, then the two rings (see below).
func (g *gen) cbcMB32ZMM(name string, essiv bool) {
	args := []string{"nr", "xk", "dst", "src", "ss", "ivs", "lag"}
	doc := "CBC encryption of 32 consecutive sectors of ss bytes (ss > 0, multiple of 16),\nfour sectors per ZMM register; ivs holds the 32 IVs; lag is a multiple of 16, lag*3 <= 8*ss."
	if essiv {
		args = append(args, "ivnr", "ivxk")
		doc = "ESSIV-CBC encryption of 32 consecutive sectors of ss bytes (ss > 0, multiple of 16):\nthe CBC IVs are the 32 IVs at ivs encrypted with ivxk (ivnr rounds); ivs is not\nmodified. Four sectors per ZMM register; lag is a multiple of 16, lag*3 <= 8*ss."
	}
	const (
		srcSlot   = 0   // 4 pointers
		dstSlot   = 32  // 4 pointers
		startSlot = 64  // 4 steps
		endSlot   = 96  // 4 steps
		limSlot   = 128 // the last step + 1 - cbcStageAhead: stage while below
		ringSlot  = 136
	)
	g.begin(name, ringSlot+2*cbcStageSlots*512+64, doc, args...)
	g.arg("ivs", "R13")
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU64 %d(R13), Z%d", 64*i, i)
	}
	if essiv {
		g.arg("ivnr", "AX")
		g.arg("ivxk", "R12")
		g.keyEnd("R11", "R12", "AX", 16)
		g.zmmKeys("R12", "R11", "AX")
		for i := 0; i < 8; i++ {
			g.p("VPXORD Z31, Z%d, Z%d", i, i)
		}
		g.zmmRounds("AESENC", regs(zr, 0, 8), "AX")
	}
	// Groups 1..3 restart from these at their first step.
	for i := 2; i < 8; i++ {
		g.p("VMOVDQA64 Z%d, Z%d", i, 6+i)
	}
	g.arg("nr", "AX")
	g.arg("xk", "R12")
	g.keyEnd("R11", "R12", "AX", 16)
	g.zmmKeys("R12", "R11", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.laneSetup()
	// R9 = 8*ss - lag: the distance between consecutive groups' pointers.
	// R10 = lag/16 steps, R12 = ss/16 steps.
	g.arg("lag", "R10")
	g.p("MOVQ BX, R9")
	g.p("SHLQ $3, R9")
	g.p("SUBQ R10, R9")
	g.p("SHRQ $4, R10")
	g.p("MOVQ BX, R12")
	g.p("SHRQ $4, R12")
	g.p("XORQ R13, R13") // group q's first step, q*lag/16
	for q := 0; q < 4; q++ {
		g.p("MOVQ SI, %d(SP)", srcSlot+8*q)
		g.p("MOVQ DI, %d(SP)", dstSlot+8*q)
		g.p("MOVQ R13, %d(SP)", startSlot+8*q)
		g.p("LEAQ (R13)(R12*1), R14")
		g.p("MOVQ R14, %d(SP)", endSlot+8*q)
		g.p("ADDQ R9, SI")
		g.p("ADDQ R9, DI")
		g.p("ADDQ R10, R13")
	}
	// R13: the step. R12: the rings (64-byte aligned): cbcStageSlots
	// slots of staged plaintext, then as many of results.
	g.p("MOVQ %d(SP), R9", endSlot+24)
	g.p("SUBQ $%d, R9", cbcStageAhead)
	g.p("MOVQ R9, %d(SP)", limSlot)
	g.p("LEAQ %d(SP), R12", ringSlot+63)
	g.p("ANDQ $-64, R12")
	// The first steps' plaintext (the stage units stage step R13+ahead).
	for d := 0; d < cbcStageAhead; d++ {
		g.p("MOVQ $%d, R13", d-cbcStageAhead)
		g.cbcStepRegs()
		for _, u := range g.cbcUnits32(true, false) {
			g.buf.WriteString(u)
		}
	}
	g.p("XORQ R13, R13")
	loop := g.newLabel("loop")
	g.lbl(loop)
	g.cbcStepRegs()
	for q := 1; q < 4; q++ {
		l := g.newLabel("norestore")
		g.p("CMPQ R13, %d(SP)", startSlot+8*q)
		g.p("JNE %s", l)
		g.p("VMOVDQA64 Z%d, Z%d", 6+2*q, 2*q)
		g.p("VMOVDQA64 Z%d, Z%d", 7+2*q, 2*q+1)
		g.lbl(l)
	}
	g.cbcSlot("R9", "R13", 0)
	for i := 0; i < 8; i++ {
		g.p("VPTERNLOGD $0x96, %d(R9), Z31, Z%d", 64*i, i)
	}
	// The copies are spread over the rounds: left to out-of-order
	// execution they would wait behind this step's AES instructions, as
	// the XTS sector kernel's tweak work did (see zPipelined).
	units := g.cbcUnits32(true, true)
	g.afterRound = func(back int) {
		if k := 9 - back; k < len(units) {
			g.buf.WriteString(units[k])
		}
	}
	g.zmmRounds("AESENC", regs(zr, 0, 8), "AX")
	g.afterRound = nil
	g.cbcSlot("R9", "R13", cbcStageSlots*512)
	for i := 0; i < 8; i++ {
		g.p("VMOVDQU64 Z%d, %d(R9)", i, 64*i)
	}
	g.p("INCQ R13")
	g.p("CMPQ R13, %d(SP)", endSlot+24)
	g.p("JNE %s", loop)
	// The last steps' results (the out units copy out step R13-ahead).
	for d := 0; d < cbcStageAhead; d++ {
		g.cbcStepRegs()
		for _, u := range g.cbcUnits32(false, true) {
			g.buf.WriteString(u)
		}
		g.p("INCQ R13")
	}
	// The staged plaintext, the IVs (ESSIV's are secret) and the round
	// keys are cleared (the registers as cbcMBZMM does).
	g.p("VPXORQ Z8, Z8, Z8")
	for i := 0; i < 2*cbcStageSlots*8; i++ {
		g.p("VMOVDQU64 Z8, %d(R12)", 64*i)
	}
	for r := 8; r <= 31; r++ {
		g.p("VPXORQ Z%d, Z%d, Z%d", r, r, r)
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// The 32-sector kernel stages each step's 32 plaintext blocks into a ring
// of cbcStageSlots 512-byte slots on the stack, cbcStageAhead steps before
// the step reads them as eight ZMM operands, and sends its results out
// through a second ring the same way. On Zen 5 (ESSIV, 256 x 512 B, against
// the XTS batch): lanes gathered with VINSERTI32X4 and scattered with
// VEXTRACTI32X4, as cbcMBZMM does, 0.72x (the shuffles take the AES unit's
// pipes); merge- or zero-masked VBROADCASTI32X4 or masked loads no better,
// one VPGATHERQQ per register 0.51x; no gather at all 0.99x, no scatter
// 1.08x. Plain loads and stores it is, far enough ahead that a wide load
// finds the narrow stores in L1 (they cannot be forwarded to it), and a
// narrow load the wide store (copying out in the same step ran slower).
// The copies are spread over the rounds (0.78x before, 0.88x after).
const (
	cbcStageSlots = 4
	cbcStageAhead = 2 // 2*cbcStageAhead must be a multiple of cbcStageSlots (cbcStepRegs)
)

// cbcStepRegs sets, for the step in R13, R14 = 16*(step+ahead) (the stage
// units' byte offset; the out units' is 32*ahead less) and R10 = the stage
// ring slot of step+ahead, which is also the result slot of step-ahead
// (2*ahead is a multiple of cbcStageSlots) less the result ring's offset.
func (g *gen) cbcStepRegs() {
	g.p("LEAQ %d(R13), R14", cbcStageAhead)
	g.cbcSlot("R10", "R14", 0)
	g.p("SHLQ $4, R14")
}

// cbcSlot sets dst to the slot of the step in reg (any register but dst)
// in the ring at R12+off.
func (g *gen) cbcSlot(dst, reg string, off int) {
	g.p("MOVQ %s, %s", reg, dst)
	g.p("ANDQ $%d, %s", cbcStageSlots-1, dst)
	g.p("SHLQ $9, %s", dst)
	g.p("LEAQ %d(R12)(%s*1), %s", off, dst, dst)
}

// cbcUnits32 returns, as separate pieces of code, the stage units (copy
// the blocks of step R13+ahead of group q into the stage ring, if that
// step exists) and the out units (copy group q's results of step
// R13-ahead to its sectors, if that step is in the group's span), with
// the registers of cbcStepRegs. Each clobbers R9 and X14, X15, X30.
func (g *gen) cbcUnits32(stage, out bool) []string {
	const (
		srcSlot, dstSlot, startSlot, endSlot, limSlot = 0, 32, 64, 96, 128
	)
	var units []string
	tmps := []int{14, 15, 30}
	if stage {
		for q := 0; q < 4; q++ {
			u := &gen{label: g.label}
			skip := u.newLabel("nostage")
			u.p("CMPQ R13, %d(SP)", limSlot)
			u.p("JGE %s", skip)
			u.p("MOVQ %d(SP), R9", srcSlot+8*q)
			u.p("ADDQ R14, R9")
			for j := 0; j < 8; j++ {
				t := tmps[j%len(tmps)]
				u.p("VMOVDQU32 %s, X%d", laneAddr("R9", j), t)
				u.p("VMOVDQU32 X%d, %d(R10)", t, 64*(2*q+j/4)+16*(j%4))
			}
			u.lbl(skip)
			g.label = u.label
			units = append(units, u.buf.String())
		}
	}
	if out {
		for q := 0; q < 4; q++ {
			u := &gen{label: g.label}
			skip := u.newLabel("noout")
			u.p("LEAQ -%d(R13), R9", cbcStageAhead)
			u.p("CMPQ R9, %d(SP)", startSlot+8*q)
			u.p("JLT %s", skip)
			u.p("CMPQ R9, %d(SP)", endSlot+8*q)
			u.p("JGE %s", skip)
			u.p("MOVQ %d(SP), R9", dstSlot+8*q)
			u.p("LEAQ -%d(R9)(R14*1), R9", 32*cbcStageAhead)
			for j := 0; j < 8; j++ {
				t := tmps[j%len(tmps)]
				u.p("VMOVDQU32 %d(R10), X%d", cbcStageSlots*512+64*(2*q+j/4)+16*(j%4), t)
				u.p("VMOVDQU32 X%d, %s", t, laneAddr("R9", j))
			}
			u.lbl(skip)
			g.label = u.label
			units = append(units, u.buf.String())
		}
	}
	return units
}
