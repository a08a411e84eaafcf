package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// luksFixture formats a small LUKS2 image (and, with detached, a separate
// header file) with a fast KDF, writes known data and returns the paths.
func luksFixture(t *testing.T, detached bool) (dir, img, hdr, key string, data []byte) {
	t.Helper()
	dir = t.TempDir()
	img = filepath.Join(dir, "v.img")
	key = writeFile(t, dir, "key", []byte("output test passphrase"))
	args := []string{"format", img, "--size", "17825792", "--key-file", key, "-q"}
	if detached {
		hdr = filepath.Join(dir, "hdr.img")
		if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--header", hdr)
	}
	if code, _, e := run(t, nil, append(args, fastKDF...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	data = randBytes(8192)
	in := writeFile(t, dir, "in", data)
	w := []string{"write", img, "-i", in, "--key-file", key}
	if detached {
		w = append(w, "--header", hdr)
	}
	if code, _, e := run(t, nil, w...); code != 0 {
		t.Fatalf("write: %s", e)
	}
	return dir, img, hdr, key, data
}

// TestReadOutputOntoInput: `read -o` naming the device (by its path, a
// symlink or a hard link), the detached header or the key file is refused
// with exit 1 before anything is opened for writing, and the file keeps
// every byte.
func TestReadOutputOntoInput(t *testing.T) {
	for _, detached := range []bool{false, true} {
		dir, img, hdr, key, _ := luksFixture(t, detached)
		link := filepath.Join(dir, "link")
		if err := os.Symlink(img, link); err != nil {
			t.Fatal(err)
		}
		hard := filepath.Join(dir, "hard")
		if err := os.Link(img, hard); err != nil {
			t.Fatal(err)
		}
		base := []string{"read", img, "--key-file", key, "--length", "4096"}
		if detached {
			base = append(base, "--header", hdr)
		}
		cases := map[string]string{"same path": img, "symlink": link, "hard link": hard, "key file": key,
			"dotted path": dir + "/./../" + filepath.Base(dir) + "/v.img"}
		if detached {
			hlink := filepath.Join(dir, "hlink")
			if err := os.Symlink(hdr, hlink); err != nil {
				t.Fatal(err)
			}
			cases["detached header"] = hdr
			cases["header symlink"] = hlink
		}
		for name, out := range cases {
			before := map[string][]byte{img: fileBytes(t, img), key: fileBytes(t, key)}
			if detached {
				before[hdr] = fileBytes(t, hdr)
			}
			code, stdout, stderr := run(t, nil, append(base, "-o", out)...)
			if code != 1 || !strings.Contains(stderr, "same file") || strings.Count(stderr, "\n") != 1 || stdout != "" {
				t.Errorf("detached=%v %s: exit %d, stderr %q; want 1 and one line naming the clash", detached, name, code, stderr)
			}
			for p, b := range before {
				if !bytes.Equal(fileBytes(t, p), b) {
					t.Fatalf("detached=%v %s: %s changed", detached, name, filepath.Base(p))
				}
			}
		}
		// The volume is still readable: nothing was written.
		if code, _, e := run(t, nil, base...); code != 0 {
			t.Fatalf("detached=%v: read after the refusals: %s", detached, e)
		}
	}
}

// TestReadOutputStdoutIsInput: stdout redirected (appending) to the image
// is refused too; `read img >> img` would add plaintext to it.
func TestReadOutputStdoutIsInput(t *testing.T) {
	_, img, _, key, _ := luksFixture(t, false)
	before := fileBytes(t, img)
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var errb bytes.Buffer
	code := Main(context.Background(), []string{"read", img, "--key-file", key, "--length", "4096"},
		&Env{Stdin: bytes.NewReader(nil), Stdout: f, Stderr: &errb})
	if code != 1 || !strings.Contains(errb.String(), "stdout is the device") {
		t.Errorf("exit %d, %q; want 1 naming stdout", code, errb.String())
	}
	if !bytes.Equal(fileBytes(t, img), before) {
		t.Fatal("the image changed")
	}
}

// TestReadOutputReplacedOnlyOnSuccess: an existing output keeps its bytes
// and mode when the read fails (here: cancelled), no temporary file is left
// behind, a successful read replaces it (through a symlink, which stays a
// symlink), and a new output is private (0600).
func TestReadOutputReplacedOnlyOnSuccess(t *testing.T) {
	dir, img, _, key, data := luksFixture(t, false)
	out := writeFile(t, dir, "out", bytes.Repeat([]byte("old output "), 1000))
	if err := os.Chmod(out, 0o640); err != nil {
		t.Fatal(err)
	}
	old := fileBytes(t, out)
	entries := func() int { e, _ := os.ReadDir(dir); return len(e) }
	n := entries()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var errb bytes.Buffer
	code := Main(ctx, []string{"read", img, "--key-file", key, "--length", "8192", "-o", out},
		&Env{Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: &errb})
	if code == 0 {
		t.Fatal("a cancelled read succeeded")
	}
	if !bytes.Equal(fileBytes(t, out), old) {
		t.Fatal("a failed read changed the existing output")
	}
	if entries() != n {
		t.Fatalf("a failed read left a file behind (%d entries, had %d)", entries(), n)
	}

	link := filepath.Join(dir, "out-link")
	if err := os.Symlink(out, link); err != nil {
		t.Fatal(err)
	}
	if code, _, e := run(t, nil, "read", img, "--key-file", key, "--length", "8192", "-o", link); code != 0 {
		t.Fatalf("read: %s", e)
	}
	if got := fileBytes(t, out); !bytes.Equal(got, data) {
		t.Fatalf("output holds %d bytes, not the 8192 written", len(got))
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the symlink was replaced by a file")
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o640 {
		t.Errorf("output mode %v, want the old 0640", st.Mode().Perm())
	}
	fresh := filepath.Join(dir, "fresh")
	if code, _, e := run(t, nil, "read", img, "--key-file", key, "--length", "100", "-o", fresh); code != 0 {
		t.Fatalf("read: %s", e)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o600 || st.Size() != 100 {
		t.Errorf("new output: %v, %v; want 100 bytes, mode 0600", st, err)
	}
	if entries() != n+2 {
		t.Errorf("%d entries, want %d: a temporary file was left behind", entries(), n+2)
	}
	// A directory as output is refused.
	if code, _, e := run(t, nil, "read", img, "--key-file", key, "--length", "100", "-o", dir); code != 1 || !strings.Contains(e, "is a directory") {
		t.Errorf("-o DIR: exit %d, %q", code, e)
	}
}

// TestReadOutputPipeAndDevNull: outputs that are not regular files are
// written in place: /dev/null takes the data (and being a key file too
// would not matter), a FIFO gets every byte.
func TestReadOutputPipeAndDevNull(t *testing.T) {
	_, img, _, key, data := luksFixture(t, false)
	if code, _, e := run(t, nil, "read", img, "--key-file", key, "--length", "8192", "-o", "/dev/null"); code != 0 {
		t.Fatalf("-o /dev/null: %s", e)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		b.ReadFrom(r)
		got <- b.Bytes()
	}()
	fdPathName := "/proc/self/fd/" + strconv.Itoa(int(w.Fd()))
	code, _, e := run(t, nil, "read", img, "--key-file", key, "--length", "8192", "-o", fdPathName)
	w.Close()
	if code != 0 {
		t.Fatalf("-o %s: %s", fdPathName, e)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("the pipe got %d bytes, want the 8192 written", len(b))
	}
}
