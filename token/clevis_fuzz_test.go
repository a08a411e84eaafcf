package token

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-tpm/tpm2"
)

// fakeTang is a tang server in Go for the fast tests and the fuzz seeds:
// an ES512 signing key, a P-521 exchange key, /adv and /rec as tangd
// answers them. The interoperability tests use Debian's tangd instead.
type fakeTang struct {
	sig, exc *ecdsa.PrivateKey
	adv      []byte // the signed advertisement (JWS, JSON serialization)
}

var (
	fakeTangOnce sync.Once
	fakeTangKeys *fakeTang
)

func jwkOf(k *ecdsa.PublicKey, ops ...string) map[string]any {
	n := coordLen(k.Curve)
	return map[string]any{
		"kty": "EC", "crv": k.Curve.Params().Name, "key_ops": ops,
		"x": base64.RawURLEncoding.EncodeToString(k.X.FillBytes(make([]byte, n))),
		"y": base64.RawURLEncoding.EncodeToString(k.Y.FillBytes(make([]byte, n))),
	}
}

func newFakeTang(t testing.TB) *fakeTang {
	fakeTangOnce.Do(func() {
		sig, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
		if err != nil {
			panic(err)
		}
		exc, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
		if err != nil {
			panic(err)
		}
		payload, _ := json.Marshal(map[string]any{"keys": []any{jwkOf(&sig.PublicKey, "sign", "verify"), jwkOf(&exc.PublicKey, "deriveKey")}})
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES512, Key: sig}, nil)
		if err != nil {
			panic(err)
		}
		obj, err := signer.Sign(payload)
		if err != nil {
			panic(err)
		}
		fakeTangKeys = &fakeTang{sig: sig, exc: exc, adv: []byte(obj.FullSerialize())}
	})
	return fakeTangKeys
}

// ServeHTTP answers /rec/KID with s·X, as tangd does.
func (f *fakeTang) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/adv") {
		w.Write(f.adv)
		return
	}
	var req ecJWK
	if json.NewDecoder(r.Body).Decode(&req) != nil {
		w.WriteHeader(400)
		return
	}
	x, err := req.point()
	if err != nil {
		w.WriteHeader(400)
		return
	}
	yx, yy := elliptic.P521().ScalarMult(x.x, x.y, f.exc.D.FillBytes(make([]byte, 66)))
	b, _ := (&point{elliptic.P521(), yx, yy}).jwk()
	w.Write(b)
}

func (f *fakeTang) cfg(url string) []byte {
	return []byte(`{"url":"` + url + `","adv":` + string(f.adv) + `}`)
}

// TestClevisFakeTang: encryption to an advertisement and the exchange,
// against tang's algebra done independently here (the server multiplies
// by its private key); sss over two such servers with one down. The
// interoperability proof is TestClevisTang's, with tangd and clevis.
func TestClevisFakeTang(t *testing.T) {
	ft := newFakeTang(t)
	srv := httptest.NewServer(ft)
	defer srv.Close()
	ctx := context.Background()
	jwe, err := EncryptClevis(ctx, "tang", ft.cfg(srv.URL), []byte("hello"), ClevisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckClevis(jwe); err != nil {
		t.Fatal(err)
	}
	if pt, err := DecryptClevis(ctx, jwe, ClevisOptions{}); err != nil || string(pt) != "hello" {
		t.Fatalf("%q, %v", pt, err)
	}
	// The exchange key is the one the JWE names.
	h, _ := parseProtected(jwe)
	if h.Kid != (&ecJWK{Kty: "EC", Crv: "P-521", X: jwkOf(&ft.exc.PublicKey)["x"].(string), Y: jwkOf(&ft.exc.PublicKey)["y"].(string)}).thumbprint(crypto.SHA256) {
		t.Fatalf("kid %s is not the exchange key's thumbprint", h.Kid)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	sss := `{"t":1,"pins":{"tang":[` + string(ft.cfg(down.URL)) + `,` + string(ft.cfg(srv.URL)) + `]}}`
	jwe, err = EncryptClevis(ctx, "sss", []byte(sss), []byte("shared"), ClevisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := DecryptClevis(ctx, jwe, ClevisOptions{}); err != nil || string(pt) != "shared" {
		t.Fatalf("sss 1 of 2 with one down: %q, %v", pt, err)
	}
	sss = strings.Replace(sss, `"t":1`, `"t":2`, 1)
	jwe, err = EncryptClevis(ctx, "sss", []byte(sss), []byte("shared"), ClevisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecryptClevis(ctx, jwe, ClevisOptions{}); !errors.Is(err, ErrThreshold) || !errors.Is(err, ErrTangUnreachable) {
		t.Fatalf("sss 2 of 2 with one down: %v", err)
	}
}

// clevisSeeds are JWEs of each pin made offline (tang to the fake
// server's advertisement, sss over them, a tpm2 header with a
// well-formed sealed-object public area).
func clevisSeeds(t testing.TB) []string {
	ft := newFakeTang(t)
	ctx := context.Background()
	tang, err := EncryptClevis(ctx, "tang", ft.cfg("http://127.0.0.1:1"), []byte("x"), ClevisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := `{"t":2,"pins":{"tang":[` + string(ft.cfg("http://127.0.0.1:1")) + `,` + string(ft.cfg("http://127.0.0.1:2")) + `]}}`
	sss, err := EncryptClevis(ctx, "sss", []byte(cfg), []byte("x"), ClevisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub := tpm2.New2B(tpm2.TPMTPublic{
		Type: tpm2.TPMAlgKeyedHash, NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true, NoDA: true, AdminWithPolicy: true},
		Parameters:       tpm2.NewTPMUPublicParms(tpm2.TPMAlgKeyedHash, &tpm2.TPMSKeyedHashParms{Scheme: tpm2.TPMTKeyedHashScheme{Scheme: tpm2.TPMAlgNull}}),
		Unique:           tpm2.NewTPMUPublicID(tpm2.TPMAlgKeyedHash, &tpm2.TPM2BDigest{Buffer: make([]byte, 32)}),
	})
	priv := tpm2.TPM2BPrivate{Buffer: make([]byte, 64)}
	tpm, err := sealJWE(make([]byte, 32), []byte("x"), map[string]any{"pin": "tpm2", "tpm2": map[string]string{
		"hash": "sha256", "key": "ecc", "pcr_bank": "sha256", "pcr_ids": "0,7",
		"jwk_pub":  base64.RawURLEncoding.EncodeToString(tpm2.Marshal(pub)),
		"jwk_priv": base64.RawURLEncoding.EncodeToString(tpm2.Marshal(priv)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{tang, sss, tpm} {
		if err := CheckClevis(j); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	return []string{tang, sss, tpm}
}

func flatten(jwe string) string {
	p := strings.Split(jwe, ".")
	b, _ := json.Marshal(map[string]string{"protected": p[0], "encrypted_key": p[1], "iv": p[2], "ciphertext": p[3], "tag": p[4]})
	return string(b)
}

// checkErr: a refusal is one line and says why with a sentinel.
func checkErr(t *testing.T, err error) {
	if err == nil {
		return
	}
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("a multi-line error: %q", err)
	}
	if !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrUnsupported) {
		t.Fatalf("an error with no sentinel: %v", err)
	}
}

// FuzzClevisToken: no token JSON makes the parser or the offline check of
// its JWE panic, hang or fail without a one-line sentinel error.
func FuzzClevisToken(f *testing.F) {
	for _, j := range clevisSeeds(f) {
		f.Add([]byte(`{"type":"clevis","keyslots":["1"],"jwe":` + flatten(j) + `}`))
	}
	f.Add([]byte(`{"type":"clevis","keyslots":["1"],"jwe":{"ciphertext":"a","ciphertext":"b","encrypted_key":"","iv":"c","protected":"e30","tag":"d"}}`))
	f.Add([]byte(`{"type":"clevis","keyslots":[],"jwe":"a.b.c.d.e"}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		tok, err := ParseClevisToken(js)
		checkErr(t, err)
		if err == nil {
			checkErr(t, CheckClevis(tok.JWE))
		}
	})
}

// FuzzClevisJWE: the offline check of a compact JWE (every pin, nested
// sss) never panics and refuses with a one-line sentinel error.
func FuzzClevisJWE(f *testing.F) {
	for _, j := range clevisSeeds(f) {
		f.Add(j)
	}
	f.Fuzz(func(t *testing.T, jwe string) {
		err := CheckClevis(jwe)
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("a multi-line error: %q", err)
		}
		// clevis luks list's view of it: no panic, and valid JSON when
		// the JWE checks out.
		if _, cfg, err := ClevisConfig(jwe); err == nil && CheckClevis(jwe) == nil && !json.Valid([]byte(cfg)) {
			t.Fatalf("ClevisConfig gives invalid JSON %q", cfg)
		}
	})
}

// FuzzTangAnswer: whatever a tang server answers, the client refuses it
// with ErrTangAnswer or derives a key, and never panics (the curve
// arithmetic panics on a point off the curve; every point is checked).
func FuzzTangAnswer(f *testing.F) {
	ft := newFakeTang(f)
	seeds := clevisSeeds(f)
	h, err := parseProtected(seeds[0])
	if err != nil {
		f.Fatal(err)
	}
	p, err := prepareTang(h)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := (&point{elliptic.P521(), ft.exc.X, ft.exc.Y}).jwk()
	f.Add(good)
	f.Add([]byte(`{"kty":"EC","crv":"P-521","x":"AA","y":"AA"}`))
	f.Add([]byte(`{"kty":"EC","crv":"P-521","x":"` + strings.Repeat("A", 88) + `","y":"` + strings.Repeat("A", 88) + `"}`))
	scalar := big.NewInt(12345).FillBytes(make([]byte, 66))
	f.Fuzz(func(t *testing.T, body []byte) {
		y, err := p.answer(body)
		if err != nil {
			if !errors.Is(err, ErrTangAnswer) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%v", err)
			}
			return
		}
		if _, err := p.key(y, scalar); err != nil && !errors.Is(err, ErrTangAnswer) {
			t.Fatal(err)
		}
	})
}

// FuzzSSSRecover: any shares and field recover a key or refuse, never
// panic.
func FuzzSSSRecover(f *testing.F) {
	f.Add([]byte{0xfb}, []byte{1, 2, 3, 4})
	f.Add([]byte{7}, []byte{1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, pb, data []byte) {
		if len(pb) == 0 || len(pb) > 64 {
			return
		}
		p := new(big.Int).SetBytes(pb)
		if p.Cmp(big.NewInt(2)) < 0 {
			return
		}
		pl := len(pb)
		var shares [][]byte
		for len(data) >= 2*pl && len(shares) < 8 {
			shares = append(shares, data[:2*pl])
			data = data[2*pl:]
		}
		if len(shares) == 0 {
			return
		}
		if k, err := sssRecover(p, pl, shares); err == nil && len(k) != pl {
			t.Fatalf("a key of %d bytes for a %d-byte field", len(k), pl)
		}
	})
}

// TestClevisTangTrust: the ways a bind trusts an advertisement, as clevis
// encrypt tang: an "adv" object or file (trusted as given), a "thp" that
// signed the advertisement the server sends, or TrustTang; without them,
// ErrUntrusted naming the signing key; an advertisement whose signature
// does not verify is refused.
func TestClevisTangTrust(t *testing.T) {
	ft := newFakeTang(t)
	srv := httptest.NewServer(ft)
	defer srv.Close()
	ctx := context.Background()
	sigThp := (&ecJWK{Kty: "EC", Crv: "P-521", X: jwkOf(&ft.sig.PublicKey)["x"].(string), Y: jwkOf(&ft.sig.PublicKey)["y"].(string)}).thumbprint(crypto.SHA256)
	file := t.TempDir() + "/adv.jws"
	if err := os.WriteFile(file, ft.adv, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg   string
		trust bool
		want  error
	}{
		"adv-object":   {string(ft.cfg(srv.URL)), false, nil},
		"adv-file":     {`{"url":"` + srv.URL + `","adv":"` + file + `"}`, false, nil},
		"thp":          {`{"url":"` + srv.URL + `","thp":"` + sigThp + `"}`, false, nil},
		"trust":        {`{"url":"` + srv.URL + `"}`, true, nil},
		"untrusted":    {`{"url":"` + srv.URL + `"}`, false, ErrUntrusted},
		"no-url":       {`{"adv":"` + file + `"}`, false, blkcrypt.ErrInvalidOptions},
		"missing-file": {`{"url":"` + srv.URL + `","adv":"` + file + `.gone"}`, false, blkcrypt.ErrInvalidOptions},
		"bad-scheme":   {`{"url":"ftp://x","thp":"` + sigThp + `"}`, false, blkcrypt.ErrInvalidOptions},
	} {
		t.Run(name, func(t *testing.T) {
			jwe, err := EncryptClevis(ctx, "tang", []byte(tc.cfg), []byte("v"), ClevisOptions{TrustTang: tc.trust})
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("%v, want %v", err, tc.want)
				}
				if tc.want == ErrUntrusted && !strings.Contains(err.Error(), sigThp) {
					t.Fatalf("the refusal does not name the signing key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pt, err := DecryptClevis(ctx, jwe, ClevisOptions{}); err != nil || string(pt) != "v" {
				t.Fatalf("%q, %v", pt, err)
			}
		})
	}
	// A signature over another payload: the keys no longer verify it.
	var jws map[string]any
	json.Unmarshal(ft.adv, &jws)
	jws["payload"] = base64.RawURLEncoding.EncodeToString([]byte(`{"keys":[` + mustJSON(jwkOf(&ft.sig.PublicKey, "sign", "verify")) + `,` + mustJSON(jwkOf(&ft.sig.PublicKey, "deriveKey")) + `]}`))
	forged := mustJSON(jws)
	if _, err := EncryptClevis(ctx, "tang", []byte(`{"url":"`+srv.URL+`","adv":`+forged+`}`), []byte("v"), ClevisOptions{}); !errors.Is(err, ErrTangAnswer) {
		t.Fatalf("a forged advertisement: %v", err)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
