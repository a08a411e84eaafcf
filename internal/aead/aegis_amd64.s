//go:build amd64 && !purego

#include "textflag.h"

// The state S0..S4 lives in X0..X4. UPDATE(M) is the AEGIS-128 state
// update with message block M: Si = AESENC(S(i-1), Si), S0 = AESENC(S4, S0) ^ M,
// all from the old state (X5 keeps the old S4, X6 is scratch).
#define UPDATE(M) \
	MOVOU  X4, X5 \
	MOVOU  X3, X6 \
	AESENC X4, X6 \
	MOVOU  X6, X4 \
	MOVOU  X2, X6 \
	AESENC X3, X6 \
	MOVOU  X6, X3 \
	MOVOU  X1, X6 \
	AESENC X2, X6 \
	MOVOU  X6, X2 \
	MOVOU  X0, X6 \
	AESENC X1, X6 \
	MOVOU  X6, X1 \
	AESENC X0, X5 \
	PXOR   M, X5  \
	MOVOU  X5, X0

// KEYSTREAM(Z): Z = S1 ^ S4 ^ (S2 & S3).
#define KEYSTREAM(Z) \
	MOVOU X2, Z \
	PAND  X3, Z \
	PXOR  X1, Z \
	PXOR  X4, Z

#define LOAD_STATE \
	MOVOU 0(AX), X0  \
	MOVOU 16(AX), X1 \
	MOVOU 32(AX), X2 \
	MOVOU 48(AX), X3 \
	MOVOU 64(AX), X4

#define STORE_STATE \
	MOVOU X0, 0(AX)  \
	MOVOU X1, 16(AX) \
	MOVOU X2, 32(AX) \
	MOVOU X3, 48(AX) \
	MOVOU X4, 64(AX)

// func aegisEncAESNI(s *aegisState, dst, src *byte, n int)
TEXT ·aegisEncAESNI(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), AX
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LOAD_STATE
	TESTQ CX, CX
	JZ    encdone

encloop:
	MOVOU (SI), X8
	KEYSTREAM(X7)
	PXOR  X8, X7
	MOVOU X7, (DI)
	UPDATE(X8)
	ADDQ  $16, SI
	ADDQ  $16, DI
	DECQ  CX
	JNZ   encloop

encdone:
	STORE_STATE
	RET

// func aegisDecAESNI(s *aegisState, dst, src *byte, n int)
TEXT ·aegisDecAESNI(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), AX
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LOAD_STATE
	TESTQ CX, CX
	JZ    decdone

decloop:
	MOVOU (SI), X8
	KEYSTREAM(X7)
	PXOR  X8, X7
	MOVOU X7, (DI)
	UPDATE(X7)
	ADDQ  $16, SI
	ADDQ  $16, DI
	DECQ  CX
	JNZ   decloop

decdone:
	STORE_STATE
	RET
