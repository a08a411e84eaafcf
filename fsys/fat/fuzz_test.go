package fat

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
)

// FuzzFAT opens arbitrary bytes as a volume and walks it, reading every
// file: any failure must be one line and wrap ErrCorrupt (or io.EOF, a
// read past the end of the bytes). The seed is synthFAT12 (a volume made
// by mkfs.vfat is too large for the fuzzer to minimize what it finds in
// reasonable time: it stalls for minutes on each).
func FuzzFAT(f *testing.F) {
	f.Add(synthFAT12())
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
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, io.EOF) {
			t.Fatalf("error is not ErrCorrupt: %v", err)
		}
	})
}

// synthFAT12 is a FAT12 volume of 8 KiB, small enough for the fuzzer to
// minimize what it finds: one-sector clusters, a 16-entry root holding
// "hello world.txt" (a long name, cluster 2) and SUB (cluster 3), which
// holds A.TXT (600 bytes in clusters 4 and 5).
func synthFAT12() []byte {
	b := make([]byte, 8<<10)
	copy(b, []byte{0xEB, 0x3C, 0x90})
	copy(b[3:], "MSDOS5.0")
	b[11], b[12] = 0, 2 // 512 bytes a sector
	b[13] = 1           // a sector a cluster
	b[14] = 1           // reserved
	b[16] = 1           // FATs
	b[17] = 16          // root entries
	b[19] = 16          // sectors
	b[21] = 0xF8
	b[22] = 1 // FAT sectors
	b[38] = 0x29
	copy(b[43:], "SYNTH      ")
	b[510], b[511] = 0x55, 0xAA
	// FAT12: 0 and 1 reserved, 2 end, 3 end, 4 -> 5, 5 end.
	setFAT12 := func(c int, v uint16) {
		o := 512 + c*3/2
		if c&1 == 0 {
			b[o] = byte(v)
			b[o+1] = b[o+1]&0xF0 | byte(v>>8)
		} else {
			b[o] = b[o]&0x0F | byte(v<<4)
			b[o+1] = byte(v >> 4)
		}
	}
	for c, v := range []uint16{0xFF8, 0xFFF, 0xFFF, 0xFFF, 5, 0xFFF} {
		setFAT12(c, v)
	}
	dirent := func(d []byte, name string, attr byte, cluster, size int) {
		copy(d, name)
		d[11] = attr
		d[26], d[27] = byte(cluster), byte(cluster>>8)
		d[28], d[29] = byte(size), byte(size>>8)
	}
	root := b[1024:1536]
	short := "HELLOW~1TXT"
	lfn := root[0:32]
	lfn[0] = 0x41 // the last (and only) long entry, number 1
	lfn[11] = 0x0F
	lfn[13] = checksum([]byte(short))
	name := []rune("hello world.t") // 13 characters: one entry
	for i, o := range []int{1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30} {
		lfn[o] = byte(name[i])
	}
	dirent(root[32:], short, 0x20, 2, 6)
	dirent(root[64:], "SUB        ", attrDir, 3, 0)
	data := func(c int) []byte { return b[1536+(c-2)*512:][:512] }
	copy(data(2), "hello\n")
	sub := data(3)
	dirent(sub, ".          ", attrDir, 3, 0)
	dirent(sub[32:], "..         ", attrDir, 0, 0)
	dirent(sub[64:], "A       TXT", 0x20, 4, 600)
	for i := range 512 {
		data(4)[i] = 'a'
		data(5)[i] = 'b'
	}
	return b
}

// TestSynth reads the fuzz seed back.
func TestSynth(t *testing.T) {
	b := synthFAT12()
	v, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.ReadFile("hello world.t"); err != nil || string(got) != "hello\n" {
		t.Fatalf("hello world.t: %q %v", got, err)
	}
	want := strings.Repeat("a", 512) + strings.Repeat("b", 88)
	if got, err := v.ReadFile("SUB/A.TXT"); err != nil || string(got) != want {
		t.Fatalf("SUB/A.TXT: %q %v", got, err)
	}
	if v.Type() != FAT12 || v.Label() != "SYNTH" {
		t.Fatalf("%v %q", v.Type(), v.Label())
	}
}
