package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
)

// TestGoAPI formats, opens, writes and reads through the public API, and
// cryptsetup accepts the result.
func TestGoAPI(t *testing.T) {
	if _, err := exec.LookPath("cryptsetup"); err != nil {
		t.Fatal("cryptsetup is needed (apt-get install cryptsetup-bin)")
	}
	fast := blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	for _, typ := range []string{"luks2", "luks1"} {
		img := filepath.Join(t.TempDir(), "v.img")
		if err := blkcrypt.Format(context.Background(), img, []byte("pw"), blkcrypt.FormatOptions{Type: typ, Size: 32 << 20, PBKDF: fast}); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if _, err := blkcrypt.AddKey(context.Background(), img, []byte("pw"), []byte("pw2"), fast); err != nil {
			t.Fatal(err)
		}
		v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: []byte("pw2")})
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 100000)
		rand.Read(data)
		if _, err := v.WriteAt(data, 12345); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if _, err := v.ReadAt(got, 12345); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back: %v", err)
		}
		if _, err := v.WriteAt(data, v.Size()-10); !errors.Is(err, blkcrypt.ErrOutOfRange) {
			t.Fatalf("write past the end: %v", err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: []byte("nope")}); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
			t.Fatalf("wrong passphrase: %v", err)
		}
		if _, err := blkcrypt.RemoveKey(context.Background(), img, []byte("pw")); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("cryptsetup", "open", "--test-passphrase", "--key-file", "-", img)
		cmd.Stdin = bytes.NewReader([]byte("pw2"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: cryptsetup rejects pw2: %s", typ, out)
		}
		cmd = exec.Command("cryptsetup", "open", "--test-passphrase", "--key-file", "-", img)
		cmd.Stdin = bytes.NewReader([]byte("pw"))
		if err := cmd.Run(); err == nil {
			t.Fatalf("%s: cryptsetup still accepts the removed passphrase", typ)
		}
	}
}
