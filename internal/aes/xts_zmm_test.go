package aes

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The ZMM kernels have paths the short-length tests above do not reach: a
// 32-block main loop with a 16-block tail, and per-sector tweak derivation
// for sectors of 512*k bytes across batches longer than one tweak chunk.
// These compare every implementation (vaes-avx512 first) with generic
// there.

func TestXTSLongUnitsVsGeneric(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(21, 22))
		lens := []int{256, 512, 768, 4096, 4096 + 256, 4096 + 17, 8192 - 1, 65536, 65536 + 16*15 + 3}
		for i := 0; i < 40; i++ {
			lens = append(lens, 16+r.IntN(16384))
		}
		for _, n := range lens {
			for _, ks := range []int{32, 48, 64} {
				key := randBytes(r, ks)
				x, gx := xtsPair(t, impl, key), xtsPair(t, "generic", key)
				pt := randBytes(r, n)
				iv := [16]byte(randBytes(r, 16))
				want := make([]byte, n)
				gx.Encrypt(want, pt, &iv)
				got := make([]byte, n)
				x.Encrypt(got, pt, &iv)
				if !bytes.Equal(got, want) {
					t.Fatalf("len %d key %d: encrypt mismatch", n, ks)
				}
				x.Decrypt(got, got, &iv) // in place
				if !bytes.Equal(got, pt) {
					t.Fatalf("len %d key %d: decrypt mismatch", n, ks)
				}
			}
		}
	})
}

func TestXTSSectorBatchesVsGeneric(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(23, 24))
		for _, ss := range []int{512, 1024, 2048, 4096, 4096 + 512} {
			for _, ns := range []int{1, 2, 3, sectorChunk - 1, sectorChunk, sectorChunk + 1, 256} {
				if ss*ns > 1<<20 {
					continue
				}
				ks := []int{32, 48, 64}[r.IntN(3)]
				key := randBytes(r, ks)
				x, gx := xtsPair(t, impl, key), xtsPair(t, "generic", key)
				pt := randBytes(r, ss*ns)
				ivs := randBytes(r, 16*ns)
				ivs0 := slices.Clone(ivs)
				want := make([]byte, len(pt))
				gx.EncryptSectors(want, pt, ss, ivs)
				got := make([]byte, len(pt))
				x.EncryptSectors(got, pt, ss, ivs)
				if !bytes.Equal(got, want) {
					t.Fatalf("ss %d n %d key %d: encrypt mismatch", ss, ns, ks)
				}
				x.DecryptSectors(got, got, ss, ivs)
				if !bytes.Equal(got, pt) {
					t.Fatalf("ss %d n %d key %d: decrypt mismatch", ss, ns, ks)
				}
				if !bytes.Equal(ivs, ivs0) {
					t.Fatalf("ss %d n %d: ivs modified", ss, ns)
				}
			}
		}
	})
}

// TestImplSelection checks that the ZMM implementation is offered exactly
// when the CPU has what it needs, and is preferred then. Run by
// TestForcedFallbacks with CPU features switched off, it checks the list
// it was told to expect.
func TestImplSelection(t *testing.T) {
	impls := Impls()
	if want := os.Getenv("BLKCRYPT_TEST_AES_IMPLS"); want != "" && strings.Join(impls, ",") != want {
		t.Fatalf("GODEBUG=%s: Impls() = %v, want %s", os.Getenv("GODEBUG"), impls, want)
	}
	has := slices.Contains(impls, "vaes-avx512")
	if has != (archHasVAES512() && slices.Contains(impls, "vaes")) {
		t.Fatalf("Impls() = %v with AVX-512 VAES support %v", impls, archHasVAES512())
	}
	switch {
	case has && !archPreferYMM() && impls[0] != "vaes-avx512":
		t.Errorf("Impls() = %v, want vaes-avx512 first", impls)
	case has && archPreferYMM() && impls[0] != "vaes":
		t.Errorf("Impls() = %v on a CPU that downclocks under zmm, want vaes first", impls)
	}
	if m, ok := archFamily6Model(); ok {
		t.Logf("Intel family 6 model %#x, prefer ymm: %v", m, archPreferYMM())
	}
	if has {
		b := mustNew(t, "vaes-avx512", make([]byte, 16))
		v := mustNew(t, "vaes", make([]byte, 16))
		if _, err := NewXTS(b, v); err == nil {
			t.Error("NewXTS accepted vaes-avx512 with vaes")
		}
	}
}

// TestForcedFallbacks reruns the XTS tests with CPU features switched off
// through GODEBUG (golang.org/x/sys/cpu honours cpu.<feature>=off), so that
// the selection falls back as it would on a CPU without AVX-512, without
// AVX2 or without AES-NI, and checks that every implementation left still
// agrees with generic. (The purego build tag covers the no-assembly build.)
func TestForcedFallbacks(t *testing.T) {
	if os.Getenv("BLKCRYPT_TEST_AES_IMPLS") != "" {
		t.Skip("already the child")
	}
	if testing.Short() {
		t.Skip("-short: skipping the three child runs")
	}
	have := Impls()
	without := func(drop ...string) string {
		var l []string
		for _, i := range have {
			if !slices.Contains(drop, i) {
				l = append(l, i)
			}
		}
		return strings.Join(l, ",")
	}
	for _, c := range []struct{ godebug, want string }{
		{"cpu.avx512f=off", without("vaes-avx512")},
		{"cpu.avx2=off", without("vaes-avx512", "vaes")},
		{"cpu.aes=off", "generic"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^(TestImplSelection|TestXTS|TestXTSSectors|TestXTSLongUnitsVsGeneric|TestXTSSectorBatchesVsGeneric|TestXTSStealingVsGeneric)$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GODEBUG="+c.godebug, "BLKCRYPT_TEST_AES_IMPLS="+c.want)
		out, err := cmd.CombinedOutput()
		if errors.Is(err, syscall.ENOEXEC) {
			// qemu-user without binfmt_misc: the host cannot start the
			// binary again (scripts/test.sh runs these cases directly).
			t.Skipf("cannot re-execute the test binary here (%v)", err)
		}
		if err != nil {
			t.Errorf("GODEBUG=%s: %v\n%s", c.godebug, err, out)
		}
	}
}

// TestXTSPlain64 checks EncryptPlain64/DecryptPlain64 against Encrypt and
// Decrypt with the IV spelled out, in every implementation, for lengths the
// by-value kernel takes and those it leaves to the general path.
func TestXTSPlain64(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(25, 26))
		for _, n := range []int{16, 31, 256, 512, 512 + 7, 4096, 4096 + 16, 8192} {
			for _, ks := range []int{32, 48, 64} {
				x := xtsPair(t, impl, randBytes(r, ks))
				sector := r.Uint64()
				var iv [16]byte
				for i := range 8 {
					iv[i] = byte(sector >> (8 * i))
				}
				pt := randBytes(r, n)
				want, got := make([]byte, n), make([]byte, n)
				x.Encrypt(want, pt, &iv)
				x.EncryptPlain64(got, pt, sector)
				if !bytes.Equal(got, want) {
					t.Fatalf("len %d key %d: EncryptPlain64 differs from Encrypt", n, ks)
				}
				x.DecryptPlain64(got, got, sector)
				if !bytes.Equal(got, pt) {
					t.Fatalf("len %d key %d: DecryptPlain64 does not invert", n, ks)
				}
			}
		}
	})
}
