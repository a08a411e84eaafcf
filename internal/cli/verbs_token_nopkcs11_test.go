//go:build !pkcs11 || !cgo

package cli

import (
	"strings"
	"testing"
)

// TestPKCS11NotBuiltCLI: without the pkcs11 build tag, read --token-only
// on a volume whose only token is a systemd-pkcs11 one (imported by
// cryptsetup) fails on one line saying how to build with it, never
// asking; without --token-only the passphrase is asked for as before;
// enroll --pkcs11-token-uri says the same and changes nothing.
func TestPKCS11NotBuiltCLI(t *testing.T) {
	img, kf, data := tokenImage(t)
	const want = "built without PKCS#11 support (build with -tags pkcs11)"
	js := writeFile(t, t.TempDir(), "token.json", []byte(`{"type":"systemd-pkcs11","keyslots":["0"],"pkcs11-uri":"pkcs11:token=test","pkcs11-key":"AAEC"}`))
	mustCS(t, "token", "import", "--json-file", js, img)
	before := mustCS(t, "luksDump", "--dump-json-metadata", img)

	asked := 0
	code, _, errs := runPrompt(t, []byte("first passphrase"), &asked, "read", "--token-only", "--length", "1M", img)
	if code == 0 || asked != 0 || !strings.Contains(errs, want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("read --token-only: exit %d, %d prompts: %q", code, asked, errs)
	}
	code, _, errs = runPrompt(t, nil, &asked, "read", "--token-only", "--token-type", "systemd-pkcs11", "--length", "1M", img)
	if code == 0 || !strings.Contains(errs, "token 0 (systemd-pkcs11): "+want) {
		t.Fatalf("read --token-only --token-type systemd-pkcs11: exit %d: %q", code, errs)
	}
	code, out, errs := runPrompt(t, []byte("first passphrase"), &asked, "read", "--length", "1M", img)
	if code != 0 || asked != 1 || out != string(data) {
		t.Fatalf("read without --token-only: exit %d, %d prompts: %s", code, asked, errs)
	}
	code, _, errs = run(t, nil, "enroll", "--pkcs11-token-uri", "pkcs11:token=test", "--unlock-key-file", kf, img)
	if code == 0 || !strings.Contains(errs, want) {
		t.Fatalf("enroll --pkcs11-token-uri: exit %d: %q", code, errs)
	}
	if after := mustCS(t, "luksDump", "--dump-json-metadata", img); after != before {
		t.Fatal("the failed enrollment changed the header")
	}
}
