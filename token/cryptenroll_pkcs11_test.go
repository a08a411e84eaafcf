//go:build pkcs11 && cgo

package token

import (
	"maps"
	"slices"
	"testing"
)

// TestEnrollPKCS11Wipe: Enroll enrolls a security token whose certificate
// is public without asking for its PIN, to a keyslot cryptsetup opens
// with what pkcs11-tool decrypts; a recovery key enrolled with
// --wipe-slot=pkcs11 leaves what systemd-cryptenroll lists as the
// password and the recovery key, and no systemd-pkcs11 token.
func TestEnrollPKCS11Wipe(t *testing.T) {
	hsm := newSoftHSM(t)
	f := newImage(t)
	h := f.open(t)
	ctx := ctxT(t)
	asked := 0
	ask := func(string) ([]byte, error) { asked++; return []byte(hsmPIN), nil }
	r, err := Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, PKCS11URI: "pkcs11:token=blkcrypt", AskPIN: ask})
	if err != nil || r.Type != TypePKCS11 || r.Keyslot != 1 || asked != 0 {
		t.Fatalf("Enroll a PKCS#11 token: %+v, asked %d: %v", r, asked, err)
	}
	if !f.cryptsetupAcceptsSlot(t, hsm.judge(t, f.img, r.TokenID), r.Keyslot) {
		t.Fatal("cryptsetup refuses pkcs11-tool's passphrase for the new keyslot")
	}
	r, err = Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, RecoveryKey: true, Wipe: []string{"pkcs11"}})
	if err != nil || !slices.Equal(r.Wiped, []int{1}) {
		t.Fatalf("Enroll a recovery key with --wipe-slot=pkcs11: %+v: %v", r, err)
	}
	if got := slotTypes(t, f); !maps.Equal(got, map[int]string{0: "password", r.Keyslot: "recovery"}) {
		t.Fatalf("systemd-cryptenroll lists %v after wiping the PKCS#11 slot", got)
	}
	toks, _ := luksTokens(t, f.img)
	if len(toks) != 1 {
		t.Fatalf("%d tokens left, want the recovery token only", len(toks))
	}
}
