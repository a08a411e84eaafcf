package token

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// Tokens through the header's life, side by side with cryptsetup 2.6.1:
// one volume carries a systemd-tpm2 token (systemd-cryptenroll over
// swtpm), a systemd-recovery token (systemd-cryptenroll) and a clevis
// tang token (clevis luks bind with Debian's tang). Each operation runs
// with cryptsetup on one copy and blkcrypt on another; the tokens
// cryptsetup exports must then be the same on both, and every token that
// still names a keyslot must still unlock it, judged by tpm2-tools,
// clevis luks pass and cryptsetup, and through Unlock.

// tokenState is every token of img as cryptsetup token export prints it,
// by id.
func tokenState(t *testing.T, img string) map[string]string {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	var md struct {
		Tokens map[string]json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(run(t, nil, nil, cs, "luksDump", "--dump-json-metadata", img)), &md); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for id := range md.Tokens {
		out[id] = run(t, nil, nil, cs, "token", "export", "--token-id", id, img)
	}
	return out
}

// lifecycleVolume is the volume the lifecycle tests start from.
type lifecycleVolume struct {
	*fixture
	tcti   string
	recKey []byte
	// The keyslot of each token (ids 0, 1, 2).
	tpmSlot, recSlot, clevisSlot int
}

func newLifecycleVolume(t *testing.T) *lifecycleVolume {
	t.Helper()
	tpm := startSwtpm(t)
	tpm.extendPCR7(t)
	tg := startTang(t)
	v := &lifecycleVolume{fixture: newSmallImage(t), tcti: tpm.tcti}
	v.cryptenroll(t, nil, "--tpm2-device="+tpm.tcti, "--tpm2-pcrs=7")
	v.recKey = []byte(recoveryKeyRE.FindString(v.cryptenroll(t, nil, "--recovery-key")))
	if !IsRecoveryKey(v.recKey) {
		t.Fatal("no recovery key in systemd-cryptenroll's output")
	}
	v.clevisSlot = v.clevisBind(t, nil, "tang", tangCfg(tg.url))
	st := tokenState(t, v.img)
	for id, want := range map[string]string{"0": TypeTPM2, "1": TypeRecovery, "2": TypeClevis} {
		ks := tokenKeyslots(t, st[id])
		if tokenType([]byte(st[id])) != want || len(ks) != 1 {
			t.Fatalf("token %s is %s, want a %s token of one keyslot", id, st[id], want)
		}
		switch id {
		case "0":
			v.tpmSlot = ks[0]
		case "1":
			v.recSlot = ks[0]
		case "2":
			if ks[0] != v.clevisSlot {
				t.Fatalf("clevis token names keyslot %d, clevis bound %d", ks[0], v.clevisSlot)
			}
		}
	}
	return v
}

// newSmallImage is a LUKS2 image of 6 MiB made by cryptsetup (64 KiB
// metadata, 3 MiB of keyslot areas: room for the four keyslots and a
// reencryption's new one), with 512-byte sectors so that only its tokens
// keep it from converting to LUKS1, and its first passphrase in a key
// file.
func newSmallImage(t *testing.T) *fixture {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	f := &fixture{img: filepath.Join(dir, "img"), keyFile: filepath.Join(dir, "key"), pass: []byte("first passphrase")}
	if err := os.WriteFile(f.keyFile, f.pass, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f.img, 6<<20); err != nil {
		t.Fatal(err)
	}
	run(t, nil, nil, cs, "luksFormat", "-q", "--type", "luks2", "--sector-size", "512", "--luks2-metadata-size", "64k",
		"--luks2-keyslots-size", "3M", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", f.keyFile, f.img)
	return f
}

func tokenKeyslots(t *testing.T, js string) []int {
	t.Helper()
	var tk struct {
		Keyslots []string `json:"keyslots"`
	}
	if err := json.Unmarshal([]byte(js), &tk); err != nil {
		t.Fatalf("token %s: %v", js, err)
	}
	var out []int
	for _, s := range tk.Keyslots {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("token %s: keyslot %q", js, s)
		}
		out = append(out, n)
	}
	return out
}

func (v *lifecycleVolume) copyTo(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(v.img)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkUnlocks: on img, every token that names a keyslot opens it, by the
// judges (the tpm2-tools unsealer, cryptsetup with the recovery key,
// clevis luks pass) and through Unlock with the same passphrase; a token
// that names none does not unlock.
func (v *lifecycleVolume) checkUnlocks(t *testing.T, img string) {
	t.Helper()
	ctx := ctxT(t)
	f := &fixture{img: img}
	h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for id, js := range tokenState(t, img) {
		n, _ := strconv.Atoi(id)
		ks := tokenKeyslots(t, js)
		typ := tokenType([]byte(js))
		if len(ks) == 0 {
			if typ != TypeRecovery {
				if _, _, err := Unlock(ctx, h, Options{TokenID: &n, TPM2Device: v.tcti}); err == nil {
					t.Errorf("token %s names no keyslot but unlocks", id)
				}
			}
			continue
		}
		var judged []byte
		switch typ {
		case TypeTPM2:
			judged = judge(t, img, n, v.tcti)
		case TypeRecovery:
			judged = v.recKey
		case TypeClevis:
			judged = f.clevisPass(t, nil, ks[0])
		default:
			t.Fatalf("token %s: type %q", id, typ)
		}
		for _, k := range ks {
			if !f.cryptsetupAcceptsSlot(t, judged, k) {
				t.Errorf("token %s (%s): cryptsetup refuses keyslot %d with the judged passphrase", id, typ, k)
			}
		}
		if typ == TypeRecovery {
			continue
		}
		pass, got, err := Unlock(ctx, h, Options{TokenID: &n, TPM2Device: v.tcti})
		if err != nil || got != n || !bytes.Equal(pass, judged) {
			t.Errorf("token %s (%s): Unlock gave token %d, %v, and the judge's passphrase: %v", id, typ, got, err, bytes.Equal(pass, judged))
		}
	}
}

// TestTokensLifecycleLikeCryptsetup: reencryption keeping each kind of
// keyslot (-S N, several keyslots; then without -S, one keyslot left), convert to LUKS1 (refused: tokens),
// and header backup and restore in both directions, each by cryptsetup
// and by blkcrypt, leave the same tokens, and they still unlock.
func TestTokensLifecycleLikeCryptsetup(t *testing.T) {
	v := newLifecycleVolume(t)
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	base := tokenState(t, v.img)
	t.Logf("tokens: %v", base)
	ctx := ctxT(t)

	// reencrypt runs cryptsetup reencrypt (offline) on theirs and
	// Reencrypt on ours, keeping keyslot slot (nil: the only one), and
	// compares the tokens cryptsetup exports of both.
	reencrypt := func(t *testing.T, theirs, ours string, pass []byte, slot *int) {
		t.Helper()
		keyFile := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(keyFile, pass, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"reencrypt", "--force-offline-reencrypt", "--batch-mode", "--pbkdf", "pbkdf2",
			"--pbkdf-force-iterations", "1000", "--key-file", keyFile}
		if slot != nil {
			args = append(args, "--key-slot", strconv.Itoa(*slot))
		}
		run(t, nil, nil, cs, append(args, theirs)...)
		h, err := blkcrypt.OpenLUKS(ctx, ours, blkcrypt.LUKSOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = h.Reencrypt(ctx, pass, blkcrypt.LUKSReencryptOptions{Keyslot: slot,
			PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Hash: "sha256", Iterations: 1000}})
		h.Close()
		if err != nil {
			t.Fatalf("Reencrypt: %v", err)
		}
		want, got := tokenState(t, theirs), tokenState(t, ours)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("tokens after our reencryption:\n%v\ncryptsetup's:\n%v", got, want)
		}
	}
	for _, c := range []struct {
		name string
		slot int
		pass func(t *testing.T) []byte
		// again: reencrypt once more without -S, the kept keyslot
		// being the only one left.
		again bool
	}{
		{"clevis keyslot", v.clevisSlot, func(t *testing.T) []byte { return v.clevisPass(t, nil, v.clevisSlot) }, true},
		{"tpm2 keyslot", v.tpmSlot, func(t *testing.T) []byte { return judge(t, v.img, 0, v.tcti) }, false},
		{"passphrase keyslot", 0, func(*testing.T) []byte { return v.pass }, false},
	} {
		t.Run("reencrypt -S "+c.name, func(t *testing.T) {
			pass := c.pass(t)
			theirs, ours := v.copyTo(t, "theirs"), v.copyTo(t, "ours")
			reencrypt(t, theirs, ours, pass, &c.slot)
			if c.again {
				reencrypt(t, theirs, ours, pass, nil)
			}
			v.checkUnlocks(t, ours)
		})
	}

	t.Run("convert to luks1", func(t *testing.T) {
		orig, err := os.ReadFile(v.img)
		if err != nil {
			t.Fatal(err)
		}
		theirs, ours := v.copyTo(t, "theirs"), v.copyTo(t, "ours")
		out, cerr := runErr(nil, nil, cs, "convert", "--type", "luks1", "-q", theirs)
		if cerr == nil {
			t.Fatalf("cryptsetup converts a volume with tokens to LUKS1: %s", out)
		}
		h, err := blkcrypt.OpenLUKS(ctx, ours, blkcrypt.LUKSOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = h.Convert(ctx, "luks1")
		h.Close()
		if err == nil || !strings.Contains(out, "token") || !strings.Contains(err.Error(), "3 token(s)") {
			t.Fatalf("Convert to luks1: %v; cryptsetup: %s", err, out)
		}
		t.Logf("cryptsetup: %s; ours: %v", bytes.TrimSpace([]byte(out)), err)
		for _, p := range []string{theirs, ours} {
			if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, orig) {
				t.Fatalf("%s changed by a refused convert (%v)", filepath.Base(p), err)
			}
		}
	})

	t.Run("header backup and restore", func(t *testing.T) {
		orig, err := os.ReadFile(v.img)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		theirBackup := filepath.Join(dir, "theirs.hdr")
		run(t, nil, nil, cs, "luksHeaderBackup", v.img, "--header-backup-file", theirBackup)
		h := v.open(t)
		var buf bytes.Buffer
		if _, err := h.BackupHeader(ctx, &buf); err != nil {
			t.Fatal(err)
		}
		h.Close()
		ourBackup := filepath.Join(dir, "ours.hdr")
		if err := os.WriteFile(ourBackup, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		tb, err := os.ReadFile(theirBackup)
		if err != nil || !bytes.Equal(tb, buf.Bytes()) {
			t.Fatalf("our header backup differs from luksHeaderBackup's (%v)", err)
		}

		// Our backup restored by cryptsetup over a header whose clevis
		// binding was removed; cryptsetup's restored by us over a
		// zeroed header.
		x1, x2 := v.copyTo(t, "x1"), v.copyTo(t, "x2")
		run(t, nil, nil, cs, "token", "remove", "--token-id", "2", x1)
		run(t, nil, nil, cs, "luksKillSlot", "-q", x1, strconv.Itoa(v.clevisSlot))
		run(t, nil, nil, cs, "luksHeaderRestore", "-q", x1, "--header-backup-file", ourBackup)
		b2, err := os.ReadFile(x2)
		if err != nil {
			t.Fatal(err)
		}
		clear(b2[:len(tb)])
		if err := os.WriteFile(x2, b2, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := blkcrypt.RestoreLUKSHeader(ctx, x2, tb, blkcrypt.RestoreOptions{}); err != nil {
			t.Fatalf("RestoreLUKSHeader: %v", err)
		}
		for _, p := range []string{x1, x2} {
			if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, orig) {
				t.Fatalf("%s after the restore is not the image backed up (%v)", filepath.Base(p), err)
			}
			if got := tokenState(t, p); !reflect.DeepEqual(got, base) {
				t.Fatalf("tokens after the restore:\n%v\nbefore:\n%v", got, base)
			}
		}
		v.checkUnlocks(t, x1)
	})
}
