package blkcrypt_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/blkcrypt/blkcrypt"
)

// TestLUKSAddKeyWithToken: through the handle, on a file and in memory,
// the new keyslot opens for cryptsetup with the new passphrase and
// cryptsetup exports the token naming it; a wrong existing passphrase, a
// malformed token, a token id in use, extra keyslots and LUKS1 are
// refused with nothing written.
func TestLUKSAddKeyWithToken(t *testing.T) {
	for _, c := range metaCases {
		t.Run(c.typ+"/"+c.where, func(t *testing.T) {
			f := newMetaFixture(t, c.typ, c.where)
			tok := []byte(`{"type":"x-enroll","keyslots":[],"note":"n"}`)
			ko := blkcrypt.KeyOptions{PBKDF: f.fast}
			if c.typ == "luks1" {
				before := f.bytes()
				if _, _, err := f.h.AddKeyWithToken(f.ctx, []byte("pw"), []byte("new"), tok, ko, blkcrypt.TokenOptions{}); !errors.Is(err, blkcrypt.ErrNotLUKS) {
					t.Fatalf("LUKS1: %v", err)
				}
				if !bytes.Equal(before, f.bytes()) {
					t.Fatal("a refused call wrote")
				}
				return
			}
			if _, err := f.h.ImportToken(f.ctx, []byte(`{"type":"x","keyslots":["0"]}`), blkcrypt.TokenOptions{}); err != nil {
				t.Fatal(err)
			}
			before := f.bytes()
			for name, call := range map[string]func() error{
				"wrong passphrase": func() error {
					_, _, err := f.h.AddKeyWithToken(f.ctx, []byte("nope"), []byte("new"), tok, ko, blkcrypt.TokenOptions{})
					return err
				},
				"malformed token": func() error {
					_, _, err := f.h.AddKeyWithToken(f.ctx, []byte("pw"), []byte("new"), []byte(`{"type":"x"}`), ko, blkcrypt.TokenOptions{})
					return err
				},
				"token id in use": func() error {
					_, _, err := f.h.AddKeyWithToken(f.ctx, []byte("pw"), []byte("new"), tok, ko, blkcrypt.TokenOptions{ID: blkcrypt.Slot(0)})
					return err
				},
				"extra keyslots": func() error {
					_, _, err := f.h.AddKeyWithToken(f.ctx, []byte("pw"), []byte("new"), tok, ko, blkcrypt.TokenOptions{Keyslots: []int{0}})
					return err
				},
				"empty passphrase": func() error {
					_, _, err := f.h.AddKeyWithToken(f.ctx, []byte("pw"), nil, tok, ko, blkcrypt.TokenOptions{})
					return err
				},
			} {
				if err := call(); err == nil {
					t.Errorf("%s: accepted", name)
				}
				if !bytes.Equal(before, f.bytes()) {
					t.Fatalf("%s: a refused call wrote", name)
				}
			}
			slot, id, err := f.h.AddKeyWithToken(f.ctx, []byte("pw"), []byte("new"), tok, ko, blkcrypt.TokenOptions{})
			if err != nil || slot != 1 || id != 1 {
				t.Fatalf("AddKeyWithToken: keyslot %d, token %d, %v", slot, id, err)
			}
			f.sync()
			if want, got := `{"type":"x-enroll","keyslots":["1"],"note":"n"}`, cs(t, "", "token", "export", "--token-id", "1", f.img); got != want {
				t.Errorf("cryptsetup exports %s, want %s", got, want)
			}
			cs(t, "new", "open", "--test-passphrase", "--key-slot", fmt.Sprint(slot), "--key-file", "-", f.img)
		})
	}
}
