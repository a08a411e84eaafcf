package aes

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestSpeedReport prints throughput figures that hold up on a busy machine,
// where go test -bench numbers swing widely: every operation is timed in
// many short windows interleaved with a reference (ECB encryption of 4 KiB
// with the same implementation) and the best window of each is kept.
// "ecb%" is the operation's throughput relative to that reference, which is
// close to the AES instruction throughput limit.
//
//	AES_SPEED=1 go test -run SpeedReport -v ./internal/aes/
func TestSpeedReport(t *testing.T) {
	if os.Getenv("AES_SPEED") == "" {
		t.Skip("set AES_SPEED=1 to print the speed report")
	}
	for _, impl := range Impls() {
		if impl == "generic" {
			continue
		}
		x := xtsPair(t, impl, benchKey(64))
		k := mustNew(t, impl, benchKey(32))
		ivk := mustNew(t, impl, benchKey(32))
		ref := make([]byte, 4096)
		ecb := func() { k.EncryptECB(ref, ref) }
		buf := make([]byte, batchBytes)
		var iv [16]byte
		report := func(name string, n int, f func()) {
			r, gbs := speedRatio(n, 4096, f, ecb)
			t.Logf("%-6s %-34s %6.2f GB/s  ecb%% %3.0f", impl, name, gbs, 100*r)
		}
		report("ECB encrypt 4096", 4096, func() { k.EncryptECB(buf[:4096], buf[:4096]) })
		for _, ss := range []int{512, 4096} {
			n := batchBytes / ss
			ivs := make([]byte, 16*n)
			sectors := make([]byte, 16*n)
			report(fmt.Sprintf("XTS Encrypt %d", ss), ss, func() { x.Encrypt(buf[:ss], buf[:ss], &iv) })
			report(fmt.Sprintf("XTS EncryptSectors 64K/%d", ss), batchBytes, func() { x.EncryptSectors(buf, buf, ss, ivs) })
			report(fmt.Sprintf("XTS DecryptSectors 64K/%d", ss), batchBytes, func() { x.DecryptSectors(buf, buf, ss, ivs) })
			report(fmt.Sprintf("CBC-ESSIV EncryptSectors 64K/%d", ss), batchBytes, func() {
				ivk.EncryptECB(ivs, sectors)
				k.EncryptCBCSectors(buf, buf, ss, ivs)
			})
			report(fmt.Sprintf("CBC DecryptSectors 64K/%d", ss), batchBytes, func() { k.DecryptCBCSectors(buf, buf, ss, ivs) })
			report(fmt.Sprintf("CBC Decrypt %d", ss), ss, func() { k.DecryptCBC(buf[:ss], buf[:ss], &iv) })
		}
		report("CBC Encrypt 4096 (serial)", 4096, func() { k.EncryptCBC(buf[:4096], buf[:4096], &iv) })
	}
}

// speedRatio times f and ref alternately in short windows for a while and
// returns throughput(f)/throughput(ref) and f's throughput in GB/s, both
// from the best window of each.
func speedRatio(nf, nref int, f, ref func()) (ratio, gbs float64) {
	const reps = 8
	bf, br := time.Duration(1<<62), time.Duration(1<<62)
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		st := time.Now()
		for i := 0; i < reps; i++ {
			f()
		}
		if d := time.Since(st); d < bf {
			bf = d
		}
		st = time.Now()
		for i := 0; i < reps; i++ {
			ref()
		}
		if d := time.Since(st); d < br {
			br = d
		}
	}
	rf := float64(reps*nf) / float64(bf.Nanoseconds())
	rr := float64(reps*nref) / float64(br.Nanoseconds())
	return rf / rr, rf
}
