package luksutil_test

import (
	"bytes"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
)

// TestRestoreHeaderOrder: with no header on the device, the backup's
// non-header part goes first, then each header range in the given order,
// each step synced; sectors that already match are not written; a backup
// identical to the device writes nothing.
func TestRestoreHeaderOrder(t *testing.T) {
	const n = 16 * 512
	cur := make([]byte, n+4096)
	backup := bytes.Repeat([]byte{0xaa}, n)
	copy(backup[10*512:11*512], cur[10*512:]) // sector 10 already holds the backup's content
	dev := powercut.New(cur)
	headers := []luksutil.Range{{Off: 4 * 512, Len: 2 * 512}, {Off: 0, Len: 2 * 512}}
	if err := luksutil.RestoreHeader(dev, backup, headers); err != nil {
		t.Fatal(err)
	}
	type w struct{ off, n int64 }
	var got []w
	for _, op := range dev.Trace() {
		if op.Sync {
			got = append(got, w{-1, 0})
		} else {
			got = append(got, w{op.Off, int64(len(op.Data))})
		}
	}
	want := []w{{2 * 512, 2 * 512}, {6 * 512, 4 * 512}, {11 * 512, 5 * 512}, {-1, 0}, {4 * 512, 2 * 512}, {-1, 0}, {0, 2 * 512}, {-1, 0}}
	if len(got) != len(want) {
		t.Fatalf("trace %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("trace %v, want %v", got, want)
		}
	}
	if !bytes.Equal(dev.Current()[:n], backup) {
		t.Fatal("the device does not hold the backup")
	}
	again := powercut.New(dev.Current())
	if err := luksutil.RestoreHeader(again, backup, headers); err != nil || again.Ops() != 0 {
		t.Fatalf("restoring what is already there: %v, %d writes and syncs", err, again.Ops())
	}
	if err := luksutil.RestoreHeader(powercut.New(make([]byte, 512)), backup, headers); err == nil {
		t.Fatal("a device smaller than the backup was accepted")
	}
}
