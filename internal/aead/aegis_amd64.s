//go:build amd64 && !purego

#include "textflag.h"

// The kernels run whole AEGIS-128 messages (init, associated data, the
// message, its zero-padded tail, the tag) on a *job (sectors.go) whose
// layout these offsets follow; TestJobLayout checks them against the Go
// struct. Every state update is five independent AES rounds whose
// critical path is one round, so a single state is latency bound: the
// VAES kernels keep one message in each 128-bit lane of a ZMM register
// and the 8-lane kernel runs two such groups so that one group's rounds
// fill the other's latency.
#define J_SRC 0
#define J_DST 24
#define J_NONCES 48
#define J_AD 72
#define J_TAIL 96
#define J_TAILLEN 104
#define J_TAGS 120
#define J_STRIDE 144
#define J_BLOCKS 152
#define J_ADBLOCKS 160
#define J_KEY 168
#define J_LEN 184
#define J_MASK 200

// The two constants of the AEGIS specification (the Fibonacci sequence
// mod 256).
DATA aegisC0<>+0(SB)/8, $0x0d08050302010100
DATA aegisC0<>+8(SB)/8, $0x6279e99059372215
GLOBL aegisC0<>(SB), RODATA|NOPTR, $16
DATA aegisC1<>+0(SB)/8, $0xf12fc26d55183ddb
DATA aegisC1<>+8(SB)/8, $0xdd28b57342311120
GLOBL aegisC1<>(SB), RODATA|NOPTR, $16

// ---- AES-NI, one state: S0..S4 in X0..X4, X5 scratch, X7 keystream,
// X8 message, X9 key^nonce, X10 key. VEX encoding (three operands, no
// register copies, no SSE/AVX transitions next to AVX-512 code).

// UPDX(M): S0' = AESENC(S4, S0^M), Si' = AESENC(S(i-1), Si), from the old state.
#define UPDX(M) \
	VPXOR   M, X0, X5 \
	VAESENC X5, X4, X5 \
	VAESENC X4, X3, X4 \
	VAESENC X3, X2, X3 \
	VAESENC X2, X1, X2 \
	VAESENC X1, X0, X1 \
	VMOVDQU X5, X0

// KSX: X7 = S1 ^ S4 ^ (S2 & S3).
#define KSX \
	VPAND X3, X2, X7 \
	VPXOR X1, X7, X7 \
	VPXOR X4, X7, X7

#define INITX \
	VMOVDQU J_KEY(AX), X10      \
	MOVQ    J_NONCES(AX), BX    \
	VPXOR   (BX), X10, X9       \
	VMOVDQU X9, X0              \
	VMOVDQU aegisC1<>(SB), X1   \
	VMOVDQU aegisC0<>(SB), X2   \
	VPXOR   X2, X10, X3         \
	VPXOR   X1, X10, X4         \
	MOVQ    $5, CX              \
initx:                          \
	UPDX(X10)                   \
	UPDX(X9)                    \
	DECQ    CX                  \
	JNZ     initx               \
	MOVQ    J_AD(AX), BX        \
	MOVQ    J_ADBLOCKS(AX), CX  \
	TESTQ   CX, CX              \
	JZ      adxdone             \
adx:                            \
	VMOVDQU (BX), X8            \
	UPDX(X8)                    \
	ADDQ    $16, BX             \
	DECQ    CX                  \
	JNZ     adx                 \
adxdone:                        \
	MOVQ    J_SRC(AX), SI       \
	MOVQ    J_DST(AX), DI       \
	MOVQ    J_BLOCKS(AX), CX

#define FINALX \
	VMOVDQU J_LEN(AX), X8  \
	VPXOR   X3, X8, X8     \
	MOVQ    $7, CX         \
finx:                      \
	UPDX(X8)               \
	DECQ    CX             \
	JNZ     finx           \
	VPXOR   X1, X0, X7     \
	VPXOR   X2, X7, X7     \
	VPXOR   X3, X7, X7     \
	VPXOR   X4, X7, X7     \
	MOVQ    J_TAGS(AX), BX \
	VMOVDQU X7, (BX)

// func sealAESNI(j *job)
TEXT ·sealAESNI(SB), NOSPLIT, $0-8
	MOVQ j+0(FP), AX
	INITX
	TESTQ CX, CX
	JZ    sxtail

sxloop:
	VMOVDQU (SI), X8
	KSX
	VPXOR   X8, X7, X7
	VMOVDQU X7, (DI)
	UPDX(X8)
	ADDQ    $16, SI
	ADDQ    $16, DI
	DECQ    CX
	JNZ     sxloop

sxtail:
	CMPQ    J_TAILLEN(AX), $0
	JEQ     sxfinal
	MOVQ    J_TAIL(AX), BX
	VMOVDQU (BX), X8
	KSX
	VPXOR   X8, X7, X7
	VMOVDQU X7, (BX)
	UPDX(X8)

sxfinal:
	FINALX
	RET

// func openAESNI(j *job)
TEXT ·openAESNI(SB), NOSPLIT, $0-8
	MOVQ j+0(FP), AX
	INITX
	TESTQ CX, CX
	JZ    oxtail

oxloop:
	VMOVDQU (SI), X8
	KSX
	VPXOR   X8, X7, X7
	VMOVDQU X7, (DI)
	UPDX(X7)
	ADDQ    $16, SI
	ADDQ    $16, DI
	DECQ    CX
	JNZ     oxloop

oxtail:
	CMPQ    J_TAILLEN(AX), $0
	JEQ     oxfinal
	MOVQ    J_TAIL(AX), BX
	VMOVDQU (BX), X8
	KSX
	VPXOR   X8, X7, X7
	VPAND   J_MASK(AX), X7, X7
	VMOVDQU X7, (BX)
	UPDX(X7)

oxfinal:
	FINALX
	RET

// ---- VAES on ZMM: four messages a group, one per 128-bit lane. Group A:
// state Z0..Z4, Z5 scratch, Z7 keystream, Z8 message, Z9 key^nonce;
// group B the same plus 10 (Z10..Z19). Z20 key, Z21 length block or tail
// mask. Lane i of the message data is at base + i*stride: R9 = stride,
// R10 = 3*stride, R11 = 5*stride, R12 = 7*stride.

#define UPDZ(S0, S1, S2, S3, S4, T, M) \
	VPXORD    M, S0, T   \
	VAESENC   T, S4, T   \
	VAESENC   S4, S3, S4 \
	VAESENC   S3, S2, S3 \
	VAESENC   S2, S1, S2 \
	VAESENC   S1, S0, S1 \
	VMOVDQU64 T, S0

#define UPDA(M) UPDZ(Z0, Z1, Z2, Z3, Z4, Z5, M)
#define UPDB(M) UPDZ(Z10, Z11, Z12, Z13, Z14, Z15, M)

#define KSZ(S1, S2, S3, S4, Z) \
	VPANDD     S3, S2, Z \
	VPTERNLOGD $0x96, S4, S1, Z

#define KSA KSZ(Z1, Z2, Z3, Z4, Z7)
#define KSB KSZ(Z11, Z12, Z13, Z14, Z17)

#define INITZ(S0, S1, S2, S3, S4, KN, NONCE) \
	VPXORD          NONCE, Z20, KN        \
	VMOVDQU64       KN, S0                \
	VBROADCASTI32X4 aegisC1<>(SB), S1     \
	VBROADCASTI32X4 aegisC0<>(SB), S2     \
	VPXORD          S2, Z20, S3           \
	VPXORD          S1, Z20, S4

#define TAGZ(S0, S1, S2, S3, S4, T) \
	VMOVDQU64  S0, T              \
	VPTERNLOGD $0x96, S2, S1, T   \
	VPTERNLOGD $0x96, S4, S3, T

// Lanes 0-3 of the block at SI into X/Z M; lanes 4-7 (group B).
#define LOADA(XM, ZM) \
	VMOVDQU64    (SI), XM                \
	VINSERTI32X4 $1, (SI)(R9*1), ZM, ZM  \
	VINSERTI32X4 $2, (SI)(R9*2), ZM, ZM  \
	VINSERTI32X4 $3, (SI)(R10*1), ZM, ZM

#define LOADB(XM, ZM) \
	VMOVDQU64    (SI)(R9*4), XM          \
	VINSERTI32X4 $1, (SI)(R11*1), ZM, ZM \
	VINSERTI32X4 $2, (SI)(R10*2), ZM, ZM \
	VINSERTI32X4 $3, (SI)(R12*1), ZM, ZM

#define STOREA(XM, ZM) \
	VMOVDQU64     XM, (DI)                \
	VEXTRACTI32X4 $1, ZM, (DI)(R9*1)      \
	VEXTRACTI32X4 $2, ZM, (DI)(R9*2)      \
	VEXTRACTI32X4 $3, ZM, (DI)(R10*1)

#define STOREB(XM, ZM) \
	VMOVDQU64     XM, (DI)(R9*4)          \
	VEXTRACTI32X4 $1, ZM, (DI)(R11*1)     \
	VEXTRACTI32X4 $2, ZM, (DI)(R10*2)     \
	VEXTRACTI32X4 $3, ZM, (DI)(R12*1)

#define SETUPZ \
	VBROADCASTI32X4 J_KEY(AX), Z20 \
	MOVQ  J_STRIDE(AX), R9         \
	LEAQ  (R9)(R9*2), R10          \
	LEAQ  (R9)(R9*4), R11          \
	LEAQ  (R10)(R9*4), R12         \
	MOVQ  J_NONCES(AX), BX

// The 8-lane init and associated data.
#define INIT8 \
	SETUPZ                                       \
	INITZ(Z0, Z1, Z2, Z3, Z4, Z9, (BX))          \
	INITZ(Z10, Z11, Z12, Z13, Z14, Z19, 64(BX))  \
	MOVQ    $5, CX                               \
init8:                                           \
	UPDA(Z20)                                    \
	UPDB(Z20)                                    \
	UPDA(Z9)                                     \
	UPDB(Z19)                                    \
	DECQ    CX                                   \
	JNZ     init8                                \
	MOVQ    J_AD(AX), BX                         \
	MOVQ    J_ADBLOCKS(AX), CX                   \
	TESTQ   CX, CX                               \
	JZ      ad8done                              \
ad8:                                             \
	VMOVDQU64 (BX), Z8                           \
	VMOVDQU64 64(BX), Z18                        \
	UPDA(Z8)                                     \
	UPDB(Z18)                                    \
	ADDQ    $128, BX                             \
	DECQ    CX                                   \
	JNZ     ad8                                  \
ad8done:                                         \
	MOVQ    J_SRC(AX), SI                        \
	MOVQ    J_DST(AX), DI                        \
	MOVQ    J_BLOCKS(AX), CX

#define FINAL8 \
	VBROADCASTI32X4 J_LEN(AX), Z21  \
	VPXORD  Z3, Z21, Z8             \
	VPXORD  Z13, Z21, Z18           \
	MOVQ    $7, CX                  \
fin8:                               \
	UPDA(Z8)                        \
	UPDB(Z18)                       \
	DECQ    CX                      \
	JNZ     fin8                    \
	TAGZ(Z0, Z1, Z2, Z3, Z4, Z7)    \
	TAGZ(Z10, Z11, Z12, Z13, Z14, Z17) \
	MOVQ    J_TAGS(AX), BX          \
	VMOVDQU64 Z7, (BX)              \
	VMOVDQU64 Z17, 64(BX)           \
	VZEROUPPER

// func sealVAES8(j *job)
TEXT ·sealVAES8(SB), NOSPLIT, $0-8
	MOVQ j+0(FP), AX
	INIT8
	TESTQ CX, CX
	JZ    s8tail

s8loop:
	LOADA(X8, Z8)
	LOADB(X18, Z18)
	KSA
	KSB
	VPXORD Z8, Z7, Z7
	VPXORD Z18, Z17, Z17
	STOREA(X7, Z7)
	STOREB(X17, Z17)
	UPDA(Z8)
	UPDB(Z18)
	ADDQ   $16, SI
	ADDQ   $16, DI
	DECQ   CX
	JNZ    s8loop

s8tail:
	CMPQ      J_TAILLEN(AX), $0
	JEQ       s8final
	MOVQ      J_TAIL(AX), BX
	VMOVDQU64 (BX), Z8
	VMOVDQU64 64(BX), Z18
	KSA
	KSB
	VPXORD    Z8, Z7, Z7
	VPXORD    Z18, Z17, Z17
	VMOVDQU64 Z7, (BX)
	VMOVDQU64 Z17, 64(BX)
	UPDA(Z8)
	UPDB(Z18)

s8final:
	FINAL8
	RET

// func openVAES8(j *job)
TEXT ·openVAES8(SB), NOSPLIT, $0-8
	MOVQ j+0(FP), AX
	INIT8
	TESTQ CX, CX
	JZ    o8tail

o8loop:
	LOADA(X8, Z8)
	LOADB(X18, Z18)
	KSA
	KSB
	VPXORD Z8, Z7, Z7
	VPXORD Z18, Z17, Z17
	STOREA(X7, Z7)
	STOREB(X17, Z17)
	UPDA(Z7)
	UPDB(Z17)
	ADDQ   $16, SI
	ADDQ   $16, DI
	DECQ   CX
	JNZ    o8loop

o8tail:
	CMPQ            J_TAILLEN(AX), $0
	JEQ             o8final
	MOVQ            J_TAIL(AX), BX
	VBROADCASTI32X4 J_MASK(AX), Z21
	VMOVDQU64       (BX), Z8
	VMOVDQU64       64(BX), Z18
	KSA
	KSB
	VPTERNLOGD      $0x28, Z21, Z8, Z7
	VPTERNLOGD      $0x28, Z21, Z18, Z17
	VMOVDQU64       Z7, (BX)
	VMOVDQU64       Z17, 64(BX)
	UPDA(Z7)
	UPDB(Z17)

o8final:
	FINAL8
	RET

// The 4-lane kernels: group A alone.
#define INIT4 \
	SETUPZ                                       \
	INITZ(Z0, Z1, Z2, Z3, Z4, Z9, (BX))          \
	MOVQ    $5, CX                               \
init4:                                           \
	UPDA(Z20)                                    \
	UPDA(Z9)                                     \
	DECQ    CX                                   \
	JNZ     init4                                \
	MOVQ    J_AD(AX), BX                         \
	MOVQ    J_ADBLOCKS(AX), CX                   \
	TESTQ   CX, CX                               \
	JZ      ad4done                              \
ad4:                                             \
	VMOVDQU64 (BX), Z8                           \
	UPDA(Z8)                                     \
	ADDQ    $64, BX                              \
	DECQ    CX                                   \
	JNZ     ad4                                  \
ad4done:                                         \
	MOVQ    J_SRC(AX), SI                        \
	MOVQ    J_DST(AX), DI                        \
	MOVQ    J_BLOCKS(AX), CX

#define FINAL4 \
	VBROADCASTI32X4 J_LEN(AX), Z21  \
	VPXORD  Z3, Z21, Z8             \
	MOVQ    $7, CX                  \
fin4:                               \
	UPDA(Z8)                        \
	DECQ    CX                      \
	JNZ     fin4                    \
	TAGZ(Z0, Z1, Z2, Z3, Z4, Z7)    \
	MOVQ    J_TAGS(AX), BX          \
	VMOVDQU64 Z7, (BX)              \
	VZEROUPPER

// func sealVAES4(j *job)
TEXT ·sealVAES4(SB), NOSPLIT, $0-8
	MOVQ j+0(FP), AX
	INIT4
	TESTQ CX, CX
	JZ    s4tail

s4loop:
	LOADA(X8, Z8)
	KSA
	VPXORD Z8, Z7, Z7
	STOREA(X7, Z7)
	UPDA(Z8)
	ADDQ   $16, SI
	ADDQ   $16, DI
	DECQ   CX
	JNZ    s4loop

s4tail:
	CMPQ      J_TAILLEN(AX), $0
	JEQ       s4final
	MOVQ      J_TAIL(AX), BX
	VMOVDQU64 (BX), Z8
	KSA
	VPXORD    Z8, Z7, Z7
	VMOVDQU64 Z7, (BX)
	UPDA(Z8)

s4final:
	FINAL4
	RET

// func openVAES4(j *job)
TEXT ·openVAES4(SB), NOSPLIT, $0-8
	MOVQ j+0(FP), AX
	INIT4
	TESTQ CX, CX
	JZ    o4tail

o4loop:
	LOADA(X8, Z8)
	KSA
	VPXORD Z8, Z7, Z7
	STOREA(X7, Z7)
	UPDA(Z7)
	ADDQ   $16, SI
	ADDQ   $16, DI
	DECQ   CX
	JNZ    o4loop

o4tail:
	CMPQ            J_TAILLEN(AX), $0
	JEQ             o4final
	MOVQ            J_TAIL(AX), BX
	VBROADCASTI32X4 J_MASK(AX), Z21
	VMOVDQU64       (BX), Z8
	KSA
	VPTERNLOGD      $0x28, Z21, Z8, Z7
	VMOVDQU64       Z7, (BX)
	UPDA(Z7)

o4final:
	FINAL4
	RET
