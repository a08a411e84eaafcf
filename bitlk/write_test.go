package bitlk

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/sector"
)

// TestWriteRoundTrip: writes through a read-write volume land where
// Windows keeps the data — the volume header at its stored place,
// encrypted for that place, everything else in place — writes into the
// metadata areas are dropped, and the metadata still opens afterwards.
func TestWriteRoundTrip(t *testing.T) {
	dir := bitlkImages(t)
	for _, name := range []string{"bitlk-aes-xts-128.img", "bitlk-aes-cbc-elephant-256.img", "bitlk-aes-cbc-128-4k.img"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			m, err := Read(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			key, _, err := m.VolumeKey([]byte("anaconda"))
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			v, err := Open(f, int64(len(raw)), m, key, false)
			if err != nil {
				t.Fatal(err)
			}
			hs := int64(m.VolumeHeaderSize)
			md := int64(m.MetadataOffsets[1])
			writes := []struct {
				off int64
				n   int
			}{
				{100, int(hs)},                            // unaligned, across the end of the header
				{md - 1000, 3000},                         // into a metadata area
				{50 << 20, 1 << 20},                       // data
				{int64(m.VolumeHeaderOffset) - 512, 1024}, // into the header's stored place
			}
			data := make([][]byte, len(writes))
			for i, w := range writes {
				data[i] = make([]byte, w.n)
				rand.Read(data[i])
				if _, err := v.WriteAt(data[i], w.off); err != nil {
					t.Fatal(err)
				}
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(path)
			for i, o := range m.MetadataOffsets {
				if !bytes.Equal(after[o:o+fveAreaSize], raw[o:o+fveAreaSize]) {
					t.Errorf("metadata area %d changed", i)
				}
			}
			// The stored header decrypts, at its own place, to what was
			// written at offset 0.
			c, err := sector.New(m.CipherSpec(), key, sector.Options{SectorSize: m.SectorSize, LargeIV: m.SectorSize != 512})
			if err != nil {
				t.Fatal(err)
			}
			hdr := append([]byte(nil), after[m.VolumeHeaderOffset:m.VolumeHeaderOffset+m.VolumeHeaderSize]...)
			if err := c.DecryptSectors(hdr, hdr, m.VolumeHeaderOffset/512); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(hdr[100:], data[0][:hs-100]) {
				t.Error("the stored volume header does not decrypt to what was written at offset 0")
			}

			m2, err := Read(bytes.NewReader(after))
			if err != nil {
				t.Fatal(err)
			}
			f2, _ := os.Open(path)
			v2, err := Open(f2, int64(len(after)), m2, key, true)
			if err != nil {
				t.Fatal(err)
			}
			defer v2.Close()
			l, err := m2.Layout(int64(len(after)))
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range writes {
				got := make([]byte, w.n)
				if _, err := v2.ReadAt(got, w.off); err != nil && err != io.EOF {
					t.Fatal(err)
				}
				// Bytes in the metadata areas and the header's stored
				// place read as zeros.
				want := append([]byte(nil), data[i]...)
				for j := range want {
					for _, z := range l.Zero {
						if p := w.off + int64(j); p >= z[0] && p < z[1] {
							want[j] = 0
						}
					}
				}
				if !bytes.Equal(got, want) {
					t.Errorf("write %d (%d bytes at %d) reads back differently", i, w.n, w.off)
				}
			}
			if _, err := v2.WriteAt([]byte{1}, 0); err == nil {
				t.Error("read-only volume accepted a write")
			}
		})
	}
}
