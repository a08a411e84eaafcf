package blkcrypt_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/sector"
)

// BenchmarkVolume measures the Volume's own data path (request checks,
// range locks, the sector map, the device call) over a file in the page
// cache, for 4 KiB and 1 MiB requests: the part the format-neutral sector
// map (mapper.go) sits in.
func BenchmarkVolume(b *testing.B) {
	const size = 64 << 20
	f, err := os.Create(filepath.Join(b.TempDir(), "v"))
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	c, err := sector.New("aes-xts-plain64", make([]byte, 64), sector.Options{SectorSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	v, err := blkcrypt.NewVolume(f, c, 0, size, false)
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	for _, n := range []int{4 << 10, 1 << 20} {
		buf := make([]byte, n)
		for _, op := range []string{"read", "write"} {
			b.Run(fmt.Sprintf("%s/%dK", op, n>>10), func(b *testing.B) {
				b.SetBytes(int64(n))
				for i := 0; i < b.N; i++ {
					off := int64(i*n) % size
					var err error
					if op == "read" {
						_, err = v.ReadAt(buf, off)
					} else {
						_, err = v.WriteAt(buf, off)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
