//go:build pkcs11 && cgo

package cli

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// pkcs11HSM makes a softhsm2 token for one test (label "blkcrypt", PIN
// 1234, an openssl RSA-2048 key and self-signed certificate with CKA_ID
// 01) and returns libsofthsm2.so and pkcs11-tool (as package token's
// tests do). SOFTHSM2_CONF points at it for the test's process and tools.
func pkcs11HSM(t *testing.T) (module, p11tool string) {
	t.Helper()
	util := testenv.Need(t, "softhsm2-util", "softhsm2")
	p11tool = testenv.Need(t, "pkcs11-tool", "opensc")
	ssl := testenv.Need(t, "openssl", "openssl")
	mods, _ := filepath.Glob("/usr/lib/softhsm/libsofthsm2.so")
	more, _ := filepath.Glob("/usr/lib/*/softhsm/libsofthsm2.so")
	if mods = append(mods, more...); len(mods) == 0 {
		testenv.Missing(t, "libsofthsm2.so (apt package softhsm2)")
	}
	if p, _ := filepath.Glob("/usr/lib/*/p11-kit-proxy.so"); len(p) == 0 {
		testenv.Missing(t, "p11-kit-proxy.so (apt package p11-kit-modules)")
	}
	dir := t.TempDir()
	f := func(n string) string { return filepath.Join(dir, n) }
	os.Mkdir(f("tokens"), 0o700)
	conf := writeFile(t, dir, "softhsm2.conf", []byte("directories.tokendir = "+f("tokens")+"\nobjectstore.backend = file\nlog.level = ERROR\n"))
	t.Setenv("SOFTHSM2_CONF", conf)
	mustTool(t, nil, nil, util, "--init-token", "--free", "--label", "blkcrypt", "--pin", "1234", "--so-pin", "5678")
	mustTool(t, nil, nil, ssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f("key.pem"), "-out", f("cert.pem"), "-days", "30", "-subj", "/CN=blkcrypt-test")
	mustTool(t, nil, nil, ssl, "pkcs8", "-topk8", "-nocrypt", "-in", f("key.pem"), "-outform", "DER", "-out", f("key.der"))
	mustTool(t, nil, nil, ssl, "x509", "-in", f("cert.pem"), "-outform", "DER", "-out", f("cert.der"))
	for _, obj := range [][]string{{"key.der", "privkey", "--usage-decrypt"}, {"cert.der", "cert"}} {
		mustTool(t, nil, nil, p11tool, append([]string{"--module", mods[0], "--login", "--pin", "1234", "--write-object", f(obj[0]), "--type", obj[1], "--id", "01", "--label", "key"}, obj[2:]...)...)
	}
	return mods[0], p11tool
}

// TestPKCS11CLI: read --token-only opens what systemd-cryptenroll 252
// enrolled on softhsm2, to the plaintext cryptsetup encrypted, with the
// PIN from --pkcs11-pin-file or the terminal; a wrong PIN fails on one
// line naming the token; enroll --pkcs11-token-uri (a URI, and auto)
// adds a keyslot that cryptsetup opens with the passphrase pkcs11-tool's
// decryption of the token's pkcs11-key gives; list prints the token.
func TestPKCS11CLI(t *testing.T) {
	module, p11tool := pkcs11HSM(t)
	enroll := testenv.Need(t, "systemd-cryptenroll", "systemd")
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	plain := make([]byte, 8<<20)
	rand.Read(plain)
	img := writeFile(t, dir, "img", plain)
	kf := writeFile(t, dir, "key", []byte("first passphrase"))
	mustTool(t, nil, nil, cs, "reencrypt", "--encrypt", "-q", "--type", "luks2", "--reduce-device-size", "4M",
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", kf, img)
	mustTool(t, []string{"PIN=1234"}, nil, enroll, "--pkcs11-token-uri=pkcs11:token=blkcrypt", "--unlock-key-file="+kf, img)
	pin := writeFile(t, dir, "pin", []byte("1234\n"))

	asked := 0
	code, out, errs := runPrompt(t, nil, &asked, "read", "--token-only", "--pkcs11-pin-file", pin, "--length", "1M", img)
	if code != 0 || asked != 0 || !bytes.Equal([]byte(out), plain[:1<<20]) {
		t.Fatalf("read --token-only --pkcs11-pin-file: exit %d, %d prompts: %s", code, asked, errs)
	}
	code, out, errs = runPrompt(t, []byte("1234"), &asked, "read", "--token-only", "--length", "1M", img)
	if code != 0 || asked != 1 || !bytes.Equal([]byte(out), plain[:1<<20]) {
		t.Fatalf("read --token-only, PIN asked: exit %d, %d prompts: %s", code, asked, errs)
	}
	bad := writeFile(t, dir, "bad", []byte("0000"))
	asked = 0
	code, _, errs = runPrompt(t, nil, &asked, "read", "--token-only", "--pkcs11-pin-file", bad, "--length", "1M", img)
	if code == 0 || asked != 0 || !strings.Contains(errs, "wrong PIN") || !strings.Contains(errs, "token 0 (systemd-pkcs11)") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("read --token-only with a wrong PIN: exit %d, %d prompts: %q", code, asked, errs)
	}

	code, out, errs = run(t, nil, "enroll", "--pkcs11-token-uri", "list")
	if code != 0 || !strings.Contains(out, "token=blkcrypt") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("enroll --pkcs11-token-uri list: exit %d: %q %s", code, out, errs)
	}
	judge := func(id string) []byte {
		var d struct {
			Tokens map[string]struct {
				Keyslots []string `json:"keyslots"`
				Key      []byte   `json:"pkcs11-key"`
			} `json:"tokens"`
		}
		if err := json.Unmarshal([]byte(mustTool(t, nil, nil, cs, "luksDump", "--dump-json-metadata", img)), &d); err != nil {
			t.Fatal(err)
		}
		in := writeFile(t, t.TempDir(), "enc", d.Tokens[id].Key)
		mustTool(t, nil, nil, p11tool, "--module", module, "--login", "--pin", "1234", "--decrypt", "-m", "RSA-PKCS", "--id", "01", "-i", in, "-o", in+".dec")
		dec, err := os.ReadFile(in + ".dec")
		if err != nil {
			t.Fatal(err)
		}
		return []byte(base64.StdEncoding.EncodeToString(dec))
	}
	for i, uri := range []string{"pkcs11:token=blkcrypt;object=key", "auto"} {
		code, _, errs = run(t, nil, "enroll", "--pkcs11-token-uri", uri, "--pkcs11-pin-file", pin, "--unlock-key-file", kf, img)
		m := regexp.MustCompile(`PKCS#11 token enrolled as key slot (\d+)\.`).FindStringSubmatch(errs)
		if code != 0 || m == nil {
			t.Fatalf("enroll --pkcs11-token-uri %s: exit %d: %s", uri, code, errs)
		}
		id := []string{"1", "2"}[i]
		mustTool(t, nil, nil, cs, "open", "--test-passphrase", "--key-slot", m[1], "--key-file", writeFile(t, t.TempDir(), "pass", judge(id)), img)
		code, out, errs = runPrompt(t, nil, &asked, "read", "--token-only", "--token-id", id, "--pkcs11-pin-file", pin, "--length", "1M", img)
		if code != 0 || !bytes.Equal([]byte(out), plain[:1<<20]) {
			t.Fatalf("read --token-only --token-id %s: exit %d: %s", id, code, errs)
		}
	}
	// The certificate is a public object: enrolling needs no PIN.
	code, _, errs = run(t, nil, "enroll", "--pkcs11-token-uri", "pkcs11:token=blkcrypt", "--unlock-key-file", kf, img)
	if code != 0 || !strings.Contains(errs, "PKCS#11 token enrolled") {
		t.Fatalf("enroll without a PIN: exit %d: %s", code, errs)
	}
}
