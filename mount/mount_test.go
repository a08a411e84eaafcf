//go:build linux

package mount

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// memDev is a device in memory that counts its flushes.
type memDev struct {
	mu      sync.Mutex
	b       []byte
	flushes int
}

func (m *memDev) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(p, m.b[off:]), nil
}

func (m *memDev) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(m.b[off:], p), nil
}

func (m *memDev) Size() int64 { return int64(len(m.b)) }

func (m *memDev) Flush() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushes++
	return nil
}

func (m *memDev) flushed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.flushes
}

func (m *memDev) bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return bytes.Clone(m.b)
}

func needFUSE(t *testing.T) {
	t.Helper()
	testenv.Need(t, "fusermount3", "fuse3")
	testenv.Need(t, "dd", "coreutils")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "FUSE mounts need /dev/fuse (modprobe fuse): %v", err)
	}
}

func start(t *testing.T, dev Device, o Options) *Mount {
	t.Helper()
	m, err := Start(t.TempDir(), dev, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-m.Done():
		default:
			exec.Command("fusermount3", "-u", "-z", filepath.Dir(m.Path())).Run()
			m.Wait()
		}
	})
	return m
}

// TestMountBlockDevice: the kernel's FUSE client, driven by dd and cat,
// sees the device as a block device: its bytes, writes in place (dd
// conv=notrunc, and an O_TRUNC open that truncates nothing), ENOSPC at
// the end, a short write across it, a flush on close after a write.
func TestMountBlockDevice(t *testing.T) {
	needFUSE(t)
	dev := &memDev{b: bytes.Repeat([]byte("0123456789abcdef"), 64<<10)} // 1 MiB
	m := start(t, dev, Options{Source: "blkcrypt:test"})
	st, err := os.Stat(m.Path())
	if err != nil || st.Size() != 1<<20 || st.Mode().Perm() != 0o600 || filepath.Base(m.Path()) != DefaultFileName {
		t.Fatalf("%s: %v %v", m.Path(), st, err)
	}
	if out, err := exec.Command("cat", m.Path()).Output(); err != nil || !bytes.Equal(out, dev.bytes()) {
		t.Fatalf("cat of the mount: %v, %d bytes", err, len(out))
	}
	in := filepath.Join(t.TempDir(), "in")
	os.WriteFile(in, bytes.Repeat([]byte{0xa5}, 5000), 0o600)
	if out, err := exec.Command("dd", "if="+in, "of="+m.Path(), "bs=5000", "seek=1", "conv=notrunc,fsync", "status=none").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	copy(want[5000:], bytes.Repeat([]byte{0xa5}, 5000))
	if !bytes.Equal(dev.bytes(), want) || dev.flushed() == 0 {
		t.Fatalf("after dd: device differs, %d flushes", dev.flushed())
	}
	// At the end: ENOSPC; across it: short.
	out, err := exec.Command("dd", "if="+in, "of="+m.Path(), "bs=1", "count=10", "seek=1048576", "conv=notrunc", "status=none").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "No space left on device") {
		t.Errorf("dd at the end: %v %s, want ENOSPC", err, out)
	}
	f, err := os.OpenFile(m.Path(), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatalf("an O_TRUNC open: %v", err)
	}
	if n, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 100), 1<<20-40); err == nil || n > 40 {
		t.Errorf("a write across the end: %d bytes, %v; want at most the 40 before the end and an error", n, err)
	}
	f.Close()
	// The kernel may pass on the part before the end (as a block device
	// takes it) or drop the whole request; nothing else changed either way.
	got := dev.bytes()
	if !bytes.Equal(got[:1<<20-40], want[:1<<20-40]) {
		t.Errorf("after the O_TRUNC open and the write across the end the device differs")
	}
	if detached, err := m.Unmount(); err != nil || detached {
		t.Fatalf("Unmount of an idle mount: detached %v, %v", detached, err)
	}
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Unmount")
	}
}

// TestMountReadOnlyAndBusy: a read-only mount refuses writes (the kernel
// says EROFS); a mount a file keeps open is detached by Unmount and ends
// when the file is closed.
func TestMountReadOnlyAndBusy(t *testing.T) {
	needFUSE(t)
	dev := &memDev{b: make([]byte, 64<<10)}
	m := start(t, dev, Options{ReadOnly: true, FileName: "disk"})
	if filepath.Base(m.Path()) != "disk" {
		t.Errorf("file name %s", m.Path())
	}
	if _, err := os.OpenFile(m.Path(), os.O_WRONLY, 0); !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
		t.Errorf("open for writing: %v, want EROFS", err)
	}
	f, err := os.Open(m.Path())
	if err != nil {
		t.Fatal(err)
	}
	detached, err := m.Unmount()
	if err != nil || !detached {
		t.Fatalf("Unmount with a file open: detached %v, %v", detached, err)
	}
	b := make([]byte, 10)
	if _, err := f.ReadAt(b, 100); err != nil {
		t.Errorf("a read through the open file after the detach: %v", err)
	}
	f.Close()
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the detached mount did not end when its last file was closed")
	}
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o600)
	for _, c := range []struct{ dir, says string }{{filepath.Join(dir, "nope"), "no such file"}, {file, "not a directory"}} {
		if _, err := CheckDir(c.dir); err == nil || !strings.Contains(err.Error(), c.says) || strings.Count(err.Error(), c.dir) != 1 {
			t.Errorf("CheckDir(%s): %v, want one mention of the path and %q", c.dir, err, c.says)
		}
	}
	if abs, err := CheckDir(dir); err != nil || abs != dir {
		t.Errorf("CheckDir(%s) = %s, %v", dir, abs, err)
	}
}
