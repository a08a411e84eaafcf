package token

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
)

// imageSum is the SHA-256 of the whole image file.
func imageSum(t *testing.T, img string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestEnrollLikeCryptenroll: Enroll refuses bad enrollments before
// writing anything and asks for a PIN only after the existing passphrase
// opened a keyslot; a TPM2 token it enrolls with the default PCR (7) and
// --wipe-slot=password unseals through the tpm2-tools judge to the
// passphrase cryptsetup accepts for the new keyslot, while the old
// passphrase no longer opens; a recovery key enrolled with
// --wipe-slot=tpm2 leaves what systemd-cryptenroll lists as one recovery
// keyslot. UnlockWithPIN asks for a PIN token's PIN once, naming TPM2.
// (The refusals change no byte of the image.)
func TestEnrollLikeCryptenroll(t *testing.T) {
	tpm := startSwtpm(t)
	tpm.extendPCR7(t)
	f := newImage(t)
	h := f.open(t)
	ctx := ctxT(t)
	before := imageSum(t, f.img)
	asked := 0
	askPIN := func(prompt string) ([]byte, error) {
		asked++
		if !strings.Contains(prompt, "TPM2 PIN") {
			t.Errorf("asked %q, want a TPM2 PIN", prompt)
		}
		return []byte("2468"), nil
	}
	for _, c := range []struct {
		name string
		e    Enrollment
		want error
	}{
		{"nothing", Enrollment{}, blkcrypt.ErrInvalidOptions},
		{"two at once", Enrollment{TPM2Device: tpm.tcti, RecoveryKey: true}, blkcrypt.ErrInvalidOptions},
		{"PCR 24", Enrollment{TPM2Device: tpm.tcti, TPM2PCRs: []int{7, 24}}, blkcrypt.ErrInvalidOptions},
		{"bad URI", Enrollment{PKCS11URI: "http://x"}, blkcrypt.ErrInvalidOptions},
		{"bad wipe word", Enrollment{Wipe: []string{"passwords"}}, blkcrypt.ErrInvalidOptions},
		{"inactive slot", Enrollment{Wipe: []string{"9"}}, blkcrypt.ErrInvalidOptions},
		{"wrong passphrase", Enrollment{EnrollOptions: EnrollOptions{Existing: []byte("wrong")}, TPM2Device: tpm.tcti, TPM2WithPIN: true, AskPIN: askPIN}, blkcrypt.ErrWrongPassphrase},
		{"no PIN", Enrollment{TPM2Device: tpm.tcti, TPM2WithPIN: true}, ErrNeedPIN},
	} {
		if c.e.Existing == nil {
			c.e.Existing = f.pass
		}
		r, err := Enroll(ctx, h, c.e)
		if !errors.Is(err, c.want) || r.Keyslot != -1 || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: slot %d, %v; want %v", c.name, r.Keyslot, err, c.want)
		}
	}
	if asked != 0 {
		t.Errorf("asked for a PIN %d times before the passphrase was right", asked)
	}
	if imageSum(t, f.img) != before {
		t.Fatal("a refused enrollment changed the image")
	}

	// New PINs that differ are refused; a PIN token, its PIN asked for
	// twice.
	n := 0
	differ := func(string) ([]byte, error) { n++; return []byte{byte('0' + n)}, nil }
	if r, err := Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tpm.tcti, TPM2WithPIN: true, AskPIN: differ}); !errors.Is(err, blkcrypt.ErrInvalidOptions) || n != 2 || r.Keyslot != -1 {
		t.Fatalf("Enroll with PINs that differ: asked %d times: %v", n, err)
	}
	r, err := Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tpm.tcti, TPM2WithPIN: true, AskPIN: askPIN})
	if err != nil || r.Type != TypeTPM2 || r.Keyslot != 1 || r.Authorised != 0 || asked != 2 {
		t.Fatalf("Enroll with a PIN: %+v, asked %d: %v", r, asked, err)
	}
	pinToken := r.TokenID
	if _, _, err := UnlockWithPIN(ctx, h, Options{TPM2Device: tpm.tcti}, nil); !errors.Is(err, ErrNeedPIN) {
		t.Fatalf("UnlockWithPIN without ask: %v", err)
	}
	pass, id, err := UnlockWithPIN(ctx, h, Options{TPM2Device: tpm.tcti}, askPIN)
	if err != nil || id != pinToken || asked != 3 || !f.cryptsetupAcceptsSlot(t, pass, 1) {
		t.Fatalf("UnlockWithPIN: token %d, asked %d: %v", id, asked, err)
	}

	// No PIN, the default PCR, the passphrase's keyslot wiped.
	r, err = Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tpm.tcti, Wipe: []string{"password"}})
	if err != nil || r.Keyslot != 2 || !slices.Equal(r.Wiped, []int{0}) {
		t.Fatalf("Enroll with --wipe-slot=password: %+v: %v", r, err)
	}
	js, err := h.ExportToken(ctx, r.TokenID)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := ParseTPM2Token(js); err != nil || !slices.Equal(tok.PCRs, []int{7}) {
		t.Fatalf("the token's PCRs: %v (want [7])", err)
	}
	tpmPass := judge(t, f.img, r.TokenID, tpm.tcti)
	if !f.cryptsetupAcceptsSlot(t, tpmPass, 2) {
		t.Fatal("cryptsetup refuses the judge's passphrase for the new keyslot")
	}
	if f.cryptsetupAccepts(t, f.pass) {
		t.Fatal("the wiped passphrase still opens the volume")
	}
	if got := slotTypes(t, f); !maps.Equal(got, map[int]string{1: "tpm2", 2: "tpm2"}) {
		t.Fatalf("systemd-cryptenroll lists %v after wiping the password", got)
	}

	// A recovery key, authorised by the TPM2 token's passphrase; both
	// TPM2 keyslots and their tokens go.
	r, err = Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: tpmPass}, RecoveryKey: true, Wipe: []string{"tpm2"}})
	if err != nil || r.Type != TypeRecovery || r.Authorised != 2 || !slices.Equal(r.Wiped, []int{1, 2}) {
		t.Fatalf("Enroll a recovery key with --wipe-slot=tpm2: %+v: %v", r, err)
	}
	if !f.cryptsetupAcceptsSlot(t, r.RecoveryKey, r.Keyslot) {
		t.Fatal("cryptsetup refuses the recovery key")
	}
	if got := slotTypes(t, f); !maps.Equal(got, map[int]string{r.Keyslot: "recovery"}) {
		t.Fatalf("systemd-cryptenroll lists %v after wiping the TPM2 slots", got)
	}
	if toks, err := h.Tokens(ctx); err != nil || len(toks) != 1 {
		t.Fatalf("tokens left: %d, %v; want the recovery token only", len(toks), err)
	}
}

// FuzzWipeTokenJSON: the token JSON WipeKeyslots reads, and systemd's
// PCR lists, never panic; a PCR ParsePCRs accepts is in 0..23.
func FuzzWipeTokenJSON(f *testing.F) {
	for _, s := range []string{`{"type":"systemd-tpm2","keyslots":["1","x"]}`, `{"keyslots":[1]}`, `{"type":7}`, "7+8", "0,7,14", "", "+", "99", "-1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		typeAndKeyslots(b)
		if pcrs, err := ParsePCRs(string(b)); err == nil {
			for _, p := range pcrs {
				if p < 0 || p > 23 {
					t.Fatalf("ParsePCRs(%q) accepted PCR %d", b, p)
				}
			}
		}
	})
}

// Bind a volume to the machine's TPM as systemd-cryptenroll
// --tpm2-device=auto --tpm2-pcrs=7 --wipe-slot=password does, so that
// it opens with no passphrase while PCR 7 holds its present value.
func ExampleEnroll() {
	ctx := context.Background()
	h, err := blkcrypt.OpenLUKS(ctx, "disk.img", blkcrypt.LUKSOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	r, err := Enroll(ctx, h, Enrollment{
		EnrollOptions: EnrollOptions{Existing: []byte("the passphrase")},
		TPM2Device:    "auto",
		TPM2PCRs:      []int{7},
		Wipe:          []string{"password"},
	})
	if err != nil {
		fmt.Println(err) // a wiping error still reports r.Keyslot: the token is enrolled
		return
	}
	fmt.Println("TPM2 token", r.TokenID, "in keyslot", r.Keyslot, "; wiped", r.Wiped)
}
