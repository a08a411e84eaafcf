package ext4

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// fstab is a realistic /etc/fstab; `cat /etc/fstab` must give it back.
const fstab = `# /etc/fstab: static file system information.
UUID=2f1e7d3c-0b5e-4a51-9d0e-6d7c1e9a2b44 /         ext4 errors=remount-ro 0 1
UUID=6A1F-3B2C                            /boot/efi vfat umask=0077        0 1
/swapfile                                 none      swap sw                0 0
`

// slowTarget is longer than the 60 bytes of i_block, so the link is
// stored in a data block (a "slow" symlink).
var slowTarget = strings.Repeat("./", 40) + "big.bin"

// sparseAt are the offsets of the 4 KiB data runs of sparse.bin; the last
// lies past 64 MiB, so with 1 KiB blocks and block maps it needs the
// triple indirect block.
var sparseAt = []int64{0, 1 << 20, 70 << 20}

// buildTree writes the source tree mkfs.ext4 -d copies: everything under
// tree/ is well-formed (fstest.TestFS walks it); badlinks/ holds a
// dangling link and a symlink loop.
func buildTree(t testing.TB, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(name string, data []byte, perm os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, data, perm))
		must(os.Chmod(p, perm)) // beat the umask
	}
	write("tree/etc/fstab", []byte(fstab), 0o644)
	big := make([]byte, 4<<20)
	rand.Read(big)
	write("tree/big.bin", big, 0o644)
	write("tree/tiny.txt", []byte("thirty bytes of inline data.\n"), 0o600)
	write("tree/empty", nil, 0o644)
	write("tree/setuid", []byte("#!/bin/sh\n"), 0o755|os.ModeSetuid)
	write("tree/small/one", []byte("1\n"), 0o644)
	write("tree/small/two", []byte("2\n"), 0o640)
	write("tree/a/b/c/deep.txt", []byte("deep\n"), 0o644)
	for i := range 300 {
		write(fmt.Sprintf("tree/d300/entry-%03d", i), []byte(strconv.Itoa(i)+"\n"), 0o644)
	}
	// Outside tree/: fstest would read its 70 MiB many times over.
	must(os.MkdirAll(filepath.Join(dir, "holes"), 0o755))
	sp, err := os.Create(filepath.Join(dir, "holes/sparse.bin"))
	must(err)
	for i, off := range sparseAt {
		_, err := sp.WriteAt(bytes.Repeat([]byte{byte('a' + i)}, 4096), off)
		must(err)
	}
	must(sp.Close())
	// many.bin: 500 runs of 4 KiB, 64 KiB apart: more extents than
	// i_block holds, so the extent tree has depth 1 (depth 2 with 1 KiB
	// blocks).
	mb, err := os.Create(filepath.Join(dir, "holes/many.bin"))
	must(err)
	for i := range 500 {
		_, err := mb.WriteAt(bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xA5, 0x5A}, 1024), int64(i)*64<<10)
		must(err)
	}
	must(mb.Close())
	// prealloc.bin has no data; debugfs fallocate gives it uninitialized
	// extents afterwards, which must read as zeros.
	must(os.WriteFile(filepath.Join(dir, "holes/prealloc.bin"), nil, 0o644))
	must(os.Truncate(filepath.Join(dir, "holes/prealloc.bin"), 400<<10))
	must(os.Symlink("etc/fstab", filepath.Join(dir, "tree/link-fast")))
	must(os.Symlink(slowTarget, filepath.Join(dir, "tree/link-slow")))
	must(os.Symlink("/tree/etc/fstab", filepath.Join(dir, "tree/link-abs")))
	must(os.Symlink("../../etc", filepath.Join(dir, "tree/a/b/up")))
	must(syscall.Mkfifo(filepath.Join(dir, "tree/fifo"), 0o644))
	if os.Geteuid() == 0 {
		// Owners above 65535 need the high halves of i_uid and i_gid; a
		// device node needs root to make.
		must(os.Lchown(filepath.Join(dir, "tree/etc/fstab"), 100000, 200000))
		must(os.Lchown(filepath.Join(dir, "tree/link-slow"), 1234, 5678))
		must(syscall.Mknod(filepath.Join(dir, "tree/null"), syscall.S_IFCHR|0o666, int(1<<8|3)))
		must(syscall.Mknod(filepath.Join(dir, "tree/sda"), syscall.S_IFBLK|0o660, int(8<<8|0)))
	}
	must(os.MkdirAll(filepath.Join(dir, "badlinks"), 0o755))
	must(os.Symlink("nowhere", filepath.Join(dir, "badlinks/dangling")))
	must(os.Symlink("loop2", filepath.Join(dir, "badlinks/loop1")))
	must(os.Symlink("loop1", filepath.Join(dir, "badlinks/loop2")))
	// Nanoseconds and the epoch bits of i_mtime_extra are set with
	// debugfs afterwards (mke2fs -d copies whole seconds only).
	old := time.Date(1999, 12, 31, 23, 59, 58, 0, time.UTC)
	must(os.Chtimes(filepath.Join(dir, "tree/setuid"), old, old))
}

// config is one way of making the filesystem.
type config struct {
	name    string
	mkfs    string   // mkfs.ext4, mkfs.ext3, mkfs.ext2
	args    []string // extra mke2fs options
	size    string   // image size
	extents bool     // big.bin is expected to use extents
	inline  bool     // small files and directories are expected inline
	// fstest runs testing/fstest.TestFS, which reads the 4 MiB file byte
	// by byte (tens of seconds): on three layouts, not all.
	fstest bool
}

var configs = []config{
	{name: "ext4-4k", mkfs: "mkfs.ext4", args: []string{"-b", "4096"}, size: "64M", extents: true, fstest: true},
	{name: "ext4-1k", mkfs: "mkfs.ext4", args: []string{"-b", "1024"}, size: "64M", extents: true},
	{name: "ext4-nocsum", mkfs: "mkfs.ext4", args: []string{"-b", "4096", "-O", "^metadata_csum"}, size: "64M", extents: true},
	{name: "ext4-no64bit", mkfs: "mkfs.ext4", args: []string{"-b", "4096", "-O", "^64bit"}, size: "64M", extents: true},
	{name: "ext4-inline", mkfs: "mkfs.ext4", args: []string{"-b", "4096", "-O", "inline_data"}, size: "64M", extents: true, inline: true, fstest: true},
	{name: "ext4-inline-1k", mkfs: "mkfs.ext4", args: []string{"-b", "1024", "-O", "inline_data,^metadata_csum"}, size: "64M", extents: true, inline: true},
	// Many small groups with meta_bg: descriptors live in each meta
	// group, not after the superblock.
	{name: "ext4-metabg", mkfs: "mkfs.ext4", args: []string{"-b", "1024", "-g", "1024", "-O", "meta_bg,^resize_inode"}, size: "64M", extents: true},
	// Features that change nothing for a reader of unencrypted,
	// exact-case names; the checksum seed moves out of the UUID.
	{name: "ext4-features", mkfs: "mkfs.ext4", args: []string{"-b", "4096", "-O", "casefold,encrypt,metadata_csum_seed,large_dir"}, size: "64M", extents: true},
	// bigalloc: 64 KiB clusters, extents still count 4 KiB blocks.
	{name: "ext4-bigalloc", mkfs: "mkfs.ext4", args: []string{"-b", "4096", "-O", "bigalloc", "-C", "65536"}, size: "64M", extents: true},
	{name: "ext3", mkfs: "mkfs.ext3", args: []string{"-b", "4096"}, size: "64M"},
	{name: "ext2-1k", mkfs: "mkfs.ext2", args: []string{"-b", "1024"}, size: "64M", fstest: true},
}

// makeImage builds an image of cfg from src and runs e2fsck -fD on it so
// large directories become htrees, then returns its path.
func makeImage(t testing.TB, cfg config, src string) string {
	t.Helper()
	mkfs := testenv.Need(t, cfg.mkfs, "e2fsprogs")
	e2fsck := testenv.Need(t, "e2fsck", "e2fsprogs")
	img := filepath.Join(t.TempDir(), cfg.name+".img")
	if out, err := exec.Command("truncate", "-s", cfg.size, img).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v\n%s", err, out)
	}
	args := append([]string{"-q", "-F", "-d", src, "-L", "blk-" + cfg.name}, cfg.args...)
	args = append(args, img)
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cfg.mkfs, args, err, out)
	}
	// -D reindexes directories: d300 becomes an htree. Exit status 1
	// means "fixed" (the reindexing), which is expected.
	cmd := exec.Command(e2fsck, "-fyD", img)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 1 {
			t.Fatalf("e2fsck -fyD: %v\n%s", err, out)
		}
	}
	return img
}

// debugfs runs one read-only debugfs request and returns its stdout.
func debugfs(t testing.TB, img, req string) []byte {
	t.Helper()
	bin := testenv.Need(t, "debugfs", "e2fsprogs")
	cmd := exec.Command(bin, "-R", req, img)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("debugfs -R %q: %v\n%s", req, err, stderr.Bytes())
	}
	return out.Bytes()
}

// debugfsWrite runs one debugfs request that changes the image.
func debugfsWrite(t testing.TB, img, req string) {
	t.Helper()
	bin := testenv.Need(t, "debugfs", "e2fsprogs")
	out, err := exec.Command(bin, "-w", "-R", req, img).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte(": ")) && !bytes.HasPrefix(bytes.TrimSpace(out), []byte("debugfs ")) {
		t.Fatalf("debugfs -w -R %q: %v\n%s", req, err, out)
	}
}

func openImage(t testing.TB, img string) (*FS, *os.File) {
	t.Helper()
	fh, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	st, err := fh.Stat()
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := Open(fh, st.Size())
	if err != nil {
		t.Fatalf("Open %s: %v", img, err)
	}
	return fsys, fh
}

// mtimeExtra is written into setuid's i_mtime_extra: epoch bits 1 (adds
// 2^32 s) and 0x048D159E nanoseconds.
const mtimeExtra = 0x12345679

func TestImages(t *testing.T) {
	src := t.TempDir()
	buildTree(t, src)
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			img := makeImage(t, cfg, src)
			debugfsWrite(t, img, fmt.Sprintf("sif /tree/setuid mtime_extra %#x", mtimeExtra))
			if cfg.extents && !cfg.inline { // with inline_data prealloc.bin is inline
				debugfsWrite(t, img, "fallocate /holes/prealloc.bin 0 40")
				ex := string(debugfs(t, img, "ex /holes/prealloc.bin"))
				if !strings.Contains(ex, "Uninit") {
					t.Fatalf("debugfs fallocate made no uninitialized extent:\n%s", ex)
				}
				if ex := string(debugfs(t, img, "ex /holes/many.bin")); !regexp.MustCompile(` 0/ [1-5] `).MatchString(ex) {
					t.Errorf("many.bin has no extent tree of depth > 0, so index nodes are not tested:\n%.300s", ex)
				}
			}
			fsys, _ := openImage(t, img)
			if cfg.fstest {
				checkConformance(t, fsys)
			}
			checkAgainstSource(t, fsys, filepath.Join(src, "tree"))
			checkCat(t, fsys, img)
			checkLs(t, fsys, img, "tree/d300", 300)
			checkLs(t, fsys, img, "tree", 0)
			for _, p := range []string{"tree/etc/fstab", "tree/setuid", "tree/d300", "tree/link-slow", "tree/link-fast", "tree/fifo", "tree/tiny.txt", "tree/small", "tree"} {
				checkStat(t, fsys, img, p)
			}
			if os.Geteuid() == 0 {
				checkStat(t, fsys, img, "tree/null")
				checkStat(t, fsys, img, "tree/sda")
				if info, err := fsys.Lstat("tree/null"); err != nil || info.Mode().Type() != fs.ModeDevice|fs.ModeCharDevice || info.Sys().(*Stat).Major() != 1 || info.Sys().(*Stat).Minor() != 3 {
					t.Errorf("Lstat null: %v, %v", info, err)
				}
				if info, err := fsys.Lstat("tree/etc/fstab"); err != nil || info.Sys().(*Stat).Uid != 100000 || info.Sys().(*Stat).Gid != 200000 {
					t.Errorf("Lstat fstab: owner %+v, %v; want 100000:200000", info.Sys(), err)
				}
			}
			if out := debugfs(t, img, "htree /tree/d300"); !bytes.Contains(out, []byte("Root node dump")) {
				t.Errorf("debugfs says /tree/d300 is not an htree, so htree reading is not tested:\n%s", out)
			}
			checkLayout(t, fsys, cfg)
			checkLinks(t, fsys)
		})
	}
}

// checkConformance runs testing/fstest over the well-formed subtree.
func checkConformance(t *testing.T, fsys *FS) {
	sub, err := fs.Sub(fsys, "tree")
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(sub, "etc/fstab", "big.bin", "d300/entry-299", "link-slow", "a/b/c/deep.txt", "small/two", "fifo"); err != nil {
		t.Errorf("fstest: %v", err)
	}
}

// checkAgainstSource walks the image with fs.WalkDir and the source
// directory with filepath.WalkDir: same names, types, permission bits,
// sizes, contents and symlink targets.
func checkAgainstSource(t *testing.T, fsys *FS, src string) {
	want := map[string]string{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", info.Mode())
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %d %x", info.Size(), sha256.Sum256(b))
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + l
		}
		want[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	err = fs.WalkDir(fsys, "tree", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Type() != d.Type() {
			t.Errorf("%s: entry type %v, inode type %v", p, d.Type(), info.Mode().Type())
		}
		desc := fmt.Sprintf("%v", info.Mode())
		switch {
		case info.Mode().IsRegular():
			b, err := fsys.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %d %x", info.Size(), sha256.Sum256(b))
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := fsys.ReadLink(p)
			if err != nil {
				return err
			}
			desc += " -> " + l
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, "tree"), "/")
		if rel == "" {
			rel = "."
		}
		got[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("WalkDir: %v", err)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: missing from the image", k)
		} else if g != w {
			t.Errorf("%s: image %s, source %s", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: in the image, not in the source", k)
		}
	}
	if len(got) < 300 {
		t.Errorf("walk found %d names", len(got))
	}
}

// checkCat compares our bytes with debugfs cat, for /etc/fstab, the 4 MiB
// file and the sparse file, and checks fstab against the source text.
func checkCat(t *testing.T, fsys *FS, img string) {
	b, err := fsys.ReadFile("tree/etc/fstab")
	if err != nil || string(b) != fstab {
		t.Errorf("cat /etc/fstab: %q, %v", b, err)
	}
	for _, p := range []string{"tree/etc/fstab", "tree/big.bin", "holes/sparse.bin", "holes/many.bin", "holes/prealloc.bin", "tree/tiny.txt", "tree/small/one", "tree/d300/entry-123", "tree/empty"} {
		judge := debugfs(t, img, "cat /"+p)
		// debugfs 1.47.0 cats all 60 bytes of i_block for an inline file
		// whatever its size; cut to the size debugfs stat reports.
		// An inline file larger than its stored bytes (mke2fs -d makes
		// one of a file that is all hole) reads as zeros past them in the
		// kernel (ext4_readpage_inline); debugfs stops there.
		if u := statUser.FindSubmatch(debugfs(t, img, "stat /"+p)); u != nil {
			size, err := strconv.Atoi(string(u[3]))
			if err == nil && size < len(judge) {
				judge = judge[:size]
			}
			if info, lerr := fsys.Lstat(p); err == nil && lerr == nil && info.Sys().(*Stat).Flags&flagInline != 0 && size > len(judge) {
				judge = append(judge, make([]byte, size-len(judge))...)
			}
		}
		want := sha256.Sum256(judge)
		f, err := fsys.Open(p)
		if err != nil {
			t.Errorf("open %s: %v", p, err)
			continue
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			continue
		}
		if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Errorf("%s: %d bytes differ from debugfs cat", p, n)
		}
	}
	// debugfs cat of a slow symlink prints its data block: the target.
	if l, err := fsys.ReadLink("tree/link-slow"); err != nil || l != string(debugfs(t, img, "cat /tree/link-slow")) {
		t.Errorf("ReadLink link-slow: %q, %v; debugfs cat differs", l, err)
	}
	// Random access into the sparse file: data, hole, data past 64 MiB.
	f, err := fsys.Open("holes/sparse.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ra := f.(io.ReaderAt)
	buf := make([]byte, 8192)
	for i, off := range sparseAt {
		if off > 0 { // straddling the hole before the run
			if _, err := ra.ReadAt(buf, off-4096); err != nil {
				t.Errorf("ReadAt %d: %v", off-4096, err)
			} else if !bytes.Equal(buf[:4096], make([]byte, 4096)) || buf[4096] != byte('a'+i) {
				t.Errorf("sparse.bin across the hole at %d: wrong bytes", off)
			}
		}
		if _, err := ra.ReadAt(buf[:4096], off); err != nil {
			t.Errorf("ReadAt %d: %v", off, err)
		} else if !bytes.Equal(buf[:4096], bytes.Repeat([]byte{byte('a' + i)}, 4096)) {
			t.Errorf("sparse.bin at %d: wrong bytes", off)
		}
	}
	if _, err := ra.ReadAt(buf, 2<<20); err != nil || !bytes.Equal(buf, make([]byte, len(buf))) {
		t.Errorf("sparse.bin hole at 2 MiB: %v, not zeros", err)
	}
	end := sparseAt[len(sparseAt)-1] + 4096
	if n, err := ra.ReadAt(buf, end-100); n != 100 || err != io.EOF {
		t.Errorf("ReadAt across EOF: %d, %v; want 100, EOF", n, err)
	}
}

// lsLine is one line of `debugfs -R 'ls -l DIR'`:
// inode, mode (octal), (type), uid, gid, size, date, time, name.
var lsLine = regexp.MustCompile(`^\s*(\d+)\s+([0-7]+)\s+\((\d+)\)\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+(.+)$`)

// checkLs compares ReadDir of dir with debugfs ls -l: names, inode
// numbers, modes, uid, gid and sizes. want > 0 also checks the count.
func checkLs(t *testing.T, fsys *FS, img, dir string, want int) {
	type row struct {
		ino       uint64
		mode      uint64
		uid, gid  uint64
		size      uint64
		isSymlink bool
	}
	judge := map[string]row{}
	sc := bufio.NewScanner(bytes.NewReader(debugfs(t, img, "ls -l /"+dir)))
	for sc.Scan() {
		m := lsLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if m[7] == "." || m[7] == ".." {
			continue
		}
		var r row
		r.ino, _ = strconv.ParseUint(m[1], 10, 32)
		r.mode, _ = strconv.ParseUint(m[2], 8, 32)
		r.uid, _ = strconv.ParseUint(m[4], 10, 32)
		r.gid, _ = strconv.ParseUint(m[5], 10, 32)
		r.size, _ = strconv.ParseUint(m[6], 10, 64)
		judge[m[7]] = r
	}
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir %s: %v", dir, err)
	}
	if want > 0 && len(ents) != want {
		t.Errorf("ls %s: %d names, want %d", dir, len(ents), want)
	}
	if len(ents) != len(judge) {
		t.Errorf("ls %s: %d names, debugfs lists %d", dir, len(ents), len(judge))
	}
	for _, e := range ents {
		r, ok := judge[e.Name()]
		if !ok {
			t.Errorf("ls %s: %q not listed by debugfs", dir, e.Name())
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Errorf("%s/%s: Info: %v", dir, e.Name(), err)
			continue
		}
		st := info.Sys().(*Stat)
		if uint64(st.Ino) != r.ino || uint64(st.Mode) != r.mode || uint64(st.Uid) != r.uid || uint64(st.Gid) != r.gid || uint64(info.Size()) != r.size {
			t.Errorf("%s/%s: ino %d mode %o uid %d gid %d size %d; debugfs %+v", dir, e.Name(), st.Ino, st.Mode, st.Uid, st.Gid, info.Size(), r)
		}
	}
}

var (
	statMode  = regexp.MustCompile(`Inode: (\d+)\s+Type: .+?\s+Mode:\s+([0-7]+)\s+Flags: (0x[0-9a-f]+)`)
	statUser  = regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+).*Size: (\d+)`)
	statMtime = regexp.MustCompile(`(?m)^\s*mtime: (0x[0-9a-f]+)(?::([0-9a-f]+))?`)
)

// checkStat compares Lstat of p with debugfs stat: inode, permission
// bits, flags, uid, gid, size and mtime to the nanosecond.
func checkStat(t *testing.T, fsys *FS, img, p string) {
	out := string(debugfs(t, img, "stat /"+p))
	m, u, mt := statMode.FindStringSubmatch(out), statUser.FindStringSubmatch(out), statMtime.FindStringSubmatch(out)
	if m == nil || u == nil || mt == nil {
		t.Fatalf("cannot parse debugfs stat /%s:\n%s", p, out)
	}
	info, err := fsys.Lstat(p)
	if err != nil {
		t.Fatalf("Lstat %s: %v", p, err)
	}
	st := info.Sys().(*Stat)
	ino, _ := strconv.ParseUint(m[1], 10, 32)
	perm, _ := strconv.ParseUint(m[2], 8, 32)
	flags, _ := strconv.ParseUint(m[3], 0, 32)
	uid, _ := strconv.ParseUint(u[1], 10, 32)
	gid, _ := strconv.ParseUint(u[2], 10, 32)
	size, _ := strconv.ParseUint(u[3], 10, 64)
	sec, _ := strconv.ParseUint(mt[1], 0, 32)
	var extra uint64
	if mt[2] != "" {
		extra, _ = strconv.ParseUint(mt[2], 16, 32)
	}
	wantMtime := time.Unix(int64(int32(uint32(sec)))+int64(extra&3)<<32, int64(extra>>2))
	if uint64(st.Ino) != ino || uint64(st.Mode&0o7777) != perm || uint64(st.Flags) != flags ||
		uint64(st.Uid) != uid || uint64(st.Gid) != gid || uint64(info.Size()) != size || !info.ModTime().Equal(wantMtime) {
		t.Errorf("stat %s: ino %d perm %o flags %#x uid %d gid %d size %d mtime %v; debugfs ino %d perm %o flags %#x uid %d gid %d size %d mtime %v",
			p, st.Ino, st.Mode&0o7777, st.Flags, st.Uid, st.Gid, info.Size(), info.ModTime(), ino, perm, flags, uid, gid, size, wantMtime)
	}
	if uint32(info.Mode().Perm()) != uint32(perm&0o777) {
		t.Errorf("stat %s: fs.FileMode %v vs mode %o", p, info.Mode(), perm)
	}
	if m := regexp.MustCompile(`Device major/minor number: ([0-9a-f]+):([0-9a-f]+) \(hex`).FindStringSubmatch(out); m != nil {
		major, _ := strconv.ParseUint(m[1], 10, 32)
		minor, _ := strconv.ParseUint(m[2], 10, 32)
		if uint64(st.Major()) != major || uint64(st.Minor()) != minor {
			t.Errorf("stat %s: device %d:%d, debugfs %d:%d", p, st.Major(), st.Minor(), major, minor)
		}
	}
	if p == "tree/setuid" {
		if info.Mode()&fs.ModeSetuid == 0 {
			t.Errorf("setuid: mode %v lacks setuid", info.Mode())
		}
		want := time.Date(1999, 12, 31, 23, 59, 58, mtimeExtra>>2, time.UTC).Add(1 << 32 * time.Second)
		if !info.ModTime().Equal(want) {
			t.Errorf("setuid: mtime %v, want %v (epoch bits and nanoseconds)", info.ModTime(), want)
		}
	}
}

// checkLayout proves the configuration exercised what it is there for:
// extents or block maps, inline data.
func checkLayout(t *testing.T, fsys *FS, cfg config) {
	flags := func(p string) uint32 {
		info, err := fsys.Lstat(p)
		if err != nil {
			t.Fatalf("Lstat %s: %v", p, err)
		}
		return info.Sys().(*Stat).Flags
	}
	if got := flags("tree/big.bin")&flagExtents != 0; got != cfg.extents {
		t.Errorf("big.bin uses extents: %v, want %v", got, cfg.extents)
	}
	if cfg.inline {
		for _, p := range []string{"tree/tiny.txt", "tree/small", "tree/d300/entry-001"} {
			if flags(p)&flagInline == 0 {
				t.Errorf("%s is not inline, so inline data is not tested", p)
			}
		}
	}
}

// checkLinks follows symlinks in Open and Stat, not in Lstat and
// ReadLink, and reports loops and dangling links as errors.
func checkLinks(t *testing.T, fsys *FS) {
	for link, target := range map[string]string{
		"tree/link-fast": "etc/fstab", "tree/link-slow": slowTarget,
		"tree/link-abs": "/tree/etc/fstab", "tree/a/b/up": "../../etc",
	} {
		got, err := fsys.ReadLink(link)
		if err != nil || got != target {
			t.Errorf("ReadLink %s: %q, %v; want %q", link, got, err, target)
		}
		info, err := fsys.Lstat(link)
		if err != nil || info.Mode().Type() != fs.ModeSymlink || info.Size() != int64(len(target)) {
			t.Errorf("Lstat %s: %v, %v", link, info, err)
		}
	}
	for _, p := range []string{"tree/link-fast", "tree/link-abs", "tree/a/b/up/fstab"} {
		b, err := fsys.ReadFile(p)
		if err != nil || string(b) != fstab {
			t.Errorf("ReadFile %s: %v (%d bytes)", p, err, len(b))
		}
	}
	if info, err := fsys.Stat("tree/link-slow"); err != nil || info.Size() != 4<<20 {
		t.Errorf("Stat link-slow: %v, %v", info, err)
	}
	if _, err := fsys.ReadLink("tree/etc/fstab"); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("ReadLink of a file: %v, want fs.ErrInvalid", err)
	}
	if _, err := fsys.Open("badlinks/dangling"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open dangling link: %v, want fs.ErrNotExist", err)
	}
	if _, err := fsys.Open("badlinks/loop1"); err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links") {
		t.Errorf("Open symlink loop: %v", err)
	}
	if _, err := fsys.Lstat("badlinks/loop1"); err != nil {
		t.Errorf("Lstat of a looping link: %v", err)
	}
	for _, bad := range []string{"/tree", "tree/../tree", "tree/", ""} {
		if _, err := fsys.Open(bad); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Open(%q): %v, want fs.ErrInvalid", bad, err)
		}
	}
	if _, err := fsys.Open("tree/etc/fstab/x"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open through a file: %v, want not a directory", err)
	}
	if _, err := fsys.Open("tree/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open missing: %v", err)
	}
}

// countingReader counts ReadAt calls, for the coalescing check.
type countingReader struct {
	r       io.ReaderAt
	calls   int
	bytes   int64
	largest int
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.calls++
	c.bytes += int64(len(p))
	c.largest = max(c.largest, len(p))
	return c.r.ReadAt(p, off)
}

// TestCoalescedReads: reading the 4 MiB file with io.Copy (WriteTo) takes
// a handful of device reads of 1 MiB (streamSize) of its extents, not one
// per block nor larger reads that fall out of the caches; and reading
// every file of a directory does not rescan the directory each time.
func TestCoalescedReads(t *testing.T) {
	src := t.TempDir()
	buildTree(t, src)
	for _, cfg := range []config{configs[0], configs[len(configs)-2]} { // extents, block map (ext3)
		t.Run(cfg.name, func(t *testing.T) {
			img := makeImage(t, cfg, src)
			_, fh := openImage(t, img)
			st, _ := fh.Stat()
			cr := &countingReader{r: fh}
			fsys, err := Open(cr, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			f, err := fsys.Open("tree/big.bin")
			if err != nil {
				t.Fatal(err)
			}
			cr.calls, cr.largest = 0, 0
			n, err := io.Copy(io.Discard, f)
			if err != nil || n != 4<<20 {
				t.Fatalf("copy: %d, %v", n, err)
			}
			// 4 MiB in 1 MiB reads: 4 or 5 data reads (a run may end
			// inside one), plus a few metadata blocks (extent or
			// indirect blocks).
			if cr.calls > 8 {
				t.Errorf("%d device reads for 4 MiB: reads are not coalesced", cr.calls)
			}
			if cr.largest != streamSize {
				t.Errorf("largest device read %d bytes, want %d", cr.largest, streamSize)
			}
			t.Logf("%d device reads for 4 MiB", cr.calls)

			// Opening and reading each of the 300 files of d300 reads
			// the directory once (the lookup cache), then an inode and a
			// block per file: not the directory again for every file.
			ents, err := fsys.ReadDir("tree/d300")
			if err != nil {
				t.Fatal(err)
			}
			cr.bytes = 0
			for _, e := range ents {
				b, err := fsys.ReadFile("tree/d300/" + e.Name())
				if err != nil || len(b) == 0 {
					t.Fatalf("%s: %q, %v", e.Name(), b, err)
				}
			}
			if per := cr.bytes / int64(len(ents)); per > int64(fsys.BlockSize())+2048 {
				t.Errorf("%d bytes read per small file of d300: directory lookups are not cached", per)
			}
		})
	}
}

// runBounded opens img and walks and reads everything, returning the
// first error, failing the test on a panic or a hang.
func runBounded(t *testing.T, data []byte) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v", r)
			}
		}()
		done <- exercise(bytes.NewReader(data), int64(len(data)), 1<<30)
	}()
	select {
	case err := <-done:
		if err != nil && strings.HasPrefix(err.Error(), "panic") {
			t.Fatal(err)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error is not one line: %q", err)
		}
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("hang: no result in 60 s")
	}
	return nil
}

// exercise opens the filesystem, walks the whole tree and reads every
// file and link, stopping at the first error, reading at most limit bytes
// per file.
func exercise(dev io.ReaderAt, size, limit int64) error {
	fsys, err := Open(dev, size)
	if err != nil {
		return err
	}
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	visited := 0
	keep(fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			keep(err)
			return nil // go on with the rest: the walk must still end
		}
		if visited++; visited > 100000 {
			return errors.New("walk too long")
		}
		if _, err := d.Info(); err != nil {
			keep(err)
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			_, err := fsys.ReadLink(p)
			keep(err)
			if f, err := fsys.Open(p); err == nil {
				f.Close()
			}
		case d.Type().IsRegular():
			f, err := fsys.Open(p)
			if err != nil {
				keep(err)
				return nil
			}
			_, err = io.Copy(io.Discard, io.LimitReader(f, limit))
			keep(err)
			f.Close()
		}
		return nil
	}))
	return first
}

// hostileBase builds a small ext4 image (no metadata_csum unless csum, so
// corrupted fields reach the parsers) from a small tree.
func hostileBase(t *testing.T, csum bool) (img string, data []byte) {
	src := t.TempDir()
	for _, d := range []string{"a/b/c", "dir"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 256<<10)
	rand.Read(big)
	os.WriteFile(filepath.Join(src, "a/b/c/file"), []byte("file\n"), 0o644)
	os.WriteFile(filepath.Join(src, "big"), big, 0o644)
	for i := range 100 {
		os.WriteFile(filepath.Join(src, fmt.Sprintf("dir/n%03d", i)), []byte("x"), 0o644)
	}
	args := []string{"-b", "4096", "-O", "^metadata_csum,^has_journal"}
	if csum {
		args = []string{"-b", "4096", "-O", "^has_journal"}
	}
	img = makeImage(t, config{name: "hostile", mkfs: "mkfs.ext4", args: args, size: "8M"}, src)
	if err := runBounded(t, mustRead(t, img)); err != nil {
		t.Fatalf("the intact image fails: %v", err)
	}
	return img, mustRead(t, img)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// inodeOffset asks debugfs where the inode of p is stored.
func inodeOffset(t *testing.T, img, p string, bs int64) int64 {
	out := string(debugfs(t, img, "imap /"+p))
	m := regexp.MustCompile(`located at block (\d+), offset (0x[0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("debugfs imap %s: %s", p, out)
	}
	blk, _ := strconv.ParseInt(m[1], 10, 64)
	off, _ := strconv.ParseInt(m[2], 0, 64)
	return blk*bs + off
}

// blockOf asks debugfs for the physical block of logical block 0 of p.
func blockOf(t *testing.T, img, p string) int64 {
	out := strings.TrimSpace(string(debugfs(t, img, "bmap /"+p+" 0")))
	n, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		t.Fatalf("debugfs bmap %s: %q", p, out)
	}
	return n
}

func put16(b []byte, off int64, v uint16) { b[off], b[off+1] = byte(v), byte(v>>8) }
func put32(b []byte, off int64, v uint32) {
	put16(b, off, uint16(v))
	put16(b, off+2, uint16(v>>16))
}

func TestHostile(t *testing.T) {
	img, base := hostileBase(t, false)
	const bs = 4096
	bigIno := inodeOffset(t, img, "big", bs)
	bigBlk := blockOf(t, img, "big")
	dirBlk := blockOf(t, img, "dir")
	rootBlk := blockOf(t, img, "")
	sb := int64(1024)
	cases := []struct {
		name   string
		patch  func(b []byte)
		want   error // nil: any error or a bounded result
		anyErr bool  // some error is required
	}{
		{"bad magic", func(b []byte) { put16(b, sb+0x38, 0x1234) }, ErrNotExt4, true},
		{"block size 2^30", func(b []byte) { put32(b, sb+0x18, 20) }, ErrCorrupt, true},
		{"blocks past device", func(b []byte) { put32(b, sb+0x4, 1<<30) }, ErrCorrupt, true},
		{"zero inodes per group", func(b []byte) { put32(b, sb+0x28, 0) }, ErrCorrupt, true},
		{"inode size 100", func(b []byte) { put16(b, sb+0x58, 100) }, ErrCorrupt, true},
		{"inodes count 1", func(b []byte) { put32(b, sb+0x0, 1) }, ErrCorrupt, true},
		{"unknown incompat", func(b []byte) { put32(b, sb+0x60, le32(b, sb+0x60)|0x800000) }, ErrUnsupported, true},
		{"compression", func(b []byte) { put32(b, sb+0x60, le32(b, sb+0x60)|incompatCompression) }, ErrUnsupported, true},
		{"group desc inode table past end", func(b []byte) { put32(b, bs+0x8, 0xFFFFFF) }, ErrCorrupt, true},
		{"extent magic", func(b []byte) { put16(b, bigIno+0x28, 0xBEEF) }, ErrCorrupt, true},
		{"extent depth 7", func(b []byte) { put16(b, bigIno+0x28+6, 7) }, ErrCorrupt, true},
		{"extent entries > max", func(b []byte) { put16(b, bigIno+0x28+2, 9) }, ErrCorrupt, true},
		{"extent past the end", func(b []byte) { put32(b, bigIno+0x28+12+8, 0x7FFFFFFF) }, ErrCorrupt, true},
		{"extent tree loop", func(b []byte) {
			// i_block: depth 1, one index entry → block bigBlk; bigBlk: a
			// node that says depth 1 again and points at itself.
			ib := bigIno + 0x28
			clear(b[ib : ib+60])
			put16(b, ib, extentMagic)
			put16(b, ib+2, 1)
			put16(b, ib+4, 4)
			put16(b, ib+6, 1)
			put32(b, ib+12+4, uint32(bigBlk))
			nb := bigBlk * bs
			clear(b[nb : nb+bs])
			put16(b, nb, extentMagic)
			put16(b, nb+2, 1)
			put16(b, nb+4, 340)
			put16(b, nb+6, 1)
			put32(b, nb+12+4, uint32(bigBlk))
		}, ErrCorrupt, true},
		{"huge size", func(b []byte) { put32(b, bigIno+0x6C, 0xFFFFFFFF) }, ErrCorrupt, true},
		{"rec_len 0", func(b []byte) { put16(b, dirBlk*bs+4, 0) }, ErrCorrupt, true},
		{"rec_len past block", func(b []byte) { put16(b, dirBlk*bs+12+4, 8000) }, ErrCorrupt, true},
		{"rec_len 4", func(b []byte) { put16(b, dirBlk*bs+12+4, 4) }, ErrCorrupt, true},
		{"name_len past rec_len", func(b []byte) { b[dirBlk*bs+12+6] = 200 }, ErrCorrupt, true},
		{"inode number past count", func(b []byte) { put32(b, dirBlk*bs+12, 0x7FFFFFFF) }, ErrCorrupt, true},
		{"dir entry names parent", func(b []byte) {
			// dir's first real entry (after "." and ".." of 12 bytes
			// each) now names the root: a cycle / → dir → /.
			put32(b, dirBlk*bs+24, rootIno)
			b[dirBlk*bs+24+7] = ftDir
		}, ErrCorrupt, true},
		{"root entry names the root", func(b []byte) {
			// The first real entry of the root (after "." and "..")
			// loops back to the root, whose ".." is itself.
			rb := rootBlk * bs
			put32(b, rb+24, rootIno)
			b[rb+24+7] = ftDir
		}, ErrCorrupt, true},
		{"root not a directory", func(b []byte) {
			off := inodeOffset(t, img, ".", bs)
			put16(b, off, 0o100644)
		}, ErrCorrupt, true},
		{"truncated image", nil, ErrCorrupt, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := slices.Clone(base)
			if c.patch != nil {
				c.patch(data)
			} else {
				data = data[:len(data)/2]
			}
			err := runBounded(t, data)
			if c.anyErr && err == nil {
				t.Fatal("no error")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			t.Logf("%v", err)
		})
	}
}

func le32(b []byte, off int64) uint32 {
	return uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24
}

// TestDirectoryLoop links a directory into its own subdirectory with
// debugfs (a hard link to a directory: the loop the kernel never makes).
// The walk must end with a clear error, and deep paths through the loop
// must fail rather than resolve.
func TestDirectoryLoop(t *testing.T) {
	img, _ := hostileBase(t, true)
	debugfsWrite(t, img, "ln /a /a/b/loop")
	debugfsWrite(t, img, "ln / /a/b/c/root")
	err := runBounded(t, mustRead(t, img))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("walk of a looping tree: %v, want ErrCorrupt", err)
	}
	fsys, _ := openImage(t, img)
	if _, err := fsys.Stat("a/b/loop/b"); err == nil || !strings.Contains(err.Error(), "loop") {
		t.Errorf("Stat a/b/loop/b: %v, want an error naming the loop", err)
	}
	if _, err := fsys.ReadDir("a/b/c"); err == nil || !strings.Contains(err.Error(), "names the root") {
		t.Errorf("ReadDir a/b/c: %v, want an error about the link to the root", err)
	}
	for _, p := range []string{"a/b/loop/b", "a/b/loop/b/loop/b/c", "a/b/c/root/a"} {
		if _, err := fsys.Stat(p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Stat %s: %v, want ErrCorrupt", p, err)
		}
	}
	if _, err := fsys.ReadDir("a/b/loop"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadDir through the loop: %v", err)
	}
	// The link itself is an entry like any other.
	if ents, err := fsys.ReadDir("a/b"); err != nil || len(ents) != 2 {
		t.Errorf("ReadDir a/b: %v, %v", ents, err)
	}
}

// TestDirectoryTwoNames gives a directory a second name in the same
// parent: its ".." is still right, but walks below it would double at
// every such level, so listing the parent is ErrCorrupt.
func TestDirectoryTwoNames(t *testing.T) {
	img, _ := hostileBase(t, true)
	debugfsWrite(t, img, "ln /a /a2")
	err := runBounded(t, mustRead(t, img))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "two names") {
		t.Fatalf("walk: %v, want ErrCorrupt for a directory with two names", err)
	}
}

// TestSuperblockChecksum: with metadata_csum, a changed superblock field
// is reported as a checksum mismatch.
func TestSuperblockChecksum(t *testing.T) {
	_, base := hostileBase(t, true)
	data := slices.Clone(base)
	data[1024+0x78] ^= 0x20 // a letter of the label
	_, err := Open(bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Open with a bad superblock checksum: %v", err)
	}
}

// BenchmarkReadLarge reads a 64 MiB file with io.Copy and reports the
// device reads per MiB (the coalescing). The raw sub-benchmark reads as
// many bytes straight from the image in 4 MiB ReadAt calls: the bound
// for ext4 (the "blkcrypt read" of the acceptance test, without the
// decryption both would share).
func BenchmarkReadLarge(b *testing.B) {
	src := b.TempDir()
	data := make([]byte, 64<<20)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(src, "large"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	img := makeImage(b, config{name: "bench", mkfs: "mkfs.ext4", args: []string{"-b", "4096"}, size: "96M"}, src)
	fh, err := os.Open(img)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	st, _ := fh.Stat()
	b.Run("ext4", func(b *testing.B) {
		cr := &countingReader{r: fh}
		fsys, err := Open(cr, st.Size())
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
		cr.calls = 0
		for b.Loop() {
			f, err := fsys.Open("large")
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, f); err != nil || n != int64(len(data)) {
				b.Fatalf("copy: %d, %v", n, err)
			}
			f.Close()
		}
		b.ReportMetric(float64(cr.calls)/float64(b.N)/64, "readat/MiB")
	})
	b.Run("raw", func(b *testing.B) {
		buf := make([]byte, maxRun)
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			for off := int64(0); off < int64(len(data)); off += maxRun {
				if _, err := fh.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				io.Discard.Write(buf)
			}
		}
	})
}
