package token

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/blkcrypt/blkcrypt"
)

// TypePKCS11 is the token type systemd-cryptenroll --pkcs11-token-uri
// writes: {"type":"systemd-pkcs11","keyslots":[…],"pkcs11-uri":URI,
// "pkcs11-key":base64}. pkcs11-key is a random secret encrypted
// (RSA PKCS#1 v1.5) to the public key of the token's X.509 certificate;
// the keyslot's passphrase is the standard base64 of the secret, which
// the token's private key (found by the URI) decrypts after C_Login.
const TypePKCS11 = "systemd-pkcs11"

// DefaultPKCS11Module is the module loaded for a URI without
// module-path: p11-kit's proxy, which reaches every module registered
// with p11-kit (as systemd, which loads them through libp11-kit, does).
const DefaultPKCS11Module = "p11-kit-proxy.so"

var (
	// ErrPKCS11NotBuilt: this build has no PKCS#11 support (cgo behind
	// the pkcs11 build tag). Unlock skips systemd-pkcs11 tokens unless
	// they are asked for by id or type.
	ErrPKCS11NotBuilt = errors.New("built without PKCS#11 support (build with -tags pkcs11)")
	// ErrPINLocked: the security token has locked its user PIN.
	ErrPINLocked = errors.New("the token's PIN is locked")
)

// PKCS11Token is a parsed systemd-pkcs11 token.
type PKCS11Token struct {
	Keyslots []int
	URI      string     // as stored
	Parsed   *PKCS11URI // URI, parsed
	Key      []byte     // pkcs11-key: the encrypted secret
}

// maxPKCS11Key bounds pkcs11-key: an RSA-16384 ciphertext is 2048 bytes.
const maxPKCS11Key = 2048

// ParsePKCS11Token parses a systemd-pkcs11 token's JSON. Every failure is
// ErrBadToken or ErrUnsupported with a one-line reason naming the field.
func ParsePKCS11Token(js []byte) (*PKCS11Token, error) {
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
	if typ != TypePKCS11 {
		return nil, fmt.Errorf("%w: token type %q is not %s", ErrBadToken, typ, TypePKCS11)
	}
	for k := range m {
		if strings.HasPrefix(k, "pkcs11") && k != "pkcs11-uri" && k != "pkcs11-key" {
			return nil, fmt.Errorf("%w: unknown field %q", ErrUnsupported, k)
		}
	}
	t := &PKCS11Token{}
	var err error
	if t.Keyslots, err = keyslots(m); err != nil {
		return nil, err
	}
	if err := field(m, "pkcs11-uri", &t.URI, true); err != nil {
		return nil, err
	}
	if t.Parsed, err = ParsePKCS11URI(t.URI); err != nil {
		return nil, fmt.Errorf("%w: field \"pkcs11-uri\": %v", ErrBadToken, err)
	}
	var b64 string
	if err := field(m, "pkcs11-key", &b64, true); err != nil {
		return nil, err
	}
	if base64.StdEncoding.DecodedLen(len(b64)) > maxPKCS11Key+3 {
		return nil, fmt.Errorf("%w: field \"pkcs11-key\": longer than %d bytes", ErrBadToken, maxPKCS11Key)
	}
	if t.Key, err = base64.StdEncoding.DecodeString(b64); err != nil || len(t.Key) == 0 || len(t.Key) > maxPKCS11Key {
		return nil, fmt.Errorf("%w: field \"pkcs11-key\": not base64 of 1..%d bytes", ErrBadToken, maxPKCS11Key)
	}
	return t, nil
}

// The module interface the cgo binding (pkcs11_cgo.go, build tag pkcs11)
// implements; the logic below is plain Go over it.
type (
	p11Info struct {
		Manufacturer, Description string
		Major, Minor              uint8
	}
	p11TokenInfo struct {
		Label, Manufacturer, Model, Serial string
		Flags                              uint64
	}
	p11Slot struct {
		ID                        uint64
		Description, Manufacturer string
		Token                     p11TokenInfo
	}
	// p11Query selects objects: a class (CKO_*), and the URI's id and
	// label when set; decrypt adds CKA_DECRYPT=TRUE, x509 adds
	// CKA_CERTIFICATE_TYPE=CKC_X_509.
	p11Query struct {
		Class         uint64
		ID            []byte
		Label         *string
		Decrypt, X509 bool
	}
	p11Module interface {
		Info() (p11Info, error)
		Slots() ([]p11Slot, error) // slots with a token present
		Open(slot uint64) (p11Session, error)
		Close() error
	}
	p11Session interface {
		TokenInfo() (p11TokenInfo, error)
		Login(pin []byte) error
		Find(q p11Query, max int) ([]uint64, error)
		Value(obj uint64) ([]byte, error) // CKA_VALUE
		DecryptRSAPKCS(obj uint64, in []byte) ([]byte, error)
		Close() error
	}
)

// loadPKCS11 loads and initialises a module by file name or path; nil in
// a build without PKCS#11 support.
var loadPKCS11 func(path string) (p11Module, error)

// PKCS#11 constants used by the logic (values from the PKCS#11 v2.40
// specification).
const (
	ckoCertificate = 1
	ckoPrivateKey  = 3

	ckfLoginRequired     = 0x4
	ckfProtectedAuthPath = 0x100
	ckfTokenInitialized  = 0x400
	ckfUserPINCountLow   = 0x10000
	ckfUserPINFinalTry   = 0x20000
	ckfUserPINLocked     = 0x40000

	ckrPINIncorrect         = 0xa0
	ckrPINLenRange          = 0xa2
	ckrPINLocked            = 0xa4
	ckrUserAlreadyLoggedIn  = 0x100
	ckrPINInvalid           = 0xa1
	ckrCryptokiInitialized  = 0x191
	ckrBufferTooSmall       = 0x150
	ckrTokenNotPresent      = 0xe0
	ckrUserPINNotInitalized = 0x102
)

// p11Error is a PKCS#11 function's failure.
type p11Error struct {
	Func string
	RV   uint64
}

var ckrNames = map[uint64]string{
	0x5: "CKR_GENERAL_ERROR", 0x6: "CKR_FUNCTION_FAILED", 0x7: "CKR_ARGUMENTS_BAD",
	0x20: "CKR_DATA_INVALID", 0x21: "CKR_DATA_LEN_RANGE", 0x30: "CKR_DEVICE_ERROR",
	0x32: "CKR_DEVICE_REMOVED", 0x40: "CKR_ENCRYPTED_DATA_INVALID", 0x41: "CKR_ENCRYPTED_DATA_LEN_RANGE",
	0x60: "CKR_KEY_HANDLE_INVALID", 0x68: "CKR_KEY_FUNCTION_NOT_PERMITTED", 0x70: "CKR_MECHANISM_INVALID",
	0x82: "CKR_OBJECT_HANDLE_INVALID", ckrPINIncorrect: "CKR_PIN_INCORRECT", ckrPINInvalid: "CKR_PIN_INVALID",
	ckrPINLenRange: "CKR_PIN_LEN_RANGE", ckrPINLocked: "CKR_PIN_LOCKED", 0xb3: "CKR_SESSION_HANDLE_INVALID",
	ckrTokenNotPresent: "CKR_TOKEN_NOT_PRESENT", ckrUserAlreadyLoggedIn: "CKR_USER_ALREADY_LOGGED_IN",
	0x101: "CKR_USER_NOT_LOGGED_IN", ckrUserPINNotInitalized: "CKR_USER_PIN_NOT_INITIALIZED",
	ckrBufferTooSmall: "CKR_BUFFER_TOO_SMALL", 0x190: "CKR_CRYPTOKI_NOT_INITIALIZED",
}

func (e *p11Error) Error() string {
	if n, ok := ckrNames[e.RV]; ok {
		return e.Func + ": " + n
	}
	return fmt.Sprintf("%s: CKR %#x", e.Func, e.RV)
}

func rvOf(err error) uint64 {
	var pe *p11Error
	if errors.As(err, &pe) {
		return pe.RV
	}
	return 0
}

// p11Match is the module, token and slot a URI selects, opened.
type p11Match struct {
	mod  p11Module
	sess p11Session
	tok  p11TokenInfo
}

func (m *p11Match) close() {
	if m.sess != nil {
		m.sess.Close()
	}
	m.mod.Close()
}

// moduleFor loads the URI's module-path, or the p11-kit proxy.
func moduleFor(u *PKCS11URI) (p11Module, string, error) {
	if loadPKCS11 == nil {
		return nil, "", ErrPKCS11NotBuilt
	}
	path := DefaultPKCS11Module
	if u.ModulePath != "" {
		path = u.ModulePath
	}
	m, err := loadPKCS11(path)
	if err != nil {
		if u.ModulePath == "" {
			// dlerror() names the file; say what provides it.
			return nil, path, fmt.Errorf("PKCS#11 module %s (p11-kit's proxy, Debian's p11-kit-modules; or give module-path= in the URI): %w", path, err)
		}
		return nil, path, fmt.Errorf("PKCS#11 module %s: %w", path, err)
	}
	return m, path, nil
}

func trimmedEq(want, got string) bool { return want == strings.TrimRight(got, " \x00") }

// tokenMatches reports whether the URI's module, slot and token
// attributes hold for slot s.
func (u *PKCS11URI) tokenMatches(info p11Info, s p11Slot) bool {
	ver := fmt.Sprintf("%d.%d", info.Major, info.Minor)
	switch {
	case u.has["library-manufacturer"] && !trimmedEq(u.LibraryManufacturer, info.Manufacturer),
		u.has["library-description"] && !trimmedEq(u.LibraryDescription, info.Description),
		u.has["library-version"] && u.LibraryVersion != ver && u.LibraryVersion+".0" != ver,
		u.SlotID != nil && *u.SlotID != s.ID,
		u.has["slot-description"] && !trimmedEq(u.SlotDescription, s.Description),
		u.has["slot-manufacturer"] && !trimmedEq(u.SlotManufacturer, s.Manufacturer),
		u.has["token"] && !trimmedEq(u.Token, s.Token.Label),
		u.has["manufacturer"] && !trimmedEq(u.Manufacturer, s.Token.Manufacturer),
		u.has["model"] && !trimmedEq(u.Model, s.Token.Model),
		u.has["serial"] && !trimmedEq(u.Serial, s.Token.Serial):
		return false
	}
	return true
}

// TokenURI is the pkcs11: URI naming a token by its label, manufacturer,
// model and serial, as p11tool --list-token-urls prints it.
func (t p11TokenInfo) uri() string {
	tr := func(s string) string { return pctEncode(strings.TrimRight(s, " \x00")) }
	return "pkcs11:model=" + tr(t.Model) + ";manufacturer=" + tr(t.Manufacturer) +
		";serial=" + tr(t.Serial) + ";token=" + tr(t.Label)
}

// openToken finds the first token the URI selects that holds an object
// q selects (the URI's id and label added), opens a session on it and
// logs in when the token needs it. pin is the PIN given by the caller;
// without it the URI's pin-value or pin-source is used; without any,
// a token that needs a login fails with ErrNeedPIN. A wrong PIN is never
// tried on a second token.
func openToken(ctx context.Context, u *PKCS11URI, q p11Query, pin []byte, what string) (*p11Match, []uint64, error) {
	mod, path, err := moduleFor(u)
	if err != nil {
		return nil, nil, err
	}
	m := &p11Match{mod: mod}
	ok := false
	defer func() {
		if !ok {
			m.close()
		}
	}()
	info, err := mod.Info()
	if err != nil {
		return nil, nil, err
	}
	slots, err := mod.Slots()
	if err != nil {
		return nil, nil, err
	}
	if u.Object != "" || u.has["object"] {
		q.Label = &u.Object
	}
	if u.ID != nil {
		q.ID = u.ID
	}
	var errs []error
	for _, s := range slots {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if !u.tokenMatches(info, s) {
			continue
		}
		name := fmt.Sprintf("security token %q", strings.TrimRight(s.Token.Label, " \x00"))
		sess, err := mod.Open(s.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		m.sess, m.tok = sess, s.Token
		objs, err := loginAndFind(u, sess, s.Token, q, pin, name, what)
		if err == nil {
			ok = true
			return m, objs, nil
		}
		sess.Close()
		m.sess = nil
		if errors.Is(err, ErrNeedPIN) || errors.Is(err, ErrWrongPIN) || errors.Is(err, ErrPINLocked) {
			return nil, nil, err // never try a PIN on another token
		}
		errs = append(errs, err)
	}
	switch len(errs) {
	case 0:
		return nil, nil, fmt.Errorf("no security token matches the URI (module %s)", path)
	case 1:
		return nil, nil, errs[0]
	}
	return nil, nil, joined(errs)
}

func loginAndFind(u *PKCS11URI, sess p11Session, tok p11TokenInfo, q p11Query, pin []byte, name, what string) ([]uint64, error) {
	// Certificates are public: look before asking for a PIN.
	if q.Class == ckoCertificate {
		if objs, err := sess.Find(q, 2); err == nil && len(objs) > 0 {
			return checkCount(objs, name, what)
		}
	}
	if tok.Flags&ckfLoginRequired != 0 {
		if err := login(u, sess, pin, name); err != nil {
			return nil, err
		}
	}
	objs, err := sess.Find(q, 2)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return checkCount(objs, name, what)
}

func checkCount(objs []uint64, name, what string) ([]uint64, error) {
	switch {
	case len(objs) == 0:
		return nil, fmt.Errorf("%s holds no %s the URI selects", name, what)
	case len(objs) > 1:
		return nil, fmt.Errorf("%s: the URI selects several objects (%s); name one by id= or object=", name, what)
	}
	return objs, nil
}

func login(u *PKCS11URI, sess p11Session, pin []byte, name string) error {
	if pin == nil {
		p, err := u.pin()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if p != nil {
			defer wipe(p)
			pin = p
		}
	}
	if pin == nil {
		tok, _ := sess.TokenInfo()
		if tok.Flags&ckfProtectedAuthPath == 0 {
			return fmt.Errorf("%w: %s", ErrNeedPIN, name)
		}
		// A PIN pad: C_Login with no PIN lets the reader ask.
	}
	err := sess.Login(pin)
	if err == nil {
		return nil
	}
	switch rvOf(err) {
	case ckrUserAlreadyLoggedIn:
		return nil
	case ckrPINIncorrect, ckrPINInvalid, ckrPINLenRange:
		return fmt.Errorf("%s: %w%s", name, ErrWrongPIN, triesNote(sess))
	case ckrPINLocked:
		return fmt.Errorf("%s: %w", name, ErrPINLocked)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// triesNote is what the token tells of the tries left after a wrong PIN
// (PKCS#11 reports only "few", "one" and "none", not a count).
func triesNote(sess p11Session) string {
	tok, err := sess.TokenInfo()
	switch {
	case err != nil:
		return ""
	case tok.Flags&ckfUserPINLocked != 0:
		return " (the PIN is now locked)"
	case tok.Flags&ckfUserPINFinalTry != 0:
		return " (one try left before the PIN locks)"
	case tok.Flags&ckfUserPINCountLow != 0:
		return " (few tries left before the PIN locks)"
	}
	return " (the token does not report the tries left)"
}

// DecryptPKCS11 decrypts the token's pkcs11-key on the security token and
// returns the LUKS passphrase (the base64 of the secret; the caller wipes
// it). pin, when nil, is the URI's pin-value or pin-source.
func DecryptPKCS11(ctx context.Context, t *PKCS11Token, pin []byte) ([]byte, error) {
	u := t.Parsed
	if u == nil {
		var err error
		if u, err = ParsePKCS11URI(t.URI); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadToken, err)
		}
	}
	if u.Type != "" && u.Type != "private" {
		return nil, fmt.Errorf("%w: the URI selects a %q object, not a private key", ErrBadToken, u.Type)
	}
	m, objs, err := openToken(ctx, u, p11Query{Class: ckoPrivateKey, Decrypt: true}, pin, "private key for decryption")
	if err != nil {
		return nil, err
	}
	defer m.close()
	secret, err := m.sess.DecryptRSAPKCS(objs[0], t.Key)
	if err != nil {
		return nil, fmt.Errorf("security token %q: decrypting pkcs11-key: %w", strings.TrimRight(m.tok.Label, " \x00"), err)
	}
	defer wipe(secret)
	pass := make([]byte, base64.StdEncoding.EncodedLen(len(secret)))
	base64.StdEncoding.Encode(pass, secret)
	return pass, nil
}

func unlockPKCS11(ctx context.Context, id int, t *PKCS11Token, pin []byte) ([]byte, error) {
	pass, err := DecryptPKCS11(ctx, t, pin)
	if err != nil {
		return nil, fmt.Errorf("token %d (%s): %w", id, TypePKCS11, err)
	}
	return pass, nil
}

// PKCS11EnrollOptions choose the security token EnrollPKCS11 enrolls.
type PKCS11EnrollOptions struct {
	EnrollOptions
	// URI is the pkcs11: URI of the token (and optionally the
	// certificate) to enroll, stored in the token as given, with a
	// type=cert or type=public changed to type=private.
	URI string
	// PIN logs in to the token if it needs it to show the certificate;
	// nil is the URI's pin-value or pin-source.
	PIN []byte
}

// EnrollPKCS11 reads the X.509 certificate the URI selects on the
// security token, encrypts a fresh secret (half the RSA modulus long, as
// systemd-cryptenroll makes it) to its public key with PKCS#1 v1.5, adds
// a keyslot whose passphrase is the base64 of the secret and stores the
// token as systemd-cryptenroll 252 does, in one header update. It returns
// the keyslot and the token id.
func EnrollPKCS11(ctx context.Context, h *blkcrypt.LUKS, o PKCS11EnrollOptions) (slot, tokenID int, err error) {
	u, err := ParsePKCS11URI(o.URI)
	if err != nil {
		return -1, -1, fmt.Errorf("%w: %w", blkcrypt.ErrInvalidOptions, err)
	}
	if u.Type == "secret-key" || u.Type == "data" {
		return -1, -1, fmt.Errorf("%w: the URI selects a %q object; a certificate is needed", blkcrypt.ErrInvalidOptions, u.Type)
	}
	m, objs, err := openToken(ctx, u, p11Query{Class: ckoCertificate, X509: true}, o.PIN, "X.509 certificate")
	if err != nil {
		return -1, -1, err
	}
	der, err := m.sess.Value(objs[0])
	m.close()
	if err != nil {
		return -1, -1, fmt.Errorf("reading the certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return -1, -1, fmt.Errorf("the token's certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return -1, -1, fmt.Errorf("%w: the token's certificate holds a %T key; systemd-pkcs11 needs RSA", ErrUnsupported, cert.PublicKey)
	}
	n := pub.Size() / 2
	if n < 1 {
		return -1, -1, fmt.Errorf("%w: the certificate's RSA key is too small", ErrUnsupported)
	}
	secret := make([]byte, n)
	defer wipe(secret)
	if _, err := rand.Read(secret); err != nil {
		return -1, -1, err
	}
	enc, err := rsa.EncryptPKCS1v15(rand.Reader, pub, secret)
	if err != nil {
		return -1, -1, fmt.Errorf("encrypting to the certificate's key: %w", err)
	}
	pass := make([]byte, base64.StdEncoding.EncodedLen(n))
	base64.StdEncoding.Encode(pass, secret)
	defer wipe(pass)
	uri := o.URI
	if u.Type != "" && u.Type != "private" {
		uri = withType(uri, "private")
	}
	// The fields and their order are systemd-cryptenroll 252's; '&' in
	// a URI's query stays as it is (no HTML escaping).
	var tok bytes.Buffer
	e := json.NewEncoder(&tok)
	e.SetEscapeHTML(false)
	if err := e.Encode(struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
		URI      string   `json:"pkcs11-uri"`
		Key      string   `json:"pkcs11-key"`
	}{TypePKCS11, []string{}, uri, base64.StdEncoding.EncodeToString(enc)}); err != nil {
		return -1, -1, err
	}
	return addWithToken(ctx, h, pass, o.EnrollOptions, bytes.TrimSpace(tok.Bytes()))
}

// PKCS11TokenURIs lists the initialised security tokens the p11-kit
// proxy (or the module at modulePath) reaches, as pkcs11: URIs.
func PKCS11TokenURIs(modulePath string) ([]string, error) {
	mod, _, err := moduleFor(&PKCS11URI{ModulePath: modulePath})
	if err != nil {
		return nil, err
	}
	defer mod.Close()
	slots, err := mod.Slots()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(slots))
	for _, s := range slots {
		// softhsm2 and others offer an uninitialised token in a spare
		// slot: nothing to enroll there.
		if s.Token.Flags&ckfTokenInitialized != 0 {
			out = append(out, s.Token.uri())
		}
	}
	return out, nil
}
