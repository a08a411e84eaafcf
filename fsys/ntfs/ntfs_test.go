package ntfs

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"golang.org/x/sys/unix"
)

// The images are made by mkntfs and filled by ntfs-3g (a FUSE mount, for
// directories, sparse, compressed files and streams) or by ntfscp (files
// into the root, no FUSE needed). ntfsls and ntfscat are the judges.

func runTool(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

func mkntfs(t testing.TB, mib int, label string) string {
	t.Helper()
	tool := testenv.Need(t, "mkntfs", "ntfs-3g")
	img := filepath.Join(t.TempDir(), "ntfs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, int64(mib)<<20); err != nil {
		t.Fatal(err)
	}
	runTool(t, tool, "-F", "-Q", "-q", "-L", label, img)
	return img
}

func openImage(t testing.TB, img string) *FS {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mount mounts img with ntfs-3g (compression allowed) and returns the
// mount point and a function that unmounts it (also run at cleanup).
func mount(t *testing.T, img string) (string, func()) {
	t.Helper()
	ntfs3g := testenv.Need(t, "ntfs-3g", "ntfs-3g")
	fusermount := testenv.Need(t, "fusermount", "fuse3")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "/dev/fuse is needed to fill an NTFS image through ntfs-3g: %v", err)
	}
	mnt := t.TempDir()
	if out, err := exec.Command(ntfs3g, "-o", "compression", img, mnt).CombinedOutput(); err != nil {
		testenv.Missing(t, "ntfs-3g cannot mount here (FUSE): %v: %s", err, out)
	}
	done := false
	umount := func() {
		if !done {
			done = true
			if out, err := exec.Command(fusermount, "-u", mnt).CombinedOutput(); err != nil {
				t.Errorf("fusermount -u: %v: %s", err, out)
			}
		}
	}
	t.Cleanup(umount)
	return mnt, umount
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ntfsls lists one directory as ntfsls -F does (a slash after
// directories), without "." and "..".
func ntfsls(t *testing.T, img, dir string) []string {
	t.Helper()
	out := runTool(t, testenv.Need(t, "ntfsls", "ntfs-3g"), "-F", "-p", "/"+dir, img)
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" && l != "." && l != ".." && l != "./" && l != "../" {
			names = append(names, l)
		}
	}
	slices.Sort(names)
	return names
}

// TestAgainstNtfs3g fills a volume through ntfs-3g and holds every
// directory to ntfsls and every file to ntfscat: long and Unicode names,
// a 300-entry directory (a B-tree of INDX blocks), nested directories, a
// 4 MiB random file (non-resident, in runs), small files (resident), a
// sparse file, a hard link, a file with an alternate data stream (its
// main stream reads; the stream is not listed) and a compressed file
// (refused with ErrUnsupported; ntfscat reads it).
func TestAgainstNtfs3g(t *testing.T) {
	img := mkntfs(t, 64, "Test Volume")
	mnt, umount := mount(t, img)
	files := map[string][]byte{
		"Long Name With Spaces.txt":   []byte("hello\n"),
		"Größe 文件 ünïcödé.txt":        []byte("unicode\n"),
		"UPPER.TXT":                   []byte("upper\n"),
		"d1/d2/d3/d4/deep file.txt":   []byte("deep\n"),
		"d1/sibling/x.y.z":            []byte("dots\n"),
		"empty":                       nil,
		"resident-but-not-tiny.bin":   bytes.Repeat([]byte{7}, 600),
		"just-past-a-record.bin":      bytes.Repeat([]byte{9}, 1100),
		"with a stream.txt":           []byte("main stream\n"),
		"d1/sibling/another long one": []byte("x"),
	}
	big := make([]byte, 4<<20)
	rand.Read(big)
	files["big.bin"] = big
	for i := range 300 {
		files[fmt.Sprintf("many/entry number %03d with a long name.dat", i)] = []byte(fmt.Sprintf("entry %d\n", i))
	}
	for name, b := range files {
		write(t, filepath.Join(mnt, name), b)
	}
	// A sparse file: 8 MiB of hole between two written pieces.
	sp, err := os.Create(filepath.Join(mnt, "sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	sp.Write([]byte("head"))
	sp.WriteAt([]byte("tail"), 8<<20)
	sp.Close()
	files["sparse.bin"] = append(append([]byte("head"), make([]byte, 8<<20-4)...), "tail"...)
	if err := os.Link(filepath.Join(mnt, "big.bin"), filepath.Join(mnt, "d1/hard link to big")); err != nil {
		t.Fatal(err)
	}
	files["d1/hard link to big"] = big
	if err := unix.Setxattr(filepath.Join(mnt, "with a stream.txt"), "user.ads", []byte("hidden stream"), 0); err != nil {
		t.Fatalf("alternate data stream: %v", err)
	}
	// A directory flagged compressed: ntfs-3g compresses what is
	// created in it.
	if err := os.Mkdir(filepath.Join(mnt, "comp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(mnt, "comp"), "system.ntfs_attrib_be", []byte{0, 0, 0x08, 0x10}, 0); err != nil {
		t.Fatalf("compressed attribute: %v", err)
	}
	write(t, filepath.Join(mnt, "comp/zeros.bin"), make([]byte, 200000))
	// A DOS 8.3 name beside the long one, as Windows makes: the index
	// then holds both, and only the long one is listed.
	if err := unix.Setxattr(filepath.Join(mnt, "Long Name With Spaces.txt"), "system.ntfs_dos_name", []byte("LONGNA~1.TXT"), 0); err != nil {
		t.Fatalf("DOS name: %v", err)
	}
	// The times ntfs-3g shows are the judge of ModTime.
	mtimes := map[string]time.Time{}
	for _, name := range []string{"big.bin", "d1/d2/d3/d4/deep file.txt", "d1", "Long Name With Spaces.txt"} {
		st, err := os.Stat(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		mtimes[name] = st.ModTime()
	}
	umount()

	v := openImage(t, img)
	if v.Label() != "Test Volume" {
		t.Errorf("label %q", v.Label())
	}

	// Every directory lists what ntfsls lists.
	var dirs []string
	err = fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".", "comp", "d1", "d1/d2", "d1/d2/d3", "d1/d2/d3/d4", "d1/sibling", "many"}; !slices.Equal(dirs, want) {
		t.Fatalf("directories %q, want %q", dirs, want)
	}
	for _, d := range dirs {
		name := d
		if d == "." {
			name = ""
		}
		want := ntfsls(t, img, name)
		ents, err := v.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() {
				n += "/"
			}
			got = append(got, n)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: ReadDir\n %q\nntfsls -F\n %q", d, got, want)
		}
	}
	if ents, _ := v.ReadDir("many"); len(ents) != 300 {
		t.Fatalf("many: %d entries", len(ents))
	}

	// Every file reads as ntfscat reads it, and as it was written.
	ntfscat := testenv.Need(t, "ntfscat", "ntfs-3g")
	for name, want := range files {
		judge := runTool(t, ntfscat, img, "/"+name)
		if !bytes.Equal(judge, want) {
			t.Fatalf("%s: ntfscat disagrees with what was written", name)
		}
		got, err := fs.ReadFile(v, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, differ from ntfscat's %d", name, len(got), len(judge))
		}
		fi, err := fs.Stat(v, name)
		if err != nil || fi.Size() != int64(len(want)) || fi.IsDir() {
			t.Fatalf("%s: stat %v %v", name, fi, err)
		}
	}

	for name, want := range mtimes {
		fi, err := v.Stat(name)
		if err != nil || !fi.ModTime().Equal(want) {
			t.Fatalf("%s: ModTime %v, ntfs-3g says %v (%v)", name, fi.ModTime(), want, err)
		}
	}
	// The DOS name finds the file, as on Windows (ntfscat finds it too),
	// and is not listed (ReadDir matched ntfsls above).
	if fi, err := v.Stat("longna~1.txt"); err != nil || fi.Name() != "Long Name With Spaces.txt" {
		t.Fatalf("DOS name: %v %v", fi, err)
	}
	if b := runTool(t, ntfscat, img, "/LONGNA~1.TXT"); string(b) != "hello\n" {
		t.Fatalf("ntfscat by the DOS name: %q", b)
	}

	// A compressed file is refused, with a clear error.
	if len(runTool(t, ntfscat, img, "/comp/zeros.bin")) != 200000 {
		t.Fatal("ntfscat does not read the compressed file")
	}
	_, err = fs.ReadFile(v, "comp/zeros.bin")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "compressed") {
		t.Fatalf("compressed file: %v, want ErrUnsupported", err)
	}
	t.Log(err)

	// Windows matches names case-insensitively.
	if fi, err := v.Stat("long name with spaces.TXT"); err != nil || fi.Name() != "Long Name With Spaces.txt" {
		t.Fatalf("case-insensitive stat: %v %v", fi, err)
	}

	// Seek and ReadAt across the sparse hole.
	f, err := v.Open("sparse.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.(io.Seeker).Seek(8<<20-2, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "\x00\x00tail" {
		t.Fatalf("read after seek: %q %v", b, err)
	}

	// io/fs's own checks, on the parts without the compressed file.
	for _, dir := range []string{"d1", "many"} {
		var names []string
		for name := range files {
			if rest, ok := strings.CutPrefix(name, dir+"/"); ok {
				names = append(names, rest)
			}
		}
		sub, err := fs.Sub(v, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := fstest.TestFS(sub, names...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNtfscp fills a volume with ntfscp alone (no FUSE): files copied
// into the root, judged by ntfsls and ntfscat.
func TestNtfscp(t *testing.T) {
	ntfscp := testenv.Need(t, "ntfscp", "ntfs-3g")
	img := mkntfs(t, 16, "cp")
	dir := t.TempDir()
	files := map[string][]byte{
		"a long file name.txt": []byte("long\n"),
		"small":                []byte("s"),
	}
	big := make([]byte, 3<<20+123)
	rand.Read(big)
	files["big random.bin"] = big
	for name, b := range files {
		src := filepath.Join(dir, "src")
		write(t, src, b)
		runTool(t, ntfscp, "-f", img, src, "/"+name)
	}
	v := openImage(t, img)
	var got []string
	ents, err := v.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if want := ntfsls(t, img, ""); !slices.Equal(got, want) {
		t.Fatalf("ReadDir %q, ntfsls %q", got, want)
	}
	for name, want := range files {
		judge := runTool(t, testenv.Need(t, "ntfscat", "ntfs-3g"), img, "/"+name)
		b, err := v.ReadFile(name)
		if err != nil || !bytes.Equal(b, judge) || !bytes.Equal(b, want) {
			t.Fatalf("%s: %d bytes, %v; ntfscat %d bytes", name, len(b), err, len(judge))
		}
	}
}
