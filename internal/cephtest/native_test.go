//go:build ceph && cgo && linux

package cephtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/cephtest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
	"github.com/blkcrypt/blkcrypt/rbd"
)

// TestRBDNative: the native device (package rbd, librbd through cgo) as a
// blkcrypt DEVICE, rbd:POOL/IMAGE@conf=FILE: blkcrypt formats and writes
// the image, librbd's encryption (qemu's rbd driver) reads exactly that;
// librbd writes, the native device reads it; an image that is not there
// is an error naming it, wrapping ENOENT.
func TestRBDNative(t *testing.T) {
	c := cephtest.Get(t)
	ctx := context.Background()
	pass := []byte("native passphrase")
	passFile := writeFile(t, "pass", pass)
	img := c.NewImage(t, imageSize)
	dev := "rbd:rbd/" + img + "@conf=" + c.Conf
	if !blkcrypt.IsURI(dev) {
		t.Fatalf("%s is not taken as a device", dev)
	}
	if err := blkcrypt.Format(ctx, dev, pass, blkcrypt.FormatOptions{PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatalf("Format %s: %v", dev, err)
	}
	v := open(t, dev, pass, false)
	checkLayout(t, c, img, "luks2", v)
	want := randBytes(t, v.Size())
	writeMixed(t, v, want)
	if err := v.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !bytes.Equal(c.LibrbdRead(t, img, "luks2", passFile), want) {
		t.Fatal("librbd read other bytes than blkcrypt wrote through the native device")
	}
	head := randBytes(t, 2<<20)
	c.LibrbdWrite(t, img, "luks2", passFile, writeFile(t, "head", head))
	copy(want, head)
	v = open(t, dev, pass, true)
	defer v.Close()
	if !bytes.Equal(readAll(t, v), want) {
		t.Fatal("the native device read other bytes than librbd wrote")
	}
	if _, err := v.WriteAt(make([]byte, 4096), 0); err == nil {
		t.Fatal("a read-only open wrote")
	}

	_, err := blkcrypt.Open(ctx, "rbd:rbd/no-such-image@conf="+c.Conf, blkcrypt.OpenOptions{Passphrase: pass})
	if !errors.Is(err, rbd.ErrCeph) || !errors.Is(err, syscall.ENOENT) || !bytes.Contains([]byte(err.Error()), []byte("rbd/no-such-image")) {
		t.Errorf("a missing image: %v", err)
	}
}

// TestRBDNativeTuning: the native device runs with librbd's zero-copy
// writes and without its cache, unless the configuration chose a cache
// policy, which it then keeps. (Through configuration files: librados
// reads CEPH_ARGS once per process.)
func TestRBDNativeTuning(t *testing.T) {
	c := cephtest.Get(t)
	img := c.NewImage(t, imageSize)
	base, err := os.ReadFile(c.Conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		extra string
		want  map[string]string
	}{
		{"", map[string]string{"rbd_cache": "false", "rbd_disable_zero_copy_writes": "false"}},
		{"rbd cache policy = writeback", map[string]string{"rbd_cache": "true", "rbd_cache_policy": "writeback", "rbd_disable_zero_copy_writes": "false"}},
		{"rbd cache = false", map[string]string{"rbd_cache": "false", "rbd_cache_policy": "writearound"}},
	} {
		conf := writeFile(t, "ceph.conf", append(append([]byte{}, base...), "\n[client.admin]\n"+tc.extra+"\n"...))
		im, err := rbd.Open(context.Background(), "rbd:rbd/"+img+"@conf="+conf, false)
		if err != nil {
			t.Fatalf("%q: open: %v", tc.extra, err)
		}
		for k, want := range tc.want {
			if got, err := im.ConfigValue(k); err != nil || got != want {
				t.Errorf("%q: %s = %q, %v; want %q", tc.extra, k, got, err, want)
			}
		}
		if _, err := im.ConfigValue("no_such_option"); !errors.Is(err, rbd.ErrCeph) || !errors.Is(err, syscall.ENOENT) {
			t.Errorf("an unknown option: %v, want ErrCeph and ENOENT", err)
		}
		if err := im.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if _, err := im.ConfigValue("rbd_cache"); !errors.Is(err, rbd.ErrClosed) {
			t.Errorf("after Close: %v, want ErrClosed", err)
		}
	}
}

// TestRBDNativeAsync: writes that a Volume over the native device starts
// with StartWriteAt (librbd's completion answers them) land where librbd's
// own encryption reads them, mixed with the writes that take the waiting
// path, both from the library and through `blkcrypt serve` with nbdcopy
// and qemu-io as clients. The image's WriteAtAsync reports a write it
// cannot start to done at once.
func TestRBDNativeAsync(t *testing.T) {
	c := cephtest.Get(t)
	testenv.Need(t, "nbdcopy", "libnbd-bin")
	ctx := context.Background()
	pass := []byte("async passphrase")
	passFile := writeFile(t, "pass", pass)
	img := c.NewImage(t, imageSize)
	dev := "rbd:rbd/" + img + "@conf=" + c.Conf
	if err := blkcrypt.Format(ctx, dev, pass, blkcrypt.FormatOptions{PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatalf("Format %s: %v", dev, err)
	}

	v := open(t, dev, pass, false)
	want := randBytes(t, v.Size())
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for off := int64(0); off < v.Size(); off += 1 << 20 {
		p := bytes.Clone(want[off : off+1<<20])
		if off%(4<<20) == 3<<20 {
			// Unaligned, through the waiting path, between the others.
			if _, err := v.WriteAt(p[100:], off+100); err != nil {
				t.Fatal(err)
			}
			if _, err := v.WriteAt(p[:100], off); err != nil {
				t.Fatal(err)
			}
			continue
		}
		wg.Add(1)
		if !v.StartWriteAt(p, off, func(err error) {
			if err != nil {
				errs <- err
			}
			wg.Done()
		}) {
			t.Fatalf("StartWriteAt at %d did not start on the native device", off)
		}
	}
	if v.StartWriteAt(make([]byte, 4096), 512, func(error) { t.Error("done called for a write not started") }) {
		t.Error("an unaligned StartWriteAt started")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !bytes.Equal(c.LibrbdRead(t, img, "luks2", passFile), want) {
		t.Fatal("librbd read other bytes than the started writes wrote")
	}

	// Through serve: nbdcopy's 256 KiB writes start asynchronously,
	// qemu-io's FUA and unaligned ones wait.
	sock := filepath.Join(t.TempDir(), "s.sock")
	_, stop := startServe(t, sock, []string{"serve", dev, "--key-file", passFile, "--listen", "unix:" + sock})
	uri := "nbd+unix:///?socket=" + sock
	want = randBytes(t, int64(len(want)))
	if out, err := exec.Command("nbdcopy", "--flush", writeFile(t, "src", want), uri).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v %s", err, out)
	}
	q := nbdtest.StartQemuIO(t, uri)
	for _, w := range []struct {
		cmd      string
		off, n   int
		pat      byte
		expected string
	}{
		{"write -P 0x33 %d %d", 1 << 20, 1 << 20, 0x33, "wrote 1048576/1048576 bytes"},
		{"write -f -P 0x44 %d %d", 3 << 20, 64 << 10, 0x44, "wrote 65536/65536 bytes"},
		{"write -P 0x55 %d %d", 5<<20 + 512, 4096, 0x55, "wrote 4096/4096 bytes"},
	} {
		q.Do(fmt.Sprintf(w.cmd, w.off, w.n), w.expected)
		copy(want[w.off:w.off+w.n], bytes.Repeat([]byte{w.pat}, w.n))
	}
	q.Do("flush", "")
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	if !bytes.Equal(c.LibrbdRead(t, img, "luks2", passFile), want) {
		t.Fatal("librbd read other bytes than serve's clients wrote")
	}

	// Refused at once, on the caller's goroutine.
	asyncErr := func(im *rbd.Image, off int64) error {
		var got error
		called := false
		im.WriteAtAsync(make([]byte, 4096), off, func(_ int, err error) { called, got = true, err })
		if !called {
			return errors.New("done not called at once")
		}
		return got
	}
	im, err := rbd.Open(ctx, dev, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := asyncErr(im, 0); !errors.Is(err, rbd.ErrReadOnly) {
		t.Errorf("a read-only image: %v, want ErrReadOnly", err)
	}
	im.Close()
	im, err = rbd.Open(ctx, dev, false)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := im.Size()
	if err := asyncErr(im, size-512); !errors.Is(err, rbd.ErrOutOfRange) {
		t.Errorf("past the end: %v, want ErrOutOfRange", err)
	}
	im.Close()
	if err := asyncErr(im, 0); !errors.Is(err, rbd.ErrClosed) {
		t.Errorf("a closed image: %v, want ErrClosed", err)
	}
}
