//go:build !pkcs11 || !cgo

package token

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestPKCS11NotBuilt: in a build without the pkcs11 tag, a systemd-pkcs11
// token (imported by cryptsetup) is skipped by Unlock unless asked for,
// when it fails saying how to build with it; enrolling says the same.
func TestPKCS11NotBuilt(t *testing.T) {
	f := newImage(t)
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	js := filepath.Join(t.TempDir(), "token.json")
	if err := os.WriteFile(js, []byte(strings.Replace(systemd252Token, `["1"]`, `["0"]`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, nil, nil, cs, "token", "import", "--json-file", js, f.img)
	h := f.open(t)
	ctx := ctxT(t)
	const want = "built without PKCS#11 support (build with -tags pkcs11)"

	_, _, err := Unlock(ctx, h, Options{})
	if !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Unlock, not asked: %v", err)
	}
	for _, o := range []Options{{TokenType: TypePKCS11}, {TokenID: new(int)}} {
		_, _, err := Unlock(ctx, h, o)
		if !errors.Is(err, ErrPKCS11NotBuilt) || !strings.Contains(err.Error(), "token 0 (systemd-pkcs11)") || !strings.Contains(err.Error(), want) {
			t.Fatalf("Unlock %+v: %v", o, err)
		}
	}
	_, _, err = EnrollPKCS11(ctx, h, PKCS11EnrollOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, URI: "pkcs11:token=x"})
	if !errors.Is(err, ErrPKCS11NotBuilt) || err.Error() != want {
		t.Fatalf("EnrollPKCS11: %v", err)
	}
	if hd, err := h.Header(ctx); err != nil || len(hd.ActiveKeyslots()) != 1 {
		t.Fatalf("the failed enrollment changed the keyslots: %v", err)
	}
	if _, err := PKCS11TokenURIs(""); !errors.Is(err, ErrPKCS11NotBuilt) {
		t.Fatalf("PKCS11TokenURIs: %v", err)
	}
}
