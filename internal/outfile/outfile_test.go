package outfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	os.WriteFile(img, []byte("ciphertext"), 0o600)
	hard := filepath.Join(dir, "hard")
	if err := os.Link(img, hard); err != nil {
		t.Fatal(err)
	}
	sym := filepath.Join(dir, "sym")
	os.Symlink(img, sym)
	in := []Input{{"device", img}, {"key file", filepath.Join(dir, "missing")}}
	for _, out := range []string{img, hard, sym} {
		if err := Check(out, nil, in); err == nil || !strings.Contains(err.Error(), "the device") {
			t.Errorf("output %s over the device: %v", out, err)
		}
	}
	if err := Check(dir, nil, in); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory: %v", err)
	}
	for _, out := range []string{filepath.Join(dir, "new"), os.DevNull} {
		if err := Check(out, nil, in); err != nil {
			t.Errorf("%s: %v", out, err)
		}
	}
	f, _ := os.OpenFile(img, os.O_WRONLY|os.O_APPEND, 0)
	defer f.Close()
	if err := Check("-", f, in); err == nil || !strings.Contains(err.Error(), "stdout") {
		t.Errorf("stdout appending to the device: %v", err)
	}
	if b, _ := os.ReadFile(img); string(b) != "ciphertext" {
		t.Errorf("Check changed an input")
	}
}

// TestCreate: a new file is 0600 and appears only on Commit; an existing
// one keeps its mode and is replaced only on Commit (through a symlink,
// the target is); Abort leaves it as it was and no temporary file.
func TestCreate(t *testing.T) {
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh")
	o, err := Create(fresh, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("plaintext"))
	if _, err := os.Stat(fresh); err == nil {
		t.Errorf("the output exists before Commit")
	}
	if err := o.Commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("new output: %v %v", st, err)
	}
	old := filepath.Join(dir, "old")
	os.WriteFile(old, []byte("old contents, longer"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(old, link)
	o, _ = Create(link, nil)
	o.Write([]byte("half"))
	o.Abort()
	if b, _ := os.ReadFile(old); string(b) != "old contents, longer" {
		t.Errorf("Abort changed the file: %q", b)
	}
	o, _ = Create(link, nil)
	o.Write([]byte("new"))
	if err := o.Commit(); err != nil {
		t.Fatal(err)
	}
	o.Abort() // safe after Commit
	b, _ := os.ReadFile(old)
	st, _ := os.Stat(old)
	lst, _ := os.Lstat(link)
	if string(b) != "new" || st.Mode().Perm() != 0o644 || lst.Mode()&os.ModeSymlink == 0 {
		t.Errorf("after Commit through the symlink: %q, mode %v, link %v", b, st.Mode(), lst.Mode())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".blkcrypt-") {
			t.Errorf("a temporary file was left: %s", e.Name())
		}
	}
	var stdout bytes.Buffer
	o, _ = Create("-", &stdout)
	o.Write([]byte("x"))
	if o.Commit() != nil || stdout.String() != "x" {
		t.Errorf("stdout: %q", stdout.String())
	}
}
