package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerdict(t *testing.T) {
	ratio := target{keys: []string{"a", "b"}, labels: []string{"x", "y"}, min: 1.5}
	allocs := target{keys: []string{"n"}, min: 0, atMost: true, unit: "allocs"}
	rec := target{keys: []string{"a"}, record: true}
	share := target{keys: []string{"f"}, record: true, unit: "%"}
	mbs := target{keys: []string{"v"}, min: 2000, unit: "MB/s"}
	for _, c := range []struct {
		tg        target
		r         map[string]float64
		cell, met string
	}{
		{ratio, map[string]float64{"a": 1.5, "b": 2}, "1.50× (x), 2.00× (y)", "yes"},
		{ratio, map[string]float64{"a": 1.49, "b": 2}, "1.49× (x), 2.00× (y)", "no"},
		{ratio, map[string]float64{"a": 3}, "3.00× (x), – (y)", "not measured"},
		{allocs, map[string]float64{"n": 0}, "0 allocs", "yes"},
		{allocs, map[string]float64{"n": 1}, "1 allocs", "no"},
		{rec, map[string]float64{"a": 0.5}, "0.50×", "recorded"},
		{rec, nil, "–", "not measured"},
		{share, map[string]float64{"f": 0.904}, "90%", "recorded"},
		{mbs, map[string]float64{"v": 2500}, "2500 MB/s", "yes"},
		{mbs, map[string]float64{"v": 1999}, "1999 MB/s", "no"},
	} {
		cell, met := c.tg.verdict(c.r)
		if cell != c.cell || met != c.met {
			t.Errorf("%v on %v: %q %q, want %q %q", c.tg.keys, c.r, cell, met, c.cell, c.met)
		}
	}
}

// TestReadmeBlock: the README's figures block is replaced with this run's
// figures and its id, and nothing outside the markers changes.
func TestReadmeBlock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	before, after := "# x\n\nintro\n\n", "\n\nrest\n"
	if err := os.WriteFile(p, []byte(before+readmeBegin+"\nold 1.6–1.7×\n"+readmeEnd+after), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run{ID: "20261201T0900Z-abc", CPU: "cpu", Cores: 2, Date: "2026-12-01",
		Results: map[string]float64{"xtskernel.aes256.enc4096": 1.4, "kernels.essiv_enc": 10.29, "xtskernel.batch512": 2.36, "nbd.read.nbdkit-luks": 2.92}}
	if err := updateReadme(p, r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	s := string(b)
	if !strings.HasPrefix(s, before+readmeBegin) || !strings.HasSuffix(s, readmeEnd+after) {
		t.Fatalf("text outside the block changed:\n%s", s)
	}
	for _, want := range []string{"run 20261201T0900Z-abc", "1.40×", "10.29×", "2.36×", "2.92×", "(not measured)"} {
		if !strings.Contains(s, want) {
			t.Errorf("block lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "1.6–1.7×") {
		t.Error("old figure kept")
	}
	if err := updateReadme(filepath.Join(t.TempDir(), "none.md"), r); err == nil {
		t.Error("missing README accepted")
	}
	os.WriteFile(p, []byte("no markers"), 0o644)
	if err := updateReadme(p, r); err == nil {
		t.Error("README without markers accepted")
	}
}

// TestRunsRoundTrip: a saved run is read back for the history table.
func TestRunsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := run{ID: "id1", CPU: "cpu", Results: map[string]float64{"kernels.xts512": 1.25}}
	if err := saveRun(dir, r); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o644)
	rs := loadRuns(dir)
	if len(rs) != 1 || rs[0].ID != "id1" || rs[0].Results["kernels.xts512"] != 1.25 {
		t.Fatalf("loaded %+v", rs)
	}
}

// TestReadmeFiguresInBenchmarks: every figure README quotes appears in
// BENCHMARKS.md, so README never drifts from the run it names.
func TestReadmeFiguresInBenchmarks(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	bench, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		t.Fatal("README has no figures block")
	}
	n := 0
	for _, f := range strings.Fields(s[i+len(readmeBegin) : j]) {
		f = strings.TrimRight(f, ".,;:)")
		if strings.HasSuffix(f, "×") {
			n++
			if !strings.Contains(string(bench), f) {
				t.Errorf("README quotes %s, which BENCHMARKS.md does not contain", f)
			}
		}
	}
	if n == 0 {
		t.Error("README's figures block quotes no ratio")
	}
	if strings.Contains(s, "1.6–1.7×") {
		t.Error("README still has the drifted XTS claim")
	}
}

// TestCommentaryFromThisRun: the commentary names the run's CPU and the
// AES-unit limit, and a figure the run lacks reads "not measured", never a
// number from somewhere else.
func TestCommentaryFromThisRun(t *testing.T) {
	var b strings.Builder
	writeCommentary(&b, run{ID: "id1", CPU: "Some CPU", Cores: 2, Results: map[string]float64{
		"aesunit.bpc.aes256": 4.56, "aesunit.mbs.aes256.enc": 18530, "aesunit.ghz": 4.06, "aesunit.load": 0.1,
		"xtskernel.aes256.enc4096": 0.93, "xtskernel.batch512": 1.81, "xtskernel.limit_fraction.batch512": 0.9,
	}})
	s := b.String()
	for _, want := range []string{"run id1", "Some CPU, 2 vCPUs", "4.56 B/cycle", "18530 MB/s at 4.06 GHz", "0.93×", "1.81×", "90% of the limit", "(not measured)"} {
		if !strings.Contains(s, want) {
			t.Errorf("commentary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "not reliable") {
		t.Error("a quiet limit measurement called unreliable")
	}

	b.Reset()
	writeCommentary(&b, run{ID: "id2", CPU: "cpu", Results: map[string]float64{"aesunit.bpc.aes256": 6.9, "aesunit.load": 1.2}})
	if s := b.String(); !strings.Contains(s, "not reliable in this run") {
		t.Errorf("a limit measured under load is not flagged:\n%s", s)
	}

	b.Reset()
	writeCommentary(&b, run{ID: "id3", CPU: "cpu"})
	s = b.String()
	if strings.Contains(s, "×") || strings.Contains(s, "MB/s at") && !strings.Contains(s, "(not measured) MB/s") {
		t.Errorf("commentary of an empty run quotes a figure:\n%s", s)
	}
}
