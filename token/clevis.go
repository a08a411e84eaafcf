package token

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/blkcrypt/blkcrypt"
	jose "github.com/go-jose/go-jose/v4"
)

// TypeClevis is the token type clevis luks bind writes on LUKS2.
const TypeClevis = "clevis"

// Sentinel errors of the clevis pins (with ErrBadToken, ErrUnsupported,
// ErrNoTPM, ErrPCRMismatch and ErrLockout for the tpm2 pin).
var (
	// ErrTangUnreachable: a tang server gave no answer in time (refused,
	// down, no route, or no answer within the timeout).
	ErrTangUnreachable = errors.New("tang server unreachable")
	// ErrTangAnswer: a tang server answered, but not with a usable key
	// (an error status, not a JWK, a point off the curve, or a key that
	// does not decrypt the JWE: another server at that address).
	ErrTangAnswer = errors.New("bad answer from the tang server")
	// ErrThreshold: an sss pin decrypted fewer of its shares than its
	// threshold needs (the message names each share's failure).
	ErrThreshold = errors.New("threshold not met")
	// ErrUntrusted: at bind, the tang server's advertisement is not
	// trusted (give its thumbprint "thp", the advertisement "adv", or
	// ClevisOptions.TrustTang, clevis's -y).
	ErrUntrusted = errors.New("the tang advertisement is not trusted")
)

// DefaultTangTimeout bounds one exchange with a tang server when
// ClevisOptions.TangTimeout is zero. clevis (curl) waits without bound;
// an unlock that may fall back to a passphrase prompt must not.
const DefaultTangTimeout = 10 * time.Second

// Bounds on hostile input: a clevis JWE nests sss pins at most
// maxClevisDepth deep, with at most maxShares shares each; a tang answer
// or advertisement is at most maxTangBody bytes.
const (
	maxClevisDepth = 8
	maxShares      = 64
	maxTangBody    = 64 << 10
	maxJWE         = 4 << 20 // the largest LUKS2 metadata area
)

// ClevisOptions choose how the clevis pins reach their TPM and tang
// servers.
type ClevisOptions struct {
	// TPM2Device is the tpm2 pin's TPM in systemd's (and tpm2-tools')
	// spelling; "" is /dev/tpmrm0, as clevis without TPM2TOOLS_TCTI.
	TPM2Device string
	// TangTimeout bounds each exchange with a tang server (connection,
	// request and answer); zero is DefaultTangTimeout. The context bounds
	// the whole unlock as well.
	TangTimeout time.Duration
	// HTTPClient talks to tang servers; nil is a client that honours the
	// proxy environment, as curl does, and follows no redirect.
	HTTPClient *http.Client
	// TrustTang makes a bind trust the advertisement a tang server sends
	// when the configuration gives neither "thp" nor "adv" (clevis
	// encrypt tang -y). Unlocking never needs it: the advertisement is
	// in the JWE.
	TrustTang bool
}

func (o ClevisOptions) tangTimeout() time.Duration {
	if o.TangTimeout > 0 {
		return o.TangTimeout
	}
	return DefaultTangTimeout
}

func (o ClevisOptions) httpClient() *http.Client {
	if o.HTTPClient != nil {
		return o.HTTPClient
	}
	return &http.Client{
		Transport: http.DefaultTransport,
		// curl -sfg, as clevis calls it, does not follow redirects.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ClevisToken is a parsed clevis LUKS2 token: the keyslots it opens and
// its JWE in the compact serialization clevis decrypt reads.
type ClevisToken struct {
	Keyslots []int
	// JWE is the compact serialization of the token's flattened JWE.
	JWE string
	// Pin is the outer pin ("tang", "tpm2", "sss", …).
	Pin string
}

// flatJWE is the flattened JSON serialization clevis stores ("jose jwe
// fmt" of the compact form).
type flatJWE struct {
	Protected    *string         `json:"protected"`
	EncryptedKey string          `json:"encrypted_key"`
	IV           string          `json:"iv"`
	Ciphertext   string          `json:"ciphertext"`
	Tag          string          `json:"tag"`
	Header       json.RawMessage `json:"header"`
	Unprotected  json.RawMessage `json:"unprotected"`
	AAD          json.RawMessage `json:"aad"`
}

// ParseClevisToken parses a clevis token's JSON (as Tokens returns it):
// its keyslots and its JWE, whose protected header must name a pin. The
// pins' own fields are checked when the JWE is decrypted. Every failure
// is ErrBadToken or ErrUnsupported with a one-line reason.
func ParseClevisToken(js []byte) (*ClevisToken, error) {
	var m map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(js)).Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: token JSON: %v", ErrBadToken, oneLine(err))
	}
	if m == nil {
		return nil, fmt.Errorf("%w: token JSON is not an object", ErrBadToken)
	}
	var typ string
	if err := field(m, "type", &typ, true); err != nil {
		return nil, err
	}
	if typ != TypeClevis {
		return nil, fmt.Errorf("%w: token type %q is not %s", ErrBadToken, typ, TypeClevis)
	}
	t := &ClevisToken{}
	var err error
	if t.Keyslots, err = keyslots(m); err != nil {
		return nil, err
	}
	var f flatJWE
	if err := field(m, "jwe", &f, true); err != nil {
		return nil, err
	}
	if f.Protected == nil || *f.Protected == "" {
		return nil, fmt.Errorf("%w: field \"jwe\": no protected header", ErrBadToken)
	}
	for name, raw := range map[string]json.RawMessage{"header": f.Header, "unprotected": f.Unprotected, "aad": f.AAD} {
		if raw != nil && !emptyValue(raw) {
			return nil, fmt.Errorf("%w: field \"jwe\": member %q (clevis writes only a protected header)", ErrUnsupported, name)
		}
	}
	parts := []string{*f.Protected, f.EncryptedKey, f.IV, f.Ciphertext, f.Tag}
	for i, p := range parts {
		if !isB64URL(p) {
			return nil, fmt.Errorf("%w: field \"jwe\": member %q is not base64url", ErrBadToken, []string{"protected", "encrypted_key", "iv", "ciphertext", "tag"}[i])
		}
	}
	t.JWE = strings.Join(parts, ".")
	if len(t.JWE) > maxJWE {
		return nil, fmt.Errorf("%w: field \"jwe\": %d bytes", ErrBadToken, len(t.JWE))
	}
	h, err := parseProtected(t.JWE)
	if err != nil {
		return nil, err
	}
	t.Pin = h.Clevis.Pin
	return t, nil
}

func isB64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// clevisHeader is the protected header of a clevis JWE: the JOSE fields
// the pins use and the "clevis" member naming the pin and its data.
type clevisHeader struct {
	Alg    string          `json:"alg"`
	Enc    string          `json:"enc"`
	Kid    string          `json:"kid"`
	Epk    json.RawMessage `json:"epk"`
	Apu    string          `json:"apu"`
	Apv    string          `json:"apv"`
	Clevis struct {
		Pin  string         `json:"pin"`
		Tang *tangHeader    `json:"tang"`
		TPM2 *tpm2PinHeader `json:"tpm2"`
		SSS  *sssHeader     `json:"sss"`
	} `json:"clevis"`
}

// parseProtected decodes a compact JWE's protected header.
func parseProtected(compact string) (*clevisHeader, error) {
	parts := strings.Split(compact, ".")
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: the JWE has %d parts, not 5", ErrBadToken, len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%w: the JWE's protected header is not base64url", ErrBadToken)
	}
	var h clevisHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("%w: the JWE's protected header: %v", ErrBadToken, oneLine(err))
	}
	if h.Clevis.Pin == "" {
		return nil, fmt.Errorf("%w: the JWE's protected header names no clevis pin", ErrBadToken)
	}
	return &h, nil
}

// DecryptClevis decrypts a clevis JWE (compact serialization) as clevis
// decrypt does, through its pin: tang (a McCallum-Relyea exchange with
// the server the header names), tpm2 (the key sealed in the TPM) or sss
// (a threshold of nested pins). The caller wipes the plaintext.
func DecryptClevis(ctx context.Context, jwe string, o ClevisOptions) ([]byte, error) {
	return o.decrypt(ctx, jwe, 0)
}

func (o ClevisOptions) decrypt(ctx context.Context, jwe string, depth int) ([]byte, error) {
	if depth > maxClevisDepth {
		return nil, fmt.Errorf("%w: sss pins nested deeper than %d", ErrBadToken, maxClevisDepth)
	}
	if len(jwe) > maxJWE {
		return nil, fmt.Errorf("%w: a JWE of %d bytes", ErrBadToken, len(jwe))
	}
	h, err := parseProtected(jwe)
	if err != nil {
		return nil, err
	}
	switch h.Clevis.Pin {
	case "tang":
		return o.decryptTang(ctx, jwe, h)
	case "tpm2":
		return o.decryptTPM2(ctx, jwe, h)
	case "sss":
		return o.decryptSSS(ctx, jwe, h, depth)
	}
	return nil, fmt.Errorf("%w: clevis pin %q is not built in (tang, tpm2 and sss are)", ErrUnsupported, h.Clevis.Pin)
}

// CheckClevis checks a clevis JWE (compact serialization) as far as it
// can without a TPM or the network: its protected header, each pin's
// fields (the tang advertisement and keys, the tpm2 blobs and policy,
// the sss threshold and field), through nested sss pins. Decryption may
// still fail; a JWE that fails here cannot decrypt.
func CheckClevis(jwe string) error { return checkClevis(jwe, 0) }

func checkClevis(jwe string, depth int) error {
	if depth > maxClevisDepth {
		return fmt.Errorf("%w: sss pins nested deeper than %d", ErrBadToken, maxClevisDepth)
	}
	if len(jwe) > maxJWE {
		return fmt.Errorf("%w: a JWE of %d bytes", ErrBadToken, len(jwe))
	}
	h, err := parseProtected(jwe)
	if err != nil {
		return err
	}
	switch h.Clevis.Pin {
	case "tang":
		_, err = prepareTang(h)
	case "tpm2":
		_, err = prepareTPM2(h)
	case "sss":
		var s *sssHeader
		if s, _, _, err = prepareSSS(h); err == nil {
			for i, child := range s.JWE {
				if err := checkClevis(child, depth+1); err != nil {
					return fmt.Errorf("sss share %d: %w", i+1, err)
				}
			}
		}
	default:
		err = fmt.Errorf("%w: clevis pin %q is not built in (tang, tpm2 and sss are)", ErrUnsupported, h.Clevis.Pin)
	}
	return err
}

// contentEncryptions are the JWE "enc" values accepted; clevis writes
// A256GCM.
var contentEncryptions = []jose.ContentEncryption{
	jose.A128GCM, jose.A192GCM, jose.A256GCM, jose.A128CBC_HS256, jose.A192CBC_HS384, jose.A256CBC_HS512,
}

// openJWE decrypts the compact JWE with key (a content key for "dir",
// or a cekDecrypter for ECDH-ES whose exchange was done already).
func openJWE(jwe string, alg jose.KeyAlgorithm, key any) ([]byte, error) {
	obj, err := jose.ParseEncryptedCompact(jwe, []jose.KeyAlgorithm{alg}, contentEncryptions)
	if err != nil {
		return nil, fmt.Errorf("%w: the JWE: %v", ErrBadToken, oneLine(err))
	}
	pt, err := obj.Decrypt(key)
	if err != nil {
		return nil, fmt.Errorf("%w: the JWE does not decrypt with the pin's key", ErrBadToken)
	}
	return pt, nil
}

// cekDecrypter hands go-jose a content key derived outside it (the tang
// exchange): its ECDH-ES needs a private key, which tang keeps.
type cekDecrypter struct{ cek []byte }

func (c cekDecrypter) DecryptKey([]byte, jose.Header) ([]byte, error) {
	return append([]byte(nil), c.cek...), nil
}

// sealJWE encrypts plaintext under the content key (alg "dir", enc
// A256GCM) with the clevis header member, as clevis's tpm2 and sss pins
// do, and returns the compact serialization.
func sealJWE(key, plaintext []byte, clevis any) (string, error) {
	enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.DIRECT, Key: key},
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

// EncryptClevis encrypts plaintext with a clevis pin and its JSON
// configuration, as clevis encrypt PIN CONFIG does: tang ({"url", "thp",
// "adv"}), tpm2 ({"hash", "key", "pcr_bank", "pcr_ids", "pcr_digest"}) or
// sss ({"t", "pins": {PIN: CONFIG or [CONFIG, …]}}). It returns the
// compact JWE.
func EncryptClevis(ctx context.Context, pin string, config []byte, plaintext []byte, o ClevisOptions) (string, error) {
	return o.encrypt(ctx, pin, config, plaintext, 0)
}

func (o ClevisOptions) encrypt(ctx context.Context, pin string, config []byte, plaintext []byte, depth int) (string, error) {
	if depth > maxClevisDepth {
		return "", fmt.Errorf("%w: sss pins nested deeper than %d", blkcrypt.ErrInvalidOptions, maxClevisDepth)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(config, &cfg); err != nil || cfg == nil {
		return "", fmt.Errorf("%w: the %s configuration is not a JSON object", blkcrypt.ErrInvalidOptions, pin)
	}
	switch pin {
	case "tang":
		return o.encryptTang(ctx, cfg, plaintext)
	case "tpm2":
		return o.encryptTPM2(ctx, cfg, plaintext)
	case "sss":
		return o.encryptSSS(ctx, cfg, plaintext, depth)
	}
	return "", fmt.Errorf("%w: clevis pin %q is not built in (tang, tpm2 and sss are)", ErrUnsupported, pin)
}

// ClevisPassphrase is what clevis luks unlock and clevis luks pass make
// of a decrypted JWE: the plaintext less its trailing newlines (clevis
// reads it through a shell command substitution).
func ClevisPassphrase(plaintext []byte) []byte {
	return bytes.TrimRight(plaintext, "\n")
}

// unlockClevis decrypts a clevis token's JWE and returns the passphrase.
func unlockClevis(ctx context.Context, id int, tok *ClevisToken, o ClevisOptions) ([]byte, error) {
	pt, err := o.decrypt(ctx, tok.JWE, 0)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return nil, fmt.Errorf("token %d (%s, pin %s): %w", id, TypeClevis, tok.Pin, err)
	}
	pass := ClevisPassphrase(pt)
	if len(pass) == 0 {
		wipe(pt)
		return nil, fmt.Errorf("token %d (%s, pin %s): %w: the decrypted passphrase is empty", id, TypeClevis, tok.Pin, ErrBadToken)
	}
	return pass, nil
}

// ClevisBindOptions choose how BindClevis authorises itself and what it
// writes.
type ClevisBindOptions struct {
	// Existing (a passphrase of the volume) authorises the new keyslot;
	// Keyslot restricts it to one keyslot. PBKDF is the new keyslot's
	// KDF; the zero value is what clevis luks bind sets: PBKDF2 (SHA-256)
	// at 1000 iterations, for a random passphrase needs no stretching.
	EnrollOptions
	ClevisOptions
	// NewKeyslot is the keyslot to create (clevis's -s); nil takes the
	// first free one.
	NewKeyslot *int
	// TokenID is the token id (clevis's -t); nil takes the first free.
	TokenID *int
}

// BindClevis binds the LUKS2 volume to a clevis pin as clevis luks bind
// -d DEV PIN CONFIG does: a fresh random passphrase, encrypted with the
// pin into a JWE, in a new keyslot, and the token
// {"type":"clevis","keyslots":["N"],"jwe":{…}} naming it. Unlike clevis,
// the keyslot and the token are one header update (AddKeyWithToken), so a
// crash leaves neither or both. clevis luks pass and clevis luks unlock
// read the result. It returns the keyslot and the token id.
func BindClevis(ctx context.Context, h *blkcrypt.LUKS, pin string, config []byte, o ClevisBindOptions) (slot, tokenID int, err error) {
	// 256 bits in the base64url alphabet: a printable passphrase, as
	// clevis's pwmake makes one, that no shell or keyboard mangles.
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return -1, -1, err
	}
	pass := make([]byte, base64.RawURLEncoding.EncodedLen(len(raw)))
	base64.RawURLEncoding.Encode(pass, raw[:])
	wipe(raw[:])
	defer wipe(pass)
	jwe, err := o.encrypt(ctx, pin, config, pass, 0)
	if err != nil {
		return -1, -1, err
	}
	parts := strings.Split(jwe, ".")
	if len(parts) != 5 {
		return -1, -1, fmt.Errorf("clevis %s: the JWE has %d parts", pin, len(parts))
	}
	// The fields in clevis's order; the keyslot is appended to the empty
	// array by the header update that creates it.
	tok, err := json.Marshal(struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
		JWE      struct {
			Ciphertext   string `json:"ciphertext"`
			EncryptedKey string `json:"encrypted_key"`
			IV           string `json:"iv"`
			Protected    string `json:"protected"`
			Tag          string `json:"tag"`
		} `json:"jwe"`
	}{Type: TypeClevis, Keyslots: []string{}, JWE: struct {
		Ciphertext   string `json:"ciphertext"`
		EncryptedKey string `json:"encrypted_key"`
		IV           string `json:"iv"`
		Protected    string `json:"protected"`
		Tag          string `json:"tag"`
	}{parts[3], parts[1], parts[2], parts[0], parts[4]}})
	if err != nil {
		return -1, -1, err
	}
	ko := blkcrypt.KeyOptions{Keyslot: o.Keyslot, PBKDF: o.PBKDF, NewKeyslot: o.NewKeyslot}
	if ko.PBKDF.Type == "" && ko.PBKDF.Hash == "" && ko.PBKDF.Iterations == 0 && ko.PBKDF.IterTime == 0 {
		ko.PBKDF = blkcrypt.PBKDFOptions{Type: "pbkdf2", Hash: "sha256", Iterations: 1000}
	}
	return h.AddKeyWithToken(ctx, o.Existing, pass, tok, ko, blkcrypt.TokenOptions{ID: o.TokenID})
}
