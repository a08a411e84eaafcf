//go:build amd64 && !purego

package aes

import (
	"slices"
	"strconv"
	"testing"
)

// TestCBCMBLaneChoice runs the multi-buffer CBC checks on vaes-avx512 with
// the 32-sector kernels (Zen 5's choice) and without (Intel's), whichever
// this CPU picks, and the 32-sector ones with other group lags than the
// dispatch's, so that every kernel and path is tested on any AVX-512 CPU.
func TestCBCMBLaneChoice(t *testing.T) {
	if !slices.Contains(Impls(), "vaes-avx512") {
		t.Skipf("vaes-avx512 not available: CPU or build lacks %s", archMissing("vaes-avx512"))
	}
	saved, savedLag := cbcMB32, cbcLag32Bytes
	t.Cleanup(func() { cbcMB32, cbcLag32Bytes = saved, savedLag })
	for _, c := range []struct {
		name string
		mb32 bool
		lag  int
	}{
		{"mb16", false, 128},
		{"mb32", true, 256},
		{"mb32-lag128", true, 128},
		{"mb32-lag0", true, 0},
		{"mb32-lag64", true, 64},
		{"mb32-lag512", true, 512},
	} {
		t.Run(c.name, func(t *testing.T) {
			cbcMB32, cbcLag32Bytes = c.mb32, c.lag
			checkCBCSectorShapes(t, "vaes-avx512")
			checkESSIVCBCSectors(t, "vaes-avx512")
		})
	}
}

// BenchmarkCBCMBLanes compares the 16- and 32-sector multi-buffer kernels
// (and the 32-sector one's group lags at 2 and 4 KiB) next to the XTS
// batch the CBC-ESSIV target is a share of: AES-256, ESSIV batches of 256
// sectors, in place, as the sector layer calls them. Sub-benchmarks of one
// -count 1 run are interleaved; repeat the run for rounds.
func BenchmarkCBCMBLanes(b *testing.B) {
	if !slices.Contains(Impls(), "vaes-avx512") {
		b.Skip("vaes-avx512 not available")
	}
	saved, savedLag := cbcMB32, cbcLag32Bytes
	b.Cleanup(func() { cbcMB32, cbcLag32Bytes = saved, savedLag })
	for _, ss := range []int{512, 2048, 4096} {
		b.Run("xts/"+strconv.Itoa(ss), func(b *testing.B) {
			x := xtsPair(b, "vaes-avx512", benchKey(64))
			buf := heapBuf(256 * ss)
			ivs := make([]byte, 16*256)
			for i := 0; i < 256; i++ {
				ivs[16*i], ivs[16*i+1] = byte(i), byte(i>>8)
			}
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				x.EncryptSectors(buf, buf, ss, ivs)
			}
		})
		type variant struct {
			name string
			mb32 bool
			lag  int
		}
		vs := []variant{{"mb16", false, 0}, {"mb32", true, cbcLag32Bytes}}
		if ss%2048 == 0 { // named by the lag cbcLag32 derives from cbcLag32Bytes
			vs = []variant{{"mb16", false, 0}, {"", true, 128}, {"", true, 256}, {"", true, 384}}
		}
		for _, v := range vs {
			name := v.name
			if v.mb32 {
				cbcLag32Bytes = v.lag
				name = "mb32-lag" + strconv.Itoa(cbcLag32(ss))
			}
			b.Run("essiv/"+strconv.Itoa(ss)+"/"+name, func(b *testing.B) {
				cbcMB32, cbcLag32Bytes = v.mb32, v.lag
				k := mustNew(b, "vaes-avx512", benchKey(32))
				ivk := mustNew(b, "vaes-avx512", benchKey(32))
				buf := heapBuf(256 * ss)
				ivs := make([]byte, 16*256)
				for i := 0; i < 256; i++ {
					ivs[16*i], ivs[16*i+1] = byte(i), byte(i>>8)
				}
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					k.EncryptESSIVCBCSectors(ivk, buf, buf, ss, ivs)
				}
			})
		}
	}
}
