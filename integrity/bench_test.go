package integrity

import (
	"fmt"
	"testing"
)

// BenchmarkVolume: sequential 1 MiB reads (tag checks) and journal-mode
// writes (journal, in place, two syncs) of an in-memory volume, to set
// against a plain Volume's data path (issue #29's ≥ 0.5× target). Run on
// an idle machine.
func BenchmarkVolume(b *testing.B) {
	for _, alg := range []string{"crc32c", "sha256"} {
		for _, ss := range []int{512, 4096} {
			dev := make(memDev, 64<<20)
			if _, err := Format(dev, FormatOptions{Algorithm: alg, SectorSize: ss}); err != nil {
				b.Fatal(err)
			}
			for _, mode := range []Mode{ModeJournal, ModeBitmap} {
				v, err := Open(dev, Options{Algorithm: alg, Mode: mode})
				if err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, 1<<20)
				n := v.Size() / int64(len(buf))
				b.Run(fmt.Sprintf("%s/%d/mode%d/read", alg, ss, mode), func(b *testing.B) {
					b.SetBytes(int64(len(buf)))
					for i := 0; i < b.N; i++ {
						if _, err := v.ReadAt(buf, int64(i)%n*int64(len(buf))); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run(fmt.Sprintf("%s/%d/mode%d/write", alg, ss, mode), func(b *testing.B) {
					b.SetBytes(int64(len(buf)))
					for i := 0; i < b.N; i++ {
						if _, err := v.WriteAt(buf, int64(i)%n*int64(len(buf))); err != nil {
							b.Fatal(err)
						}
					}
				})
				v.Close()
			}
		}
	}
}

// memDev is a plain in-memory device (no power-cut recording).
type memDev []byte

func (m memDev) ReadAt(p []byte, off int64) (int, error)  { return copy(p, m[off:]), nil }
func (m memDev) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }
func (m memDev) Sync() error                              { return nil }
func (m memDev) Size() (int64, error)                     { return int64(len(m)), nil }
