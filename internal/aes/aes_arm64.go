//go:build arm64 && !purego

package aes

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd _asm/arm64 && go run . -out ../../aes_arm64.s"

// hasCE: the "ce" kernels use the ARMv8 Crypto Extensions' AES
// instructions and, for the XTS tweaks, PMULL (64x64 carry-less multiply).
// x/sys/cpu reads them from the kernel's HWCAP on Linux and reports both on
// darwin, where every Apple Silicon core has them. GODEBUG=cpu.aes=off or
// cpu.pmull=off switches them off, as for the standard library.
var hasCE = cpu.ARM64.HasAES && cpu.ARM64.HasPMULL

func archImpls() []implID {
	if hasCE {
		return []implID{implCE}
	}
	return nil
}

// archMissing names the CPU features an implementation lacks here.
func archMissing(impl string) string {
	switch impl {
	case "ce":
		return "the ARMv8 Crypto Extensions' AES and PMULL instructions"
	case "aesni", "vaes", "vaes-avx512":
		return "x86 AES instructions (amd64 only)"
	}
	return "unknown implementation"
}

//go:noescape
func encBlockCE(nr int, xk *byte, dst, src *byte)

//go:noescape
func decBlockCE(nr int, xk *byte, dst, src *byte)

//go:noescape
func encECBCE(nr int, xk *byte, dst, src *byte, n int)

//go:noescape
func decECBCE(nr int, xk *byte, dst, src *byte, n int)

//go:noescape
func encCBCCE(nr int, xk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func encESSIVCBCCE(nr int, xk *byte, ivnr int, ivxk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func decCBCCE(nr int, xk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func decESSIVCBCCE(nr int, xk *byte, ivnr int, ivxk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func encCBCMB8CE(nr int, xk *byte, dst, src *byte, ss int, ivs *byte)

//go:noescape
func encCBCMB4CE(nr int, xk *byte, dst, src *byte, ss int, ivs *byte)

//go:noescape
func encCBCMB2CE(nr int, xk *byte, dst, src *byte, ss int, ivs *byte)

//go:noescape
func encESSIVCBCMB8CE(nr int, xk *byte, dst, src *byte, ss int, ivs *byte, ivnr int, ivxk *byte)

//go:noescape
func xtsEncCE(nr int, xk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsDecCE(nr int, xk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsEncUnitCE(nr int, xk *byte, tnr int, txk *byte, dst, src *byte, n int, iv, tweak *[16]byte)

//go:noescape
func xtsDecUnitCE(nr int, xk *byte, tnr int, txk *byte, dst, src *byte, n int, iv, tweak *[16]byte)

// The kernels take the same byte schedules as the amd64 AES-NI ones: AESE
// adds the round key before SubBytes where AESENC adds it after MixColumns,
// so the same keys in the same order serve both, the last one added by EOR.
func (b *Block) xkEnc() *byte { return &b.xk[0] }
func (b *Block) xkDec() *byte { return &b.xk[xkDecOff] }

func ptr(s []byte) *byte { return unsafe.SliceData(s) }

func archBlock(b *Block, enc bool, dst, src []byte) {
	if enc {
		encBlockCE(b.rounds, b.xkEnc(), ptr(dst), ptr(src))
	} else {
		decBlockCE(b.rounds, b.xkDec(), ptr(dst), ptr(src))
	}
}

func archECB(b *Block, enc bool, dst, src []byte) {
	if enc {
		encECBCE(b.rounds, b.xkEnc(), ptr(dst), ptr(src), len(src)/16)
	} else {
		decECBCE(b.rounds, b.xkDec(), ptr(dst), ptr(src), len(src)/16)
	}
}

func archEncCBC(b *Block, dst, src []byte, iv *[16]byte) {
	encCBCCE(b.rounds, b.xkEnc(), ptr(dst), ptr(src), len(src)/16, iv)
}

func archDecCBC(b *Block, dst, src []byte, iv *[16]byte) {
	decCBCCE(b.rounds, b.xkDec(), ptr(dst), ptr(src), len(src)/16, iv)
}

func archEncESSIVCBC(b, ivKey *Block, dst, src []byte, iv *[16]byte) {
	encESSIVCBCCE(b.rounds, b.xkEnc(), ivKey.rounds, ivKey.xkEnc(), ptr(dst), ptr(src), len(src)/16, iv)
}

func archDecESSIVCBC(b, ivKey *Block, dst, src []byte, iv *[16]byte) {
	decESSIVCBCCE(b.rounds, b.xkDec(), ivKey.rounds, ivKey.xkEnc(), ptr(dst), ptr(src), len(src)/16, iv)
}

// archEncCBCSectors runs 8 sectors per kernel call, then 4, 2 and 1.
// (Direct calls, not a func value: an indirect call would make the buffers
// escape, and callers pass stack IVs.)
func archEncCBCSectors(b *Block, dst, src []byte, ss int, ivs []byte) {
	n := len(src) / ss
	i := 0
	for ; n-i >= 8; i += 8 {
		encCBCMB8CE(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i])
	}
	if n-i >= 4 {
		encCBCMB4CE(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i])
		i += 4
	}
	if n-i >= 2 {
		encCBCMB2CE(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i])
		i += 2
	}
	if n-i == 1 {
		var iv [16]byte
		copy(iv[:], ivs[16*i:])
		encCBCCE(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss/16, &iv)
	}
}

// archEncESSIVCBCSectors encrypts the leading whole groups of 8 sectors
// with the fused kernel (their IVs encrypted in the same call) and returns
// how many sectors it did.
func archEncESSIVCBCSectors(b, ivKey *Block, dst, src []byte, ss int, ivs []byte) int {
	n := len(src) / ss &^ 7
	for i := 0; i < n; i += 8 {
		encESSIVCBCMB8CE(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i], ivKey.rounds, ivKey.xkEnc())
	}
	return n
}

func archXTS(b *Block, enc bool, dst, src []byte, t *[16]byte) {
	if enc {
		xtsEncCE(b.rounds, b.xkEnc(), ptr(dst), ptr(src), len(src)/16, t)
	} else {
		xtsDecCE(b.rounds, b.xkDec(), ptr(dst), ptr(src), len(src)/16, t)
	}
}

// archXTSSectors: no multi-sector kernel; the sector loop calls archXTS
// once per sector.
func archXTSSectors(b *Block, enc bool, dst, src []byte, ss int, tws []byte) bool { return false }

// archDecCBCSectors: none either; DecryptCBCSectors calls archDecCBC per
// sector.
func archDecCBCSectors(b *Block, dst, src []byte, ss int, ivs []byte) bool { return false }

// archXTSUnitPrefix runs the whole blocks of a data unit, but the one
// ciphertext stealing needs, through the kernel that encrypts the tweak
// itself, and returns how many bytes it did, leaving in t the next tweak.
func archXTSUnitPrefix(b, tk *Block, enc bool, dst, src []byte, iv, t *[16]byte) int {
	n := len(src) / 16
	if len(src)%16 != 0 {
		n--
	}
	if n == 0 {
		return 0
	}
	if enc {
		xtsEncUnitCE(b.rounds, b.xkEnc(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), n, iv, t)
	} else {
		xtsDecUnitCE(b.rounds, b.xkDec(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), n, iv, t)
	}
	return 16 * n
}

func archHasVAES512() bool { return false }

func archPreferYMM() bool { return false }

func archFamily6Model() (uint32, bool) { return 0, false }

func archXTSTweaks(tk *Block, tws, ivs []byte) { tk.ecb(true, tws[:len(ivs)], ivs) }

func archXTSUnitZMM(b, tk *Block, enc bool, dst, src []byte, iv, t *[16]byte) {
	panic("aes: no ZMM kernels on arm64")
}

func archXTSUnit64ZMM(b, tk *Block, enc bool, dst, src []byte, sector uint64, t *[16]byte) {
	panic("aes: no ZMM kernels on arm64")
}

// archCBCEncryptGroup: the kernels take 8 sectors; 16 keeps the sector
// layer's split as before.
func archCBCEncryptGroup() int { return 16 }
