//go:build pkcs11 && cgo

package token

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// softHSM is a softhsm2 token made for one test: label "blkcrypt", user
// PIN 1234, an RSA-2048 key pair made by openssl with a self-signed
// certificate, both with CKA_ID 01. SOFTHSM2_CONF points at it for the
// test's process and the tools it runs, so the p11-kit proxy (which
// loads softhsm2 as a registered module) and systemd reach it.
type softHSM struct {
	module string // libsofthsm2.so
	p11    string // pkcs11-tool
}

const hsmPIN = "1234"

func newSoftHSM(t *testing.T) *softHSM {
	t.Helper()
	util := testenv.Need(t, "softhsm2-util", "softhsm2")
	p11 := testenv.Need(t, "pkcs11-tool", "opensc")
	ssl := testenv.Need(t, "openssl", "openssl")
	mods, _ := filepath.Glob("/usr/lib/*/softhsm/libsofthsm2.so")
	mods2, _ := filepath.Glob("/usr/lib/softhsm/libsofthsm2.so")
	mods = append(mods2, mods...)
	if len(mods) == 0 {
		testenv.Missing(t, "libsofthsm2.so (apt package softhsm2)")
	}
	if p, _ := filepath.Glob("/usr/lib/*/p11-kit-proxy.so"); len(p) == 0 {
		testenv.Missing(t, "p11-kit-proxy.so (apt package p11-kit-modules)")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "softhsm2.conf")
	if err := os.MkdirAll(filepath.Join(dir, "tokens"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("directories.tokendir = "+filepath.Join(dir, "tokens")+"\nobjectstore.backend = file\nlog.level = ERROR\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOFTHSM2_CONF", conf)
	run(t, nil, nil, util, "--init-token", "--free", "--label", "blkcrypt", "--pin", hsmPIN, "--so-pin", "5678")
	f := func(n string) string { return filepath.Join(dir, n) }
	run(t, nil, nil, ssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f("key.pem"), "-out", f("cert.pem"), "-days", "30", "-subj", "/CN=blkcrypt-test")
	run(t, nil, nil, ssl, "pkcs8", "-topk8", "-nocrypt", "-in", f("key.pem"), "-outform", "DER", "-out", f("key.der"))
	run(t, nil, nil, ssl, "x509", "-in", f("cert.pem"), "-outform", "DER", "-out", f("cert.der"))
	h := &softHSM{module: mods[0], p11: p11}
	run(t, nil, nil, p11, "--module", h.module, "--login", "--pin", hsmPIN, "--write-object", f("key.der"), "--type", "privkey", "--id", "01", "--label", "key", "--usage-decrypt")
	run(t, nil, nil, p11, "--module", h.module, "--login", "--pin", hsmPIN, "--write-object", f("cert.der"), "--type", "cert", "--id", "01", "--label", "key")
	return h
}

// encryptedImage is an 8 MiB file of random bytes that cryptsetup
// encrypted in place (reencrypt --encrypt, a LUKS2 header in front), with
// the first passphrase in a key file; plain is what it encrypted.
func encryptedImage(t *testing.T) (f *fixture, plain []byte) {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	f = &fixture{img: filepath.Join(dir, "img"), keyFile: filepath.Join(dir, "key"), pass: []byte("first passphrase")}
	plain = make([]byte, 8<<20)
	rand.Read(plain)
	if err := os.WriteFile(f.keyFile, f.pass, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.img, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, nil, nil, cs, "reencrypt", "--encrypt", "-q", "--type", "luks2", "--reduce-device-size", "4M",
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", f.keyFile, f.img)
	return f, plain
}

// luksTokens is the header's tokens as cryptsetup dumps them, raw.
func luksTokens(t *testing.T, img string) (tokens map[string]json.RawMessage, keyslots map[string]json.RawMessage) {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	var d struct {
		Tokens   map[string]json.RawMessage `json:"tokens"`
		Keyslots map[string]json.RawMessage `json:"keyslots"`
	}
	out := run(t, nil, nil, cs, "luksDump", "--dump-json-metadata", img)
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("cryptsetup's JSON: %v", err)
	}
	return d.Tokens, d.Keyslots
}

// judgePKCS11 is systemd's unlocking logic done by tools we did not
// write: OpenSC's pkcs11-tool decrypts token id's pkcs11-key on the
// softhsm2 token (RSA-PKCS, the key with id 01); the passphrase is the
// base64 of the result.
func (h *softHSM) judge(t *testing.T, img string, id int) []byte {
	t.Helper()
	toks, _ := luksTokens(t, img)
	var tok struct {
		Key string `json:"pkcs11-key"`
	}
	if err := json.Unmarshal(toks[strconv.Itoa(id)], &tok); err != nil {
		t.Fatalf("token %d: %v", id, err)
	}
	enc, err := base64.StdEncoding.DecodeString(tok.Key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "enc"), filepath.Join(dir, "dec")
	if err := os.WriteFile(in, enc, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, nil, nil, h.p11, "--module", h.module, "--login", "--pin", hsmPIN, "--decrypt", "-m", "RSA-PKCS", "--id", "01", "-i", in, "-o", out)
	dec, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(dec))
}

// TestPKCS11SystemdEnrolled: a systemd-pkcs11 token systemd-cryptenroll
// 252 enrolls on softhsm2 (through the p11-kit proxy, as systemd reaches
// it) unlocks through Unlock with the PIN to the passphrase pkcs11-tool's
// decryption gives and cryptsetup accepts, and the volume reads as the
// plaintext cryptsetup encrypted; without a PIN, and with a wrong one,
// Unlock fails on one line naming the token.
func TestPKCS11SystemdEnrolled(t *testing.T) {
	hsm := newSoftHSM(t)
	f, plain := encryptedImage(t)
	f.cryptenroll(t, []string{"PIN=" + hsmPIN}, "--pkcs11-token-uri=pkcs11:token=blkcrypt")
	h := f.open(t)
	ctx := ctxT(t)

	pass, id, err := Unlock(ctx, h, Options{PIN: []byte(hsmPIN)})
	if err != nil || id != 0 {
		t.Fatalf("Unlock: token %d: %v", id, err)
	}
	if !bytes.Equal(pass, hsm.judge(t, f.img, 0)) {
		t.Fatal("Unlock's passphrase is not the one pkcs11-tool's decryption gives")
	}
	if !f.cryptsetupAccepts(t, pass) {
		t.Fatal("cryptsetup refuses the passphrase")
	}
	v, err := blkcrypt.Open(ctx, f.img, blkcrypt.OpenOptions{Passphrase: pass})
	if err != nil {
		t.Fatalf("blkcrypt.Open: %v", err)
	}
	got := make([]byte, 1<<20)
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	v.Close()
	if !bytes.Equal(got, plain[:len(got)]) {
		t.Fatal("the volume opened through the token reads other bytes than cryptsetup encrypted")
	}

	_, _, err = Unlock(ctx, h, Options{})
	if !errors.Is(err, ErrNeedPIN) || !strings.Contains(err.Error(), "token 0 (systemd-pkcs11)") || !strings.Contains(err.Error(), `security token "blkcrypt"`) {
		t.Fatalf("without a PIN: %v", err)
	}
	_, _, err = Unlock(ctx, h, Options{PIN: []byte("0000")})
	if !errors.Is(err, ErrWrongPIN) || !strings.Contains(err.Error(), "token 0 (systemd-pkcs11)") ||
		!strings.Contains(err.Error(), `security token "blkcrypt"`) || !strings.Contains(err.Error(), "tries left") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("wrong PIN: %v", err)
	}
	t.Logf("wrong PIN: %v", err)
	// A URI without a token that exists: named clearly.
	_, err = DecryptPKCS11(ctx, &PKCS11Token{URI: "pkcs11:token=none", Parsed: mustURI(t, "pkcs11:token=none"), Key: []byte{1}}, []byte(hsmPIN))
	if err == nil || !strings.Contains(err.Error(), "no security token matches") {
		t.Fatalf("no such token: %v", err)
	}
}

func mustURI(t *testing.T, s string) *PKCS11URI {
	u, err := ParsePKCS11URI(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// orderedKeys is a JSON object's keys in the order they appear.
func orderedKeys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	var keys []string
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestPKCS11Enroll: what EnrollPKCS11 writes is systemd-cryptenroll's
// token field for field (systemd enrolls the same token beside it, and
// the keyslots' KDFs match), pkcs11-tool's decryption of its pkcs11-key
// gives the passphrase cryptsetup accepts for its keyslot, and Unlock
// opens it; a type=cert URI is stored as type=private; a URI with
// module-path and pin-value reaches softhsm2 directly and needs no PIN.
func TestPKCS11Enroll(t *testing.T) {
	hsm := newSoftHSM(t)
	f := newImage(t)
	h := f.open(t)
	ctx := ctxT(t)
	eo := EnrollOptions{Existing: f.pass}
	slot, id, err := EnrollPKCS11(ctx, h, PKCS11EnrollOptions{EnrollOptions: eo, URI: "pkcs11:token=blkcrypt", PIN: []byte(hsmPIN)})
	if err != nil {
		t.Fatalf("EnrollPKCS11: %v", err)
	}
	h.Close()
	pass := hsm.judge(t, f.img, id)
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	if out, err := runErr(nil, pass, cs, "open", "--test-passphrase", "--key-file", "-", "--key-slot", strconv.Itoa(slot), f.img); err != nil {
		t.Fatalf("cryptsetup refuses keyslot %d with the judge's passphrase: %v: %s", slot, err, out)
	}
	f.cryptenroll(t, []string{"PIN=" + hsmPIN}, "--pkcs11-token-uri=pkcs11:token=blkcrypt")
	toks, slots := luksTokens(t, f.img)
	ours, theirs := toks[strconv.Itoa(id)], toks[strconv.Itoa(id+1)]
	if ko, kt := orderedKeys(t, ours), orderedKeys(t, theirs); strings.Join(ko, ",") != strings.Join(kt, ",") {
		t.Fatalf("fields %v, systemd's %v", ko, kt)
	}
	var a, b struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
		URI      string   `json:"pkcs11-uri"`
		Key      []byte   `json:"pkcs11-key"`
	}
	if json.Unmarshal(ours, &a) != nil || json.Unmarshal(theirs, &b) != nil {
		t.Fatal("token JSON")
	}
	if a.Type != b.Type || a.URI != b.URI || len(a.Keyslots) != 1 || len(b.Keyslots) != 1 || a.Keyslots[0] != strconv.Itoa(slot) || len(a.Key) != len(b.Key) {
		t.Fatalf("ours %+v, systemd's %+v", a, b)
	}
	kdf := func(s string) string {
		var k struct {
			KDF struct {
				Type, Hash string
				Iterations int
			} `json:"kdf"`
		}
		json.Unmarshal(slots[s], &k)
		return k.KDF.Type + "/" + k.KDF.Hash + "/" + strconv.Itoa(k.KDF.Iterations)
	}
	if kdf(a.Keyslots[0]) != kdf(b.Keyslots[0]) {
		t.Fatalf("keyslot KDF %s, systemd's %s", kdf(a.Keyslots[0]), kdf(b.Keyslots[0]))
	}

	h = f.open(t)
	for _, tid := range []int{id, id + 1} {
		p, got, err := Unlock(ctx, h, Options{TokenID: &tid, PIN: []byte(hsmPIN)})
		if err != nil || got != tid || !f.cryptsetupAccepts(t, p) {
			t.Fatalf("Unlock token %d: %v", tid, err)
		}
	}

	// type=cert is stored as type=private; module-path and pin-value.
	uri := "pkcs11:token=blkcrypt;id=%01;type=cert?module-path=" + hsm.module + "&pin-value=" + hsmPIN
	_, id2, err := EnrollPKCS11(ctx, h, PKCS11EnrollOptions{EnrollOptions: eo, URI: uri})
	if err != nil {
		t.Fatalf("EnrollPKCS11 with module-path: %v", err)
	}
	toks, _ = luksTokens(t, f.img)
	var c struct {
		URI string `json:"pkcs11-uri"`
	}
	json.Unmarshal(toks[strconv.Itoa(id2)], &c)
	if want := "pkcs11:token=blkcrypt;id=%01;type=private?module-path=" + hsm.module + "&pin-value=" + hsmPIN; c.URI != want {
		t.Fatalf("stored URI %q, want %q", c.URI, want)
	}
	p, got, err := Unlock(ctx, h, Options{TokenID: &id2})
	if err != nil || got != id2 || !f.cryptsetupAccepts(t, p) || !bytes.Equal(p, hsm.judge(t, f.img, id2)) {
		t.Fatalf("Unlock through module-path and pin-value: %v", err)
	}
}

// TestPKCS11ModuleMissing: a module-path that does not load fails on one
// line naming it, changing nothing.
func TestPKCS11ModuleMissing(t *testing.T) {
	tok, err := ParsePKCS11Token([]byte(`{"type":"systemd-pkcs11","keyslots":["0"],"pkcs11-uri":"pkcs11:token=x?module-path=/nonexistent/libnone.so","pkcs11-key":"AAEC"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecryptPKCS11(ctxT(t), tok, []byte("1234"))
	if err == nil || !strings.Contains(err.Error(), "PKCS#11 module /nonexistent/libnone.so") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("missing module: %v", err)
	}
}
