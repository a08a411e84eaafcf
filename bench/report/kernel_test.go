package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Lines as bench_xts and clockaes print them (../shared/peers/xts), so a
// change of their format shows here rather than as an empty table.
const benchXTSOut = `RESULT impl=k512      key=AES-256 dir=enc size=4096   median_MBps= 17021.1 min= 16597.4 max= 17021.1 runs=17021,16597 median_Bpc=4.104 median_GHz=4.155 ghz_range=4.04-4.15 max_other_cpus=0.00 max_nice_cpus=0.00 max_steal=0.00 retries=1 waited_s=3  # linux vaes_avx10_512 (zmm)
RESULT impl=kavx2     key=AES-128 dir=dec size=512    median_MBps=  9201.9 min=  7448.0 max=  9201.9 runs=9202,7448 median_Bpc=2.392 median_GHz=4.145 ghz_range=3.11-4.21 max_other_cpus=0.16 max_nice_cpus=0.00 max_steal=0.00 retries=1 waited_s=60  # linux vaes_avx2 (ymm, VEX)
something else
`

const clockaesOut = `CLOCK add-chain (scalar, add reg,reg) : 4.029 GHz
AESUNIT vaesenc xmm 12acc :   8.196 Ginstr/s =  2.02 instr/cycle =  2.02 blocks/cycle  -> AES-256 limit  2.30 B/cycle =   9367 MB/s, AES-128 limit  3.22 B/cycle =  13114 MB/s
AESUNIT vaesenc zmm 12acc :   4.053 Ginstr/s =  1.00 instr/cycle =  3.99 blocks/cycle  -> AES-256 limit  4.56 B/cycle =  18530 MB/s, AES-128 limit  6.38 B/cycle =  25942 MB/s
AESUNIT vaesdec ymm 12acc :   8.110 Ginstr/s =  1.99 instr/cycle =  3.99 blocks/cycle  -> AES-256 limit  4.55 B/cycle =  18536 MB/s, AES-128 limit  6.37 B/cycle =  25951 MB/s
LOAD other processes used 0.18 CPUs (nice>0 jobs: 0.00 CPUs) on average during this run, steal 0.00
(instr/cycle computed with clock 4.067 GHz = mean of the first two clock measurements)
`

func TestParseResults(t *testing.T) {
	got := map[string]map[cell]float64{}
	ghz := parseResults([]byte(benchXTSOut), got)
	if ghz != 4.21 {
		t.Errorf("highest clock %v, want 4.21", ghz)
	}
	if v := got["k512"][cell{256, false, 4096}]; v != 17021.1 {
		t.Errorf("k512 AES-256 enc 4096: %v", v)
	}
	if v := got["kavx2"][cell{128, true, 512}]; v != 9201.9 {
		t.Errorf("kavx2 AES-128 dec 512: %v", v)
	}
	// A later round keeps the best of the two.
	parseResults([]byte("RESULT impl=k512 key=AES-256 dir=enc size=4096 median_MBps= 100.0 min= 1 max= 1 runs=1 ghz_range=1-2 \n"), got)
	if v := got["k512"][cell{256, false, 4096}]; v != 17021.1 {
		t.Errorf("a slower round replaced the best: %v", v)
	}
	if len(got) != 2 {
		t.Errorf("parsed %d implementations, want 2: %v", len(got), got)
	}
}

func TestParseLimit(t *testing.T) {
	l := parseLimit([]byte(clockaesOut))
	if l.enc[256] != 4.56 || l.enc[128] != 6.38 || l.dec[256] != 4.55 || l.dec[128] != 6.37 || l.ghz != 4.067 || l.load != 0.18 {
		t.Fatalf("parsed %+v", l)
	}
	if v := l.of(cell{256, false, 4096}); v != 0 {
		t.Errorf("limit without a run clock is %v, want 0 (not measured)", v)
	}
	l.runGHz = 4
	if v := l.of(cell{256, false, 4096}); v != 4.56*4*1e3 {
		t.Errorf("AES-256 enc limit %v MB/s", v)
	}
	if v := l.of(cell{128, true, 4096}); v != 6.37*4*1e3 {
		t.Errorf("AES-128 dec limit %v MB/s", v)
	}
	l.load = 1.2
	if v := l.of(cell{256, false, 4096}); v != 0 {
		t.Errorf("limit measured under load is %v MB/s, want 0 (not measured)", v)
	}
}

// TestPeersCurrent: a cached build is used only if its correctness check
// passed and no source is newer than it.
func TestPeersCurrent(t *testing.T) {
	build, src := t.TempDir(), t.TempDir()
	old := time.Now().Add(-time.Hour)
	os.WriteFile(filepath.Join(src, "a.c"), nil, 0o644)
	os.Chtimes(filepath.Join(src, "a.c"), old, old)
	if peersCurrent(build, src) {
		t.Error("empty build folder accepted")
	}
	os.WriteFile(filepath.Join(build, "bench_xts"), nil, 0o755)
	os.WriteFile(filepath.Join(build, "test_output.txt"), []byte("FAILED\n"), 0o644)
	if peersCurrent(build, src) {
		t.Error("build whose check failed accepted")
	}
	os.WriteFile(filepath.Join(build, "test_output.txt"), []byte("RESULT: ALL OK\n"), 0o644)
	if !peersCurrent(build, src) {
		t.Error("checked, current build refused")
	}
	os.Chtimes(filepath.Join(src, "a.c"), time.Now().Add(time.Hour), time.Now().Add(time.Hour))
	if peersCurrent(build, src) {
		t.Error("build older than its sources accepted")
	}
}
