package token

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// keysInOrder returns a JSON object's keys in the order they are written.
func keysInOrder(t *testing.T, js []byte) []string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(js))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", js)
	}
	var keys []string
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// slotTypes parses systemd-cryptenroll's listing: keyslot number → type.
func slotTypes(t *testing.T, f *fixture) map[int]string {
	t.Helper()
	out := f.cryptenroll(t, nil)
	m := map[int]string{}
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) == 2 {
			if n, err := strconv.Atoi(fs[0]); err == nil {
				m[n] = fs[1]
			}
		}
	}
	return m
}

// TestEnrollTPM2LikeSystemd: what EnrollTPM2 writes is a token
// systemd-cryptenroll lists as tpm2, with systemd 252's fields in its
// order and the same policy hash systemd computes for the same PCR state;
// the tpm2-tools judge unseals it to the passphrase cryptsetup accepts,
// and Unlock does too, with the PIN for a PIN token.
func TestEnrollTPM2LikeSystemd(t *testing.T) {
	tpm := startSwtpm(t)
	tpm.extendPCR7(t)
	f := newImage(t)
	f.cryptenroll(t, nil, "--tpm2-device="+tpm.tcti, "--tpm2-pcrs=7")                                            // token 0
	f.cryptenroll(t, []string{"NEWPIN=2468"}, "--tpm2-device="+tpm.tcti, "--tpm2-pcrs=7", "--tpm2-with-pin=yes") // token 1
	h := f.open(t)
	ctx := ctxT(t)
	slot, id, err := EnrollTPM2(ctx, h, TPM2EnrollOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tpm.tcti})
	if err != nil {
		t.Fatalf("EnrollTPM2: %v", err)
	}
	pslot, pid, err := EnrollTPM2(ctx, h, TPM2EnrollOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tpm.tcti, PIN: []byte("2468")})
	if err != nil {
		t.Fatalf("EnrollTPM2 with a PIN: %v", err)
	}
	types := slotTypes(t, f)
	if types[slot] != "tpm2" || types[pslot] != "tpm2" {
		t.Fatalf("systemd-cryptenroll lists %v; want tpm2 at %d and %d", types, slot, pslot)
	}
	if a, b := slotKDF(t, f, 1), slotKDF(t, f, slot); a != b {
		t.Errorf("our TPM2 keyslot's KDF %s, systemd's %s", b, a)
	}
	theirs, err := h.ExportToken(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := h.ExportToken(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := keysInOrder(t, theirs), keysInOrder(t, ours); strings.Join(a, ",") != strings.Join(b, ",") {
		t.Errorf("token fields %v, systemd-cryptenroll writes %v", b, a)
	}
	tt, err := ParseTPM2Token(theirs)
	if err != nil {
		t.Fatal(err)
	}
	ot, err := ParseTPM2Token(ours)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tt.PolicyHash, ot.PolicyHash) {
		t.Errorf("policy hash %x, systemd's for the same PCRs %x", ot.PolicyHash, tt.PolicyHash)
	}
	// With a PIN too: the same policy, so systemd unseals what we seal.
	for _, pair := range [][2]int{{1, pid}} {
		a, err := h.ExportToken(ctx, pair[0])
		if err != nil {
			t.Fatal(err)
		}
		b, err := h.ExportToken(ctx, pair[1])
		if err != nil {
			t.Fatal(err)
		}
		at, err := ParseTPM2Token(a)
		if err != nil {
			t.Fatal(err)
		}
		bt, err := ParseTPM2Token(b)
		if err != nil {
			t.Fatal(err)
		}
		if !at.PIN || !bt.PIN || !bytes.Equal(at.PolicyHash, bt.PolicyHash) {
			t.Errorf("PIN token policy hash %x (pin %v), systemd's %x (pin %v)", bt.PolicyHash, bt.PIN, at.PolicyHash, at.PIN)
		}
	}
	j := judge(t, f.img, id, tpm.tcti)
	if !f.cryptsetupAccepts(t, j) {
		t.Fatal("cryptsetup refuses what the judge unsealed from our token")
	}
	pass, got, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &id})
	if err != nil || got != id || !bytes.Equal(pass, j) {
		t.Fatalf("Unlock of our token: %d, %v (same as the judge: %v)", got, err, bytes.Equal(pass, j))
	}
	pass, got, err = Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &pid, PIN: []byte("2468")})
	if err != nil || got != pid || !f.cryptsetupAccepts(t, pass) {
		t.Fatalf("Unlock of our PIN token: %d, %v", got, err)
	}
	if _, _, err = Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &pid, PIN: []byte("1357")}); !errors.Is(err, ErrWrongPIN) {
		t.Fatalf("our PIN token with a wrong PIN: %v", err)
	}
}

var recoveryKeyRE = regexp.MustCompile(`[cbdefghijklnrtuv]{8}(-[cbdefghijklnrtuv]{8}){7}`)

// TestRecoveryKeys: a recovery key systemd-cryptenroll enrolls is
// recognised (its form and its token) and is the passphrase cryptsetup
// takes verbatim; one EnrollRecovery makes opens in cryptsetup and is
// listed by systemd-cryptenroll as a recovery slot; Unlock never tries to
// unlock a recovery token by itself.
func TestRecoveryKeys(t *testing.T) {
	f := newImage(t)
	out := f.cryptenroll(t, nil, "--recovery-key")
	theirs := []byte(recoveryKeyRE.FindString(out))
	if !IsRecoveryKey(theirs) {
		t.Fatalf("no recovery key in systemd-cryptenroll's output")
	}
	if !f.cryptsetupAccepts(t, theirs) {
		t.Fatal("cryptsetup refuses systemd's recovery key typed verbatim")
	}
	h := f.open(t)
	ctx := ctxT(t)
	toks, err := h.Tokens(ctx)
	if err != nil || len(toks) != 1 || tokenType(toks[0]) != TypeRecovery {
		t.Fatalf("tokens %d, %v", len(toks), err)
	}
	if _, _, err := Unlock(ctx, h, Options{}); !errors.Is(err, ErrNoToken) {
		t.Fatalf("Unlock with only a recovery token: %v", err)
	}
	if _, _, err := Unlock(ctx, h, Options{TokenType: TypeRecovery}); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "token 0") {
		t.Fatalf("Unlock asked for the recovery token: %v", err)
	}

	key, slot, id, err := EnrollRecovery(ctx, h, EnrollOptions{Existing: f.pass})
	if err != nil {
		t.Fatalf("EnrollRecovery: %v", err)
	}
	if !IsRecoveryKey(key) {
		t.Fatalf("EnrollRecovery made a key of another form (%d bytes)", len(key))
	}
	if !f.cryptsetupAccepts(t, key) {
		t.Fatal("cryptsetup refuses our recovery key")
	}
	if got := slotTypes(t, f)[slot]; got != "recovery" {
		t.Fatalf("systemd-cryptenroll lists keyslot %d as %q", slot, got)
	}
	// The KDF systemd-cryptenroll gives a recovery keyslot (keyslot 1).
	if a, b := slotKDF(t, f, 1), slotKDF(t, f, slot); a != b {
		t.Errorf("our recovery keyslot's KDF %s, systemd's %s", b, a)
	}
	js, err := h.ExportToken(ctx, id)
	if want := `{"type":"systemd-recovery","keyslots":["` + strconv.Itoa(slot) + `"]}`; err != nil || string(js) != want {
		t.Fatalf("token %s, %v; want %s", js, err, want)
	}
	if _, err := h.TestPassphrase(ctx, key, blkcrypt.KeyOptions{Keyslot: &slot}); err != nil {
		t.Fatalf("TestPassphrase: %v", err)
	}
}

// TestRSAPrimarySHA1BankAndLockout: a token sealed under the RSA primary
// in the SHA-1 bank unseals through the tpm2-tools judge (its
// rsa2048:aes128cfb primary) to the passphrase cryptsetup accepts and
// Unlock returns; wrong PINs count down to the TPM's lockout, after which
// even the right PIN is refused with a lockout message.
func TestRSAPrimarySHA1BankAndLockout(t *testing.T) {
	tpm := startSwtpm(t)
	f := newImage(t)
	h := f.open(t)
	ctx := ctxT(t)
	_, id, err := EnrollTPM2(ctx, h, TPM2EnrollOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tpm.tcti, PrimaryAlg: "rsa", Bank: "sha1", PCRs: []int{0, 7}})
	if err != nil {
		t.Fatalf("EnrollTPM2: %v", err)
	}
	j := judge(t, f.img, id, tpm.tcti)
	if !f.cryptsetupAccepts(t, j) {
		t.Fatal("cryptsetup refuses what the judge unsealed")
	}
	pass, _, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti})
	if err != nil || !bytes.Equal(pass, j) {
		t.Fatalf("Unlock: %v (same as the judge: %v)", err, bytes.Equal(pass, j))
	}

	_, pid, err := EnrollTPM2(ctx, h, TPM2EnrollOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tpm.tcti, PIN: []byte("good")})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for i := 0; i < 10; i++ {
		_, _, last = Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &pid, PIN: []byte("bad")})
		t.Logf("wrong PIN %d: %v", i+1, last)
		if errors.Is(last, ErrLockout) {
			break
		}
		if !errors.Is(last, ErrWrongPIN) {
			t.Fatalf("wrong PIN %d: %v", i+1, last)
		}
	}
	if !errors.Is(last, ErrLockout) {
		t.Fatalf("no lockout after 10 wrong PINs: %v", last)
	}
	if _, _, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &pid, PIN: []byte("good")}); !errors.Is(err, ErrLockout) || !strings.Contains(err.Error(), "token "+strconv.Itoa(pid)) {
		t.Fatalf("the right PIN in lockout: %v", err)
	}
}

// TestSaltedPIN: a token carrying tpm2_salt (systemd 253 and later) is
// unsealed with the salted PIN derivation: sealed here under
// PINAuth(pin, salt), whose value TestPINAuth checks independently.
func TestSaltedPIN(t *testing.T) {
	tpm := startSwtpm(t)
	f := newImage(t)
	h := f.open(t)
	ctx := ctxT(t)
	salt := []byte("0123456789abcdef0123456789abcdef")
	secret := []byte("0123456789ABCDEF0123456789ABCDEF")
	blob, policy, err := seal(ctx, tpm.tcti, secret, []int{7}, "sha256", "ecc", true, PINAuth([]byte("s3cret"), salt))
	if err != nil {
		t.Fatal(err)
	}
	pass := []byte(base64.StdEncoding.EncodeToString(secret))
	slot, err := h.AddKey(ctx, f.pass, pass, EnrollOptions{}.keyOptions())
	if err != nil {
		t.Fatal(err)
	}
	js := fmt.Sprintf(`{"type":"systemd-tpm2","keyslots":["%d"],"tpm2-blob":"%s","tpm2-pcrs":[7],"tpm2-pcr-bank":"sha256","tpm2-primary-alg":"ecc","tpm2-policy-hash":"%x","tpm2-pin":true,"tpm2_salt":"%s"}`,
		slot, base64.StdEncoding.EncodeToString(blob), policy, base64.StdEncoding.EncodeToString(salt))
	id, err := h.ImportToken(ctx, []byte(js), blkcrypt.TokenOptions{Keyslots: []int{slot}})
	if err != nil {
		t.Fatal(err)
	}
	got, gid, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, PIN: []byte("s3cret")})
	if err != nil || gid != id || !bytes.Equal(got, pass) {
		t.Fatalf("Unlock: %d, %v", gid, err)
	}
	if _, _, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, PIN: []byte("wrong")}); !errors.Is(err, ErrWrongPIN) {
		t.Fatalf("a wrong salted PIN: %v", err)
	}
}

// slotKDF returns the PBKDF, hash and iteration lines cryptsetup luksDump
// prints for a keyslot.
func slotKDF(t *testing.T, f *fixture, slot int) string {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	out := run(t, nil, nil, cs, "luksDump", f.img)
	in, kdf := false, []string{}
	for _, line := range strings.Split(out, "\n") {
		if line != "" && line[0] != ' ' && line[0] != '\t' {
			in = false // a new section (Tokens:, Digests:)
			continue
		}
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "\t") && strings.HasSuffix(line, ": luks2") {
			in = strings.TrimSpace(line) == strconv.Itoa(slot)+": luks2"
			continue
		}
		if f := strings.Fields(line); in && len(f) == 2 && (f[0] == "PBKDF:" || f[0] == "Hash:" || f[0] == "Iterations:") {
			kdf = append(kdf, f[0]+f[1])
		}
	}
	if len(kdf) != 3 {
		t.Fatalf("keyslot %d's KDF not found in luksDump: %q", slot, kdf)
	}
	return strings.Join(kdf, " ")
}
