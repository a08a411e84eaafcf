//go:build amd64 && gc && !purego

#include "textflag.h"

// The Argon2 compression function G (RFC 9106 section 3.5) in AVX2.
//
// A row or column of the 1 KiB block is 16 words, the 4x4 matrix of one
// BLAKE2b round: a, b, c and d are its rows, one YMM register each, so
// one GB step computes the four column (then, after rotating b, c and d,
// the four diagonal) G functions at once. Two matrices go through the
// rounds together to keep both multipliers busy.
//
// Rows of the block are 16 consecutive words. Column i is the 16-byte
// pairs at byte 16i of each row (rows are 128 bytes apart), so a holds
// the pairs of rows 0 and 1, b of rows 2 and 3, and so on.

DATA ·rot24<>+0x00(SB)/8, $0x0201000706050403
DATA ·rot24<>+0x08(SB)/8, $0x0a09080f0e0d0c0b
DATA ·rot24<>+0x10(SB)/8, $0x0201000706050403
DATA ·rot24<>+0x18(SB)/8, $0x0a09080f0e0d0c0b
GLOBL ·rot24<>(SB), (NOPTR+RODATA), $32

DATA ·rot16<>+0x00(SB)/8, $0x0100070605040302
DATA ·rot16<>+0x08(SB)/8, $0x09080f0e0d0c0b0a
DATA ·rot16<>+0x10(SB)/8, $0x0100070605040302
DATA ·rot16<>+0x18(SB)/8, $0x09080f0e0d0c0b0a
GLOBL ·rot16<>(SB), (NOPTR+RODATA), $32

// a = a + b + 2*lo32(a)*lo32(b), lane by lane; t is clobbered.
#define FBLAMKA(a, b, t) \
	VPMULUDQ b, a, t \
	VPADDQ   b, a, a \
	VPADDQ   t, t, t \
	VPADDQ   t, a, a

// GB on two matrices; Y14 and Y15 hold the byte shuffles that rotate
// each word right by 24 and 16 bits.
#define GB2(a0, b0, c0, d0, a1, b1, c1, d1, t0, t1) \
	FBLAMKA(a0, b0, t0); FBLAMKA(a1, b1, t1) \
	VPXOR a0, d0, d0; VPXOR a1, d1, d1 \
	VPSHUFD $0xb1, d0, d0; VPSHUFD $0xb1, d1, d1 \
	FBLAMKA(c0, d0, t0); FBLAMKA(c1, d1, t1) \
	VPXOR c0, b0, b0; VPXOR c1, b1, b1 \
	VPSHUFB Y14, b0, b0; VPSHUFB Y14, b1, b1 \
	FBLAMKA(a0, b0, t0); FBLAMKA(a1, b1, t1) \
	VPXOR a0, d0, d0; VPXOR a1, d1, d1 \
	VPSHUFB Y15, d0, d0; VPSHUFB Y15, d1, d1 \
	FBLAMKA(c0, d0, t0); FBLAMKA(c1, d1, t1) \
	VPXOR c0, b0, b0; VPXOR c1, b1, b1 \
	VPADDQ b0, b0, t0; VPADDQ b1, b1, t1 \
	VPSRLQ $63, b0, b0; VPSRLQ $63, b1, b1 \
	VPXOR t0, b0, b0; VPXOR t1, b1, b1

// P on two matrices held in Y0-Y3 and Y4-Y7: GB on the columns, then on
// the diagonals (b, c, d rotated left by one, two, three words).
#define P2 \
	GB2(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9) \
	VPERMQ $0x39, Y1, Y1; VPERMQ $0x39, Y5, Y5 \
	VPERMQ $0x4e, Y2, Y2; VPERMQ $0x4e, Y6, Y6 \
	VPERMQ $0x93, Y3, Y3; VPERMQ $0x93, Y7, Y7 \
	GB2(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9) \
	VPERMQ $0x93, Y1, Y1; VPERMQ $0x93, Y5, Y5 \
	VPERMQ $0x4e, Y2, Y2; VPERMQ $0x4e, Y6, Y6 \
	VPERMQ $0x39, Y3, Y3; VPERMQ $0x39, Y7, Y7

// Y = the column pairs at lo and hi of base (hi = lo + 128, the next row).
#define LOADCOL(base, lo, hi, Y, X) \
	VMOVDQU lo(base), X \
	VINSERTI128 $1, hi(base), Y, Y

#define STORECOL(base, lo, hi, Y, X) \
	VMOVDQU X, lo(base) \
	VEXTRACTI128 $1, Y, hi(base)

// Y ^= the column pairs of x (SI) and y (DX), and of out (DI) with XOR.
#define MIXCOL(lo, hi, Y) \
	LOADCOL(SI, lo, hi, Y10, X10) \
	LOADCOL(DX, lo, hi, Y11, X11) \
	VPXOR Y10, Y, Y \
	VPXOR Y11, Y, Y

#define MIXCOLXOR(lo, hi, Y) \
	MIXCOL(lo, hi, Y) \
	LOADCOL(DI, lo, hi, Y12, X12) \
	VPXOR Y12, Y, Y

// Load columns i and i+1 of q (BX) into Y0-Y3 and Y4-Y7.
#define LOADCOLS \
	LOADCOL(BX, 0, 128, Y0, X0) \
	LOADCOL(BX, 256, 384, Y1, X1) \
	LOADCOL(BX, 512, 640, Y2, X2) \
	LOADCOL(BX, 768, 896, Y3, X3) \
	LOADCOL(BX, 16, 144, Y4, X4) \
	LOADCOL(BX, 272, 400, Y5, X5) \
	LOADCOL(BX, 528, 656, Y6, X6) \
	LOADCOL(BX, 784, 912, Y7, X7)

#define STORECOLS \
	STORECOL(DI, 0, 128, Y0, X0) \
	STORECOL(DI, 256, 384, Y1, X1) \
	STORECOL(DI, 512, 640, Y2, X2) \
	STORECOL(DI, 768, 896, Y3, X3) \
	STORECOL(DI, 16, 144, Y4, X4) \
	STORECOL(DI, 272, 400, Y5, X5) \
	STORECOL(DI, 528, 656, Y6, X6) \
	STORECOL(DI, 784, 912, Y7, X7)

#define MIXCOLS(MIX) \
	MIX(0, 128, Y0) \
	MIX(256, 384, Y1) \
	MIX(512, 640, Y2) \
	MIX(768, 896, Y3) \
	MIX(16, 144, Y4) \
	MIX(272, 400, Y5) \
	MIX(528, 656, Y6) \
	MIX(784, 912, Y7)

// func processBlockAVX2(out, x, y *block, xor bool)
// The 1 KiB frame holds Q, the block between the row and column passes.
TEXT ·processBlockAVX2(SB), 0, $1024-25
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVBLZX xor+24(FP), AX
	VMOVDQU ·rot24<>(SB), Y14
	VMOVDQU ·rot16<>(SB), Y15

	// Rows, two at a time: Q = P(x ^ y) row by row. x and y are read in
	// full before anything is written to out, which may be x.
	LEAQ 0(SP), BX
	MOVQ SI, R8
	MOVQ DX, R9
	MOVQ $4, CX

rows:
	VMOVDQU 0(R8), Y0
	VMOVDQU 32(R8), Y1
	VMOVDQU 64(R8), Y2
	VMOVDQU 96(R8), Y3
	VMOVDQU 128(R8), Y4
	VMOVDQU 160(R8), Y5
	VMOVDQU 192(R8), Y6
	VMOVDQU 224(R8), Y7
	VPXOR 0(R9), Y0, Y0
	VPXOR 32(R9), Y1, Y1
	VPXOR 64(R9), Y2, Y2
	VPXOR 96(R9), Y3, Y3
	VPXOR 128(R9), Y4, Y4
	VPXOR 160(R9), Y5, Y5
	VPXOR 192(R9), Y6, Y6
	VPXOR 224(R9), Y7, Y7
	P2
	VMOVDQU Y0, 0(BX)
	VMOVDQU Y1, 32(BX)
	VMOVDQU Y2, 64(BX)
	VMOVDQU Y3, 96(BX)
	VMOVDQU Y4, 128(BX)
	VMOVDQU Y5, 160(BX)
	VMOVDQU Y6, 192(BX)
	VMOVDQU Y7, 224(BX)
	ADDQ $256, R8
	ADDQ $256, R9
	ADDQ $256, BX
	DECQ CX
	JNZ  rows

	// Columns, two at a time, and out = P(Q) ^ x ^ y (^ out). Each word of
	// x, y and out is read just before the same word of out is written.
	LEAQ 0(SP), BX
	MOVQ $4, CX
	TESTL AX, AX
	JNZ  colsxor

cols:
	LOADCOLS
	P2
	MIXCOLS(MIXCOL)
	STORECOLS
	ADDQ $32, BX
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  cols
	JMP  done

colsxor:
	LOADCOLS
	P2
	MIXCOLS(MIXCOLXOR)
	STORECOLS
	ADDQ $32, BX
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  colsxor

done:
	VZEROUPPER
	RET
