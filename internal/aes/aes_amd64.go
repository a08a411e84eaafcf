//go:build amd64 && !purego

package aes

import (
	"slices"
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd _asm && go run . -out ../aes_amd64.s"

var (
	hasAESNI = cpu.X86.HasAES
	hasVAES  bool
	// The ZMM XTS kernels use EVEX VAES/VPCLMULQDQ and per-lane byte shifts
	// (AVX512BW); x/sys/cpu reports these only if the OS saves ZMM state.
	hasVAES512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VAES && cpu.X86.HasAVX512VPCLMULQDQ
	// preferYMM: the CPU lowers its clock under ZMM code, so vaes-avx512
	// ranks below vaes (it stays available by name).
	preferYMM bool
)

// zmmDownclockModels are the Intel family-6 models with VAES on which the
// Linux kernel prefers its ymm AES code because zmm code lowers the clock
// (its X86_FEATURE_PREFER_YMM list: Ice Lake server, client and NNPI, Tiger
// Lake; Skylake-X is on it too but has no VAES). Sapphire Rapids, Rocket
// Lake and later and AMD Zen 4 and later run zmm at full speed.
var zmmDownclockModels = []uint32{0x6a, 0x6c, 0x7d, 0x7e, 0x9d, 0x8c, 0x8d}

func intelFamily6Model() (uint32, bool) {
	_, b, c, d := cpuid(0, 0)
	if b != 0x756e6547 || d != 0x49656e69 || c != 0x6c65746e { // "GenuineIntel"
		return 0, false
	}
	a, _, _, _ := cpuid(1, 0)
	if (a>>8)&0xf != 6 {
		return 0, false
	}
	return (a>>4)&0xf | (a>>16)&0xf<<4, true
}

const (
	cpuidVAES       = 1 << 9  // CPUID.(EAX=7,ECX=0):ECX
	cpuidVPCLMULQDQ = 1 << 10 // CPUID.(EAX=7,ECX=0):ECX
)

func init() {
	// golang.org/x/sys/cpu only reports VAES/VPCLMULQDQ together with
	// AVX-512, but the VEX-encoded YMM forms need just AVX2 (which implies
	// the OS saves YMM state), so read the CPUID bits directly.
	if hasAESNI && cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ {
		maxLeaf, _, _, _ := cpuid(0, 0)
		if maxLeaf >= 7 {
			_, _, ecx, _ := cpuid(7, 0)
			hasVAES = ecx&cpuidVAES != 0 && ecx&cpuidVPCLMULQDQ != 0
		}
	}
	if m, ok := intelFamily6Model(); ok {
		preferYMM = slices.Contains(zmmDownclockModels, m)
	}
	cbcMB32 = amdFamily() >= 0x1a
}

// cbcMB32 selects the 32-sector multi-buffer CBC kernels of vaes-avx512
// (encCBCMB32ZMM) over the 16-sector ones for batches of 32 sectors or
// more. Zen 5 (AMD family 0x1A) runs two ZMM VAESENC per cycle (clockaes),
// so four registers of chains leave its AES unit about half idle: 256 x
// 512 B ESSIV batches ran at 0.53x the XTS batch with 16 sectors, 0.88x
// with 32. Intel's one per cycle is filled by 16, and the kernels it was
// measured with stay there (the 32-sector one's stack copies are
// unmeasured on Intel). Tests set it both ways, so every kernel is
// reachable whatever this CPU picks.
var cbcMB32 bool

// amdFamily returns the CPU family (base plus extended) of an AMD CPU, 0
// on any other vendor.
func amdFamily() uint32 {
	_, b, c, d := cpuid(0, 0)
	if b != 0x68747541 || d != 0x69746e65 || c != 0x444d4163 { // "AuthenticAMD"
		return 0
	}
	a, _, _, _ := cpuid(1, 0)
	f := (a >> 8) & 0xf
	if f == 0xf {
		f += (a >> 20) & 0xff
	}
	return f
}

func archImpls() []implID {
	switch {
	case hasVAES && hasVAES512 && preferYMM:
		return []implID{implVAES, implVAES512, implAESNI}
	case hasVAES && hasVAES512:
		return []implID{implVAES512, implVAES, implAESNI}
	case hasVAES:
		return []implID{implVAES, implAESNI}
	case hasAESNI:
		return []implID{implAESNI}
	}
	return nil
}

// archMissing names the CPU features an implementation lacks here.
func archMissing(impl string) string {
	switch impl {
	case "aesni":
		return "AES-NI"
	case "vaes":
		return "VAES, VPCLMULQDQ, PCLMULQDQ and AVX2 (with OS YMM support)"
	case "vaes-avx512":
		return "AVX512F, AVX512BW, VAES and VPCLMULQDQ (with OS ZMM support), besides what vaes needs"
	case "ce":
		return "the ARMv8 Crypto Extensions (arm64 only)"
	}
	return "unknown implementation"
}

//go:noescape
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

//go:noescape
func encBlockAESNI(nr int, xk *byte, dst, src *byte)

//go:noescape
func decBlockAESNI(nr int, xk *byte, dst, src *byte)

//go:noescape
func encECBAESNI(nr int, xk *byte, dst, src *byte, n int)

//go:noescape
func decECBAESNI(nr int, xk *byte, dst, src *byte, n int)

//go:noescape
func encCBCAESNI(nr int, xk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func decCBCAESNI(nr int, xk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func encESSIVCBCAESNI(nr int, xk *byte, ivnr int, ivxk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func decESSIVCBCAESNI(nr int, xk *byte, ivnr int, ivxk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func encCBCMB8AESNI(nr int, xk *byte, dst, src *byte, ss int, ivs *byte)

//go:noescape
func encCBCMB8StagedAESNI(nr int, xk *byte, dst, src *byte, ss int, ivs *byte)

//go:noescape
func encCBCMB4AESNI(nr int, xk *byte, dst, src *byte, ss int, ivs *byte)

//go:noescape
func encCBCMB2AESNI(nr int, xk *byte, dst, src *byte, ss int, ivs *byte)

//go:noescape
func xtsEncAESNI(nr int, xk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsDecAESNI(nr int, xk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsEncRingAESNI(nr int, xk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsDecRingAESNI(nr int, xk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsEncSectorsAESNI(nr int, xk *byte, dst, src *byte, n, ips int, tws *byte)

//go:noescape
func xtsDecSectorsAESNI(nr int, xk *byte, dst, src *byte, n, ips int, tws *byte)

//go:noescape
func decCBCSectorsAESNI(nr int, xk *byte, dst, src *byte, n, ips int, ivs *byte)

//go:noescape
func decCBCSectorsVAES(nr int, yk *byte, dst, src *byte, n, ips int, ivs *byte)

//go:noescape
func xtsEncUnitVAES(nr int, yk *byte, tnr int, txk *byte, dst, src *byte, n int, iv, tweak *[16]byte)

//go:noescape
func xtsDecUnitVAES(nr int, yk *byte, tnr int, txk *byte, dst, src *byte, n int, iv, tweak *[16]byte)

//go:noescape
func encECBVAES(nr int, yk *byte, dst, src *byte, n int)

//go:noescape
func decECBVAES(nr int, yk *byte, dst, src *byte, n int)

//go:noescape
func decCBCVAES(nr int, yk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func decESSIVCBCVAES(nr int, yk *byte, ivnr int, ivxk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func encCBCMB16VAES(nr int, yk *byte, dst, src *byte, ss int, ivs *byte, lag int)

//go:noescape
func encCBCMB16ZMM(nr int, xk *byte, dst, src *byte, ss int, ivs *byte, lag int)

//go:noescape
func encESSIVCBCMB16ZMM(nr int, xk *byte, dst, src *byte, ss int, ivs *byte, lag int, ivnr int, ivxk *byte)

//go:noescape
func encCBCMB32ZMM(nr int, xk *byte, dst, src *byte, ss int, ivs *byte, lag int)

//go:noescape
func encESSIVCBCMB32ZMM(nr int, xk *byte, dst, src *byte, ss int, ivs *byte, lag int, ivnr int, ivxk *byte)

//go:noescape
func decCBCZMM(nr int, xk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func decESSIVCBCZMM(nr int, xk *byte, ivnr int, ivxk *byte, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func xtsEncVAES(nr int, yk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsDecVAES(nr int, yk *byte, dst, src *byte, n int, tweak *[16]byte)

//go:noescape
func xtsEncSectorsVAES(nr int, yk *byte, dst, src *byte, n, ips int, tws *byte)

//go:noescape
func xtsDecSectorsVAES(nr int, yk *byte, dst, src *byte, n, ips int, tws *byte)

//go:noescape
func xtsEncUnitZMM(nr int, xk *byte, tnr int, txk *byte, dst, src *byte, n int, iv, tweak *[16]byte)

//go:noescape
func xtsDecUnitZMM(nr int, xk *byte, tnr int, txk *byte, dst, src *byte, n int, iv, tweak *[16]byte)

//go:noescape
func xtsEncUnit64ZMM(nr int, xk *byte, tnr int, txk *byte, dst, src *byte, n int, sector uint64, tweak *[16]byte)

//go:noescape
func xtsDecUnit64ZMM(nr int, xk *byte, tnr int, txk *byte, dst, src *byte, n int, sector uint64, tweak *[16]byte)

//go:noescape
func encECBZMM(nr int, xk *byte, dst, src *byte, n int)

//go:noescape
func xtsEncSectorsZMM(nr int, xk *byte, dst, src *byte, n, ips int, tws *byte)

//go:noescape
func xtsDecSectorsZMM(nr int, xk *byte, dst, src *byte, n, ips int, tws *byte)

func (b *Block) xkEnc() *byte { return &b.xk[0] }
func (b *Block) xkDec() *byte { return &b.xk[xkDecOff] }
func (b *Block) ykEnc() *byte { return &b.yk[0] }
func (b *Block) ykDec() *byte { return &b.yk[ykDecOff] }

func ptr(s []byte) *byte { return unsafe.SliceData(s) }

func archBlock(b *Block, enc bool, dst, src []byte) {
	if enc {
		encBlockAESNI(b.rounds, b.xkEnc(), ptr(dst), ptr(src))
	} else {
		decBlockAESNI(b.rounds, b.xkDec(), ptr(dst), ptr(src))
	}
}

func archECB(b *Block, enc bool, dst, src []byte) {
	n := len(src) / 16
	switch {
	case b.impl == implVAES && enc:
		encECBVAES(b.rounds, b.ykEnc(), ptr(dst), ptr(src), n)
	case b.impl == implVAES:
		decECBVAES(b.rounds, b.ykDec(), ptr(dst), ptr(src), n)
	case enc:
		encECBAESNI(b.rounds, b.xkEnc(), ptr(dst), ptr(src), n)
	default:
		decECBAESNI(b.rounds, b.xkDec(), ptr(dst), ptr(src), n)
	}
}

func archEncCBC(b *Block, dst, src []byte, iv *[16]byte) {
	encCBCAESNI(b.rounds, b.xkEnc(), ptr(dst), ptr(src), len(src)/16, iv)
}

func archDecCBC(b *Block, dst, src []byte, iv *[16]byte) {
	n := len(src) / 16
	if b.zmm && n >= 32 {
		m := n &^ 31
		decCBCZMM(b.rounds, b.xkDec(), ptr(dst), ptr(src), m, iv)
		if m == n {
			return
		}
		dst, src, n = dst[16*m:], src[16*m:], n-m
	}
	if b.impl == implVAES && n >= 16 {
		m := n &^ 15
		decCBCVAES(b.rounds, b.ykDec(), ptr(dst), ptr(src), m, iv)
		if m == n {
			return
		}
		dst, src, n = dst[16*m:], src[16*m:], n-m
	}
	decCBCAESNI(b.rounds, b.xkDec(), ptr(dst), ptr(src), n, iv)
}

func archEncESSIVCBC(b, ivKey *Block, dst, src []byte, iv *[16]byte) {
	encESSIVCBCAESNI(b.rounds, b.xkEnc(), ivKey.rounds, ivKey.xkEnc(), ptr(dst), ptr(src), len(src)/16, iv)
}

func archDecESSIVCBC(b, ivKey *Block, dst, src []byte, iv *[16]byte) {
	n := len(src) / 16
	wide := b.zmm && n >= 32
	var m int
	switch {
	case wide:
		m = n &^ 31
	case b.impl == implVAES && n >= 16:
		m = n &^ 15
	default:
		decESSIVCBCAESNI(b.rounds, b.xkDec(), ivKey.rounds, ivKey.xkEnc(), ptr(dst), ptr(src), n, iv)
		return
	}
	var civ [16]byte
	if m < n { // the chain of the rest, read before an in-place call overwrites it
		copy(civ[:], src[16*m-16:16*m])
	}
	if wide {
		decESSIVCBCZMM(b.rounds, b.xkDec(), ivKey.rounds, ivKey.xkEnc(), ptr(dst), ptr(src), m, iv)
	} else {
		decESSIVCBCVAES(b.rounds, b.ykDec(), ivKey.rounds, ivKey.xkEnc(), ptr(dst), ptr(src), m, iv)
	}
	if m < n {
		archDecCBC(b, dst[16*m:], src[16*m:], &civ)
	}
}

// cbcLag is the delay of the second half of the lanes of encCBCMB16ZMM and
// encCBCMB16VAES: with sectors a multiple of 4 KiB apart the 16 lanes' cache
// lines share one L1 set, and a lag of two lines (measured best among 0..512
// bytes at 4 KiB sectors: 0 runs at a third of the speed) keeps at most 8 of
// them per set for 8 extra steps per call. Other sizes run best without.
func cbcLag(ss int) int {
	if ss%4096 == 0 {
		return 128
	}
	return 0
}

// cbcLag32 is the delay between consecutive groups of 8 sectors of
// encCBCMB32ZMM, for the reason of cbcLag: with sectors 4 KiB apart all 32
// lanes' lines would share one L1 set, 2 KiB apart 16 per set. On Zen 5,
// batches of 256 sectors (ESSIV, AES-256, best of interleaved windows,
// against the XTS batch): 4 KiB sectors with lag 0 ran at 0.03x, 64 bytes
// 0.33x, 128 0.67x, 192 0.75x, 256 0.77x (the 16-sector kernel 0.51x);
// 2 KiB sectors with lag 0 at 0.22x, 32 0.56x, 48 0.77x, 64 0.82x, 96 0.80x,
// 128 0.78x, 256 0.71x (the 16-sector kernel 0.52x). Each costs 3*lag/ss
// extra steps.
func cbcLag32(ss int) int {
	switch {
	case ss%4096 == 0:
		return cbcLag32Bytes
	case ss%2048 == 0:
		return cbcLag32Bytes / 4
	}
	return 0
}

var cbcLag32Bytes = 256

// archEncESSIVCBCSectors encrypts the leading sectors that a fused kernel
// takes (whole groups of 16) and returns how many it did.
func archEncESSIVCBCSectors(b, ivKey *Block, dst, src []byte, ss int, ivs []byte) int {
	if !b.zmm || !ivKey.zmm {
		return 0
	}
	n := len(src) / ss &^ 15
	i := 0
	if cbcMB32 {
		lag := cbcLag32(ss)
		for ; n-i >= 32; i += 32 {
			encESSIVCBCMB32ZMM(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i], lag, ivKey.rounds, ivKey.xkEnc())
		}
	}
	lag := cbcLag(ss)
	for ; i < n; i += 16 {
		encESSIVCBCMB16ZMM(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i], lag, ivKey.rounds, ivKey.xkEnc())
	}
	return n
}

func archEncCBCSectors(b *Block, dst, src []byte, ss int, ivs []byte) {
	n := len(src) / ss
	i := 0
	if b.zmm && cbcMB32 {
		lag := cbcLag32(ss)
		for ; n-i >= 32; i += 32 {
			encCBCMB32ZMM(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i], lag)
		}
	}
	if b.zmm {
		lag := cbcLag(ss)
		for ; n-i >= 16; i += 16 {
			encCBCMB16ZMM(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i], lag)
		}
	}
	if b.impl == implVAES {
		// (Direct calls, not a func value: an indirect call would make
		// the buffers escape, and callers pass stack IVs.)
		lag := cbcLag(ss)
		for ; n-i >= 16; i += 16 {
			encCBCMB16VAES(b.rounds, b.ykEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i], lag)
		}
	}
	// With 8 lanes the direct kernel only thrashes L1 when lanes are 2 KiB
	// multiples apart (out of place); the staged one is a little slower
	// elsewhere.
	for ; n-i >= 8; i += 8 {
		if ss%2048 == 0 {
			encCBCMB8StagedAESNI(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i])
		} else {
			encCBCMB8AESNI(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i])
		}
	}
	if n-i >= 4 {
		encCBCMB4AESNI(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i])
		i += 4
	}
	if n-i >= 2 {
		encCBCMB2AESNI(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss, &ivs[16*i])
		i += 2
	}
	if n-i == 1 {
		var iv [16]byte
		copy(iv[:], ivs[16*i:])
		encCBCAESNI(b.rounds, b.xkEnc(), &dst[i*ss], &src[i*ss], ss/16, &iv)
	}
}

func archXTS(b *Block, enc bool, dst, src []byte, t *[16]byte) {
	n := len(src) / 16
	if b.impl == implVAES && n >= 16 {
		m := n &^ 15
		if enc {
			xtsEncVAES(b.rounds, b.ykEnc(), ptr(dst), ptr(src), m, t)
		} else {
			xtsDecVAES(b.rounds, b.ykDec(), ptr(dst), ptr(src), m, t)
		}
		if m == n {
			return
		}
		dst, src, n = dst[16*m:], src[16*m:], n-m
	}
	switch {
	case n >= 16 && enc:
		xtsEncRingAESNI(b.rounds, b.xkEnc(), ptr(dst), ptr(src), n, t)
	case n >= 16:
		xtsDecRingAESNI(b.rounds, b.xkDec(), ptr(dst), ptr(src), n, t)
	case enc:
		xtsEncAESNI(b.rounds, b.xkEnc(), ptr(dst), ptr(src), n, t)
	default:
		xtsDecAESNI(b.rounds, b.xkDec(), ptr(dst), ptr(src), n, t)
	}
}

// archXTSSectors handles a batch of whole sectors whose encrypted tweaks are
// in tws (len(tws) >= 16*(nsectors+1): the kernel may read one spare entry).
// It reports false if the implementation has no multi-sector kernel for
// this sector size.
func archXTSSectors(b *Block, enc bool, dst, src []byte, ss int, tws []byte) bool {
	n := len(src) / 16
	if b.zmm && ss%512 == 0 {
		if enc {
			xtsEncSectorsZMM(b.rounds, b.xkEnc(), ptr(dst), ptr(src), n, ss/512, &tws[0])
		} else {
			xtsDecSectorsZMM(b.rounds, b.xkDec(), ptr(dst), ptr(src), n, ss/512, &tws[0])
		}
		return true
	}
	if b.impl == implAESNI && ss%256 == 0 {
		if enc {
			xtsEncSectorsAESNI(b.rounds, b.xkEnc(), ptr(dst), ptr(src), n, ss/128, &tws[0])
		} else {
			xtsDecSectorsAESNI(b.rounds, b.xkDec(), ptr(dst), ptr(src), n, ss/128, &tws[0])
		}
		return true
	}
	if b.impl != implVAES || ss%512 != 0 {
		return false
	}
	if enc {
		xtsEncSectorsVAES(b.rounds, b.ykEnc(), ptr(dst), ptr(src), n, ss/256, &tws[0])
	} else {
		xtsDecSectorsVAES(b.rounds, b.ykDec(), ptr(dst), ptr(src), n, ss/256, &tws[0])
	}
	return true
}

// archDecCBCSectors decrypts whole sectors with one kernel call that runs
// across sector boundaries. It reports false if there is no such kernel for
// this sector size.
func archDecCBCSectors(b *Block, dst, src []byte, ss int, ivs []byte) bool {
	n := len(src) / 16
	switch {
	case b.impl == implVAES && ss%256 == 0:
		decCBCSectorsVAES(b.rounds, b.ykDec(), ptr(dst), ptr(src), n, ss/256, &ivs[0])
	case ss%128 == 0:
		decCBCSectorsAESNI(b.rounds, b.xkDec(), ptr(dst), ptr(src), n, ss/128, &ivs[0])
	default:
		return false
	}
	return true
}

// archXTSUnitPrefix handles the leading whole blocks of a short data unit
// with the fused kernel (tweak encryption included) and returns how many
// bytes it processed, leaving in t the tweak of the next block; 0 means it
// did nothing. The last whole block is left alone when ciphertext stealing
// will need it.
func archXTSUnitPrefix(b, tk *Block, enc bool, dst, src []byte, iv, t *[16]byte) int {
	if b.impl != implVAES {
		return 0
	}
	n := len(src) / 16
	if len(src)%16 != 0 {
		n--
	}
	m := n &^ 15
	if b.zmm && m > 0 {
		// One call for a unit of any length: the ZMM loop has no start-up
		// cost the YMM kernel's scalar tweak ring would amortize.
		if enc {
			xtsEncUnitZMM(b.rounds, b.xkEnc(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), m, iv, t)
		} else {
			xtsDecUnitZMM(b.rounds, b.xkDec(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), m, iv, t)
		}
		return 16 * m
	}
	if m == 0 || m >= 128 { // longer units go faster through xtsEncVAES
		return 0
	}
	if enc {
		xtsEncUnitVAES(b.rounds, b.ykEnc(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), m, iv, t)
	} else {
		xtsDecUnitVAES(b.rounds, b.ykDec(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), m, iv, t)
	}
	return 16 * m
}

func archCBCEncryptGroup() int {
	if ids := archImpls(); len(ids) > 0 && ids[0] == implVAES512 && cbcMB32 {
		return 32
	}
	return 16
}

func archHasVAES512() bool { return hasVAES512 }

func archPreferYMM() bool { return preferYMM }

// archXTSTweaks encrypts the sector IVs of a batch into tws (len(ivs) a
// multiple of 16) for archXTSSectors.
func archXTSTweaks(tk *Block, tws, ivs []byte) {
	n := len(ivs) / 16
	if tk.zmm && n >= 4 {
		m := n &^ 3
		encECBZMM(tk.rounds, tk.xkEnc(), ptr(tws), ptr(ivs), m)
		if m == n {
			return
		}
		tws, ivs = tws[16*m:], ivs[16*m:]
	}
	tk.ecb(true, tws[:len(ivs)], ivs)
}

// archXTSUnitZMM is a whole data unit of a multiple of 256 bytes with the
// ZMM kernel (b.zmm set).
func archXTSUnitZMM(b, tk *Block, enc bool, dst, src []byte, iv, t *[16]byte) {
	if enc {
		xtsEncUnitZMM(b.rounds, b.xkEnc(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), len(src)/16, iv, t)
	} else {
		xtsDecUnitZMM(b.rounds, b.xkDec(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), len(src)/16, iv, t)
	}
}

func archFamily6Model() (uint32, bool) { return intelFamily6Model() }

// archXTSUnit64ZMM is archXTSUnitZMM with the plain64 IV of sector.
func archXTSUnit64ZMM(b, tk *Block, enc bool, dst, src []byte, sector uint64, t *[16]byte) {
	if enc {
		xtsEncUnit64ZMM(b.rounds, b.xkEnc(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), len(src)/16, sector, t)
	} else {
		xtsDecUnit64ZMM(b.rounds, b.xkDec(), tk.rounds, tk.xkEnc(), ptr(dst), ptr(src), len(src)/16, sector, t)
	}
}
