package fsys_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/fsys"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

func run(t *testing.T, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v %s", name, args, err, out)
	}
}

func openImage(t *testing.T, img string) fsys.FS {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, _ := f.Stat()
	fsy, _, err := fsys.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return fsy
}

// TestCopyOutExt4: a tree put into ext4 by mkfs.ext4 -d comes out by
// CopyOut as it went in: bytes, permission bits, modification times (whole
// seconds: mkfs.ext4 -d copies no more, as debugfs stat shows), symbolic
// links.
func TestCopyOutExt4(t *testing.T) {
	mkfs := testenv.Need(t, "mkfs.ext4", "e2fsprogs")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	when := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	files := map[string]struct {
		data []byte
		mode fs.FileMode
	}{
		"etc/fstab":        {[]byte("/dev/vg0/root / ext4 defaults 0 1\n"), 0o644},
		"etc/shadow":       {[]byte("root:*:19000::::::\n"), 0o600},
		"usr/bin/tool":     {bytes.Repeat([]byte{0x7f, 'E', 'L', 'F'}, 300_000), 0o755},
		"var/empty/.keep":  {nil, 0o444},
		"home/u/notes.txt": {[]byte("hello"), 0o640},
	}
	for name, f := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode)
		os.Chtimes(p, when, when)
	}
	if err := os.Symlink("../etc/fstab", filepath.Join(src, "usr/fstab-link")); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(src, "home/u"), 0o750)
	os.Chtimes(filepath.Join(src, "home/u"), when, when)
	img := filepath.Join(dir, "ext4.img")
	run(t, nil, mkfs, "-q", "-d", src, img, "8M")
	fsy := openImage(t, img)

	dest := filepath.Join(dir, "out")
	if err := fsys.CopyOut(context.Background(), fsy, ".", dest); err != nil {
		t.Fatal(err)
	}
	for name, f := range files {
		p := filepath.Join(dest, name)
		got, err := os.ReadFile(p)
		st, _ := os.Stat(p)
		if err != nil || !bytes.Equal(got, f.data) || st.Mode().Perm() != f.mode || !st.ModTime().Equal(when) {
			t.Errorf("%s: %v, %d bytes, mode %v (want %v), mtime %v (want %v)", name, err, len(got), st.Mode(), f.mode, st.ModTime(), when)
		}
	}
	if l, err := os.Readlink(filepath.Join(dest, "usr/fstab-link")); err != nil || l != "../etc/fstab" {
		t.Errorf("symlink: %q %v", l, err)
	}
	if st, err := os.Stat(filepath.Join(dest, "home/u")); err != nil || st.Mode().Perm() != 0o750 || !st.ModTime().Equal(when) {
		t.Errorf("directory home/u: %v %v", st.Mode(), err)
	}
	// Into an existing directory: under the base name; the root needs a
	// new name.
	into := t.TempDir()
	if err := fsys.CopyOut(context.Background(), fsy, "etc", into); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(into, "etc", "fstab")); !bytes.Equal(got, files["etc/fstab"].data) {
		t.Errorf("copy into a directory: %q", got)
	}
	if err := fsys.CopyOut(context.Background(), fsy, ".", into); err == nil {
		t.Errorf("the root copied into an existing directory")
	}
	// A cancelled copy leaves nothing, not even its temporary directory.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	empty := t.TempDir()
	if err := fsys.CopyOut(ctx, fsy, "usr", filepath.Join(empty, "usr")); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled copy: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("a cancelled copy left %v", ents)
	}
}

// TestOpenPicks: Open reads FAT made by mkfs.vfat and filled by mcopy,
// and refuses what holds no filesystem it reads (zeros; swap by mkswap).
func TestOpenPicks(t *testing.T) {
	mkfsVfat := testenv.Need(t, "mkfs.vfat", "dosfstools")
	mcopy := testenv.Need(t, "mcopy", "mtools")
	mkswap := testenv.Need(t, "mkswap", "util-linux")
	dir := t.TempDir()
	img := filepath.Join(dir, "fat.img")
	run(t, nil, "truncate", "-s", "4M", img)
	run(t, nil, mkfsVfat, img)
	data := bytes.Repeat([]byte("fat file "), 5000)
	src := filepath.Join(dir, "Long Name.txt")
	os.WriteFile(src, data, 0o644)
	run(t, []string{"MTOOLS_SKIP_CHECK=1"}, mcopy, "-i", img, src, "::/Long Name.txt")
	if got, err := fs.ReadFile(openImage(t, img), "Long Name.txt"); err != nil || !bytes.Equal(got, data) {
		t.Errorf("FAT: %v, %d bytes", err, len(got))
	}
	zeros := bytes.NewReader(make([]byte, 1<<20))
	if _, _, err := fsys.Open(zeros, 1<<20); !errors.Is(err, fsys.ErrNoFilesystem) {
		t.Errorf("zeros: %v", err)
	}
	swap := filepath.Join(dir, "swap.img")
	run(t, nil, "truncate", "-s", "1M", swap)
	run(t, nil, mkswap, swap)
	f, _ := os.Open(swap)
	defer f.Close()
	if _, info, err := fsys.Open(f, 1<<20); !errors.Is(err, fsys.ErrUnsupported) || info.Type != "swap" {
		t.Errorf("swap: %v %+v", err, info)
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{"/etc/fstab": "etc/fstab", "EFI/": "EFI", "/": ".", "": ".", "a/../b": "b", "/../x": "x"} {
		if got, err := fsys.Name(in); err != nil || got != want {
			t.Errorf("Name(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
