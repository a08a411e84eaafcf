package ext4

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fuzzDevSize is the size of the device a fuzz input is read as: the
// input, then zeros. The seeds are images with their trailing zeros cut
// off, which keeps the committed corpus small.
const fuzzDevSize = 1 << 20

// zeroPadded reads as b followed by zeros up to size, without allocating
// the zeros.
type zeroPadded struct {
	b    []byte
	size int64
}

func (z zeroPadded) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= z.size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > z.size-off {
		p = p[:z.size-off]
	}
	n := 0
	if off < int64(len(z.b)) {
		n = copy(p, z.b[off:])
	}
	clear(p[n:])
	if len(p) < want {
		return len(p), io.EOF
	}
	return len(p), nil
}

// FuzzExt4 opens the input as a filesystem, walks the whole tree, and
// reads every file (up to 64 KiB each) and symlink. Errors are expected;
// a panic, a hang or a runaway allocation is a bug.
func FuzzExt4(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		size := max(int64(len(data)), fuzzDevSize)
		err := exercise(zeroPadded{data, size}, size, 64<<10)
		if err != nil && bytes.ContainsRune([]byte(err.Error()), '\n') {
			t.Fatalf("multi-line error: %q", err)
		}
	})
}

// TestFuzzSeedsOpen checks that the committed seeds are whole, readable
// images, so the fuzzer starts from something that reaches the parsers.
func TestFuzzSeedsOpen(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzExt4")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("no seeds in %s: %v", dir, err)
	}
	for _, e := range ents {
		data := readSeed(t, filepath.Join(dir, e.Name()))
		if err := exercise(zeroPadded{data, fuzzDevSize}, fuzzDevSize, 1<<20); err != nil {
			t.Errorf("seed %s: %v", e.Name(), err)
		}
		fsys, err := Open(zeroPadded{data, fuzzDevSize}, fuzzDevSize)
		if err != nil {
			t.Fatalf("seed %s: %v", e.Name(), err)
		}
		if b, err := fsys.ReadFile("slow"); err != nil || len(b) != 14<<10 {
			t.Errorf("seed %s: slow link to f: %d bytes, %v", e.Name(), len(b), err)
		}
		if ents, err := fsys.ReadDir("d"); err != nil || len(ents) != 20 {
			t.Errorf("seed %s: d has %d entries, %v", e.Name(), len(ents), err)
		}
	}
}

func readSeed(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	hdr := []byte("go test fuzz v1\n[]byte(")
	if !bytes.HasPrefix(b, hdr) {
		t.Fatalf("%s: not a fuzz corpus file", p)
	}
	body := bytes.TrimSuffix(bytes.TrimSpace(b[len(hdr):]), []byte(")"))
	s, err := strconv.Unquote(string(body))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return []byte(s)
}

// TestWriteFuzzSeeds regenerates the seed corpus when
// BLKCRYPT_WRITE_EXT4_SEEDS is set: tiny images (160 KiB, 1 KiB blocks)
// made by mkfs from a small tree, trailing zeros cut.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("BLKCRYPT_WRITE_EXT4_SEEDS") == "" {
		t.Skip("set BLKCRYPT_WRITE_EXT4_SEEDS=1 to regenerate testdata/fuzz/FuzzExt4")
	}
	src := t.TempDir()
	write := func(name string, data []byte) {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/fstab", []byte(fstab))
	for i := range 20 {
		write(fmt.Sprintf("d/e%02d", i), []byte(strconv.Itoa(i)))
	}
	// 14 KiB: past the 12 direct blocks of a block map.
	write("f", bytes.Repeat([]byte("0123456789abcdef"), 14<<10/16))
	os.Symlink("etc/fstab", filepath.Join(src, "l"))
	os.Symlink(strings.Repeat("./", 40)+"f", filepath.Join(src, "slow"))
	seeds := []config{
		{name: "ext4", mkfs: "mkfs.ext4", args: []string{"-b", "1024", "-N", "64", "-O", "^has_journal,^resize_inode"}, size: "160K"},
		{name: "ext4-inline", mkfs: "mkfs.ext4", args: []string{"-b", "1024", "-N", "64", "-O", "^has_journal,^resize_inode,inline_data,^metadata_csum"}, size: "160K"},
		{name: "ext2", mkfs: "mkfs.ext2", args: []string{"-b", "1024", "-N", "64", "-O", "^resize_inode"}, size: "160K"},
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzExt4")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range seeds {
		img := makeImage(t, cfg, src)
		data := bytes.TrimRight(mustRead(t, img), "\x00")
		out := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, "seed-"+cfg.name), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
