package fat

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// The images are made by mkfs.vfat and filled by mtools at test time;
// mtools is also the judge of what they hold (mdir for the names, mtype
// and mcopy for the bytes).

// mtoolsEnv keeps mtools from refusing images it finds odd and makes it
// read and write UTF-8 names.
func mtoolsEnv() []string {
	return append(os.Environ(), "MTOOLS_SKIP_CHECK=1", "LC_ALL=C.UTF-8", "MTOOLSRC=/dev/null")
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = mtoolsEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tree is the content the tests copy in: long names in several scripts
// and cases, a name that fits 8.3, a 300-entry directory, a 4 MiB random
// file and a deep nest.
func tree(t testing.TB) map[string][]byte {
	files := map[string][]byte{
		"a long file name.txt":             []byte("hello, long name\n"),
		"Größe 文件.txt":                     []byte("unicode\n"),
		"UPPER.TXT":                        []byte("upper\n"),
		"lower.txt":                        []byte("lower\n"),
		"MixedCase.Extension":              []byte("mixed\n"),
		"empty":                            nil,
		"d1/d2/d3/d4/deep file.txt":        []byte("deep\n"),
		"d1/sibling with spaces/x.y.z.txt": []byte("dots\n"),
	}
	big := make([]byte, 4<<20)
	rand.Read(big)
	files["big.bin"] = big
	for i := range 300 {
		files[fmt.Sprintf("many/entry number %03d.dat", i)] = []byte(fmt.Sprintf("entry %d\n", i))
	}
	return files
}

// buildFAT makes a FAT volume of the given type and size in KiB and copies the
// tree in with mcopy.
func buildFAT(t testing.TB, typ int, kib int, files map[string][]byte) string {
	t.Helper()
	testenv.Need(t, "mkfs.vfat", "dosfstools")
	testenv.Need(t, "mcopy", "mtools")
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	for name, b := range files {
		p := filepath.Join(host, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, fmt.Sprintf("fat%d.img", typ))
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, int64(kib)<<10); err != nil {
		t.Fatal(err)
	}
	run(t, testenv.Need(t, "mkfs.vfat", "dosfstools"), "-F", fmt.Sprint(typ), "-n", fmt.Sprintf("VOL%d", typ), "-i", "1234abcd", img)
	ents, err := os.ReadDir(host)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-s", "-i", img}
	for _, e := range ents {
		args = append(args, filepath.Join(host, e.Name()))
	}
	run(t, "mcopy", append(args, "::/")...)
	return img
}

func openImage(t testing.TB, img string) *FS {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAgainstMtools reads FAT12, FAT16 and FAT32 volumes made by
// mkfs.vfat and filled by mcopy: the names of every directory are those
// mdir lists, the bytes of every file those mcopy copies out, and the big
// file is the one mtype prints.
func TestAgainstMtools(t *testing.T) {
	files := tree(t)
	for _, c := range []struct{ typ, mib int }{{12, 8}, {16, 32}, {32, 64}} {
		t.Run(fmt.Sprintf("FAT%d", c.typ), func(t *testing.T) {
			img := buildFAT(t, c.typ, c.mib<<10, files)
			f := openImage(t, img)
			if int(f.Type()) != c.typ {
				t.Fatalf("type %v, mkfs.vfat -F %d", f.Type(), c.typ)
			}
			if want := fmt.Sprintf("VOL%d", c.typ); f.Label() != want {
				t.Errorf("label %q, want %q", f.Label(), want)
			}
			if f.Serial() != 0x1234abcd {
				t.Errorf("serial %#x, want 0x1234abcd", f.Serial())
			}

			// mdir -b -s lists every path, directories with a slash.
			var want []string
			for _, l := range strings.Split(run(t, "mdir", "-i", img, "-b", "-s", "::/"), "\n") {
				if l = strings.TrimPrefix(l, "::/"); l != "" {
					want = append(want, l)
				}
			}
			var got []string
			err := fs.WalkDir(f, ".", func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if p == "." {
					return nil
				}
				if d.IsDir() {
					p += "/"
				}
				got = append(got, p)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("paths differ from mdir -b -s:\n got %q\nwant %q", got, want)
			}
			many, err := f.ReadDir("many")
			if err != nil || len(many) != 300 {
				t.Fatalf("many: %d entries, %v; want 300", len(many), err)
			}

			// mcopy -s copies the tree out: every file byte for byte.
			out := filepath.Join(t.TempDir(), "out")
			run(t, "mcopy", "-s", "-n", "-i", img, "::/", out)
			for name := range files {
				judge, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				b, err := fs.ReadFile(f, name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, judge) {
					t.Fatalf("%s: %d bytes differ from mcopy's %d", name, len(b), len(judge))
				}
			}
			cmd := exec.Command("mtype", "-i", img, "::/big.bin")
			cmd.Env = mtoolsEnv()
			judge, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := f.ReadFile("big.bin"); !bytes.Equal(b, judge) || len(b) != 4<<20 {
				t.Fatalf("big.bin: %d bytes differ from mtype's %d", len(b), len(judge))
			}

			// The 8.3 and case-folded names find the same files.
			for alias, name := range map[string]string{"A LONG FILE NAME.TXT": "a long file name.txt", "upper.txt": "UPPER.TXT", "ALONGF~1.TXT": "a long file name.txt"} {
				fi, err := f.Stat(alias)
				if err != nil || fi.Name() != name {
					t.Errorf("stat %q: %v, %v; want %q", alias, fi, err, name)
				}
			}

			var names []string
			for name := range files {
				names = append(names, name)
			}
			if err := fstest.TestFS(f, names...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHostile corrupts a real FAT16 volume in the ways a hostile image
// would: every read must fail with an error wrapping ErrCorrupt, at once.
func TestHostile(t *testing.T) {
	files := map[string][]byte{
		"file.txt":     bytes.Repeat([]byte("x"), 10000),
		"d1/d2/in.txt": []byte("in\n"),
	}
	img := buildFAT(t, 16, 32<<10, files)
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	f := openImage(t, img)
	fe, _, err := f.resolve("stat", "file.txt")
	if err != nil {
		t.Fatal(err)
	}
	d1, _, err := f.resolve("stat", "d1")
	if err != nil {
		t.Fatal(err)
	}
	d2, _, err := f.resolve("stat", "d1/d2")
	if err != nil {
		t.Fatal(err)
	}
	reserved := int64(orig[14]) | int64(orig[15])<<8
	setFAT := func(b []byte, c, v uint32) {
		o := reserved*f.bps + int64(2*c)
		b[o], b[o+1] = byte(v), byte(v>>8)
	}
	// findEntry returns the offset of the short entry pointing at cluster
	// c in the data area of directory cluster dc.
	findEntry := func(b []byte, dc uint32, name string) int64 {
		base := f.dataStart + int64(dc-2)*f.clusterSize
		for o := base; o < base+f.clusterSize; o += 32 {
			if strings.HasPrefix(string(b[o:o+11]), name) {
				return o
			}
		}
		t.Fatalf("entry %s not found", name)
		return 0
	}
	cases := []struct {
		name  string
		patch func(b []byte)
		read  string
	}{
		{"zero sectors per cluster", func(b []byte) { b[13] = 0 }, ""},
		{"chain loops on itself", func(b []byte) { setFAT(b, fe.cluster, fe.cluster) }, "file.txt"},
		{"chain loops back", func(b []byte) { setFAT(b, fe.cluster+1, fe.cluster) }, "file.txt"},
		{"chain leaves the volume", func(b []byte) { setFAT(b, fe.cluster, 0xFFF0) }, "file.txt"},
		{"chain ends early", func(b []byte) { setFAT(b, fe.cluster, 0xFFFF) }, "file.txt"},
		{"chain to a free cluster", func(b []byte) { setFAT(b, fe.cluster, 0) }, "file.txt"},
		{"directory chain loops", func(b []byte) { setFAT(b, d1.cluster, d1.cluster) }, "d1"},
		{"directory contains its parent", func(b []byte) {
			o := findEntry(b, d1.cluster, "D2")
			b[o+26], b[o+27] = byte(d1.cluster), byte(d1.cluster>>8)
		}, "d1"},
		{"directory contains the root", func(b []byte) {
			o := findEntry(b, d2.cluster, "IN      TXT")
			b[o+11] = attrDir
			b[o+26], b[o+27] = 0, 0
		}, "d1/d2"},
		{"two directories share a subdirectory", func(b []byte) {
			// file.txt in the root becomes a second parent of d1/d2.
			o := f.rootStart
			for ; o < f.rootStart+f.rootEntries*32; o += 32 {
				if string(b[o:o+11]) == "FILE    TXT" {
					break
				}
			}
			b[o+11] = attrDir
			b[o+26], b[o+27] = byte(d2.cluster), byte(d2.cluster>>8)
		}, ""},
		{"geometry beyond the volume", func(b []byte) { b[19], b[20] = 0, 0; b[32], b[33], b[34], b[35] = 0, 0, 0, 1 }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := slices.Clone(orig)
			c.patch(b)
			f, err := Open(bytes.NewReader(b), int64(len(b)))
			if err == nil {
				err = fs.WalkDir(f, ".", func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if !d.IsDir() {
						_, err = fs.ReadFile(f, p)
					}
					return err
				})
			}
			if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line wrapping ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

// TestCP437 holds the OEM table to its 128 characters.
func TestCP437(t *testing.T) {
	if len(cp437Runes) != 128 {
		t.Fatalf("cp437 has %d runes", len(cp437Runes))
	}
}
