//go:build linux

package cephtest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/cephtest"
	"github.com/blkcrypt/blkcrypt/internal/cli"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

// TestRBDGateway: one `blkcrypt serve` with three --export volumes, one
// of them an RBD image behind qemu-nbd's raw rbd export (an NBD URI as the
// DEVICE), the others LUKS2 image files. Each export has two real clients
// at once, qemu-io and nbdcopy, and everything read through the gateway
// equals the test's shadow copy. Then the RBD export's qemu-nbd stops: its
// clients get an error, the file exports go on serving. After the gateway
// stops, blkcrypt reads the files and librbd (qemu's rbd driver,
// encrypt.format=luks2) the RBD image, and both equal the shadow.
func TestRBDGateway(t *testing.T) {
	c := cephtest.Get(t)
	testenv.Need(t, "nbdcopy", "libnbd-bin")
	testenv.Need(t, "qemu-io", "qemu-utils")
	ctx := context.Background()
	dir := t.TempDir()
	pbkdf := blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	pass := map[string]string{}
	device := map[string]string{}
	for _, n := range []string{"file1", "file2"} {
		device[n] = filepath.Join(dir, n+".img")
		pass[n] = writeFile(t, n+".pass", []byte("passphrase of "+n))
		if err := blkcrypt.Format(ctx, device[n], []byte("passphrase of "+n), blkcrypt.FormatOptions{Size: 24 << 20, PBKDF: pbkdf}); err != nil {
			t.Fatalf("format %s: %v", n, err)
		}
	}
	img := c.NewImage(t, imageSize)
	e := c.Export(t, img, 4)
	device["rbd"], pass["rbd"] = e.URI, writeFile(t, "rbd.pass", []byte("passphrase of rbd"))
	if err := blkcrypt.Format(ctx, e.URI, []byte("passphrase of rbd"), blkcrypt.FormatOptions{PBKDF: pbkdf}); err != nil {
		t.Fatalf("format over %s: %v", e.URI, err)
	}
	names := []string{"file1", "file2", "rbd"}

	sock := filepath.Join(dir, "gw.sock")
	args := []string{"serve", "--listen", "unix:" + sock}
	for _, n := range names {
		args = append(args, "--export", n+"="+device[n]+",key-file="+pass[n]+",type=luks2")
	}
	// Its cleanup runs before qemu-nbd's: the gateway's Volume of the RBD
	// image stops first.
	stderr, stop := startServe(t, sock, args)
	uri := func(n string) string { return "nbd+unix:///" + n + "?socket=" + sock }

	// Client 1 of each export connects and stays.
	qs := map[string]*nbdtest.QemuIO{}
	for _, n := range names {
		qs[n] = nbdtest.StartQemuIO(t, uri(n))
	}
	// Client 2 of each, all at once: nbdcopy writes the whole volume.
	shadow := map[string][]byte{}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	// The gateway holds the files' locks: another open is refused.
	for _, n := range []string{"file1", "file2"} {
		if v, err := blkcrypt.Open(ctx, device[n], blkcrypt.OpenOptions{Passphrase: []byte("passphrase of " + n), ReadOnly: true}); err == nil {
			v.Close()
			t.Errorf("%s opened while the gateway serves it read-write", n)
		}
	}
	sizes := map[string]int64{"file1": 8 << 20, "file2": 8 << 20, "rbd": 16 << 20}
	for _, n := range names {
		shadow[n] = randBytes(t, sizes[n])
		src := writeFile(t, n+".src", shadow[n])
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := exec.Command("nbdcopy", "--flush", src, uri(n)).CombinedOutput(); err != nil {
				errs <- fmt.Errorf("nbdcopy to %s: %v %s", n, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Client 1 writes patterns over what client 2 wrote, and reads them.
	for i, n := range names {
		q := qs[n]
		for j, off := range []int{0, 1<<20 + 512, 5<<20 + 4096} {
			pat := byte(0x10*(i+1) + j)
			q.Do(fmt.Sprintf("write -P 0x%02x %d 8192", pat, off), "wrote 8192/8192 bytes")
			copy(shadow[n][off:off+8192], bytes.Repeat([]byte{pat}, 8192))
		}
		q.Do("flush", "")
		q.Do(fmt.Sprintf("read -P 0x%02x %d 8192", 0x10*(i+1)+1, 1<<20+512), "read 8192/8192 bytes")
	}
	// Client 2 reads every export back, client 1 still connected.
	for _, n := range names {
		back := filepath.Join(dir, n+".back")
		if out, err := exec.Command("nbdcopy", uri(n), back).CombinedOutput(); err != nil {
			t.Fatalf("nbdcopy from %s: %v %s", n, err, out)
		}
		got, _ := os.ReadFile(back)
		if len(got) < len(shadow[n]) || !bytes.Equal(got[:len(shadow[n])], shadow[n]) {
			t.Fatalf("export %s: bytes read differ from the shadow copy", n)
		}
		shadow[n] = got // the rest, never written, as the volume decrypts it
	}
	// The RBD export's backend goes away (its qemu-nbd stopped, as when
	// the process dies): a client of that export gets an error, not a
	// hang or wrong data, and the other exports go on serving.
	e.Stop(t)
	start := time.Now()
	if out, err := exec.Command("nbdcopy", uri("rbd"), filepath.Join(dir, "rbd.after")).CombinedOutput(); err == nil {
		t.Errorf("nbdcopy read the RBD export after its qemu-nbd stopped: %s", out)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the failed read of the RBD export took %v", d)
	}
	qs["file1"].Do(fmt.Sprintf("read -P 0x%02x %d 8192", 0x11, 1<<20+512), "read 8192/8192 bytes")
	back := filepath.Join(dir, "file2.again")
	if out, err := exec.Command("nbdcopy", uri("file2"), back).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy from file2 after the RBD backend went: %v %s", err, out)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, shadow["file2"]) {
		t.Fatal("file2 read differently after the RBD backend went")
	}
	// Stopping flushes every export; the RBD one cannot be, which the
	// exit code may report. Everything was flushed by its clients before.
	if code := stop(); code != 0 && code != cli.ExitDevice {
		t.Errorf("gateway exited %d after losing a backend, want 0 or %d: %s", code, cli.ExitDevice, stderr.String())
	}

	// What the clients were told is stored: blkcrypt reads the files,
	// librbd the RBD image.
	for _, n := range []string{"file1", "file2"} {
		v := open(t, device[n], []byte("passphrase of "+n), true)
		if !bytes.Equal(readAll(t, v), shadow[n]) {
			t.Errorf("%s after the gateway stopped differs from the shadow copy", n)
		}
		v.Close()
	}
	if !bytes.Equal(c.LibrbdRead(t, img, "luks2", pass["rbd"]), shadow["rbd"]) {
		t.Error("librbd reads other bytes from the RBD export's image than the gateway's clients wrote")
	}
}

// startServe runs `blkcrypt ARGS` (a serve listening on sock) in this
// process until it listens, and returns its stderr and a stop function
// that cancels it and returns its exit code (0 once stopped before). The
// test's cleanup stops it too.
func startServe(t *testing.T, sock string, args []string) (*nbdtest.LockedBuffer, func() int) {
	t.Helper()
	stderr := &nbdtest.LockedBuffer{}
	env := &cli.Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: stderr}
	stop := testenv.Serve(t, sock, func(ctx context.Context) int { return cli.Main(ctx, args, env) }, stderr.String)
	return stderr, stop
}
