package token

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/blkcrypt/blkcrypt/internal/cbor"
)

// CTAP2 (CTAP 2.0 §5, §6.2): authenticator commands and status codes.
const (
	ctapMakeCredential = 0x01
	ctapGetAssertion   = 0x02
	ctapGetInfo        = 0x04
	ctapClientPIN      = 0x06

	pinGetRetries      = 0x01
	pinGetKeyAgreement = 0x02
	pinGetPINToken     = 0x05

	coseES256     = -7
	coseECDHHKDF  = -25
	authFlagUP    = 0x01
	authFlagUV    = 0x04
	authFlagAT    = 0x40
	authFlagED    = 0x80
	fido2RPName   = "Encrypted Volume"
	fido2SaltSize = 32
)

// CTAP2 status codes the token reports by name.
const (
	ctapOK               = 0x00
	ctapNoCredentials    = 0x2e
	ctapPINInvalid       = 0x31
	ctapPINBlocked       = 0x32
	ctapPINAuthInvalid   = 0x33
	ctapPINAuthBlocked   = 0x34
	ctapPINNotSet        = 0x35
	ctapPINRequired      = 0x36
	ctapUnsupportedOpt   = 0x2b
	ctapOperationDenied  = 0x27
	ctapActionTimeout    = 0x2f
	ctapUPRequired       = 0x3b
	ctapUnsupportedAlg   = 0x26
	ctapKeepaliveCancel  = 0x2d
	ctapInvalidParameter = 0x02
)

// ErrFIDO2NoCredential: the security key does not hold the token's
// credential (another key, or the credential was made elsewhere).
var ErrFIDO2NoCredential = errors.New("the security key does not know the token's credential")

// ctapError is a CTAP2 status other than success.
type ctapError byte

func (e ctapError) Error() string {
	names := map[ctapError]string{
		ctapNoCredentials: "no credentials", ctapPINInvalid: "PIN invalid",
		ctapPINBlocked: "PIN blocked", ctapPINAuthInvalid: "PIN auth invalid",
		ctapPINAuthBlocked: "PIN auth blocked (remove and reinsert the key)", ctapPINNotSet: "PIN not set",
		ctapPINRequired: "PIN required", ctapUnsupportedOpt: "unsupported option",
		ctapOperationDenied: "operation denied", ctapActionTimeout: "user action timeout",
		ctapUPRequired: "user presence required", ctapUnsupportedAlg: "unsupported algorithm",
		ctapKeepaliveCancel: "cancelled", ctapInvalidParameter: "invalid parameter",
	}
	if n, ok := names[e]; ok {
		return fmt.Sprintf("CTAP2 error %#02x (%s)", byte(e), n)
	}
	return fmt.Sprintf("CTAP2 error %#02x", byte(e))
}

// Is maps the statuses callers act on to the package's sentinels.
func (e ctapError) Is(target error) bool {
	switch target {
	case ErrWrongPIN:
		return e == ctapPINInvalid || e == ctapPINAuthInvalid
	case ErrLockout:
		return e == ctapPINBlocked || e == ctapPINAuthBlocked
	case ErrNeedPIN:
		return e == ctapPINRequired
	case ErrFIDO2NoCredential:
		return e == ctapNoCredentials
	}
	return false
}

// fido2Info is what getInfo says that the token uses.
type fido2Info struct {
	versions     []string
	hmacSecret   bool
	options      map[string]bool
	pinProtocols []int64
}

// has reports an option's value and whether the key lists it.
func (i *fido2Info) option(name string) (value, listed bool) {
	value, listed = i.options[name]
	return value, listed
}

// fido2Dev is one security key spoken to over CTAPHID.
type fido2Dev struct {
	hid  *hidConn
	info fido2Info
}

// openFIDO2 opens a CTAPHID channel on rw and reads getInfo.
func openFIDO2(ctx context.Context, rw io.ReadWriter) (*fido2Dev, error) {
	c, err := newHIDConn(ctx, rw)
	if err != nil {
		return nil, err
	}
	d := &fido2Dev{hid: c}
	m, err := d.cbor(ctx, ctapGetInfo, nil)
	if err != nil {
		return nil, fmt.Errorf("getInfo: %w", err)
	}
	if d.info, err = parseGetInfo(m); err != nil {
		return nil, fmt.Errorf("getInfo: %w", err)
	}
	return d, nil
}

func parseGetInfo(m cbor.Map) (fido2Info, error) {
	var info fido2Info
	vs, ok := m.Get(1)
	va, isArr := vs.([]any)
	if !ok || !isArr {
		return info, fmt.Errorf("%w: no versions", ErrFIDO2Device)
	}
	for _, v := range va {
		if s, ok := v.(string); ok {
			info.versions = append(info.versions, s)
		}
	}
	if es, ok := m.Get(2); ok {
		ea, ok := es.([]any)
		if !ok {
			return info, fmt.Errorf("%w: extensions are %T", ErrFIDO2Device, es)
		}
		for _, e := range ea {
			if e == "hmac-secret" {
				info.hmacSecret = true
			}
		}
	}
	info.options = map[string]bool{}
	if os, ok := m.Get(4); ok {
		om, ok := os.(cbor.Map)
		if !ok {
			return info, fmt.Errorf("%w: options are %T", ErrFIDO2Device, os)
		}
		for _, p := range om {
			k, ok1 := p[0].(string)
			v, ok2 := p[1].(bool)
			if !ok1 || !ok2 {
				return info, fmt.Errorf("%w: option %v: %v", ErrFIDO2Device, p[0], p[1])
			}
			info.options[k] = v
		}
	}
	if ps, ok := m.Get(6); ok {
		pa, ok := ps.([]any)
		if !ok {
			return info, fmt.Errorf("%w: pinProtocols are %T", ErrFIDO2Device, ps)
		}
		for _, p := range pa {
			if n, ok := p.(int64); ok {
				info.pinProtocols = append(info.pinProtocols, n)
			}
		}
	}
	return info, nil
}

// cbor sends a CTAP2 command and returns the answer's map (an empty map
// for an empty answer).
func (d *fido2Dev) cbor(ctx context.Context, cmd byte, req cbor.Map) (cbor.Map, error) {
	msg := []byte{cmd}
	if req != nil {
		b, err := cbor.Marshal(req)
		if err != nil {
			return nil, err
		}
		msg = append(msg, b...)
	}
	resp, err := d.hid.transact(ctx, hidCBOR, msg, nil)
	if err != nil {
		return nil, err
	}
	if len(resp) == 0 {
		return nil, fmt.Errorf("%w: empty CTAP2 answer", ErrFIDO2Device)
	}
	if resp[0] != ctapOK {
		return nil, ctapError(resp[0])
	}
	if len(resp) == 1 {
		return cbor.Map{}, nil
	}
	v, err := cbor.Unmarshal(resp[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFIDO2Device, err)
	}
	m, ok := v.(cbor.Map)
	if !ok {
		return nil, fmt.Errorf("%w: CTAP2 answer is %T, want a map", ErrFIDO2Device, v)
	}
	return m, nil
}

// pinProtocol is a PIN/UV auth protocol's shared secret with the key
// (CTAP 2.1 §6.5.6, §6.5.7) from the ECDH between a fresh platform key and
// the authenticator's key agreement key. Protocol 1 (CTAP 2.0): both keys
// are SHA-256 of the x-coordinate, AES-256-CBC with a zero IV, HMACs cut
// to 16 bytes. Protocol 2: HKDF-SHA-256 derives a separate HMAC key and
// AES key, each ciphertext carries a random IV, HMACs are whole.
type pinProtocol struct {
	version         int
	platform        *ecdh.PrivateKey
	hmacKey, aesKey []byte
}

func (p *pinProtocol) wipe() {
	clear(p.hmacKey)
	clear(p.aesKey)
}

// coseKey is the platform's public key as a COSE_Key (CTAP 2.0 §5.5.4).
func (p *pinProtocol) coseKey() cbor.Map {
	pub := p.platform.PublicKey().Bytes() // 0x04 || X || Y
	return cbor.Map{{1, 2}, {3, coseECDHHKDF}, {-1, 1}, {-2, pub[1:33]}, {-3, pub[33:65]}}
}

// parseCOSEP256 reads a P-256 COSE_Key's point.
func parseCOSEP256(v any) (*ecdh.PublicKey, error) {
	m, ok := v.(cbor.Map)
	if !ok {
		return nil, fmt.Errorf("%w: COSE key is %T", ErrFIDO2Device, v)
	}
	kty, err1 := m.Int(1)
	crv, err2 := m.Int(-1)
	x, err3 := m.Bytes(-2)
	y, err4 := m.Bytes(-3)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("%w: COSE key: %w", ErrFIDO2Device, err)
	}
	if kty != 2 || crv != 1 || len(x) != 32 || len(y) != 32 {
		return nil, fmt.Errorf("%w: COSE key is not a P-256 point (kty %d, crv %d)", ErrFIDO2Device, kty, crv)
	}
	pub, err := ecdh.P256().NewPublicKey(append(append([]byte{4}, x...), y...))
	if err != nil {
		return nil, fmt.Errorf("%w: COSE key: %w", ErrFIDO2Device, err)
	}
	return pub, nil
}

// protocol is the PIN/UV auth protocol to speak: 2 when the key lists
// it (libfido2 prefers it too), else 1.
func (d *fido2Dev) protocol() int {
	if slices.Contains(d.info.pinProtocols, 2) {
		return 2
	}
	return 1
}

// keyAgreement runs clientPIN getKeyAgreement and derives the shared
// secret with a fresh platform key.
func (d *fido2Dev) keyAgreement(ctx context.Context) (*pinProtocol, error) {
	v := d.protocol()
	m, err := d.cbor(ctx, ctapClientPIN, cbor.Map{{1, v}, {2, pinGetKeyAgreement}})
	if err != nil {
		return nil, fmt.Errorf("clientPIN getKeyAgreement: %w", err)
	}
	ka, ok := m.Get(1)
	if !ok {
		return nil, fmt.Errorf("%w: clientPIN getKeyAgreement: no key", ErrFIDO2Device)
	}
	peer, err := parseCOSEP256(ka)
	if err != nil {
		return nil, err
	}
	priv, err := ecdh.P256().GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	z, err := priv.ECDH(peer)
	if err != nil {
		return nil, fmt.Errorf("%w: key agreement: %w", ErrFIDO2Device, err)
	}
	defer clear(z)
	p := &pinProtocol{version: v, platform: priv}
	if v == 1 {
		k := sha256.Sum256(z)
		p.hmacKey, p.aesKey = bytes.Clone(k[:]), bytes.Clone(k[:])
		clear(k[:])
		return p, nil
	}
	salt := make([]byte, 32)
	if p.hmacKey, err = hkdf.Key(sha256.New, z, salt, "CTAP2 HMAC key", 32); err != nil {
		return nil, err
	}
	if p.aesKey, err = hkdf.Key(sha256.New, z, salt, "CTAP2 AES key", 32); err != nil {
		return nil, err
	}
	return p, nil
}

// encrypt is AES-256-CBC over whole blocks: a zero IV (protocol 1) or a
// random one sent before the ciphertext (protocol 2).
func (p *pinProtocol) encrypt(in []byte) []byte {
	b, _ := aes.NewCipher(p.aesKey)
	iv := make([]byte, aes.BlockSize)
	if p.version == 2 {
		_, _ = rand.Read(iv)
	}
	out := make([]byte, len(in))
	cipher.NewCBCEncrypter(b, iv).CryptBlocks(out, in)
	if p.version == 2 {
		return append(iv, out...)
	}
	return out
}

func (p *pinProtocol) decrypt(in []byte) ([]byte, error) {
	iv := make([]byte, aes.BlockSize)
	if p.version == 2 {
		if len(in) < aes.BlockSize {
			return nil, fmt.Errorf("%w: encrypted field of %d bytes", ErrFIDO2Device, len(in))
		}
		iv, in = in[:aes.BlockSize], in[aes.BlockSize:]
	}
	if len(in) == 0 || len(in)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("%w: encrypted field of %d bytes", ErrFIDO2Device, len(in))
	}
	b, _ := aes.NewCipher(p.aesKey)
	out := make([]byte, len(in))
	cipher.NewCBCDecrypter(b, iv).CryptBlocks(out, in)
	return out, nil
}

// authenticate is HMAC-SHA-256(key, msg), its first 16 bytes under
// protocol 1.
func (p *pinProtocol) authenticate(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	if p.version == 1 {
		return h.Sum(nil)[:16]
	}
	return h.Sum(nil)
}

// pinToken runs clientPIN getPINToken for pin (protocol 1).
func (d *fido2Dev) pinToken(ctx context.Context, p *pinProtocol, pin []byte) ([]byte, error) {
	if _, has := d.info.option("clientPin"); !has {
		return nil, fmt.Errorf("%w: the security key has no PIN support", ErrUnsupported)
	}
	if set, _ := d.info.option("clientPin"); !set {
		return nil, fmt.Errorf("%w: the security key has no PIN set", ErrWrongPIN)
	}
	h := sha256.Sum256(pin)
	enc := p.encrypt(h[:16])
	clear(h[:])
	m, err := d.cbor(ctx, ctapClientPIN, cbor.Map{{1, p.version}, {2, pinGetPINToken}, {3, p.coseKey()}, {6, enc}})
	if err != nil {
		if errors.Is(err, ErrWrongPIN) {
			if r, rerr := d.pinRetries(ctx); rerr == nil {
				return nil, fmt.Errorf("clientPIN getPINToken: %w (%d tries left before the key blocks its PIN)", err, r)
			}
		}
		return nil, fmt.Errorf("clientPIN getPINToken: %w", err)
	}
	tokEnc, err := m.Bytes(2)
	if err != nil {
		return nil, fmt.Errorf("%w: clientPIN getPINToken: %w", ErrFIDO2Device, err)
	}
	return p.decrypt(tokEnc)
}

func (d *fido2Dev) pinRetries(ctx context.Context) (int64, error) {
	m, err := d.cbor(ctx, ctapClientPIN, cbor.Map{{1, d.protocol()}, {2, pinGetRetries}})
	if err != nil {
		return 0, err
	}
	return m.Int(3)
}

// authData is the part of authenticator data (WebAuthn §6.1) the token
// reads.
type authData struct {
	rpIDHash   []byte
	flags      byte
	credID     []byte
	extensions cbor.Map
}

func parseAuthData(b []byte) (*authData, error) {
	if len(b) < 37 {
		return nil, fmt.Errorf("%w: authenticator data of %d bytes", ErrFIDO2Device, len(b))
	}
	a := &authData{rpIDHash: b[:32], flags: b[32]}
	rest := b[37:]
	if a.flags&authFlagAT != 0 {
		if len(rest) < 18 {
			return nil, fmt.Errorf("%w: attested credential data truncated", ErrFIDO2Device)
		}
		n := int(binary.BigEndian.Uint16(rest[16:18]))
		if n == 0 || len(rest) < 18+n {
			return nil, fmt.Errorf("%w: credential id of %d bytes", ErrFIDO2Device, n)
		}
		a.credID = rest[18 : 18+n]
		var err error
		if _, rest, err = cbor.Decode(rest[18+n:]); err != nil {
			return nil, fmt.Errorf("%w: credential public key: %w", ErrFIDO2Device, err)
		}
	}
	if a.flags&authFlagED != 0 {
		v, err := cbor.Unmarshal(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: extensions: %w", ErrFIDO2Device, err)
		}
		m, ok := v.(cbor.Map)
		if !ok {
			return nil, fmt.Errorf("%w: extensions are %T", ErrFIDO2Device, v)
		}
		a.extensions = m
	} else if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the authenticator data", ErrFIDO2Device, len(rest))
	}
	return a, nil
}

// fido2User is the user a credential is made for: systemd uses the
// volume's UUID as id and name, and the device's name as display name.
type fido2User struct {
	id          []byte
	name, displ string
}

// makeCredential creates a non-resident ES256 credential with the
// hmac-secret extension for rp and returns its id. pin, when set, is
// verified by the key (the credential then needs it, as systemd's do).
func (d *fido2Dev) makeCredential(ctx context.Context, rp string, user fido2User, pin []byte) ([]byte, error) {
	if !d.info.hmacSecret {
		return nil, fmt.Errorf("%w: the security key lacks the hmac-secret extension", ErrUnsupported)
	}
	req := cbor.Map{
		{1, make([]byte, 32)}, // systemd's client data hash: zeros
		{2, cbor.Map{{"id", rp}, {"name", fido2RPName}}},
		{3, cbor.Map{{"id", user.id}, {"name", user.name}, {"displayName", user.displ}}},
		{4, []any{cbor.Map{{"alg", coseES256}, {"type", "public-key"}}}},
		{6, cbor.Map{{"hmac-secret", true}}},
	}
	var opts cbor.Map
	if _, has := d.info.option("rk"); has {
		opts = append(opts, cbor.Pair{"rk", false})
	}
	if _, has := d.info.option("uv"); has {
		opts = append(opts, cbor.Pair{"uv", false})
	}
	if opts != nil {
		req = append(req, cbor.Pair{7, opts})
	}
	if pin != nil {
		p, err := d.keyAgreement(ctx)
		if err != nil {
			return nil, err
		}
		defer p.wipe()
		tok, err := d.pinToken(ctx, p, pin)
		if err != nil {
			return nil, err
		}
		defer clear(tok)
		req = append(req, cbor.Pair{8, p.authenticate(tok, make([]byte, 32))}, cbor.Pair{9, p.version})
	}
	m, err := d.cbor(ctx, ctapMakeCredential, req)
	if err != nil {
		return nil, fmt.Errorf("makeCredential: %w", err)
	}
	ad, err := m.Bytes(2)
	if err != nil {
		return nil, fmt.Errorf("%w: makeCredential: %w", ErrFIDO2Device, err)
	}
	a, err := parseAuthData(ad)
	if err != nil {
		return nil, fmt.Errorf("makeCredential: %w", err)
	}
	rpHash := sha256.Sum256([]byte(rp))
	if !bytes.Equal(a.rpIDHash, rpHash[:]) {
		return nil, fmt.Errorf("%w: makeCredential answered for another relying party", ErrFIDO2Device)
	}
	if a.credID == nil {
		return nil, fmt.Errorf("%w: makeCredential returned no credential", ErrFIDO2Device)
	}
	return a.credID, nil
}

// assertOptions are a getAssertion's demands, as the token's
// fido2-*-required fields say.
type assertOptions struct {
	pin []byte // nil: no PIN
	up  bool
	uv  bool
}

// hmacSecret runs getAssertion for credential cred with the hmac-secret
// extension over salt and returns the 32-byte output (CTAP 2.0 §10.5).
func (d *fido2Dev) hmacSecret(ctx context.Context, rp string, cred, salt []byte, o assertOptions) ([]byte, error) {
	if !d.info.hmacSecret {
		return nil, fmt.Errorf("%w: the security key lacks the hmac-secret extension", ErrUnsupported)
	}
	if len(salt) != fido2SaltSize {
		return nil, fmt.Errorf("%w: salt of %d bytes, want %d", ErrBadToken, len(salt), fido2SaltSize)
	}
	p, err := d.keyAgreement(ctx)
	if err != nil {
		return nil, err
	}
	defer p.wipe()
	saltEnc := p.encrypt(salt)
	hs := cbor.Map{{1, p.coseKey()}, {2, saltEnc}, {3, p.authenticate(p.hmacKey, saltEnc)}}
	if p.version != 1 {
		hs = append(hs, cbor.Pair{4, p.version}) // CTAP 2.1: absent means 1
	}
	ext := cbor.Map{{"hmac-secret", hs}}
	req := cbor.Map{
		{1, rp},
		{2, make([]byte, 32)},
		{3, []any{cbor.Map{{"id", cred}, {"type", "public-key"}}}},
		{4, ext},
	}
	var opts cbor.Map
	if _, has := d.info.option("up"); has || !o.up {
		// up defaults to true (CTAP 2.0 §5.4's table): say false only
		// when not wanted, as systemd does.
		opts = append(opts, cbor.Pair{"up", o.up})
	}
	if o.uv {
		opts = append(opts, cbor.Pair{"uv", true})
	}
	if opts != nil {
		req = append(req, cbor.Pair{5, opts})
	}
	if o.pin != nil {
		// The salt's shared secret serves the PIN too, as libfido2 does.
		tok, err := d.pinToken(ctx, p, o.pin)
		if err != nil {
			return nil, err
		}
		defer clear(tok)
		req = append(req, cbor.Pair{6, p.authenticate(tok, make([]byte, 32))}, cbor.Pair{7, p.version})
	}
	m, err := d.cbor(ctx, ctapGetAssertion, req)
	if err != nil {
		return nil, fmt.Errorf("getAssertion: %w", err)
	}
	ad, err := m.Bytes(2)
	if err != nil {
		return nil, fmt.Errorf("%w: getAssertion: %w", ErrFIDO2Device, err)
	}
	a, err := parseAuthData(ad)
	if err != nil {
		return nil, fmt.Errorf("getAssertion: %w", err)
	}
	rpHash := sha256.Sum256([]byte(rp))
	if !bytes.Equal(a.rpIDHash, rpHash[:]) {
		return nil, fmt.Errorf("%w: getAssertion answered for another relying party", ErrFIDO2Device)
	}
	if o.pin != nil && a.flags&authFlagUV == 0 {
		// Without UV the key would have used its other CredRandom: the
		// secret would not be the one enrolled with the PIN.
		return nil, fmt.Errorf("%w: getAssertion with a PIN did not verify the user", ErrFIDO2Device)
	}
	if o.up && a.flags&authFlagUP == 0 {
		return nil, fmt.Errorf("%w: getAssertion did not test user presence", ErrFIDO2Device)
	}
	if a.extensions == nil {
		return nil, fmt.Errorf("%w: getAssertion returned no hmac-secret", ErrFIDO2Device)
	}
	out, err := a.extensions.Bytes("hmac-secret")
	if err != nil {
		return nil, fmt.Errorf("%w: getAssertion: %w", ErrFIDO2Device, err)
	}
	secret, err := p.decrypt(out)
	if err != nil {
		return nil, err
	}
	if len(secret) != fido2SaltSize {
		clear(secret)
		return nil, fmt.Errorf("%w: hmac-secret output of %d bytes, want %d", ErrFIDO2Device, len(secret), fido2SaltSize)
	}
	return secret, nil
}
