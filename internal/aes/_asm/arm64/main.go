// Command arm64 generates ../../aes_arm64.s, the ARMv8 Crypto Extensions
// kernels of package aes ("ce"). Like the amd64 generator in .., it is a
// plain text emitter: each helper prints a fixed instruction sequence, so
// the structure of every kernel is visible here.
//
// Run with: cd internal/aes/_asm/arm64 && go run . -out ../../aes_arm64.s
//
// Register use, common to every kernel:
//
//   - V17..V31 hold the round keys of the current schedule, the last key
//     always in V31: round key j of an nr-round schedule is in V(31-nr+j),
//     so AES-128 uses V21..V31, AES-192 V19..V31 and AES-256 V17..V31, and
//     the three key sizes share one instruction stream that enters it 0, 2
//     or 4 rounds in (as the amd64 kernels address keys from the last).
//   - V0..V7 are the states of up to 8 blocks in flight; V8..V15 the XTS
//     tweaks, the CBC ciphertext kept for chaining, or the multi-buffer
//     plaintext; V16 a constant.
//   - A round is AESE (AddRoundKey, SubBytes, ShiftRows) then AESMC
//     (MixColumns) on each state in turn, the two adjacent so that the
//     cores that fuse the pair do. The last round has no AESMC and the last
//     key is a plain EOR. Decryption uses AESD/AESIMC with the equivalent
//     inverse cipher's schedule, the same bytes the amd64 AESDEC kernels
//     take (Block.xk).
//
// General registers: R18 (platform), R26..R30 are never used.
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
}

func (g *gen) p(format string, a ...any) {
	fmt.Fprintf(&g.buf, "\t"+format+"\n", a...)
}

func (g *gen) lbl(l string) { fmt.Fprintf(&g.buf, "%s:\n", l) }

func (g *gen) newLabel(prefix string) string {
	g.label++
	return fmt.Sprintf("%s_%d", prefix, g.label)
}

// begin starts a leaf function whose arguments are all 8 bytes wide.
func (g *gen) begin(name, doc string, args ...string) {
	g.args = map[string]int{}
	for i, a := range args {
		g.args[a] = 8 * i
	}
	fmt.Fprintf(&g.buf, "\n// func %s(%s)\n", name, strings.Join(args, ", "))
	for _, l := range strings.Split(doc, "\n") {
		fmt.Fprintf(&g.buf, "// %s\n", l)
	}
	fmt.Fprintf(&g.buf, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", name, 8*len(args))
}

func (g *gen) arg(name, reg string) {
	off, ok := g.args[name]
	if !ok {
		log.Fatalf("unknown arg %s", name)
	}
	g.p("MOVD %s+%d(FP), %s", name, off, reg)
}

func v(i int) string { return fmt.Sprintf("V%d", i) }

func vs(from, n int) []string {
	var r []string
	for i := 0; i < n; i++ {
		r = append(r, v(from+i))
	}
	return r
}

// list formats registers as a VLD1/VST1 list of 16-byte lanes.
func list(regs []string) string {
	var s []string
	for _, r := range regs {
		s = append(s, r+".B16")
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// key is the register holding the round key back rounds before the last.
func key(back int) string { return v(31 - back) }

const lastKey = "V31"

// loadKeys loads the round keys of an nr-round schedule at k (advanced)
// into V(31-nr)..V31.
func (g *gen) loadKeys(k, nr string) {
	l10, l12 := g.newLabel("keys10"), g.newLabel("keys12")
	g.p("CMP $12, %s", nr)
	g.p("BLT %s", l10)
	g.p("BEQ %s", l12)
	g.p("VLD1.P 32(%s), %s", k, list(vs(17, 2)))
	g.lbl(l12)
	g.p("VLD1.P 32(%s), %s", k, list(vs(19, 2)))
	g.lbl(l10)
	g.p("VLD1.P 64(%s), %s", k, list(vs(21, 4)))
	g.p("VLD1.P 64(%s), %s", k, list(vs(25, 4)))
	g.p("VLD1 (%s), %s", k, list(vs(29, 3)))
}

// rounds emits the nr AESE (or AESD) rounds on the states, AESMC (AESIMC)
// after all but the last; the caller adds the last key (V31). nr is a
// register holding 10, 12 or 14. With first set, state i's first round
// takes first[i] as its round key instead of round key 0.
func (g *gen) rounds(enc bool, states []string, nr string, first []string) {
	op, mc := "AESE", "AESMC"
	if !enc {
		op, mc = "AESD", "AESIMC"
	}
	round := func(back int, useFirst bool) {
		for i, s := range states {
			k := key(back)
			if useFirst {
				k = first[i]
			}
			g.p("%s %s.B16, %s.B16", op, k, s)
			if back != 1 {
				g.p("%s %s.B16, %s.B16", mc, s, s)
			}
		}
	}
	l10, l12 := g.newLabel("r10"), g.newLabel("r12")
	g.p("CMP $12, %s", nr)
	g.p("BLT %s", l10)
	g.p("BEQ %s", l12)
	if first == nil {
		round(14, false)
		round(13, false)
		g.lbl(l12)
		round(12, false)
		round(11, false)
		g.lbl(l10)
		round(10, false)
	} else {
		l11, l9 := g.newLabel("r11"), g.newLabel("r9")
		round(14, true)
		round(13, false)
		round(12, false)
		g.p("B %s", l11)
		g.lbl(l12)
		round(12, true)
		g.lbl(l11)
		round(11, false)
		round(10, false)
		g.p("B %s", l9)
		g.lbl(l10)
		round(10, true)
		g.lbl(l9)
	}
	for back := 9; back >= 1; back-- {
		round(back, false)
	}
}

// xorLast adds the last round key to the states.
func (g *gen) xorLast(states []string) {
	for _, s := range states {
		g.p("VEOR %s.B16, %s.B16, %s.B16", lastKey, s, s)
	}
}

// encryptOne emits dst = E(*src) for one block with the schedule at k
// (advanced) of nr rounds, leaving the schedule in V17..V31.
func (g *gen) encryptOne(dst, src, k, nr string) {
	g.loadKeys(k, nr)
	g.p("VLD1 (%s), [%s.B16]", src, dst)
	g.rounds(true, []string{dst}, nr, nil)
	g.xorLast([]string{dst})
}

func (g *gen) block(name string, enc bool) {
	g.begin(name, "One block. xk is the encryption or the decryption schedule.", "nr", "xk", "dst", "src")
	g.arg("nr", "R9")
	g.arg("xk", "R10")
	g.arg("dst", "R11")
	g.arg("src", "R12")
	g.loadKeys("R10", "R9")
	g.p("VLD1 (R12), [V0.B16]")
	g.rounds(enc, []string{"V0"}, "R9", nil)
	g.xorLast([]string{"V0"})
	g.p("VST1 [V0.B16], (R11)")
	g.p("RET")
}

func (g *gen) ecb(name string, enc bool) {
	g.begin(name, "n blocks, 8 in flight.", "nr", "xk", "dst", "src", "n")
	g.arg("nr", "R9")
	g.arg("xk", "R10")
	g.arg("dst", "R11")
	g.arg("src", "R12")
	g.arg("n", "R13")
	g.loadKeys("R10", "R9")
	loop, tail, one, done := g.newLabel("loop8"), g.newLabel("tail"), g.newLabel("one"), g.newLabel("done")
	g.p("CMP $8, R13")
	g.p("BLT %s", tail)
	g.lbl(loop)
	g.p("VLD1.P 64(R12), %s", list(vs(0, 4)))
	g.p("VLD1.P 64(R12), %s", list(vs(4, 4)))
	g.rounds(enc, vs(0, 8), "R9", nil)
	g.xorLast(vs(0, 8))
	g.p("VST1.P %s, 64(R11)", list(vs(0, 4)))
	g.p("VST1.P %s, 64(R11)", list(vs(4, 4)))
	g.p("SUB $8, R13")
	g.p("CMP $8, R13")
	g.p("BGE %s", loop)
	g.lbl(tail)
	g.p("CBZ R13, %s", done)
	g.lbl(one)
	g.p("VLD1.P 16(R12), [V0.B16]")
	g.rounds(enc, []string{"V0"}, "R9", nil)
	g.xorLast([]string{"V0"})
	g.p("VST1.P [V0.B16], 16(R11)")
	g.p("SUBS $1, R13")
	g.p("BNE %s", one)
	g.lbl(done)
	g.p("RET")
}

// essivIV leaves E(ivxk, *iv) in dst, using the general registers R14,
// R15 and R16.
func (g *gen) essivIV(dst string) {
	g.arg("ivnr", "R14")
	g.arg("ivxk", "R15")
	g.arg("iv", "R16")
	g.encryptOne(dst, "R16", "R15", "R14")
}

// cbcEnc: serial CBC encryption. The chain is kept as the state before the
// last key (s = c ^ k_last), and each plaintext block enters as the first
// round's key operand already XORed with k0 ^ k_last, so the serial path is
// the AES instructions alone.
func (g *gen) cbcEnc(name string, essiv bool) {
	if essiv {
		g.begin(name, "CBC encryption of n > 0 blocks with IV = E(ivxk, *iv); *iv is not modified.",
			"nr", "xk", "ivnr", "ivxk", "dst", "src", "n", "iv")
		g.essivIV("V0")
	} else {
		g.begin(name, "CBC encryption of n > 0 blocks; *iv is updated to the last ciphertext block.",
			"nr", "xk", "dst", "src", "n", "iv")
		g.arg("iv", "R16")
		g.p("VLD1 (R16), [V0.B16]")
	}
	g.arg("nr", "R9")
	g.arg("xk", "R10")
	g.arg("dst", "R11")
	g.arg("src", "R12")
	g.arg("n", "R13")
	g.p("VLD1 (R10), [V16.B16]")
	g.loadKeys("R10", "R9")
	g.p("VEOR %s.B16, V16.B16, V16.B16", lastKey)
	g.p("VEOR %s.B16, V0.B16, V0.B16", lastKey)
	loop := g.newLabel("loop")
	g.lbl(loop)
	g.p("VLD1.P 16(R12), [V1.B16]")
	g.p("VEOR V16.B16, V1.B16, V1.B16")
	g.rounds(true, []string{"V0"}, "R9", []string{"V1"})
	g.p("VEOR %s.B16, V0.B16, V2.B16", lastKey)
	g.p("VST1.P [V2.B16], 16(R11)")
	g.p("SUBS $1, R13")
	g.p("BNE %s", loop)
	if !essiv {
		g.p("VST1 [V2.B16], (R16)")
	}
	g.p("RET")
}

// cbcDec: CBC decryption, 8 blocks in flight; the chaining value in V16,
// the 8 ciphertext blocks kept in V8..V15. Every block of a group is
// loaded before the first store, so dst == src works.
func (g *gen) cbcDec(name string, essiv bool) {
	if essiv {
		g.begin(name, "CBC decryption of n > 0 blocks with IV = E(ivxk, *iv); *iv is not modified.\nxk is the decryption schedule, ivxk an encryption schedule.",
			"nr", "xk", "ivnr", "ivxk", "dst", "src", "n", "iv")
		g.essivIV("V16")
	} else {
		g.begin(name, "CBC decryption of n > 0 blocks, 8 in flight; *iv is updated to the last ciphertext block.",
			"nr", "xk", "dst", "src", "n", "iv")
		g.arg("iv", "R16")
		g.p("VLD1 (R16), [V16.B16]")
	}
	g.arg("nr", "R9")
	g.arg("xk", "R10")
	g.arg("dst", "R11")
	g.arg("src", "R12")
	g.arg("n", "R13")
	g.loadKeys("R10", "R9")
	loop, tail, one, done := g.newLabel("loop8"), g.newLabel("tail"), g.newLabel("one"), g.newLabel("done")
	g.p("CMP $8, R13")
	g.p("BLT %s", tail)
	g.lbl(loop)
	g.p("VLD1 (R12), %s", list(vs(0, 4)))
	g.p("ADD $64, R12, R17")
	g.p("VLD1 (R17), %s", list(vs(4, 4)))
	g.p("VLD1.P 64(R12), %s", list(vs(8, 4)))
	g.p("VLD1.P 64(R12), %s", list(vs(12, 4)))
	g.rounds(false, vs(0, 8), "R9", nil)
	g.xorLast(vs(0, 8))
	g.p("VEOR V16.B16, V0.B16, V0.B16")
	for i := 1; i < 8; i++ {
		g.p("VEOR V%d.B16, V%d.B16, V%d.B16", 7+i, i, i)
	}
	g.p("VORR V15.B16, V15.B16, V16.B16")
	g.p("VST1.P %s, 64(R11)", list(vs(0, 4)))
	g.p("VST1.P %s, 64(R11)", list(vs(4, 4)))
	g.p("SUB $8, R13")
	g.p("CMP $8, R13")
	g.p("BGE %s", loop)
	g.lbl(tail)
	g.p("CBZ R13, %s", done)
	g.lbl(one)
	g.p("VLD1.P 16(R12), [V8.B16]")
	g.p("VORR V8.B16, V8.B16, V0.B16")
	g.rounds(false, []string{"V0"}, "R9", nil)
	g.xorLast([]string{"V0"})
	g.p("VEOR V16.B16, V0.B16, V0.B16")
	g.p("VORR V8.B16, V8.B16, V16.B16")
	g.p("VST1.P [V0.B16], 16(R11)")
	g.p("SUBS $1, R13")
	g.p("BNE %s", one)
	g.lbl(done)
	if !essiv {
		g.p("VST1 [V16.B16], (R16)")
	}
	g.p("RET")
}

// Lane pointers of the multi-buffer kernels.
var (
	srcLane = []string{"R0", "R1", "R2", "R3", "R4", "R5", "R6", "R7"}
	dstLane = []string{"R8", "R17", "R19", "R20", "R21", "R22", "R23", "R24"}
)

// cbcMB: multi-buffer CBC encryption of L consecutive sectors of ss bytes,
// lane j on sector j, so the L AESE of a round are independent. Chains as
// in cbcEnc (s = c ^ k_last, plaintext ^ k0 ^ k_last as the first key).
// With essiv the L IVs are encrypted with ivxk first, 8 in flight.
func (g *gen) cbcMB(name string, L int, essiv bool) {
	doc := fmt.Sprintf("CBC encryption of %d consecutive sectors of ss bytes (ss > 0, a multiple of 16),\none lane per sector; ivs holds the %d IVs", L, L)
	args := []string{"nr", "xk", "dst", "src", "ss", "ivs"}
	if essiv {
		doc += ", which are encrypted with ivxk first (ESSIV); ivs is not modified."
		args = append(args, "ivnr", "ivxk")
	} else {
		doc += "."
	}
	g.begin(name, doc, args...)
	g.arg("nr", "R9")
	g.arg("xk", "R10")
	g.arg("dst", srcLane[0]) // moved to dstLane[0] below
	g.p("MOVD %s, %s", srcLane[0], dstLane[0])
	g.arg("src", srcLane[0])
	g.arg("ss", "R13")
	g.arg("ivs", "R14")
	for j := 1; j < L; j++ {
		g.p("ADD R13, %s, %s", srcLane[j-1], srcLane[j])
		g.p("ADD R13, %s, %s", dstLane[j-1], dstLane[j])
	}
	g.p("LSR $4, R13, R15")
	state := vs(0, L)
	for j := 0; j < L; j += 4 {
		n := min(4, L-j)
		if j+n < L {
			g.p("VLD1.P %d(R14), %s", 16*n, list(vs(j, n)))
		} else {
			g.p("VLD1 (R14), %s", list(vs(j, n)))
		}
	}
	if essiv {
		g.arg("ivnr", "R16")
		g.arg("ivxk", "R25")
		g.loadKeys("R25", "R16")
		g.rounds(true, state, "R16", nil)
		g.xorLast(state)
	}
	g.p("VLD1 (R10), [V16.B16]")
	g.loadKeys("R10", "R9")
	g.p("VEOR %s.B16, V16.B16, V16.B16", lastKey)
	g.xorLast(state)
	pt := vs(8, L)
	loop := g.newLabel("loop")
	g.lbl(loop)
	for j := 0; j < L; j++ {
		g.p("VLD1.P 16(%s), [%s.B16]", srcLane[j], pt[j])
	}
	for j := 0; j < L; j++ {
		g.p("VEOR V16.B16, %s.B16, %s.B16", pt[j], pt[j])
	}
	g.rounds(true, state, "R9", pt)
	for j := 0; j < L; j++ {
		g.p("VEOR %s.B16, %s.B16, %s.B16", lastKey, state[j], pt[j])
	}
	for j := 0; j < L; j++ {
		g.p("VST1.P [%s.B16], 16(%s)", pt[j], dstLane[j])
	}
	g.p("SUBS $1, R15")
	g.p("BNE %s", loop)
	g.p("RET")
}

// mulx8 sets t = t·x^8 in GF(2^128) (XTS's little-endian convention):
// rotating the bytes up by one is the shift by 8 bits plus the top byte
// b times 1 in byte 0, and PMULL adds b times 0x86, the rest of the
// reduction by x^128 = x^7+x^2+x+1. V16 holds 0x86 in its upper half.
func (g *gen) mulx8(t, tmp string) {
	g.p("VUSHR $56, %s.D2, %s.D2", t, tmp)
	g.p("VPMULL2 V16.D2, %s.D2, %s.Q1", tmp, tmp)
	g.p("VEXT $15, %s.B16, %s.B16, %s.B16", t, t, t)
	g.p("VEOR %s.B16, %s.B16, %s.B16", tmp, t, t)
}

// mulxk sets dst = src·x^k for 1 <= k <= 7 (dst may be src): each 64-bit
// half shifted by k, the top k bits of the low half carried into the high
// half, and the top k bits h of the high half reduced into the low half as
// h times 1 (the swapped carry) plus h times 0x86 (PMULL).
func (g *gen) mulxk(src, dst string, k int, t0, t1 string) {
	g.p("VUSHR $%d, %s.D2, %s.D2", 64-k, src, t0)
	g.p("VSHL $%d, %s.D2, %s.D2", k, src, dst)
	g.p("VEXT $8, %s.B16, %s.B16, %s.B16", t0, t0, t1)
	g.p("VEOR %s.B16, %s.B16, %s.B16", t1, dst, dst)
	g.p("VPMULL2 V16.D2, %s.D2, %s.Q1", t0, t1)
	g.p("VEOR %s.B16, %s.B16, %s.B16", t1, dst, dst)
}

// xts: XTS on n whole blocks, 8 in flight, tweaks T..T·x^7 in V8..V15;
// after each group every tweak advances by x^8 independently, so the loop
// carries a chain of one multiplication, not eight. With unit the first
// tweak is E(txk, *iv) (the data unit's IV); otherwise it is read from
// *tweak. Either way *tweak receives the tweak of the block after the last.
func (g *gen) xts(name string, enc, unit bool) {
	if unit {
		g.begin(name, "XTS on n > 0 whole blocks of one data unit: the tweak is E(txk, *iv) (tnr rounds);\n*tweak receives the tweak of the next block.",
			"nr", "xk", "tnr", "txk", "dst", "src", "n", "iv", "tweak")
		g.arg("tnr", "R14")
		g.arg("txk", "R15")
		g.arg("iv", "R16")
		g.encryptOne("V8", "R16", "R15", "R14")
	} else {
		g.begin(name, "XTS on n > 0 whole blocks with the tweak at *tweak, which receives the tweak of\nthe next block.",
			"nr", "xk", "dst", "src", "n", "tweak")
		g.arg("tweak", "R17")
		g.p("VLD1 (R17), [V8.B16]")
	}
	g.arg("nr", "R9")
	g.arg("xk", "R10")
	g.arg("dst", "R11")
	g.arg("src", "R12")
	g.arg("n", "R13")
	g.loadKeys("R10", "R9")
	g.p("MOVD $0x86, R0")
	g.p("VEOR V16.B16, V16.B16, V16.B16")
	g.p("VMOV R0, V16.D[1]")
	loop, tail, one, done := g.newLabel("loop8"), g.newLabel("tail"), g.newLabel("one"), g.newLabel("done")
	g.p("CMP $8, R13")
	g.p("BLT %s", tail)
	for k := 1; k < 8; k++ {
		g.mulxk("V8", v(8+k), k, "V0", "V1")
	}
	g.lbl(loop)
	g.p("VLD1.P 64(R12), %s", list(vs(0, 4)))
	g.p("VLD1.P 64(R12), %s", list(vs(4, 4)))
	for i := 0; i < 8; i++ {
		g.p("VEOR V%d.B16, V%d.B16, V%d.B16", 8+i, i, i)
	}
	g.rounds(enc, vs(0, 8), "R9", nil)
	for i := 0; i < 8; i++ {
		g.p("VEOR %s.B16, V%d.B16, V%d.B16", lastKey, i, i)
		g.p("VEOR V%d.B16, V%d.B16, V%d.B16", 8+i, i, i)
	}
	g.p("VST1.P %s, 64(R11)", list(vs(0, 4)))
	g.p("VST1.P %s, 64(R11)", list(vs(4, 4)))
	for i := 0; i < 8; i++ {
		g.mulx8(v(8+i), v(i))
	}
	g.p("SUB $8, R13")
	g.p("CMP $8, R13")
	g.p("BGE %s", loop)
	g.lbl(tail)
	g.p("CBZ R13, %s", done)
	g.lbl(one)
	g.p("VLD1.P 16(R12), [V0.B16]")
	g.p("VEOR V8.B16, V0.B16, V0.B16")
	g.rounds(enc, []string{"V0"}, "R9", nil)
	g.xorLast([]string{"V0"})
	g.p("VEOR V8.B16, V0.B16, V0.B16")
	g.p("VST1.P [V0.B16], 16(R11)")
	g.mulxk("V8", "V8", 1, "V1", "V2")
	g.p("SUBS $1, R13")
	g.p("BNE %s", one)
	g.lbl(done)
	if unit {
		g.arg("tweak", "R17")
	}
	g.p("VST1 [V8.B16], (R17)")
	g.p("RET")
}

func main() {
	out := flag.String("out", "../../aes_arm64.s", "output file")
	flag.Parse()
	g := &gen{}
	g.buf.WriteString("// Code generated by internal/aes/_asm/arm64. DO NOT EDIT.\n\n//go:build arm64 && !purego\n\n#include \"textflag.h\"\n")
	g.block("encBlockCE", true)
	g.block("decBlockCE", false)
	g.ecb("encECBCE", true)
	g.ecb("decECBCE", false)
	g.cbcEnc("encCBCCE", false)
	g.cbcEnc("encESSIVCBCCE", true)
	g.cbcDec("decCBCCE", false)
	g.cbcDec("decESSIVCBCCE", true)
	g.cbcMB("encCBCMB8CE", 8, false)
	g.cbcMB("encCBCMB4CE", 4, false)
	g.cbcMB("encCBCMB2CE", 2, false)
	g.cbcMB("encESSIVCBCMB8CE", 8, true)
	g.xts("xtsEncCE", true, false)
	g.xts("xtsDecCE", false, false)
	g.xts("xtsEncUnitCE", true, true)
	g.xts("xtsDecUnitCE", false, true)
	if err := os.WriteFile(*out, g.buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
