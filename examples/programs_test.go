package examples

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
)

// buildProgram compiles one of this module's commands.
func buildProgram(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if b, err := exec.Command("go", "build", "-o", bin, "./"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", name, err, b)
	}
	return bin
}

// TestPrograms: a LUKS1 image made by cryptsetup is written through
// blkcrypt.Open's WriteAt; qemu-img's LUKS driver reads back exactly what
// was written; the decrypt program prints the plaintext's SHA-256, and
// nbdcopy reads the same bytes from the serve program, which exits cleanly
// on SIGTERM.
func TestPrograms(t *testing.T) {
	cs := need(t, "cryptsetup", "cryptsetup-bin")
	qemuImg := need(t, "qemu-img", "qemu-utils")
	nbdcopy := need(t, "nbdcopy", "libnbd-bin")
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 8<<20); err != nil {
		t.Fatal(err)
	}
	pass := "outside module"
	cmd := exec.Command(cs, "luksFormat", "-q", "--type", "luks1", "--pbkdf-force-iterations", "1000", "--key-file", "-", img)
	cmd.Stdin = strings.NewReader(pass)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v\n%s", err, b)
	}

	ctx := context.Background()
	v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte(pass)})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, v.Size())
	rand.Read(data)
	// An unaligned write in the middle as well as the whole volume.
	if _, err := v.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(data[1000:5000], 1000); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)

	// qemu-img decrypts independently.
	secret := filepath.Join(dir, "pass")
	if err := os.WriteFile(secret, []byte(pass), 0o600); err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(dir, "qemu.raw")
	spec := `json:{"driver":"luks","key-secret":"sec0","file":{"driver":"file","filename":"` + img + `"}}`
	if b, err := exec.Command(qemuImg, "convert", "--object", "secret,id=sec0,file="+secret, "-O", "raw", spec, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, b)
	}
	got, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("qemu-img reads %d bytes that differ from what blkcrypt wrote", len(got))
	}

	decrypt := buildProgram(t, "decrypt")
	cmd = exec.Command(decrypt, img)
	cmd.Stdin = strings.NewReader(pass + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("decrypt: %v", err)
	}
	if s := string(out); !strings.Contains(s, "type luks1\n") || !strings.Contains(s, "sha256 "+hex.EncodeToString(want[:])) {
		t.Fatalf("decrypt printed %q", s)
	}
	cmd = exec.Command(decrypt, img)
	cmd.Stdin = strings.NewReader("wrong\n")
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("decrypt with a wrong passphrase: %v, want exit 2", err)
	}

	serve := buildProgram(t, "serve")
	sock := filepath.Join(dir, "nbd.sock")
	srv := exec.Command(serve, "-socket", sock, img)
	srv.Stdin = strings.NewReader(pass + "\n")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("serve did not say ready")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start within 30 s")
	}
	copied := filepath.Join(dir, "nbd.raw")
	if b, err := exec.Command(nbdcopy, "nbd+unix:///?socket="+sock, copied).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v\n%s", err, b)
	}
	if got, err := os.ReadFile(copied); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("nbdcopy from serve: %v, equal %v", err, bytes.Equal(got, data))
	}
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within 30 s of SIGTERM")
	}
}
