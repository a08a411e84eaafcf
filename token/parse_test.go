package token

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// systemdToken is a token systemd-cryptenroll 252 wrote on swtpm (PCR 7,
// no PIN): its blob is a sealed object of a throwaway software TPM.
const systemdToken = `{"type":"systemd-tpm2","keyslots":["1"],"tpm2-blob":"AJ4AIE6kFKiPyqXH/9P0FNd4uB4J2pvKEf/Wl8tBWmfXRpJkABAc0xYFFBvsTTBJsTqKo8YmEx08jl7FW8cb5Kxnq46t8qlBrrIPAesFq0b+rsRCgHX+hhypL4OSV/GGqXVT0BZzN8rEnV1QFs6FuyPxaahDsSS1XjCJUQVkEtC0gNhxr7TyxOY0qHgHW+QMMXoLpzh1HmeRnzXchywCMABOAAgACwAAABIAIJh9gcbeJSWl457UnRT7Iun++xJGSt3VxOrc/RpJoU0UABAAIOMVTAmVrreU+al9esDx3fXhcpU29A9SsFrB2awcwaBx","tpm2-pcrs":[7],"tpm2-pcr-bank":"sha256","tpm2-primary-alg":"ecc","tpm2-policy-hash":"987d81c6de2525a5e39ed49d14fb22e9fefb12464addd5c4eadcfd1a49a14d14","tpm2-pin":false}`

func blobOf(t testing.TB) []byte {
	i := strings.Index(systemdToken, `"tpm2-blob":"`) + len(`"tpm2-blob":"`)
	b, err := base64.StdEncoding.DecodeString(systemdToken[i : i+strings.Index(systemdToken[i:], `"`)])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func withBlob(b []byte) string {
	i := strings.Index(systemdToken, `"tpm2-blob":"`) + len(`"tpm2-blob":"`)
	j := i + strings.Index(systemdToken[i:], `"`)
	return systemdToken[:i] + base64.StdEncoding.EncodeToString(b) + systemdToken[j:]
}

func TestParseSystemdToken(t *testing.T) {
	tok, err := ParseTPM2Token([]byte(systemdToken))
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.Keyslots) != 1 || tok.Keyslots[0] != 1 || len(tok.PCRs) != 1 || tok.PCRs[0] != 7 ||
		tok.Bank != "sha256" || tok.PrimaryAlg != "ecc" || tok.PIN || len(tok.PolicyHash) != 32 {
		t.Fatalf("parsed %+v", tok)
	}
	// systemd before 250 wrote neither the bank nor the algorithm.
	old := strings.NewReplacer(`"tpm2-pcr-bank":"sha256",`, "", `"tpm2-primary-alg":"ecc",`, "").Replace(systemdToken)
	if tok, err := ParseTPM2Token([]byte(old)); err != nil || tok.Bank != "sha256" || tok.PrimaryAlg != "ecc" {
		t.Fatalf("a systemd 249 token: %+v, %v", tok, err)
	}
}

// TestHostileTokens: malformed JSON and blobs, and the fields of later
// systemd versions, are refused with a one-line error naming the field.
func TestHostileTokens(t *testing.T) {
	blob := blobOf(t)
	rep := func(old, new string) string { return strings.Replace(systemdToken, old, new, 1) }
	cases := []struct {
		name, js, want string
		sentinel       error
	}{
		{"not JSON", `{"type":`, "token JSON", ErrBadToken},
		{"not an object", `[1]`, "token JSON", ErrBadToken},
		{"null", `null`, "not an object", ErrBadToken},
		{"other type", `{"type":"systemd-fido2","keyslots":[]}`, "systemd-fido2", ErrBadToken},
		{"no blob", rep(`"tpm2-blob"`, `"x-blob"`), `"tpm2-blob" missing`, ErrBadToken},
		{"blob not base64", rep(`"tpm2-blob":"AJ4A`, `"tpm2-blob":"!!!!`), `"tpm2-blob": not base64`, ErrBadToken},
		{"blob empty", withBlob(nil), `"tpm2-blob": 0 bytes`, ErrBadToken},
		{"blob truncated", withBlob(blob[:100]), `"tpm2-blob": TPM2B_PRIVATE`, ErrBadToken},
		{"blob public truncated", withBlob(blob[:len(blob)-1]), `"tpm2-blob": TPM2B_PUBLIC`, ErrBadToken},
		{"blob trailing bytes", withBlob(append(append([]byte{}, blob...), 0)), `"tpm2-blob": TPM2B_PUBLIC`, ErrBadToken},
		{"blob sharded", rep(`"tpm2-blob":"`, `"tpm2-blob":["x"],"y":"`), "sharded", ErrUnsupported},
		{"pcr out of range", rep(`"tpm2-pcrs":[7]`, `"tpm2-pcrs":[24]`), `"tpm2-pcrs"`, ErrBadToken},
		{"pcrs not numbers", rep(`"tpm2-pcrs":[7]`, `"tpm2-pcrs":["7"]`), `"tpm2-pcrs"`, ErrBadToken},
		{"bank", rep(`"sha256"`, `"sm3_256"`), `"tpm2-pcr-bank"`, ErrUnsupported},
		{"alg", rep(`"ecc"`, `"ecc521"`), `"tpm2-primary-alg"`, ErrUnsupported},
		{"policy hash short", rep(`"tpm2-policy-hash":"98`, `"tpm2-policy-hash":"`), `"tpm2-policy-hash"`, ErrBadToken},
		{"pin not bool", rep(`"tpm2-pin":false`, `"tpm2-pin":"no"`), `"tpm2-pin"`, ErrBadToken},
		{"keyslot not a number", rep(`"keyslots":["1"]`, `"keyslots":["one"]`), `"keyslots"`, ErrBadToken},
		{"srk", rep(`"tpm2-pin":false`, `"tpm2-pin":false,"tpm2_srk":"AAAA"`), `"tpm2_srk"`, ErrUnsupported},
		{"signed policy", rep(`"tpm2-pin":false`, `"tpm2-pin":false,"tpm2_pubkey_pcrs":[11],"tpm2_pubkey":"AAAA"`), `"tpm2_pubkey`, ErrUnsupported},
		{"pcrlock", rep(`"tpm2-pin":false`, `"tpm2-pin":false,"tpm2_pcrlock":true`), `"tpm2_pcrlock"`, ErrUnsupported},
		{"unknown tpm2 field", rep(`"tpm2-pin":false`, `"tpm2-pin":false,"tpm2-frobnicate":1`), `"tpm2-frobnicate"`, ErrUnsupported},
		{"salt not base64", rep(`"tpm2-pin":false`, `"tpm2-pin":true,"tpm2_salt":"%%"`), `"tpm2_salt"`, ErrBadToken},
	}
	for _, c := range cases {
		_, err := ParseTPM2Token([]byte(c.js))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.want) || strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("%s: %v (want %v naming %s, one line)", c.name, err, c.sentinel, c.want)
		}
	}
	// Fields of no meaning to the TPM are ignored, as systemd ignores them.
	if _, err := ParseTPM2Token([]byte(rep(`"tpm2-pin":false`, `"tpm2-pin":false,"note":"x","tpm2_pubkey_pcrs":[]`))); err != nil {
		t.Errorf("an unrelated field: %v", err)
	}
}

// TestPINAuth: systemd's PIN derivations: SHA-256 of the PIN; with a salt,
// SHA-256 of the base64 of PBKDF2-HMAC-SHA256(pin, salt, 10000, 32); the
// TPM's trailing zero bytes trimmed.
func TestPINAuth(t *testing.T) {
	// SHA-256("1234"), computed independently.
	if got := base64.StdEncoding.EncodeToString(PINAuth([]byte("1234"), nil)); got != "A6xnQhbz4Vx2HuGl4lXwZ5U2I8iziLRFnhP5eNfIRvQ=" {
		t.Errorf("PINAuth(1234) = %s", got)
	}
	// With salt "salt": computed with Python's hashlib (whose PBKDF2 at
	// 10000 iterations reproduces systemd's test vector E3 07 12 BE … for
	// "\0pass" and "mysa\0lt").
	if got := base64.StdEncoding.EncodeToString(PINAuth([]byte("1234"), []byte("salt"))); got != "H0DezCz9xJ5gStTDBDEsr1f/pL0ORWtP6P+rdytmIu8=" {
		t.Errorf("salted PINAuth(1234) = %s", got)
	}
}

func TestRecoveryKeyForm(t *testing.T) {
	k, err := NewRecoveryKey()
	if err != nil || !IsRecoveryKey(k) {
		t.Fatalf("%s, %v", k, err)
	}
	for _, bad := range []string{"", strings.Repeat("c", 71), "cdidblje-brhlbtue-dckiicie-lllueetd-rkndbddn-vtccbbiu-bhuvedfb-nfugtrka"} {
		if IsRecoveryKey([]byte(bad)) {
			t.Errorf("%q taken for a recovery key", bad)
		}
	}
	if !IsRecoveryKey([]byte("cdidblje-brhlbtue-dckiicie-lllueetd-rkndbddn-vtccbbiu-bhuvedfb-nfugtrkl")) {
		t.Error("a key systemd-cryptenroll printed is not recognised")
	}
}

// TestTCTIStrings: the spellings systemd takes, and clear refusals.
func TestTCTIStrings(t *testing.T) {
	ctx := context.Background()
	for _, s := range []string{"mssim:host=x", "swtpm:port=0", "swtpm:host", "swtpm:color=red", "device:/nonexistent/tpm"} {
		if _, err := openTPM(ctx, s); !errors.Is(err, ErrNoTPM) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// TestTPMWaitBounded: a TPM that never answers holds Unlock only until the
// context ends.
func TestTPMWaitBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // silent: reads nothing back
		}
	}()
	tok, err := ParseTPM2Token([]byte(systemdToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = unsealTPM2(ctx, 0, tok, "swtpm:host=127.0.0.1,port="+strings.Split(l.Addr().String(), ":")[1], nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "token 0") {
		t.Fatalf("%v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %v", d)
	}
}

// FuzzTPM2Token: no token JSON or blob makes the parser panic, and every
// refusal is a one-line ErrBadToken or ErrUnsupported.
func FuzzTPM2Token(f *testing.F) {
	f.Add([]byte(systemdToken))
	f.Add([]byte(withBlob(blobOf(f)[:50])))
	f.Fuzz(func(t *testing.T, js []byte) {
		tok, err := ParseTPM2Token(js)
		if err != nil {
			if !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("unexpected error class: %v", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error: %q", err)
			}
			return
		}
		if len(tok.PolicyHash) != 32 || tok.Private.Buffer == nil {
			t.Fatalf("accepted a token without its essentials: %+v", tok)
		}
	})
}
