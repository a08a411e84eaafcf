package powercut

import (
	"bytes"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// The model goes under header writes (and, see the root package's
// volume_powercut_test.go, under a Volume).
var _ luksutil.Device = (*Device)(nil)

func fill(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

// trace: durable 'A'; W1 writes 'B' over sectors 0-3, W2 writes 'C' over
// sectors 2-5; Sync; W3 writes 'D' over sector 7 (unsynced).
func newTrace(t *testing.T) *Device {
	d := New(fill(8*SectorSize, 'A'))
	for _, w := range []struct {
		b   byte
		off int64
		n   int
	}{{'B', 0, 4}, {'C', 2 * SectorSize, 4}} {
		if _, err := d.WriteAt(fill(w.n*SectorSize, w.b), w.off); err != nil {
			t.Fatal(err)
		}
	}
	d.Sync()
	d.WriteAt(fill(SectorSize, 'D'), 7*SectorSize)
	return d
}

func sectors(img []byte) string {
	var s []byte
	for i := 0; i < len(img); i += SectorSize {
		s = append(s, img[i])
	}
	return string(s)
}

func TestCutStates(t *testing.T) {
	d := newTrace(t)
	if d.Ops() != 4 {
		t.Fatalf("%d ops recorded", d.Ops())
	}
	want := map[int][2]string{ // keep-none, keep-all per cut point
		0: {"AAAAAAAA", "AAAAAAAA"},
		1: {"AAAAAAAA", "BBBBAAAA"},
		2: {"AAAAAAAA", "BBCCCCAA"},
		3: {"BBCCCCAA", "BBCCCCAA"},
		4: {"BBCCCCAA", "BBCCCCAD"},
	}
	for k, w := range want {
		c := d.CutAfter(k)
		if got := sectors(c.Pick(KeepNone).Bytes()); got != w[0] {
			t.Errorf("cut %d keep-none: %s, want %s", k, got, w[0])
		}
		if got := sectors(c.Pick(KeepAll).Bytes()); got != w[1] {
			t.Errorf("cut %d keep-all: %s, want %s", k, got, w[1])
		}
	}
	if !bytes.Equal(d.CutAfter(4).Pick(KeepAll).Bytes(), d.Current()) {
		t.Error("keeping everything is not what reads see")
	}
}

// TestRandomSurvivors checks that random survivor sets stay within the
// model (each sector durable or one of its cached versions) and reach the
// states the model promises: reordered (the later write kept over a lost
// earlier one), torn (part of one write kept), and deterministic per seed.
func TestRandomSurvivors(t *testing.T) {
	d := newTrace(t)
	c := d.CutAfter(2)
	allowed := []string{"AB", "AB", "ABC", "ABC", "AC", "AC", "A", "A"}
	seen := map[string]bool{}
	for i := 0; i < 2000; i++ {
		im := c.Pick(Random(7, i))
		s := sectors(im.Bytes())
		for j := range s {
			if !bytes.ContainsRune([]byte(allowed[j]), rune(s[j])) {
				t.Fatalf("%s: sector %d holds %q, the model allows only %q", im.Survivors, j, s[j], allowed[j])
			}
		}
		seen[s] = true
		if again := c.Pick(Random(7, i)); again.Sum != im.Sum {
			t.Fatalf("%s is not deterministic", im.Survivors)
		}
	}
	for _, s := range []string{
		"AAAAAAAA", // nothing kept
		"BBCCCCAA", // everything kept
		"AACCCCAA", // the later write kept, the earlier lost
		"BBBBAAAA", // in order, the second lost
		"BBAAAAAA", // the first torn
		"BBCCAAAA", // the second torn
		"ABACAAAA", // sector by sector
		"BBBBCCAA", // the first write durable over the second's sectors
	} {
		if !seen[s] {
			t.Errorf("no random survivor set gives %s (of %d distinct)", s, len(seen))
		}
	}
	if len(c.Images(7, 30)) < 10 {
		t.Errorf("only %d distinct images from 32 survivor sets", len(c.Images(7, 30)))
	}
	if n := len(d.CutAfter(3).Images(7, 30)); n != 1 {
		t.Errorf("a cut right after a sync has %d images, want 1", n)
	}
}

// TestPartialSectorWrite: a write that covers part of a sector persists
// as the whole sector the cache held after it (read-modify-write), never
// as a mix of bytes from different moments.
func TestPartialSectorWrite(t *testing.T) {
	d := New(fill(2*SectorSize, 'A'))
	d.WriteAt(fill(100, 'B'), 0)
	d.WriteAt(fill(100, 'C'), 200)
	c := d.CutAfter(2)
	got := map[string]bool{}
	for i := 0; i < 200; i++ {
		b := c.Pick(Random(1, i)).Bytes()
		got[string([]byte{b[0], b[250], b[600]})] = true
	}
	for s := range got {
		if s[2] != 'A' || s == "ACA" {
			t.Errorf("sector state %q: C kept without the B written before it in the same sector, or sector 1 touched", s)
		}
	}
	for _, s := range []string{"AAA", "BAA", "BCA"} {
		if !got[s] {
			t.Errorf("state %q never produced", s)
		}
	}
}

func TestBounds(t *testing.T) {
	d := New(make([]byte, 1024))
	if _, err := d.WriteAt(make([]byte, 10), 1020); err == nil {
		t.Error("a write past the end succeeded")
	}
	d.Close()
	if _, err := d.ReadAt(make([]byte, 1), 0); err != ErrClosed {
		t.Errorf("read after close: %v", err)
	}
}

// TestSetsIndependent: the random sets of one cut differ at every sector,
// the first included (correlated generator seeds once kept sector 0 in
// every set, so a torn header never lost its first sector).
func TestSetsIndependent(t *testing.T) {
	d := New(make([]byte, 64*SectorSize))
	d.WriteAt(fill(32*SectorSize, 'P'), 0)
	c := d.CutAfter(1)
	for s := 0; s < 32; s++ {
		kept, lost := 0, 0
		for _, im := range c.Images(3, 12) {
			if im.Bytes()[s*SectorSize] == 'P' {
				kept++
			} else {
				lost++
			}
		}
		if kept == 0 || lost == 0 {
			t.Errorf("sector %d: kept in %d sets, lost in %d", s, kept, lost)
		}
	}
}
