package token

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	jose "github.com/go-jose/go-jose/v4"
	josecipher "github.com/go-jose/go-jose/v4/cipher"
)

// The tang pin (clevis's src/pins/tang, latchset/tang). Binding encrypts
// with ECDH-ES to the server's exchange key S = s·G: an ephemeral key
// E = e·G goes into the JWE header, and the content key comes from the
// shared point e·S. Unlocking never learns s, nor sends E: it sends
// X = E + T for a fresh T = t·G, the server answers Y = s·X, and
// Y − t·S = s·E is the shared point (the McCallum-Relyea exchange). The
// server sees only a random point; an eavesdropper learns nothing.

// tangHeader is clevis.tang in a tang JWE's protected header.
type tangHeader struct {
	URL string          `json:"url"`
	Adv json.RawMessage `json:"adv"`
}

// ecJWK is a public EC JWK as tang writes it; the members stay as
// written, for the thumbprint.
type ecJWK struct {
	Kty    string   `json:"kty"`
	Crv    string   `json:"crv"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
	D      string   `json:"d"`
	Alg    string   `json:"alg"`
	KeyOps []string `json:"key_ops"`
}

// point is a validated point of c.
type point struct {
	c    elliptic.Curve
	x, y *big.Int
}

func curveByName(crv string) (elliptic.Curve, ecdh.Curve, bool) {
	switch crv {
	case "P-256":
		return elliptic.P256(), ecdh.P256(), true
	case "P-384":
		return elliptic.P384(), ecdh.P384(), true
	case "P-521":
		return elliptic.P521(), ecdh.P521(), true
	}
	return nil, nil, false
}

func coordLen(c elliptic.Curve) int { return (c.Params().BitSize + 7) / 8 }

// point decodes and validates the JWK's public point: the curve, the
// coordinates' length, and that it lies on the curve (crypto/ecdh's
// check; elliptic's arithmetic below panics on a point off the curve).
func (k *ecJWK) point() (*point, error) {
	if k.Kty != "EC" {
		return nil, fmt.Errorf("key type %q, not EC", k.Kty)
	}
	c, ec, ok := curveByName(k.Crv)
	if !ok {
		return nil, fmt.Errorf("curve %q (P-256, P-384 and P-521 are)", k.Crv)
	}
	n := coordLen(c)
	x, errX := base64.RawURLEncoding.DecodeString(k.X)
	y, errY := base64.RawURLEncoding.DecodeString(k.Y)
	if errX != nil || errY != nil || len(x) != n || len(y) != n {
		return nil, fmt.Errorf("coordinates are not %d-byte base64url", n)
	}
	if _, err := ec.NewPublicKey(append(append([]byte{4}, x...), y...)); err != nil {
		return nil, errors.New("the point is not on the curve")
	}
	return &point{c, new(big.Int).SetBytes(x), new(big.Int).SetBytes(y)}, nil
}

func (p *point) jwk() ([]byte, error) {
	n := coordLen(p.c)
	return json.Marshal(map[string]string{
		"kty": "EC", "crv": p.c.Params().Name,
		"x": base64.RawURLEncoding.EncodeToString(p.x.FillBytes(make([]byte, n))),
		"y": base64.RawURLEncoding.EncodeToString(p.y.FillBytes(make([]byte, n))),
	})
}

// thumbprint is the RFC 7638 thumbprint of an EC JWK with hash h.
func (k *ecJWK) thumbprint(h crypto.Hash) string {
	js, _ := json.Marshal(struct {
		Crv string `json:"crv"`
		Kty string `json:"kty"`
		X   string `json:"x"`
		Y   string `json:"y"`
	}{k.Crv, k.Kty, k.X, k.Y})
	var sum []byte
	if h == crypto.SHA1 {
		s := sha1.Sum(js)
		sum = s[:]
	} else {
		s := sha256.Sum256(js)
		sum = s[:]
	}
	return base64.RawURLEncoding.EncodeToString(sum)
}

// matches reports whether kid is the key's thumbprint: SHA-256, or SHA-1
// as older tang servers computed them (clevis accepts both).
func (k *ecJWK) matches(kid string) bool {
	return kid != "" && (k.thumbprint(crypto.SHA256) == kid || k.thumbprint(crypto.SHA1) == kid)
}

func hasOp(ops []string, op string) bool { return slices.Contains(ops, op) }

// parseJWKS parses {"keys":[…]} into the keys' EC view (other key types
// are kept with their kty, to be skipped).
func parseJWKS(raw []byte) ([]ecJWK, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("not a JWK set: %v", oneLine(err))
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("no keys")
	}
	out := make([]ecJWK, 0, len(set.Keys))
	for _, r := range set.Keys {
		var k ecJWK
		if err := json.Unmarshal(r, &k); err != nil {
			return nil, fmt.Errorf("a key: %v", oneLine(err))
		}
		out = append(out, k)
	}
	return out, nil
}

// tangPrep is a tang JWE's header, checked: everything the exchange
// needs, found without the network.
type tangPrep struct {
	where, rec string // "tang URL" for messages; the recovery URL
	epk, srv   *point
	crv        string
	enc        string
	keyLen     int
	apu, apv   []byte
}

// prepareTang checks a tang JWE's header offline.
func prepareTang(h *clevisHeader) (*tangPrep, error) {
	t := h.Clevis.Tang
	if t == nil || t.URL == "" {
		return nil, fmt.Errorf("%w: tang pin: header clevis.tang.url missing", ErrBadToken)
	}
	p := &tangPrep{where: "tang " + t.URL, enc: h.Enc}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrBadToken, p.where}, a...)...)
	}
	if h.Alg != string(jose.ECDH_ES) {
		return nil, fmt.Errorf("%w: %s: key algorithm %q (clevis writes ECDH-ES)", ErrUnsupported, p.where, h.Alg)
	}
	if h.Kid == "" || !isB64URL(h.Kid) {
		return nil, bad("header kid missing or not a thumbprint")
	}
	var epkJWK ecJWK
	if len(h.Epk) == 0 || json.Unmarshal(h.Epk, &epkJWK) != nil {
		return nil, bad("header epk missing or not a JWK")
	}
	var err error
	if p.epk, err = epkJWK.point(); err != nil {
		return nil, bad("header epk: %v", err)
	}
	p.crv = epkJWK.Crv
	if len(t.Adv) == 0 {
		return nil, bad("header clevis.tang.adv missing")
	}
	adv, err := parseJWKS(t.Adv)
	if err != nil {
		return nil, bad("header clevis.tang.adv: %v", err)
	}
	for i := range adv {
		if adv[i].matches(h.Kid) {
			if p.srv, err = adv[i].point(); err != nil {
				return nil, bad("the advertised key %s: %v", h.Kid, err)
			}
			break
		}
	}
	if p.srv == nil {
		return nil, bad("no key in clevis.tang.adv has the thumbprint %s", h.Kid)
	}
	if p.srv.c != p.epk.c {
		return nil, bad("the server key is on %s, the JWE's epk on %s", p.srv.c.Params().Name, p.epk.c.Params().Name)
	}
	var ok bool
	if p.keyLen, ok = encKeyLen(h.Enc); !ok {
		return nil, fmt.Errorf("%w: %s: content encryption %q", ErrUnsupported, p.where, h.Enc)
	}
	var errU, errV error
	p.apu, errU = base64.RawURLEncoding.DecodeString(h.Apu)
	p.apv, errV = base64.RawURLEncoding.DecodeString(h.Apv)
	if errU != nil || errV != nil {
		return nil, bad("header apu or apv is not base64url")
	}
	if p.rec, err = tangURL(t.URL, "rec", h.Kid); err != nil {
		return nil, bad("%v", err)
	}
	return p, nil
}

// answer parses and checks the server's answer: a public point on the
// JWE's curve.
func (p *tangPrep) answer(body []byte) (*point, error) {
	var rep ecJWK
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("%w: %s: the answer is not a JWK", ErrTangAnswer, p.where)
	}
	if rep.Crv != p.crv {
		return nil, fmt.Errorf("%w: %s: the answer is a key on %q, not %s", ErrTangAnswer, p.where, rep.Crv, p.crv)
	}
	y, err := rep.point()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: the answer: %v", ErrTangAnswer, p.where, err)
	}
	return y, nil
}

// key finishes the exchange: Y − t·S is the shared point s·E, and the
// Concat KDF of its x coordinate is the content key.
func (p *tangPrep) key(y *point, scalar []byte) ([]byte, error) {
	c := p.srv.c
	tsx, tsy := c.ScalarMult(p.srv.x, p.srv.y, scalar)
	negY := new(big.Int).Sub(c.Params().P, tsy)
	negY.Mod(negY, c.Params().P)
	zx, zy := c.Add(y.x, y.y, tsx, negY)
	if zx.Sign() == 0 && zy.Sign() == 0 {
		return nil, fmt.Errorf("%w: %s: the answer gives the point at infinity", ErrTangAnswer, p.where)
	}
	z := zx.FillBytes(make([]byte, coordLen(c)))
	defer wipe(z)
	return concatKDF(z, p.enc, p.apu, p.apv, p.keyLen), nil
}

// decryptTang recovers the content key through the tang server and
// decrypts the JWE with it.
func (o ClevisOptions) decryptTang(ctx context.Context, jwe string, h *clevisHeader) ([]byte, error) {
	p, err := prepareTang(h)
	if err != nil {
		return nil, err
	}
	_, ec, _ := curveByName(p.crv)
	eph, err := ec.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	tp := eph.PublicKey().Bytes() // 04 || x || y
	n := coordLen(p.epk.c)
	// crypto/elliptic's point arithmetic is deprecated for ECDH, which
	// crypto/ecdh does; the exchange needs point addition, which only
	// it offers (constant time on these curves since Go 1.19). Every
	// point it is given was checked to be on the curve.
	xx, xy := p.epk.c.Add(p.epk.x, p.epk.y, new(big.Int).SetBytes(tp[1:1+n]), new(big.Int).SetBytes(tp[1+n:]))
	req, err := (&point{p.epk.c, xx, xy}).jwk()
	if err != nil {
		return nil, err
	}
	body, err := o.tangExchange(ctx, http.MethodPost, p.rec, req, p.where)
	if err != nil {
		return nil, err
	}
	y, err := p.answer(body)
	if err != nil {
		return nil, err
	}
	scalar := eph.Bytes()
	defer wipe(scalar)
	cek, err := p.key(y, scalar)
	if err != nil {
		return nil, err
	}
	defer wipe(cek)
	pt, err := openJWE(jwe, jose.ECDH_ES, cekDecrypter{cek})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: its key does not decrypt the JWE (another server, or rotated keys)", ErrTangAnswer, p.where)
	}
	return pt, nil
}

// concatKDF is JWA's ECDH-ES key derivation (NIST SP 800-56A Concat KDF
// with SHA-256) for the "enc" algorithm id.
func concatKDF(z []byte, enc string, apu, apv []byte, keyLen int) []byte {
	lp := func(b []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
		return append(out, b...)
	}
	supPub := binary.BigEndian.AppendUint32(nil, uint32(keyLen*8))
	r := josecipher.NewConcatKDF(crypto.SHA256, z, lp([]byte(enc)), lp(apu), lp(apv), supPub, nil)
	key := make([]byte, keyLen)
	_, _ = io.ReadFull(r, key)
	return key
}

func encKeyLen(enc string) (int, bool) {
	switch enc {
	case "A128GCM":
		return 16, true
	case "A192GCM":
		return 24, true
	case "A256GCM", "A128CBC-HS256":
		return 32, true
	case "A192CBC-HS384":
		return 48, true
	case "A256CBC-HS512":
		return 64, true
	}
	return 0, false
}

// tangURL is clevis's "$url/rec/$kid" (or "/adv/$thp"): the base URL as
// written, then the path. Only http and https are spoken.
func tangURL(base, what, arg string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("URL %q: want http:// or https:// and a host", base)
	}
	return base + "/" + what + "/" + arg, nil
}

// tangExchange sends one request to a tang server within the timeout and
// returns the body of a 200 answer. A failure to connect or to answer in
// time is ErrTangUnreachable; any other answer is ErrTangAnswer.
func (o ClevisOptions) tangExchange(ctx context.Context, method, u string, body []byte, where string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.tangTimeout())
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadToken, where, oneLine(err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/jwk+json")
	}
	fail := func(why string) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", where, ctx.Err())
		}
		if rctx.Err() != nil {
			return fmt.Errorf("%w: %s: no answer within %v", ErrTangUnreachable, where, o.tangTimeout())
		}
		return fmt.Errorf("%w: %s: %s", ErrTangUnreachable, where, why)
	}
	rsp, err := o.httpClient().Do(req)
	if err != nil {
		// The *url.Error's own text repeats the method and the URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fail(oneLine(err))
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(rsp.Body, maxTangBody+1))
	if err != nil {
		return nil, fail("reading the answer: " + oneLine(err))
	}
	if rsp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s: answered %q", ErrTangAnswer, where, rsp.Status)
	}
	if len(b) > maxTangBody {
		return nil, fmt.Errorf("%w: %s: an answer over %d bytes", ErrTangAnswer, where, maxTangBody)
	}
	return b, nil
}

// encryptTang is clevis encrypt tang: fetch (or take) the advertisement,
// check its signatures and that a trusted key made them, and encrypt with
// ECDH-ES to its exchange key.
func (o ClevisOptions) encryptTang(ctx context.Context, cfg map[string]json.RawMessage, plaintext []byte) (string, error) {
	inval := func(format string, a ...any) error {
		return fmt.Errorf("%w: tang: "+format, append([]any{blkcrypt.ErrInvalidOptions}, a...)...)
	}
	var base, thp string
	if err := json.Unmarshal(cfg["url"], &base); err != nil || base == "" {
		return "", inval("the configuration needs a \"url\" string")
	}
	if raw, ok := cfg["thp"]; ok {
		if err := json.Unmarshal(raw, &thp); err != nil {
			return "", inval("\"thp\" is not a string")
		}
	}
	where := "tang " + base
	var jws []byte
	trusted := o.TrustTang
	if raw, ok := cfg["adv"]; ok {
		var file string
		switch {
		case json.Unmarshal(raw, &file) == nil:
			b, err := readSmallFile(file)
			if err != nil {
				return "", inval("advertisement file: %v", err)
			}
			jws = b
		case bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")):
			jws = raw
		default:
			return "", inval("\"adv\" is neither a file name nor an advertisement")
		}
		if thp == "" {
			thp = "any"
		}
	} else {
		if !isB64URL(thp) {
			return "", inval("\"thp\" is not a thumbprint")
		}
		u, err := tangURL(base, "adv", thp)
		if err != nil {
			return "", inval("%v", err)
		}
		if jws, err = o.tangExchange(ctx, http.MethodGet, u, nil, where); err != nil {
			return "", err
		}
	}
	sig, err := jose.ParseSigned(string(jws), []jose.SignatureAlgorithm{jose.ES256, jose.ES384, jose.ES512})
	if err != nil {
		return "", fmt.Errorf("%w: %s: the advertisement is not a JWS: %v", ErrTangAnswer, where, oneLine(err))
	}
	payload := sig.UnsafePayloadWithoutVerification()
	keys, err := parseJWKS(payload)
	if err != nil {
		return "", fmt.Errorf("%w: %s: the advertisement: %v", ErrTangAnswer, where, err)
	}
	// Every signing key the advertisement lists must have signed it
	// (jose jws ver -a).
	var signers []string
	for _, k := range keys {
		if !hasOp(k.KeyOps, "verify") {
			continue
		}
		var jwk jose.JSONWebKey
		raw, _ := json.Marshal(map[string]string{"kty": k.Kty, "crv": k.Crv, "x": k.X, "y": k.Y})
		if err := jwk.UnmarshalJSON(raw); err != nil {
			return "", fmt.Errorf("%w: %s: a signing key: %v", ErrTangAnswer, where, oneLine(err))
		}
		if _, _, _, err := sig.VerifyMulti(jwk); err != nil {
			return "", fmt.Errorf("%w: %s: the advertisement is not signed by its key %s", ErrTangAnswer, where, k.thumbprint(crypto.SHA256))
		}
		signers = append(signers, k.thumbprint(crypto.SHA256))
		if thp != "" && thp != "any" && k.matches(thp) {
			trusted = true
		}
	}
	if len(signers) == 0 {
		return "", fmt.Errorf("%w: %s: the advertisement is missing signatures", ErrTangAnswer, where)
	}
	switch {
	case thp == "any":
	case thp != "" && !trusted:
		return "", fmt.Errorf("%w: %s: the trusted key %s did not sign the advertisement", ErrUntrusted, where, thp)
	case thp == "" && !trusted:
		return "", fmt.Errorf("%w: %s: give \"thp\" (the server signs with %s) or \"adv\"", ErrUntrusted, where, strings.Join(signers, ", "))
	}
	var exc *ecJWK
	for i := range keys {
		if hasOp(keys[i].KeyOps, "deriveKey") {
			exc = &keys[i]
			break
		}
	}
	if exc == nil {
		return "", fmt.Errorf("%w: %s: the advertisement has no exchange key", ErrTangAnswer, where)
	}
	p, err := exc.point()
	if err != nil {
		return "", fmt.Errorf("%w: %s: the exchange key: %v", ErrTangAnswer, where, err)
	}
	var advObj json.RawMessage
	if err := json.Unmarshal(payload, &advObj); err != nil {
		return "", fmt.Errorf("%w: %s: the advertisement: %v", ErrTangAnswer, where, oneLine(err))
	}
	clevis := map[string]any{"pin": "tang", "tang": map[string]any{"url": base, "adv": advObj}}
	enc, err := jose.NewEncrypter(jose.A256GCM,
		jose.Recipient{Algorithm: jose.ECDH_ES, Key: &ecdsa.PublicKey{Curve: p.c, X: p.x, Y: p.y}, KeyID: exc.thumbprint(crypto.SHA256)},
		(&jose.EncrypterOptions{}).WithHeader("clevis", clevis))
	if err != nil {
		return "", err
	}
	obj, err := enc.Encrypt(plaintext)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}

// readSmallFile reads an advertisement file, refusing one over
// maxTangBody bytes.
func readSmallFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTangBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTangBody {
		return nil, fmt.Errorf("%s: over %d bytes", name, maxTangBody)
	}
	return b, nil
}
