package fat

import (
	"bytes"
	"errors"
	"io/fs"
	"os"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"strings"
	"testing"
)

// FuzzFAT opens arbitrary bytes as a volume and walks it, reading every
// file: any failure must be one line, and a failure about the content
// must wrap ErrCorrupt. The seeds are a small volume made by mkfs.vfat and
// mtools when they are installed, and a hand-made FAT12 boot sector.
func FuzzFAT(f *testing.F) {
	f.Add(synthFAT12())
	if testing.Short() {
		return
	}
	// A larger seed would slow the fuzzer to a crawl: one FAT12 volume
	// of 160 KiB (a FAT16 one needs 2 MiB at least).
	if _, err := testenv.LookPath("mkfs.vfat"); err == nil {
		img := buildFAT(f, 12, 160, map[string][]byte{
			"a long name.txt": []byte("hello\n"),
			"dir/sub/x.txt":   []byte("x\n"),
		})
		b, err := os.ReadFile(img)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Open(bytes.NewReader(b), int64(len(b)))
		if err == nil {
			err = fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if !d.IsDir() {
					_, err = fs.ReadFile(v, p)
				}
				return err
			})
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("error of more than one line: %q", err)
		}
		var pe *fs.PathError
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.As(err, &pe) && !strings.Contains(err.Error(), "EOF") {
			t.Fatalf("error neither corrupt nor a path error: %v", err)
		}
	})
}

// synthFAT12 is a minimal FAT12 volume of 64 KiB: a boot sector, one
// FAT and a 16-entry root directory holding one file of one cluster.
func synthFAT12() []byte {
	b := make([]byte, 64<<10)
	copy(b, []byte{0xEB, 0x3C, 0x90})
	copy(b[3:], "MSDOS5.0")
	b[11], b[12] = 0, 2 // 512 bytes a sector
	b[13] = 1           // a sector a cluster
	b[14] = 1           // reserved
	b[16] = 1           // FATs
	b[17] = 16          // root entries
	b[19], b[20] = 128, 0
	b[21] = 0xF8
	b[22] = 1 // FAT sectors
	b[38] = 0x29
	copy(b[43:], "SYNTH      ")
	fat := b[512:]
	copy(fat, []byte{0xF8, 0xFF, 0xFF, 0xFF, 0x0F}) // clusters 0, 1 and 2 (end)
	root := b[1024:]
	copy(root, "HELLO   TXT")
	root[11] = 0x20
	root[26] = 2
	root[28] = 6
	copy(b[1024+512:], "hello\n")
	return b
}
