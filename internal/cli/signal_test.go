package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

// TestSignalStopsKeyDerivation: SIGINT or SIGTERM during the key
// derivation of a real blkcrypt process (test-passphrase, add-key, read)
// makes it exit at once, non-zero, without writing anything. The keyslot
// uses Argon2id with a cost that takes seconds.
func TestSignalStopsKeyDerivation(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = lukstest.ModuleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	img := filepath.Join(dir, "v.img")
	start := time.Now()
	if err := blkcrypt.Format(context.Background(), img, []byte("pw"), blkcrypt.FormatOptions{Size: 20 << 20,
		PBKDF: blkcrypt.PBKDFOptions{Type: "argon2id", Iterations: 4, MemoryKiB: 256 << 10, Parallel: 1}}); err != nil {
		t.Fatal(err)
	}
	derive := time.Since(start)
	pass := writeFile(t, dir, "pass", []byte("pw"))
	newPass := writeFile(t, dir, "new", []byte("new"))
	before := fileSum(t, img)
	for _, c := range []struct {
		sig  syscall.Signal
		args []string
	}{
		{syscall.SIGINT, []string{"test-passphrase", img, "--key-file", pass}},
		{syscall.SIGTERM, []string{"add-key", img, newPass, "--key-file", pass}},
		{syscall.SIGINT, []string{"read", img, "--key-file", pass, "--length", "512"}},
	} {
		cmd := exec.Command(bin, c.args...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Signal once the command is deriving the key (its resident
		// memory grows into the 256 MiB Argon2 array): on a loaded machine
		// a fixed sleep could hit the Go runtime's start, before the
		// command's handler, and the default action would kill it
		// silently.
		waitDeriving(t, cmd.Process.Pid)
		sent := time.Now()
		cmd.Process.Signal(c.sig)
		err := cmd.Wait()
		took := time.Since(sent)
		if err == nil {
			t.Errorf("%s: exited 0 after %v", c.args[0], c.sig)
		}
		if took > derive/2+time.Second {
			t.Errorf("%s: exited %v after %v; one derivation takes %v", c.args[0], took, c.sig, derive)
		}
		if bytes.Count(errb.Bytes(), []byte("\n")) != 1 || !bytes.Contains(errb.Bytes(), []byte("canceled")) {
			t.Errorf("%s: stderr %q, want one line saying it was cancelled", c.args[0], errb.String())
		}
	}
	if fileSum(t, img) != before {
		t.Fatal("an interrupted command changed the image")
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatal(err)
	}
}

// waitDeriving waits (up to 20 s) until process pid holds more than
// 64 MiB resident, as /proc/PID/status's VmRSS says: its Argon2 has begun.
func waitDeriving(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatalf("reading the status of process %d: %v", pid, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if err == nil && kb > 64<<10 {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d never started deriving a key", pid)
}
