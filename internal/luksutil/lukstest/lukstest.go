// Package lukstest has test helpers shared by the luks1 and luks2 tests:
// a Device that fails after the N-th write, access to the cryptsetup test
// images in shared/fixtures, and a runner for the real cryptsetup binary.
package lukstest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// ErrInjected is the error a FaultDevice returns once it has failed.
var ErrInjected = errors.New("injected write failure")

// FaultDevice passes reads through and lets the first Limit writes succeed;
// the write numbered Limit (counting from 0) and everything after it fail
// without touching the device, as if the machine stopped right there.
// Syncs fail once a write has failed. Limit < 0 never fails.
type FaultDevice struct {
	luksutil.Device
	Limit  int
	Writes int // writes attempted so far
	// Tear makes the failing write land partly: its first half, in whole
	// 512-byte sectors, reaches the device (a torn multi-sector write).
	Tear   bool
	failed bool
}

// WriteAt counts writes and fails from the Limit-th on.
func (f *FaultDevice) WriteAt(p []byte, off int64) (int, error) {
	n := f.Writes
	f.Writes++
	if f.failed || f.Limit >= 0 && n >= f.Limit {
		if !f.failed && f.Tear {
			if k := len(p) / 2 &^ 511; k > 0 {
				f.Device.WriteAt(p[:k], off)
			}
		}
		f.failed = true
		return 0, ErrInjected
	}
	return f.Device.WriteAt(p, off)
}

// Sync fails after an injected failure.
func (f *FaultDevice) Sync() error {
	if f.failed {
		return ErrInjected
	}
	return f.Device.Sync()
}

// Failed reports whether a write was refused.
func (f *FaultDevice) Failed() bool { return f.failed }

// ModuleRoot returns the directory holding go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	return testenv.ModuleRoot(t)
}

// FixturesDir returns the cryptsetup fixture images folder
// ($BLKCRYPT_FIXTURES or ../shared/fixtures/cryptsetup beside the module
// root). A missing folder fails the test under CI and skips it otherwise
// (see internal/testenv).
func FixturesDir(t testing.TB) string {
	t.Helper()
	return testenv.FixturesDir(t)
}

// VectorsDir returns the shared vectors folder next to the fixtures
// ($BLKCRYPT_VECTORS overrides it).
func VectorsDir(t testing.TB) string {
	t.Helper()
	return testenv.VectorsDir(t)
}

func needTool(t testing.TB, name, pkg string) string {
	t.Helper()
	return testenv.Need(t, name, pkg)
}

var extractMu sync.Mutex

// Extract decompresses a fixture (NAME.xz or NAME.tar.xz) into a fresh
// temporary directory and returns that directory. It needs the xz command.
func Extract(t testing.TB, archive string) string {
	t.Helper()
	src := testenv.Fixture(t, archive)
	xz := needTool(t, "xz", "xz-utils")
	dir := t.TempDir()
	extractMu.Lock()
	defer extractMu.Unlock()
	if strings.HasSuffix(archive, ".tar.xz") {
		cmd := exec.Command("tar", "-xJf", src, "-C", dir)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(xz)+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar -xJf %s: %v\n%s", archive, err, out)
		}
		return dir
	}
	out, err := os.Create(filepath.Join(dir, strings.TrimSuffix(archive, ".xz")))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(xz, "-dc", src)
	cmd.Stdout = out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("xz -dc %s: %v\n%s", archive, err, stderr.String())
	}
	return dir
}

// CopyFile copies src to a new file in dir and returns its path.
func CopyFile(t testing.TB, src, dir string) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, filepath.Base(src))
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	return dst
}

// Open opens path read-write as a Device; it is closed when the test ends.
func Open(t testing.TB, path string) luksutil.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return luksutil.File{File: f}
}

// NewImage creates a zero-filled (sparse) image file of size bytes.
func NewImage(t testing.TB, dir, name string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return p
}

// Cryptsetup runs the real cryptsetup binary.
type Cryptsetup struct {
	t    testing.TB
	Path string
	Dir  string // where passphrase files go
}

// NeedCryptsetup returns a runner; a missing cryptsetup fails the test
// under CI and skips it otherwise, with an install hint.
func NeedCryptsetup(t testing.TB) *Cryptsetup {
	t.Helper()
	return &Cryptsetup{t: t, Path: needTool(t, "cryptsetup", "cryptsetup-bin"), Dir: t.TempDir()}
}

var keyFileN int
var keyFileMu sync.Mutex

// KeyFile writes a passphrase to a new file (no newline) and returns it.
func (c *Cryptsetup) KeyFile(pass []byte) string {
	keyFileMu.Lock()
	keyFileN++
	n := keyFileN
	keyFileMu.Unlock()
	p := filepath.Join(c.Dir, fmt.Sprintf("key%d", n))
	if err := os.WriteFile(p, pass, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// Run runs cryptsetup with args and returns combined output and error.
func (c *Cryptsetup) Run(args ...string) (string, error) {
	cmd := exec.Command(c.Path, args...)
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MustRun runs cryptsetup and fails the test on error.
func (c *Cryptsetup) MustRun(args ...string) string {
	c.t.Helper()
	out, err := c.Run(args...)
	if err != nil {
		c.t.Fatalf("cryptsetup %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestPassphrase reports whether cryptsetup accepts pass for img (any
// keyslot, or slot >= 0 only).
func (c *Cryptsetup) TestPassphrase(img string, pass []byte, slot int) bool {
	args := []string{"open", "--test-passphrase", "--batch-mode", "--key-file", c.KeyFile(pass)}
	if slot >= 0 {
		args = append(args, "--key-slot", fmt.Sprint(slot))
	}
	_, err := c.Run(append(args, img)...)
	return err == nil
}

// VolumeKey returns the volume key that cryptsetup reads with pass.
func (c *Cryptsetup) VolumeKey(img string, pass []byte) []byte {
	c.t.Helper()
	out := c.MustRun("luksDump", "--dump-volume-key", "--batch-mode", "--key-file", c.KeyFile(pass), img)
	var hexs strings.Builder
	in := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "MK dump:") || strings.HasPrefix(line, "Volume key:") {
			in = true
			_, rest, _ := strings.Cut(line, ":")
			hexs.WriteString(rest)
			continue
		}
		if in {
			if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, " ") {
				hexs.WriteString(line)
			} else {
				in = false
			}
		}
	}
	var key []byte
	for _, f := range strings.Fields(hexs.String()) {
		var b byte
		if _, err := fmt.Sscanf(f, "%02x", &b); err != nil {
			c.t.Fatalf("unexpected volume key dump: %q", out)
		}
		key = append(key, b)
	}
	if len(key) == 0 {
		c.t.Fatalf("no volume key in dump:\n%s", out)
	}
	return key
}

// With returns a runner that reports failures to t (for subtests).
func (c *Cryptsetup) With(t testing.TB) *Cryptsetup {
	d := *c
	d.t = t
	return &d
}
