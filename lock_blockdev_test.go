//go:build linux

package blkcrypt_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
)

// TestLockBlockDevice: on a block device the lock is cryptsetup's
// /run/cryptsetup/L_<major>:<minor>, so cryptsetup waits while blkcrypt
// holds the device, and a second blkcrypt open is refused. It needs a loop
// device (root); without one it skips, saying so.
func TestLockBlockDevice(t *testing.T) {
	cs, err := exec.LookPath("cryptsetup")
	if err != nil {
		t.Skip("cryptsetup not installed")
	}
	img := filepath.Join(t.TempDir(), "lo.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(img, 20<<20)
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Skipf("no loop device available (needs root and /dev/loop-control): %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	ctx := context.Background()
	pw := []byte("pw")
	if err := blkcrypt.Format(ctx, dev, pw, blkcrypt.FormatOptions{PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.Open(ctx, dev, blkcrypt.OpenOptions{Passphrase: pw})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blkcrypt.Open(ctx, dev, blkcrypt.OpenOptions{Passphrase: pw, ReadOnly: true}); !errors.Is(err, blkcrypt.ErrBusy) {
		t.Errorf("second open of the block device: %v, want ErrBusy", err)
	}
	if out, err := exec.Command("timeout", "2", cs, "luksDump", dev).CombinedOutput(); err == nil {
		t.Errorf("cryptsetup luksDump ran while blkcrypt held the block device:\n%s", out)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("timeout", "20", cs, "luksDump", dev).CombinedOutput(); err != nil {
		t.Errorf("cryptsetup luksDump after Close: %v\n%s", err, out)
	}
}
