package main

import (
	"fmt"
	"strings"
)

// AES-XTS on ZMM registers (EVEX: AVX512F, AVX512BW for the per-lane byte
// shifts, VAES and VPCLMULQDQ), the "vaes-avx512" implementation.
//
// Why a second VAES kernel: on this Intel core a VAESENC on YMM has a
// 3-cycle latency at 2 per cycle, so the YMM kernel's 8 registers in flight
// reach only about 85% of the AES unit (the peers' clockaes measures 3.4 of
// 4 blocks per cycle with 8 YMM accumulators). A ZMM VAESENC does the same
// 4 blocks per cycle as one instruction, so 8 ZMM registers in flight (32
// blocks, 512 bytes) saturate it with room to spare, and the 32 vector
// registers hold every round key, the 32 tweaks of an iteration and the
// states at once: the loop touches memory only for data.
//
// Register use:
//
//	Z0..Z7    states (blocks 4i..4i+3 of the iteration in Zi); scratch outside the rounds
//	Z8..Z15   the unit kernel: tweaks of those blocks (Z(8+i) lane l: block 4i+l);
//	          the sector kernel: scratch for the next iteration's tweaks
//	Z17..Z29  round key nr-b in Z(30-b) for b = 13..1; Z30 the last round key
//	Z16, Z31  key 0 at load time, then constants (zConsts, zMemSetup)
//
// Two xors per block are folded away. Tweaks are kept xored with the last
// round key: the last round takes that as its key, since
// AESENCLAST(s, k) ^ t = AESENCLAST(s, k ^ t) (likewise AESDECLAST), and
// the whitening (data ^ tweak ^ key 0) is one VPTERNLOGQ with the constant
// key 0 ^ last key.

// zkey is the register holding round key nr-back (back 0: the last key);
// round key 0 is always Z16 whatever nr is.
func zkey(back int) string { return fmt.Sprintf("Z%d", 30-back) }

// zLoadKeys broadcasts the 128-bit round keys at k (nr in AX, ke = k +
// 16*nr in R11) into their registers.
func (g *gen) zLoadKeys(k string) { g.zLoadKeysNr(k, "R11", "AX") }

// zLoadKeysNr is zLoadKeys with nr in the register nr and ke in ke.
func (g *gen) zLoadKeysNr(k, ke, nr string) {
	l10, l12 := g.newLabel("zk10"), g.newLabel("zk12")
	g.p("VBROADCASTI32X4 (%s), Z16", k)
	g.p("CMPQ %s, $12", nr)
	g.p("JB %s", l10)
	g.p("JEQ %s", l12)
	for _, b := range []int{13, 12} {
		g.p("VBROADCASTI32X4 -%d(%s), %s", 16*b, ke, zkey(b))
	}
	g.lbl(l12)
	for _, b := range []int{11, 10} {
		g.p("VBROADCASTI32X4 -%d(%s), %s", 16*b, ke, zkey(b))
	}
	g.lbl(l10)
	for b := 9; b >= 1; b-- {
		g.p("VBROADCASTI32X4 -%d(%s), %s", 16*b, ke, zkey(b))
	}
	g.p("VBROADCASTI32X4 (%s), Z30", ke)
}

// zIteration emits one pass over k (4 or 8) ZMM registers of data at SI:
// whitening, nr rounds with the keys in registers, the last round with the
// tweak folded into its key, and the store to DI.
func (g *gen) zIteration(op string, k int) { g.zIterationFrom(op, k, "", nil) }

// zIterationFrom is zIteration with the tweaks taken from tw: "" means
// Z8..Z15 with Z16 = key 0 ^ last key (zConsts); "*reg" the 512 bytes at
// reg with Z31 = key 0 ^ last key (zMemSetup); ecbNoTweak none (plain ECB,
// key 0 in Z16). It calls after(b) once round key nr-b is applied
// (b = 9..1), to interleave independent work.
func (g *gen) zIterationFrom(op string, k int, tw string, after func(b int)) {
	for i := 0; i < k; i++ {
		g.p("VMOVDQU64 %d(SI), Z%d", 64*i, i)
		switch tw {
		case "":
			g.p("VPTERNLOGQ $0x96, Z16, Z%d, Z%d", 8+i, i)
		case ecbNoTweak:
			g.p("VPXORQ Z16, Z%d, Z%d", i, i)
		default:
			g.p("VPTERNLOGQ $0x96, %d(%s), Z31, Z%d", 64*i, tw[1:], i)
		}
	}
	l10, l12 := g.newLabel("zr10"), g.newLabel("zr12")
	round := func(b int) {
		for i := 0; i < k; i++ {
			g.p("V%s %s, Z%d, Z%d", op, zkey(b), i, i)
		}
	}
	g.p("CMPQ AX, $12")
	g.p("JB %s", l10)
	g.p("JEQ %s", l12)
	round(13)
	round(12)
	g.lbl(l12)
	round(11)
	round(10)
	g.lbl(l10)
	for b := 9; b >= 1; b-- {
		round(b)
		if after != nil {
			after(b)
		}
	}
	for i := 0; i < k; i++ {
		switch tw {
		case "":
			g.p("V%sLAST Z%d, Z%d, Z%d", op, 8+i, i, i)
			g.p("VMOVDQU64 Z%d, %d(DI)", i, 64*i)
		case ecbNoTweak:
			g.p("V%sLAST Z30, Z%d, Z%d", op, i, i)
			g.p("VMOVDQU64 Z%d, %d(DI)", i, 64*i)
		default:
			g.p("V%sLAST %d(%s), Z%d, Z%d", op, 64*i, tw[1:], i, i)
			g.p("VMOVDQU64 Z%d, %d(DI)", i, 64*i)
		}
	}
}

// zMulBytesXor emits dst = src * x^(8m) per 128-bit lane (1 <= m <= 7): a
// left shift by m bytes, the bytes shifted out folded back by a carry-less
// multiply by 0x87 (at most 8m+7 bits, so no second reduction).
// With c not "", the register c is xored into the result as well.
func (g *gen) zMulBytesXor(src, dst string, m int, tmp, c string) {
	g.p("VPSRLDQ $%d, %s, %s", 16-m, src, tmp)
	g.p("VPSLLDQ $%d, %s, %s", m, src, dst)
	g.p("VPCLMULQDQ $0x00, xtsPoly512<>(SB), %s, %s", tmp, tmp)
	if c == "" {
		g.p("VPXORQ %s, %s, %s", tmp, dst, dst)
	} else {
		g.p("VPTERNLOGQ $0x96, %s, %s, %s", c, tmp, dst)
	}
}

// zMulBits emits dst = src * x^k per 128-bit lane (1 <= k <= 56), the shift
// counts either immediates (cnt == "") or per-quadword from the memory
// vectors cnt (k) and cnt+64 (64-k) (cnt: "sym<>" or "sym<>+offset"). dst must differ from src; t0, t1 are
// clobbered.
func (g *gen) zMulBits(src, dst string, k int, cnt string, t0, t1 string) {
	if cnt == "" {
		g.p("VPSRLQ $%d, %s, %s", 64-k, src, t0)
		g.p("VPSLLQ $%d, %s, %s", k, src, dst)
	} else {
		sym, off, _ := strings.Cut(cnt, "+")
		o := 0
		if off != "" {
			fmt.Sscan(off, &o)
		}
		g.p("VPSRLVQ %s+%d(SB), %s, %s", sym, o+64, src, t0)
		g.p("VPSLLVQ %s+%d(SB), %s, %s", sym, o, src, dst)
	}
	g.p("VPSLLDQ $8, %s, %s", t0, t1) // low quadword's carry into the high one
	g.p("VPSRLDQ $8, %s, %s", t0, t0) // the high quadword's, to reduce
	g.p("VPCLMULQDQ $0x00, xtsPoly512<>(SB), %s, %s", t0, t0)
	g.p("VPTERNLOGQ $0x96, %s, %s, %s", t1, t0, dst)
}

// zMulClmul is zMulBits for small k (<= 8), multiplying lane l by the
// polynomial in the low quadword of lane l of the vector at mul. Where the
// AES rounds keep port 0 busy this is cheaper than zMulBits: ZMM bit shifts
// run only on port 0, with the AES unit, whereas carry-less multiplies and
// byte shifts run on port 5.
func (g *gen) zMulClmul(src, dst, mul string, t0, t1 string) {
	g.p("VPCLMULQDQ $0x01, %s(SB), %s, %s", mul, src, t0)  // high quadword * m
	g.p("VPCLMULQDQ $0x00, %s(SB), %s, %s", mul, src, dst) // low quadword * m
	g.p("VPSLLDQ $8, %s, %s", t0, t1)
	g.p("VPSRLDQ $8, %s, %s", t0, t0)
	g.p("VPCLMULQDQ $0x00, xtsPoly512<>(SB), %s, %s", t0, t0)
	g.p("VPTERNLOGQ $0x96, %s, %s, %s", t1, t0, dst)
}

// zTweaks sets Z8..Z15 to the 32 tweaks T*x^0..T*x^31 from T broadcast in
// all four lanes of Z0. Every value depends on T by a short chain (at most
// three multiplications), so the first AES round waits little.
//
// The registers hold each tweak xored with the last round key (Z30), so
// that the last round takes its key straight from the tweak register:
// fewer instructions on the vector ports, which the AES rounds share.
// zConsts must have run (zIteration and zStep rely on it).
func (g *gen) zTweaks() {
	g.zMulBits("Z0", "Z8", 0, "xtsLaneShift<>", "Z1", "Z2")     // [T, Tx, Tx^2, Tx^3]
	g.zMulBits("Z0", "Z9", 0, "xtsLaneShift<>+128", "Z3", "Z4") // [Tx^4 .. Tx^7], not from Z8: a shorter chain
	g.zMulBytesXor("Z8", "Z10", 1, "Z5", "Z30")
	g.zMulBytesXor("Z9", "Z11", 1, "Z6", "Z30")
	g.zMulBytesXor("Z8", "Z12", 2, "Z7", "Z30")
	g.zMulBytesXor("Z9", "Z13", 2, "Z1", "Z30")
	g.zMulBytesXor("Z8", "Z14", 3, "Z2", "Z30")
	g.zMulBytesXor("Z9", "Z15", 3, "Z3", "Z30")
	g.p("VPXORQ Z30, Z8, Z8")
	g.p("VPXORQ Z30, Z9, Z9")
}

// zConsts sets, once the keys are loaded, Z16 = key 0 ^ last key (the
// whitening of a block against a tweak register) and Z31 = last key * x^32
// ^ last key: (T ^ k) * x^32 ^ that = T * x^32 ^ k, the stepped register.
func (g *gen) zConsts() {
	g.zMulBytesXor("Z30", "Z31", 4, "Z0", "Z30")
	g.p("VPXORQ Z30, Z16, Z16")
}

// zStep advances the 32 tweaks by x^32 (to the next iteration), using the
// states as scratch.
func (g *gen) zStep() {
	for i := 0; i < 8; i++ {
		g.zMulBytesXor(fmt.Sprintf("Z%d", 8+i), fmt.Sprintf("Z%d", 8+i), 4, fmt.Sprintf("Z%d", i), "Z31")
	}
}

// ecbNoTweak as zIterationFrom's tw makes the pass plain ECB.
const ecbNoTweak = "ecb"

// ecbZMM: ECB encryption of n blocks (n a multiple of 4), 32 in flight,
// for the sector kernels' tweaks: at 3% of the blocks of a batch of
// 512-byte sectors the YMM ECB kernel's start-up on every 64-tweak chunk
// cost 6% of the time.
func (g *gen) ecbZMM(name, op string) {
	g.begin(name, 0, "ECB on n blocks (n a multiple of 4) with the 128-bit schedule xk.",
		"nr", "xk", "dst", "src", "n")
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 16)
	g.zLoadKeys("DX")
	l8, l1, done := g.newLabel("ze8"), g.newLabel("ze1"), g.newLabel("zedone")
	g.lbl(l8)
	g.p("CMPQ CX, $32")
	g.p("JB %s", l1)
	g.zIterationFrom(op, 8, ecbNoTweak, nil)
	g.p("ADDQ $512, SI")
	g.p("ADDQ $512, DI")
	g.p("SUBQ $32, CX")
	g.p("JMP %s", l8)
	g.lbl(l1)
	g.p("TESTQ CX, CX")
	g.p("JEQ %s", done)
	g.zIterationFrom(op, 1, ecbNoTweak, nil)
	g.p("ADDQ $64, SI")
	g.p("ADDQ $64, DI")
	g.p("SUBQ $4, CX")
	g.p("JMP %s", l1)
	g.lbl(done)
	g.zRet()
}

// zRet returns, clearing the key registers first: no Go code uses Z16..Z31,
// so round keys left there would stay until the next AVX-512 kernel runs
// (zero idioms, almost free); VZEROUPPER leaves X0..X15 as the other kernels do.
func (g *gen) zRet() {
	for r := 16; r <= 31; r++ {
		g.p("VPXORQ Z%d, Z%d, Z%d", r, r, r)
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// zTweaksTo writes the 32 tweaks of the sector whose encrypted tweak is at
// (tw) to the 512 bytes at buf, each xored with the last round key (Z30),
// with only Z8..Z15 as scratch, and returns the instructions instead of
// emitting them, for interleaving. Storing T ^ last key lets the last
// round take its key straight from memory and saves the vector ports an
// xor per register, ports the AES rounds share.
func zTweaksTo(tw, buf string) []string {
	s := &gen{}
	if tw != "" { // else T is in every lane of Z10 already
		s.p("VBROADCASTI32X4 (%s), Z10", tw)
	}
	s.zMulClmul("Z10", "Z8", "xtsLaneMul<>", "Z11", "Z12")
	s.p("VPXORQ Z30, Z8, Z11")
	s.p("VMOVDQU64 Z11, 0(%s)", buf)
	s.zMulClmul("Z8", "Z9", "xtsLaneMul<>+64", "Z13", "Z14")
	s.p("VPXORQ Z30, Z9, Z13")
	s.p("VMOVDQU64 Z13, 64(%s)", buf)
	outs := []string{"Z10", "Z12", "Z14", "Z10", "Z12", "Z14"}
	tmps := []string{"Z11", "Z13", "Z15", "Z11", "Z13", "Z15"}
	for j := 0; j < 6; j++ {
		s.zMulBytesXor([]string{"Z8", "Z9"}[j%2], outs[j], 1+j/2, tmps[j], "Z30")
		s.p("VMOVDQU64 %s, %d(%s)", outs[j], 128+64*j, buf)
	}
	return strings.Split(strings.TrimSpace(s.buf.String()), "\n")
}

// zStepTo returns the instructions that write the tweaks at cur times
// x^32 to next (both stored xored with the last key; Z16 = last key * x^32
// ^ last key, from zMemSetup), with only Z8..Z15 as scratch.
func zStepTo(cur, next string) []string {
	s := &gen{}
	for i := 0; i < 8; i++ {
		t, d := fmt.Sprintf("Z%d", 8+2*i%8), fmt.Sprintf("Z%d", 9+2*i%8)
		s.p("VPSRLDQ $12, %d(%s), %s", 64*i, cur, t)
		s.p("VPSLLDQ $4, %d(%s), %s", 64*i, cur, d)
		s.p("VPCLMULQDQ $0x00, xtsPoly512<>(SB), %s, %s", t, t)
		s.p("VPTERNLOGQ $0x96, Z16, %s, %s", t, d)
		s.p("VMOVDQU64 %s, %d(%s)", d, 64*i, next)
	}
	return strings.Split(strings.TrimSpace(s.buf.String()), "\n")
}

// zPipelined emits an 8-register iteration on the tweaks at R14 with the
// instructions of next spread over its rounds 9..2 (every key size runs
// them).
func (g *gen) zPipelined(op string, next []string) {
	g.zIterationFrom(op, 8, "*R14", func(b int) {
		if b < 2 {
			return
		}
		per := (len(next) + 7) / 8
		lo := (9 - b) * per
		for j := lo; j < lo+per && j < len(next); j++ {
			g.buf.WriteString(next[j] + "\n")
		}
	})
}

// zMemSetup loads the keys and sets the constants of the memory-tweak
// kernels (Z31 = key 0 ^ last key, Z16 = last key * x^32 ^ last key), and
// R14 and R9 to the two 512-byte tweak buffers of the frame.
func (g *gen) zMemSetup() {
	g.keyEnd("R11", "DX", "AX", 16)
	g.zLoadKeys("DX")
	g.p("VPXORQ Z16, Z30, Z31")
	g.zMulBytesXor("Z30", "Z16", 4, "Z1", "Z30")
	g.p("LEAQ 63(SP), R14")
	g.p("ANDQ $-64, R14")    // this iteration's tweaks
	g.p("LEAQ 512(R14), R9") // the next one's
}

// The sector kernel below keeps the 32 tweaks of an iteration in memory (stored
// xored with the last key) rather than in registers, and software-pipeline
// them: during iteration k's rounds they compute iteration k+1's into the
// other half of a stack buffer (stepped by x^32, or derived from the next
// sector's entry of tws), and the rounds read theirs as operands (the
// whitening VPTERNLOGQ; the last round's key). Left to out-of-order
// execution, that work is issued only after the iteration's last AES
// instruction, the scheduler full of AES rounds waiting for port 0, and the
// next iteration's first rounds wait for it: 4% of the AES unit on a
// 4096-byte unit, 25% on 512-byte sectors.

// xtsUnitZMM: one data unit of n whole blocks (n a multiple of 16), the
// tweak encryption included, 32 blocks per iteration and a 16-block tail.
// Unlike the sector kernel it keeps the tweaks in registers (Z8..Z15,
// stepped by zStep after each iteration): a unit is short, its first
// iteration cannot wait for a round trip through memory, and measured on
// 512- and 4096-byte units the pipelined form was slower (AES-128 at 4096
// bytes: 21.8 against 23.7 GB/s).
//
// With plain64 set the IV is the 64-bit little-endian number sector (the
// dm-crypt plain64 IV) passed by value: the caller's IV would otherwise be
// a 16-byte array written as a zeroing and an 8-byte store, which a 16-byte
// load cannot take from the store buffer; that load, the head of the chain
// every block waits for, would wait until those stores retire, after the
// previous unit's last instruction, and consecutive units could not overlap.
func (g *gen) xtsUnitZMM(name, op string, plain64 bool) {
	ivArg, ivDoc := "iv", "IV *iv"
	if plain64 {
		ivArg, ivDoc = "sector", "the plain64 IV of sector"
	}
	g.begin(name, 0, "XTS on n whole blocks (n a multiple of 16, >= 16) of a data unit with "+ivDoc+": the\ntweak is E(txk, IV) (txk: the tweak key's encryption schedule); *tweak receives\nthe tweak of block n. xk is the 128-bit schedule for op.",
		"nr", "xk", "tnr", "txk", "dst", "src", "n", ivArg, "tweak")
	g.arg("tnr", "R8")
	g.arg("txk", "R9")
	if !plain64 {
		g.arg("iv", "BX")
	}
	g.keyEnd("R10", "R9", "R8", 16)
	// The tweak is encrypted in all four lanes at once, with the tweak key
	// in the key registers for a moment: no lane broadcast (3 cycles) on
	// the path every block waits for. The data key's loads rename the
	// registers, so they need not wait for these rounds.
	g.zLoadKeysNr("R9", "R10", "R8")
	if plain64 {
		g.p("VPBROADCASTQ sector+%d(FP), Z0", g.args["sector"])
		g.p("VPXORQ Z1, Z1, Z1")
		g.p("VPUNPCKLQDQ Z1, Z0, Z0") // [sector, 0] in every lane
	} else {
		g.p("VBROADCASTI32X4 (BX), Z0")
	}
	g.p("VPXORQ Z16, Z0, Z0")
	{
		l10, l12 := g.newLabel("zt10"), g.newLabel("zt12")
		g.p("CMPQ R8, $12")
		g.p("JB %s", l10)
		g.p("JEQ %s", l12)
		g.p("VAESENC %s, Z0, Z0", zkey(13))
		g.p("VAESENC %s, Z0, Z0", zkey(12))
		g.lbl(l12)
		g.p("VAESENC %s, Z0, Z0", zkey(11))
		g.p("VAESENC %s, Z0, Z0", zkey(10))
		g.lbl(l10)
		for b := 9; b >= 1; b-- {
			g.p("VAESENC %s, Z0, Z0", zkey(b))
		}
		g.p("VAESENCLAST Z30, Z0, Z0")
	}
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.keyEnd("R11", "DX", "AX", 16)
	g.zLoadKeys("DX")
	g.p("VMOVDQA64 Z0, Z8") // zConsts clobbers Z0
	g.zConsts()
	g.p("VMOVDQA64 Z8, Z0")
	g.zTweaks()
	loop, tail, done := g.newLabel("zloop"), g.newLabel("ztail"), g.newLabel("zdone")
	g.lbl(loop)
	g.p("CMPQ CX, $32")
	g.p("JB %s", tail)
	g.zIteration(op, 8)
	g.zStep()
	g.p("ADDQ $512, SI")
	g.p("ADDQ $512, DI")
	g.p("SUBQ $32, CX")
	g.p("JMP %s", loop)
	g.lbl(tail)
	g.arg("tweak", "BX")
	g.p("TESTQ CX, CX")
	g.p("JEQ %s", done)
	g.zIteration(op, 4)
	g.p("VPXORQ Z30, Z12, Z12")
	g.p("VMOVDQU X12, (BX)")
	g.zRet()
	g.lbl(done)
	g.p("VPXORQ Z30, Z8, Z8")
	g.p("VMOVDQU X8, (BX)")
	g.zRet()
}

// xtsSectorsZMM: consecutive sectors of 512*ips bytes whose encrypted
// tweaks are at tws, one 32-block iteration per 512 bytes; the iteration
// before a sector's first derives that sector's tweaks from its entry (the
// last one reads the spare entry and discards the result).
func (g *gen) xtsSectorsZMM(name, op string) {
	g.begin(name, 1024+64, "XTS over n/(32*ips) consecutive sectors of 512*ips bytes (ips >= 1); tws holds the\nencrypted tweak of every sector followed by one spare readable entry. xk is the\n128-bit schedule for op.",
		"nr", "xk", "dst", "src", "n", "ips", "tws")
	g.arg("nr", "AX")
	g.arg("xk", "DX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "CX")
	g.arg("tws", "R13")
	g.arg("ips", "R12")
	g.zMemSetup()
	for _, l := range zTweaksTo("R13", "R14") {
		g.buf.WriteString(l + "\n")
	}
	g.p("ADDQ $16, R13")
	g.p("MOVQ R12, R10") // iterations left in this sector
	loop, derive, next := g.newLabel("zsloop"), g.newLabel("zsder"), g.newLabel("zsnext")
	g.lbl(loop)
	g.p("CMPQ R10, $1")
	g.p("JEQ %s", derive)
	g.zPipelined(op, zStepTo("R14", "R9"))
	g.p("DECQ R10")
	g.p("JMP %s", next)
	g.lbl(derive)
	g.zPipelined(op, zTweaksTo("R13", "R9"))
	g.p("ADDQ $16, R13")
	g.p("MOVQ R12, R10")
	g.lbl(next)
	g.p("XCHGQ R14, R9")
	g.p("ADDQ $512, SI")
	g.p("ADDQ $512, DI")
	g.p("SUBQ $32, CX")
	g.p("JNE %s", loop)
	// The tweaks are as secret as the data they mask: clear the buffer.
	g.p("VPXORQ Z0, Z0, Z0")
	g.p("LEAQ 63(SP), R14")
	g.p("ANDQ $-64, R14")
	for i := 0; i < 16; i++ {
		g.p("VMOVDQU64 Z0, %d(R14)", 64*i)
	}
	g.zRet()
}

func (g *gen) dataZMM() {
	g.buf.WriteString(`
// 0x87 in the low quadword of each of four 128-bit lanes, for VPCLMULQDQ on ZMM.
DATA xtsPoly512<>+0(SB)/8, $0x87
DATA xtsPoly512<>+8(SB)/8, $0
DATA xtsPoly512<>+16(SB)/8, $0x87
DATA xtsPoly512<>+24(SB)/8, $0
DATA xtsPoly512<>+32(SB)/8, $0x87
DATA xtsPoly512<>+40(SB)/8, $0
DATA xtsPoly512<>+48(SB)/8, $0x87
DATA xtsPoly512<>+56(SB)/8, $0
GLOBL xtsPoly512<>(SB), RODATA|NOPTR, $64

// Per-quadword shift counts l (lane l = 0..3), then 64-l: lane l of
// T*x^l from T broadcast into every lane; then the same for l = 4..7.
DATA xtsLaneShift<>+0(SB)/8, $0
DATA xtsLaneShift<>+8(SB)/8, $0
DATA xtsLaneShift<>+16(SB)/8, $1
DATA xtsLaneShift<>+24(SB)/8, $1
DATA xtsLaneShift<>+32(SB)/8, $2
DATA xtsLaneShift<>+40(SB)/8, $2
DATA xtsLaneShift<>+48(SB)/8, $3
DATA xtsLaneShift<>+56(SB)/8, $3
DATA xtsLaneShift<>+64(SB)/8, $64
DATA xtsLaneShift<>+72(SB)/8, $64
DATA xtsLaneShift<>+80(SB)/8, $63
DATA xtsLaneShift<>+88(SB)/8, $63
DATA xtsLaneShift<>+96(SB)/8, $62
DATA xtsLaneShift<>+104(SB)/8, $62
DATA xtsLaneShift<>+112(SB)/8, $61
DATA xtsLaneShift<>+120(SB)/8, $61
DATA xtsLaneShift<>+128(SB)/8, $4
DATA xtsLaneShift<>+136(SB)/8, $4
DATA xtsLaneShift<>+144(SB)/8, $5
DATA xtsLaneShift<>+152(SB)/8, $5
DATA xtsLaneShift<>+160(SB)/8, $6
DATA xtsLaneShift<>+168(SB)/8, $6
DATA xtsLaneShift<>+176(SB)/8, $7
DATA xtsLaneShift<>+184(SB)/8, $7
DATA xtsLaneShift<>+192(SB)/8, $60
DATA xtsLaneShift<>+200(SB)/8, $60
DATA xtsLaneShift<>+208(SB)/8, $59
DATA xtsLaneShift<>+216(SB)/8, $59
DATA xtsLaneShift<>+224(SB)/8, $58
DATA xtsLaneShift<>+232(SB)/8, $58
DATA xtsLaneShift<>+240(SB)/8, $57
DATA xtsLaneShift<>+248(SB)/8, $57
GLOBL xtsLaneShift<>(SB), RODATA|NOPTR, $256

// x^l in lane l (l = 0..3), then x^4 in every lane, for zMulClmul.
DATA xtsLaneMul<>+0(SB)/8, $1
DATA xtsLaneMul<>+8(SB)/8, $0
DATA xtsLaneMul<>+16(SB)/8, $2
DATA xtsLaneMul<>+24(SB)/8, $0
DATA xtsLaneMul<>+32(SB)/8, $4
DATA xtsLaneMul<>+40(SB)/8, $0
DATA xtsLaneMul<>+48(SB)/8, $8
DATA xtsLaneMul<>+56(SB)/8, $0
DATA xtsLaneMul<>+64(SB)/8, $16
DATA xtsLaneMul<>+72(SB)/8, $0
DATA xtsLaneMul<>+80(SB)/8, $16
DATA xtsLaneMul<>+88(SB)/8, $0
DATA xtsLaneMul<>+96(SB)/8, $16
DATA xtsLaneMul<>+104(SB)/8, $0
DATA xtsLaneMul<>+112(SB)/8, $16
DATA xtsLaneMul<>+120(SB)/8, $0
GLOBL xtsLaneMul<>(SB), RODATA|NOPTR, $128
`)
}

// genXTSZMM emits the data and every kernel of this file.
func (g *gen) genXTSZMM() {
	g.dataZMM()
	g.xtsUnitZMM("xtsEncUnitZMM", "AESENC", false)
	g.xtsUnitZMM("xtsDecUnitZMM", "AESDEC", false)
	g.xtsUnitZMM("xtsEncUnit64ZMM", "AESENC", true)
	g.xtsUnitZMM("xtsDecUnit64ZMM", "AESDEC", true)
	g.xtsSectorsZMM("xtsEncSectorsZMM", "AESENC")
	g.xtsSectorsZMM("xtsDecSectorsZMM", "AESDEC")
	g.ecbZMM("encECBZMM", "AESENC")
}
