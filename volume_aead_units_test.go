package blkcrypt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// TestIntegrityVolumeUnits: a request of an integrity volume is shared
// by goroutines in units; with bad sectors in two units of one read (the
// first 256 KiB unit and a later one), every read names the first bad sector, whichever unit
// finished first, and returns nothing of the request; reads that miss
// both bad sectors return what was written, across unit and chunk
// boundaries.
func TestIntegrityVolumeUnits(t *testing.T) {
	pass := []byte("units")
	p := filepath.Join(t.TempDir(), "v.img")
	if err := Format(context.Background(), p, pass, FormatOptions{Cipher: "aes-gcm-random", Integrity: "aead", KeySize: 32, SectorSize: 4096,
		Size: 4 << 20, Offset: 2048, PBKDF: PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(context.Background(), p, OpenOptions{Passphrase: pass})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, v.Size())
	for i := range want {
		want[i] = byte(i*13 + i>>12)
	}
	// Unaligned and odd-sized writes too: partial sectors, a chunk and a
	// bit, a request of one unit and one sector.
	for _, w := range [][2]int64{{0, v.Size()}, {100, 1<<20 + 5000}, {3 << 16, aeadUnitBytes + 4096}} {
		if _, err := v.WriteAt(want[w[0]:w[0]+w[1]], w[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	const ss = 4096
	bad := []int64{35, 145} // at 140 KiB and 580 KiB
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := luks2.Read(luksutil.File{File: f})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	iv, err := integrity.Open(&integrity.SectionDevice{Dev: f, Offset: h.DataOffset(), Length: fi.Size() - h.DataOffset()}, integrity.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	g := iv.Geometry()
	iv.Close()
	for _, s := range bad {
		at := h.DataOffset() + int64(g.DataSector(uint64(s)*ss/512))<<9 + 77
		b := []byte{0}
		f.ReadAt(b, at)
		b[0] ^= 0x40
		f.WriteAt(b, at)
	}
	f.Close()

	v, err = Open(context.Background(), p, OpenOptions{Passphrase: pass, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, 1<<20)
	var ie *IntegrityError
	for range 50 {
		clear(got)
		n, err := v.ReadAt(got, 0)
		if !errors.As(err, &ie) || ie.Offset != bad[0]*ss || n != 0 || !bytes.Equal(got, make([]byte, len(got))) {
			t.Fatalf("read over both bad sectors: %d bytes, %v (want sector at byte %d, nothing returned)", n, err, bad[0]*ss)
		}
	}
	// From just after the first bad sector: the second is the first.
	if _, err := v.ReadAt(got, (bad[0]+1)*ss); !errors.As(err, &ie) || ie.Offset != bad[1]*ss {
		t.Fatalf("read over the second bad sector: %v", err)
	}
	for _, r := range [][2]int64{{(bad[1] + 1) * ss, v.Size() - (bad[1]+1)*ss}, {0, bad[0] * ss}, {(bad[0] + 1) * ss, (bad[1] - bad[0] - 1) * ss}} {
		buf := make([]byte, r[1])
		if _, err := v.ReadAt(buf, r[0]); err != nil || !bytes.Equal(buf, want[r[0]:r[0]+r[1]]) {
			t.Fatalf("%d bytes at %d: %v, or not what was written", r[1], r[0], err)
		}
	}
}
