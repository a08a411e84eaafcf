//go:build amd64 && !purego

#include "textflag.h"

// AES-GCM with VAES and VPCLMULQDQ on ZMM registers (AVX-512): four
// 16-byte blocks a register, four registers (16 blocks) an iteration of
// the bulk loops, and GHASH over those 16 blocks with the precomputed
// powers H^16..H^1 and a single reduction.
//
// GHASH representation (the one of the Linux kernel's and OpenSSL's
// carry-less GHASH): blocks are byte-reflected with VPSHUFB so that the
// polynomial's coefficients sit in bit order inside a 128-bit lane, and
// no bit reflection is done. A carry-less product of two such values then
// carries an extra factor of x, which the key powers cancel: they are
// stored times x^-1 (gcmInitAVX512 does that to H, and every product of
// two such powers keeps exactly one factor). The reduction folds the low
// 128 bits of the 256-bit product in two 64-bit steps with the constant
// x^63 + x^62 + x^57 (0xc2 << 56), see GHASH_REDUCE.
//
// Register use in gcmAVX512:
//   Z0-Z3   AES states (16 counter blocks)
//   Z4-Z7   the 16 blocks GHASH takes (ciphertext), clobbered by it
//   Z8      round key 0; Z(22-nr+1)..Z22 round keys 1..nr, so that the
//           last round key is always Z22 and AES-128 skips Z9-Z12
//   Z23     byte-reflection mask, Z24 counter step (4 in every lane)
//   Z25     next counters [c, c+1, c+2, c+3], byte-reflected (the 32-bit
//           big-endian counter is then the low dword of each lane, and
//           VPADDD wraps it modulo 2^32 as GCM's inc32 does)
//   Z26     GHASH reduction constant, Z28 GHASH accumulator (lane 0)
//   Z27, Z29-Z31 GHASH temporaries (Z5 too, in GHASH4)
//   K1      byte mask of a partial piece (CHUNK)

DATA bswapMask<>+0(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+8(SB)/8, $0x0001020304050607
GLOBL bswapMask<>(SB), RODATA|NOPTR, $16

// x^63 + x^62 + x^57 in the high qword, the only one the reduction
// multiplies by (the low qword's 1 completes the polynomial
// x^128 + x^127 + x^126 + x^121 + 1 but is not read).
DATA gfpoly<>+0(SB)/8, $0x0000000000000001
DATA gfpoly<>+8(SB)/8, $0xc200000000000000
GLOBL gfpoly<>(SB), RODATA|NOPTR, $16

// gfpoly plus the carry from bit 63 into bit 64 of the 128-bit doubling.
DATA gfpolyCarry<>+0(SB)/8, $0x0000000000000001
DATA gfpolyCarry<>+8(SB)/8, $0xc200000000000001
GLOBL gfpolyCarry<>(SB), RODATA|NOPTR, $16

DATA laneInc<>+0(SB)/8, $1
DATA laneInc<>+8(SB)/8, $0
DATA laneInc<>+16(SB)/8, $2
DATA laneInc<>+24(SB)/8, $0
DATA laneInc<>+32(SB)/8, $3
DATA laneInc<>+40(SB)/8, $0
DATA laneInc<>+48(SB)/8, $4
DATA laneInc<>+56(SB)/8, $0
GLOBL laneInc<>(SB), RODATA|NOPTR, $64

DATA four<>+0(SB)/8, $4
DATA four<>+8(SB)/8, $0
GLOBL four<>(SB), RODATA|NOPTR, $16

// GHASH_MUL: dst = a*b (one factor of x^-1 in a or b cancels the
// carry-less product's extra x), lane-wise. dst may be b.
#define GHASH_MUL(a, b, dst, poly, t0, t1, t2) \
	VPCLMULQDQ $0x00, a, b, t0; \
	VPCLMULQDQ $0x01, a, b, t1; \
	VPCLMULQDQ $0x10, a, b, t2; \
	VPXORD     t2, t1, t1; \
	VPCLMULQDQ $0x01, t0, poly, t2; \
	VPSHUFD    $0x4e, t0, t0; \
	VPTERNLOGD $0x96, t2, t0, t1; \
	VPCLMULQDQ $0x11, a, b, dst; \
	VPCLMULQDQ $0x01, t1, poly, t0; \
	VPSHUFD    $0x4e, t1, t1; \
	VPTERNLOGD $0x96, t0, t1, dst

// GHASH_REDUCE folds the 256-bit sums lo + x^64*mi + x^128*hi into hi
// (128 bits a lane): first the low 64 bits of lo into mi, then the low 64
// bits of mi into hi, each by adding that half times the polynomial.
#define GHASH_REDUCE(lo, mi, hi, poly, t) \
	VPCLMULQDQ $0x01, lo, poly, t; \
	VPSHUFD    $0x4e, lo, lo; \
	VPTERNLOGD $0x96, t, lo, mi; \
	VPCLMULQDQ $0x01, mi, poly, t; \
	VPSHUFD    $0x4e, mi, mi; \
	VPTERNLOGD $0x96, t, mi, hi

// GHASH16 absorbs the 16 blocks in Z4-Z7 (as stored, not yet reflected)
// into the accumulator X28: acc = (acc+b0)*H^16 + b1*H^15 + ... + b15*H^1,
// with the powers at 0..255(tab). One reduction for all 16 products. It
// is cut into steps G0..G8 that the 16-block loop puts between AES
// rounds; it clobbers Z4-Z7, Z27 and Z29-Z31.
#define G0(tab) \
	VPSHUFB    Z23, Z4, Z4; \
	VPXORD     Z28, Z4, Z4; \
	VPSHUFB    Z23, Z5, Z5; \
	VPSHUFB    Z23, Z6, Z6; \
	VPSHUFB    Z23, Z7, Z7
#define G1(tab) \
	VPCLMULQDQ $0x00, 0(tab), Z4, Z27; \
	VPCLMULQDQ $0x00, 64(tab), Z5, Z28; \
	VPCLMULQDQ $0x00, 128(tab), Z6, Z31; \
	VPTERNLOGD $0x96, Z31, Z28, Z27
#define G2(tab) \
	VPCLMULQDQ $0x00, 192(tab), Z7, Z31; \
	VPXORD     Z31, Z27, Z27; \
	VPCLMULQDQ $0x01, 0(tab), Z4, Z29; \
	VPCLMULQDQ $0x10, 0(tab), Z4, Z28
#define G3(tab) \
	VPCLMULQDQ $0x01, 64(tab), Z5, Z31; \
	VPTERNLOGD $0x96, Z31, Z28, Z29; \
	VPCLMULQDQ $0x10, 64(tab), Z5, Z28; \
	VPCLMULQDQ $0x01, 128(tab), Z6, Z31
#define G4(tab) \
	VPTERNLOGD $0x96, Z31, Z28, Z29; \
	VPCLMULQDQ $0x10, 128(tab), Z6, Z28; \
	VPCLMULQDQ $0x01, 192(tab), Z7, Z31; \
	VPTERNLOGD $0x96, Z31, Z28, Z29
#define G5(tab) \
	VPCLMULQDQ $0x10, 192(tab), Z7, Z28; \
	VPXORD     Z28, Z29, Z29; \
	VPCLMULQDQ $0x11, 0(tab), Z4, Z30; \
	VPCLMULQDQ $0x11, 64(tab), Z5, Z5
#define G6(tab) \
	VPCLMULQDQ $0x11, 128(tab), Z6, Z6; \
	VPTERNLOGD $0x96, Z6, Z5, Z30; \
	VPCLMULQDQ $0x11, 192(tab), Z7, Z7; \
	VPXORD     Z7, Z30, Z30
// G7 and G8 are GHASH_REDUCE, then the four lanes summed into X28.
#define G7(tab) \
	VPCLMULQDQ $0x01, Z27, Z26, Z31; \
	VPSHUFD    $0x4e, Z27, Z27; \
	VPTERNLOGD $0x96, Z31, Z27, Z29
#define G8(tab) \
	VPCLMULQDQ $0x01, Z29, Z26, Z31; \
	VPSHUFD    $0x4e, Z29, Z29; \
	VPTERNLOGD $0x96, Z31, Z29, Z30; \
	VEXTRACTI32X4 $1, Z30, X27; \
	VEXTRACTI32X4 $2, Z30, X29; \
	VEXTRACTI32X4 $3, Z30, X31; \
	VPXORD     X27, X30, X28; \
	VPTERNLOGD $0x96, X29, X31, X28
#define GHASH16(tab) \
	G0(tab); G1(tab); G2(tab); G3(tab); G4(tab); G5(tab); G6(tab); G7(tab); G8(tab)

#define ENC4(k) \
	VAESENC k, Z0, Z0; \
	VAESENC k, Z1, Z1; \
	VAESENC k, Z2, Z2; \
	VAESENC k, Z3, Z3

// LOADKEYS broadcasts the round keys at xk (nr in nr) into Z8 and
// Z(22-nr+1)..Z22; it clobbers R11.
#define LOADKEYS(xk, nr, lbl10) \
	VBROADCASTI32X4 (xk), Z8; \
	MOVQ nr, R11; \
	SHLQ $4, R11; \
	ADDQ xk, R11; \
	VBROADCASTI32X4 (R11), Z22; \
	VBROADCASTI32X4 -16(R11), Z21; \
	VBROADCASTI32X4 -32(R11), Z20; \
	VBROADCASTI32X4 -48(R11), Z19; \
	VBROADCASTI32X4 -64(R11), Z18; \
	VBROADCASTI32X4 -80(R11), Z17; \
	VBROADCASTI32X4 -96(R11), Z16; \
	VBROADCASTI32X4 -112(R11), Z15; \
	VBROADCASTI32X4 -128(R11), Z14; \
	VBROADCASTI32X4 -144(R11), Z13; \
	CMPQ nr, $12; \
	JB   lbl10; \
	VBROADCASTI32X4 -160(R11), Z12; \
	VBROADCASTI32X4 -176(R11), Z11; \
	JEQ  lbl10; \
	VBROADCASTI32X4 -192(R11), Z10; \
	VBROADCASTI32X4 -208(R11), Z9

// NEXTCTR4 makes four blocks of counters in Z0-Z3, already XORed with
// round key 0.
#define NEXTCTR4 \
	VPSHUFB Z23, Z25, Z0; \
	VPADDD  Z24, Z25, Z25; \
	VPSHUFB Z23, Z25, Z1; \
	VPADDD  Z24, Z25, Z25; \
	VPSHUFB Z23, Z25, Z2; \
	VPADDD  Z24, Z25, Z25; \
	VPSHUFB Z23, Z25, Z3; \
	VPADDD  Z24, Z25, Z25; \
	VPXORD  Z8, Z0, Z0; \
	VPXORD  Z8, Z1, Z1; \
	VPXORD  Z8, Z2, Z2; \
	VPXORD  Z8, Z3, Z3

// func subWord(x uint32) uint32
// FIPS-197's SubWord with AESENCLAST (the S-box without tables): with
// the word in all four columns ShiftRows moves nothing, and the round key
// is zero.
TEXT ·subWord(SB), NOSPLIT, $0-12
	MOVL   x+0(FP), AX
	MOVL   AX, X0
	PSHUFD $0, X0, X0
	PXOR   X1, X1
	AESENCLAST X1, X0
	MOVL   X0, AX
	MOVL   AX, ret+8(FP)
	RET

// func gcmInitAVX512(table *[304]byte, h *[16]byte)
// table[16*(16-i):] = H^i times x^-1, byte-reflected, for i = 16..1.
TEXT ·gcmInitAVX512(SB), NOSPLIT, $0-16
	MOVQ table+0(FP), DI
	MOVQ h+8(FP), SI
	VMOVDQU (SI), X0
	VPSHUFB bswapMask<>(SB), X0, X3
	// H*x^-1: double the 128-bit value (each qword, plus the carry between
	// them) and add the polynomial if bit 127 was set.
	VPSHUFD $0xd3, X3, X0
	VPSRAD  $31, X0, X0
	VPADDQ  X3, X3, X3
	VPTERNLOGD $0x78, gfpolyCarry<>(SB), X0, X3
	VMOVDQU gfpoly<>(SB), X5
	VMOVDQU X3, 240(DI)
	VMOVDQA X3, X4
	MOVQ    $224, CX
initLoop:
	GHASH_MUL(X3, X4, X4, X5, X0, X1, X2)
	VMOVDQU X4, (DI)(CX*1)
	SUBQ    $16, CX
	JAE     initLoop
	VZEROUPPER
	RET

// GHASH4 absorbs the up to four blocks in Z4 (as stored; lanes past the
// last block zero) into X28 with the powers at R12: for b blocks that is
// table+256-16*b, H^b..H^1 and then the table's zero padding.
#define GHASH4 \
	VPSHUFB    Z23, Z4, Z4; \
	VPXORD     Z28, Z4, Z4; \
	VMOVDQU64  (R12), Z5; \
	VPCLMULQDQ $0x00, Z5, Z4, Z27; \
	VPCLMULQDQ $0x01, Z5, Z4, Z29; \
	VPCLMULQDQ $0x10, Z5, Z4, Z31; \
	VPXORD     Z31, Z29, Z29; \
	VPCLMULQDQ $0x11, Z5, Z4, Z30; \
	GHASH_REDUCE(Z27, Z29, Z30, Z26, Z31); \
	VEXTRACTI32X4 $1, Z30, X27; \
	VEXTRACTI32X4 $2, Z30, X29; \
	VEXTRACTI32X4 $3, Z30, X31; \
	VPXORD     X27, X30, X28; \
	VPTERNLOGD $0x96, X29, X31, X28

// CHUNK sets up a piece of at most 64 of the R14 bytes left: BX its
// length, K1 the byte mask of its BX bytes, R12 the key powers for its
// blocks. Clobbers CX, R13.
#define CHUNK \
	MOVQ  R14, BX; \
	MOVQ  $64, CX; \
	CMPQ  BX, CX; \
	CMOVQHI CX, BX; \
	SUBQ  BX, CX; \
	MOVQ  $-1, R13; \
	SHRQ  CX, R13; \
	KMOVQ R13, K1; \
	LEAQ  15(BX), R12; \
	ANDQ  $-16, R12; \
	NEGQ  R12; \
	LEAQ  256(R8)(R12*1), R12

// AES rounds 1..nr-1 on Z0 (the caller XORs round key 0 before and does
// the last round after).
#define ROUNDS_Z0_14 \
	VAESENC Z9, Z0, Z0; \
	VAESENC Z10, Z0, Z0
#define ROUNDS_Z0_12 \
	VAESENC Z11, Z0, Z0; \
	VAESENC Z12, Z0, Z0
#define ROUNDS_Z0_10 \
	VAESENC Z13, Z0, Z0; \
	VAESENC Z14, Z0, Z0; \
	VAESENC Z15, Z0, Z0; \
	VAESENC Z16, Z0, Z0; \
	VAESENC Z17, Z0, Z0; \
	VAESENC Z18, Z0, Z0; \
	VAESENC Z19, Z0, Z0; \
	VAESENC Z20, Z0, Z0; \
	VAESENC Z21, Z0, Z0

// func gcmAVX512(xk *byte, nr int, table *[304]byte, j0 *[16]byte, ad *byte, adLen int, dst, src *byte, n int, tag *[16]byte, enc bool)
// One whole GCM operation: n bytes of src to dst in counter mode from
// J0+1, GHASH over the associated data and the ciphertext (dst when
// enc, src otherwise) and the lengths, and tag = E(J0) ^ GHASH. dst may
// equal src (every block is read before it is written). Partial blocks
// are read and written with byte masks, so nothing outside the slices is
// touched.
TEXT ·gcmAVX512(SB), NOSPLIT, $0-81
	MOVQ xk+0(FP), R10
	MOVQ nr+8(FP), R9
	MOVQ table+16(FP), R8
	MOVQ j0+24(FP), AX
	MOVQ tag+72(FP), DX
	LOADKEYS(R10, R9, keysDone)
keysDone:
	VBROADCASTI32X4 bswapMask<>(SB), Z23
	VBROADCASTI32X4 four<>(SB), Z24
	VBROADCASTI32X4 gfpoly<>(SB), Z26
	VPXORD X28, X28, X28

	// tag = E(J0) for now (in all four lanes of Z0; lane 0 is stored).
	VBROADCASTI32X4 (AX), Z25
	VPXORD Z8, Z25, Z0
	CMPQ R9, $12
	JB   j0r10
	JEQ  j0r12
	ROUNDS_Z0_14
j0r12:
	ROUNDS_Z0_12
j0r10:
	ROUNDS_Z0_10
	VAESENCLAST Z22, Z0, Z0
	VMOVDQU64 X0, (DX)
	VPSHUFB Z23, Z25, Z25
	VPADDD  laneInc<>(SB), Z25, Z25
	MOVBQZX enc+80(FP), AX

	// The associated data, 64 bytes at a time.
	MOVQ ad+32(FP), SI
	MOVQ adLen+40(FP), R14
adLoop:
	TESTQ R14, R14
	JZ    adDone
	CHUNK
	VMOVDQU8.Z (SI), K1, Z4
	GHASH4
	ADDQ  BX, SI
	SUBQ  BX, R14
	JMP   adLoop
adDone:

	MOVQ dst+48(FP), DI
	MOVQ src+56(FP), SI
	MOVQ n+64(FP), R14

	// The 16-block loop hashes 16 blocks while it encrypts the next 16.
	// Opening hashes the ciphertext it decrypts in the same iteration;
	// sealing hashes the previous iteration's ciphertext, so its first 16
	// blocks are encrypted here, without hashing.
	TESTQ AX, AX
	JZ    loop16
	CMPQ  R14, $256
	JB    tail
	NEXTCTR4
	CMPQ R9, $12
	JB   f10
	JEQ  f12
	ENC4(Z9)
	ENC4(Z10)
f12:
	ENC4(Z11)
	ENC4(Z12)
f10:
	ENC4(Z13)
	ENC4(Z14)
	ENC4(Z15)
	ENC4(Z16)
	ENC4(Z17)
	ENC4(Z18)
	ENC4(Z19)
	ENC4(Z20)
	ENC4(Z21)
	VPXORD 0(SI), Z22, Z4
	VPXORD 64(SI), Z22, Z5
	VPXORD 128(SI), Z22, Z6
	VPXORD 192(SI), Z22, Z7
	VAESENCLAST Z4, Z0, Z4
	VAESENCLAST Z5, Z1, Z5
	VAESENCLAST Z6, Z2, Z6
	VAESENCLAST Z7, Z3, Z7
	VMOVDQU64 Z4, 0(DI)
	VMOVDQU64 Z5, 64(DI)
	VMOVDQU64 Z6, 128(DI)
	VMOVDQU64 Z7, 192(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, R14
loop16:
	CMPQ R14, $256
	JB   loopEnd
	TESTQ AX, AX
	JNZ   loaded
	VMOVDQU64 0(SI), Z4
	VMOVDQU64 64(SI), Z5
	VMOVDQU64 128(SI), Z6
	VMOVDQU64 192(SI), Z7
loaded:
	NEXTCTR4
	CMPQ R9, $12
	JB   r10
	JEQ  r12
	ENC4(Z9)
	ENC4(Z10)
r12:
	ENC4(Z11)
	ENC4(Z12)
r10:
	ENC4(Z13)
	G0(R8)
	ENC4(Z14)
	G1(R8)
	ENC4(Z15)
	G2(R8)
	ENC4(Z16)
	G3(R8)
	ENC4(Z17)
	G4(R8)
	ENC4(Z18)
	G5(R8)
	ENC4(Z19)
	G6(R8)
	ENC4(Z20)
	G7(R8)
	ENC4(Z21)
	G8(R8)
	// The last round key XORed with the input gives the output from
	// VAESENCLAST directly. The input is read again (opening hashed its
	// copy), and before any of this iteration's output is written.
	VPXORD 0(SI), Z22, Z27
	VPXORD 64(SI), Z22, Z29
	VPXORD 128(SI), Z22, Z30
	VPXORD 192(SI), Z22, Z31
	VAESENCLAST Z27, Z0, Z0
	VAESENCLAST Z29, Z1, Z1
	VAESENCLAST Z30, Z2, Z2
	VAESENCLAST Z31, Z3, Z3
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z1, 64(DI)
	VMOVDQU64 Z2, 128(DI)
	VMOVDQU64 Z3, 192(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, R14
	TESTQ AX, AX
	JZ    loop16
	// Sealing: this ciphertext is hashed in the next iteration, or after
	// the loop.
	VMOVDQA64 Z0, Z4
	VMOVDQA64 Z1, Z5
	VMOVDQA64 Z2, Z6
	VMOVDQA64 Z3, Z7
	JMP  loop16
loopEnd:
	TESTQ AX, AX
	JZ    tail
	GHASH16(R8)

	// Fewer than 16 blocks left: four (or the rest) at a time.
tail:
	TESTQ R14, R14
	JZ    lengths
	CHUNK
	VPSHUFB Z23, Z25, Z0
	VPADDD  Z24, Z25, Z25
	VPXORD  Z8, Z0, Z0
	CMPQ R9, $12
	JB   t10
	JEQ  t12
	ROUNDS_Z0_14
t12:
	ROUNDS_Z0_12
t10:
	ROUNDS_Z0_10
	VMOVDQU8.Z (SI), K1, Z4
	VPXORD Z4, Z22, Z27
	VAESENCLAST Z27, Z0, Z0
	VMOVDQU8 Z0, K1, (DI)
	TESTQ AX, AX
	JZ    hashTail
	VMOVDQU8.Z Z0, K1, Z4
hashTail:
	GHASH4
	ADDQ BX, SI
	ADDQ BX, DI
	SUBQ BX, R14
	JMP  tail

lengths:
	// The lengths block, bit counts big endian: len(ad) then len(text).
	MOVQ   adLen+40(FP), BX
	SHLQ   $3, BX
	BSWAPQ BX
	MOVQ   n+64(FP), CX
	SHLQ   $3, CX
	BSWAPQ CX
	VMOVQ  BX, X4
	VPINSRQ $1, CX, X4, X4
	LEAQ   240(R8), R12
	GHASH4
	VPSHUFB X23, X28, X28
	VPXORD  (DX), X28, X28
	VMOVDQU64 X28, (DX)
	VZEROUPPER
	RET
