package blkcrypt_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

// TestSecretOptional: Open and DumpVolume tell Prepare whether the volume
// opens without a secret. cryptsetup's clear-key BitLocker image (made by
// Windows, protection suspended) does, and opens with none; its password
// image and a LUKS2 image do not.
func TestSecretOptional(t *testing.T) {
	ctx := context.Background()
	bitlkDir := filepath.Join(lukstest.Extract(t, "bitlk-images.tar.xz"), "bitlk-images")
	luks2 := filepath.Join(lukstest.Extract(t, "compatimage2.img.xz"), "compatimage2.img")
	for _, c := range []struct {
		path, pass string
		optional   bool
	}{
		{filepath.Join(bitlkDir, "bitlk-aes-xts-128-clearkey-only.img"), "", true},
		{filepath.Join(bitlkDir, "bitlk-aes-xts-128.img"), "anaconda", false},
		{luks2, "compatkey", false},
	} {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			var seen []bool
			prepare := func(_ string, o *blkcrypt.OpenOptions) error {
				seen = append(seen, o.SecretOptional)
				if !o.SecretOptional {
					o.Passphrase = []byte(c.pass)
				}
				return nil
			}
			// A caller's SecretOptional is ignored: Open sets it.
			v, err := blkcrypt.Open(ctx, c.path, blkcrypt.OpenOptions{ReadOnly: true, SecretOptional: !c.optional, Prepare: prepare})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			v.Close()
			err = blkcrypt.DumpVolume(ctx, c.path, io.Discard, blkcrypt.DumpVolumeOptions{Open: blkcrypt.OpenOptions{Prepare: prepare}})
			if err != nil {
				t.Fatalf("DumpVolume: %v", err)
			}
			if len(seen) != 2 || seen[0] != c.optional || seen[1] != c.optional {
				t.Fatalf("Prepare saw SecretOptional %v, want %v twice", seen, c.optional)
			}
		})
	}
}
