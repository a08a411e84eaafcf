package blkcrypt_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// A device marked by a LUKS1 reencryption in progress (magic LUKS\xde\xad)
// holds data under two keys: Open refuses it, detected or named, with the
// reencryption's own error, and does not write it.
func TestOpenRefusesLUKS1Reencryption(t *testing.T) {
	img := filepath.Join(t.TempDir(), "marked.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 << 20); err != nil {
		t.Fatal(err)
	}
	pass := []byte("marked")
	if _, err := luks1.Format(luks1.File{File: f}, make([]byte, 64), pass, luks1.FormatOptions{Keyslot: luks1.KeyslotOptions{PBKDF: kdf.Options{Iterations: 1000}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(luks1.NoMagic[:], 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, _ := os.ReadFile(img)
	for _, typ := range []string{"", "luks", "luks1"} {
		v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Type: typ, Passphrase: pass})
		if err == nil {
			v.Close()
			t.Fatalf("type %q: a marked device opened", typ)
		}
		if !errors.Is(err, luks1.ErrReencryptInProgress) || !errors.Is(err, blkcrypt.ErrInvalidOptions) {
			t.Fatalf("type %q: %v", typ, err)
		}
	}
	if after, _ := os.ReadFile(img); string(after) != string(before) {
		t.Fatal("the marked device was written")
	}
}
