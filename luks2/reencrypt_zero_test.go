package luks2_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// TestZeroOptionsAnyKeyslot: in every options type the zero keyslot is
// any keyslot, not keyslot 0 (issue #25): Header.AddKey with
// KeyslotOptions{} (a KDF only) on a volume whose keyslot 0 is in use
// takes keyslot 1; DecryptOptions{} and ReencryptOptions{} open with the
// passphrase of keyslot 1. cryptsetup judges each result.
func TestZeroOptionsAnyKeyslot(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()

	t.Run("AddKey", func(t *testing.T) {
		img := filepath.Join(dir, "add.img")
		slotsVolume(t, cs, img, false, false)
		dev, h := readImage(t, img)
		key := cs.VolumeKey(img, slotPass[0])
		s, err := h.AddKey(dev, key, []byte("a new one"), luks2.KeyslotOptions{PBKDF: reencKDF.PBKDF})
		if err != nil || s != 1 {
			t.Fatalf("AddKey with zero options: keyslot %d, %v; want keyslot 1", s, err)
		}
		if !cs.TestPassphrase(img, []byte("a new one"), 1) || !cs.TestPassphrase(img, slotPass[0], 0) {
			t.Fatal("cryptsetup does not open keyslots 0 and 1 with their passphrases")
		}
	})

	t.Run("ReencryptOptions", func(t *testing.T) {
		img := filepath.Join(dir, "reenc.img")
		plain := slotsVolume(t, cs, img, false, true) // keyslot 1 alone
		old := cs.VolumeKey(img, slotPass[1])
		if err := reencrypt(t, img, slotPass[1], luks2.ReencryptOptions{HotzoneSize: 1 << 20}); err != nil {
			t.Fatalf("Reencrypt with zero options and keyslot 1's passphrase: %v", err)
		}
		if bytes.Equal(cs.VolumeKey(img, slotPass[1]), old) {
			t.Fatal("the volume key did not change")
		}
		checkPlain(t, cs, img, slotPass[1], plain)
	})

	t.Run("DecryptOptions", func(t *testing.T) {
		hdr, img, plain := detachedVolume(t, cs, dir, "dec", slotPass[0], 4<<20)
		cs.MustRun(append([]string{"luksAddKey", "--batch-mode", "--key-file", cs.KeyFile(slotPass[0]), hdr, cs.KeyFile(slotPass[1])}, csFast...)...)
		err := luks2.Decrypt(context.Background(), openRW(t, hdr), openRW(t, img), slotPass[1], luks2.DecryptOptions{Keyslot: reencKDF, HotzoneSize: 1 << 20})
		if err != nil {
			t.Fatalf("Decrypt with zero options and keyslot 1's passphrase: %v", err)
		}
		if got, _ := os.ReadFile(img); !bytes.Equal(got, plain) {
			t.Fatal("the decrypted data is not the plaintext")
		}
	})
}
