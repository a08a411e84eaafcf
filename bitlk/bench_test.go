package bitlk_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/bitlk"
	"github.com/blkcrypt/blkcrypt/sector"
)

// BenchmarkRead measures sequential read throughput of whole decrypted
// BitLocker fixture images (1 MiB reads through the blkcrypt.Volume the
// layout device feeds; the image files are in the page cache). The key
// is unlocked once, outside the timing.
func BenchmarkRead(b *testing.B) {
	dir := bitlk.FixtureImages(b)
	for _, c := range []struct {
		name, secret string
		baseline     bool
	}{
		{"bitlk-aes-xts-128.img", "anaconda", false},
		{"bitlk-aes-xts-128.img", "anaconda", true},
		{"bitlk-aes-xts-256.img", "anaconda", false},
		{"bitlk-aes-xts-128-4k.img", "anaconda", false},
		{"bitlk-aes-cbc-128.img", "anaconda", false},
		{"bitlk-aes-cbc-elephant-128.img", "anaconda", false},
	} {
		bn := c.name
		if c.baseline {
			// The same file, key and cipher as one plain dm-crypt segment
			// (wrong data in the special regions): the cost of the layout
			// device is the difference.
			bn += "/plain-segment-baseline"
		}
		b.Run(bn, func(b *testing.B) {
			path := filepath.Join(dir, c.name)
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			m, err := bitlk.Read(f)
			if err != nil {
				b.Fatal(err)
			}
			key, _, err := m.VolumeKey([]byte(c.secret))
			if err != nil {
				b.Fatal(err)
			}
			st, _ := f.Stat()
			v, err := blkcrypt.OpenDevice(context.Background(), f, blkcrypt.OpenOptions{Type: "bitlk", VolumeKey: key, ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			if c.baseline {
				v.Close()
				f, _ = os.Open(path)
				sc, err := sector.New(m.CipherSpec(), key, sector.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if v, err = blkcrypt.NewVolume(f, sc, 0, st.Size(), true); err != nil {
					b.Fatal(err)
				}
			}
			defer v.Close()
			buf := make([]byte, 1<<20)
			// Warm the page cache.
			io.Copy(io.Discard, io.NewSectionReader(f, 0, st.Size()))
			b.SetBytes(v.Size())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for off := int64(0); off < v.Size(); off += int64(len(buf)) {
					if _, err := v.ReadAt(buf[:min(int64(len(buf)), v.Size()-off)], off); err != nil && err != io.EOF {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
