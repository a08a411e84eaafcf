package token

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/blkcrypt/blkcrypt"
)

// TypeFIDO2 is the token systemd-cryptenroll --fido2-device writes.
const TypeFIDO2 = "systemd-fido2"

// FIDO2RP is the relying party systemd enrolls under.
const FIDO2RP = "io.systemd.cryptsetup"

// PromptFIDO2PIN is systemd's prompt for a security key's PIN.
const PromptFIDO2PIN = "Please enter security token PIN: "

// FIDO2Token is a parsed systemd-fido2 token: a non-resident credential
// on a FIDO2 security key and a salt; the key's hmac-secret of the salt,
// in standard base64, is the keyslot's passphrase.
type FIDO2Token struct {
	Keyslots   []int
	Credential []byte
	Salt       []byte
	RP         string
	// ClientPIN, UP and UV are what the token requires. Tokens from
	// systemd 248 lack the fields; the *IfNeeded flags then say to
	// add a PIN or a touch when the key asks for one, as systemd does.
	ClientPIN, UP, UV       bool
	PINIfNeeded, UPIfNeeded bool
	UVOmit                  bool
}

// ParseFIDO2Token reads a systemd-fido2 token's JSON as systemd's
// luks2-fido2.c does.
func ParseFIDO2Token(js []byte) (*FIDO2Token, error) {
	var raw struct {
		Type       string          `json:"type"`
		Keyslots   []string        `json:"keyslots"`
		Credential *string         `json:"fido2-credential"`
		Salt       *string         `json:"fido2-salt"`
		RP         json.RawMessage `json:"fido2-rp"`
		ClientPIN  *bool           `json:"fido2-clientPin-required"`
		UP         *bool           `json:"fido2-up-required"`
		UV         *bool           `json:"fido2-uv-required"`
	}
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	if raw.Type != TypeFIDO2 {
		return nil, fmt.Errorf("%w: type %q, want %q", ErrBadToken, raw.Type, TypeFIDO2)
	}
	t := &FIDO2Token{RP: FIDO2RP}
	for _, k := range raw.Keyslots {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 || n > 31 {
			return nil, fmt.Errorf("%w: keyslot %q", ErrBadToken, k)
		}
		t.Keyslots = append(t.Keyslots, n)
	}
	if len(t.Keyslots) == 0 {
		return nil, fmt.Errorf("%w: no keyslots", ErrBadToken)
	}
	if raw.Credential == nil || raw.Salt == nil {
		return nil, fmt.Errorf("%w: fido2-credential or fido2-salt missing", ErrBadToken)
	}
	var err error
	if t.Credential, err = base64.StdEncoding.DecodeString(*raw.Credential); err != nil || len(t.Credential) == 0 || len(t.Credential) > 1024 {
		return nil, fmt.Errorf("%w: fido2-credential is not a credential id in base64", ErrBadToken)
	}
	if t.Salt, err = base64.StdEncoding.DecodeString(*raw.Salt); err != nil || len(t.Salt) != fido2SaltSize {
		return nil, fmt.Errorf("%w: fido2-salt is not %d bytes in base64", ErrBadToken, fido2SaltSize)
	}
	if raw.RP != nil && string(raw.RP) != "null" {
		if err := json.Unmarshal(raw.RP, &t.RP); err != nil || t.RP == "" {
			return nil, fmt.Errorf("%w: fido2-rp is not a relying party id", ErrBadToken)
		}
	}
	if raw.ClientPIN != nil {
		t.ClientPIN = *raw.ClientPIN
	} else {
		t.PINIfNeeded = true
	}
	if raw.UP != nil {
		t.UP = *raw.UP
	} else {
		t.UPIfNeeded = true
	}
	if raw.UV != nil {
		t.UV = *raw.UV
	} else {
		t.UVOmit = true
	}
	if t.UV {
		return nil, fmt.Errorf("%w: fido2-uv-required (built-in user verification) is not supported; a PIN is", ErrUnsupported)
	}
	return t, nil
}

// FIDO2Secret asks the security key on rw (64-byte CTAPHID reports) for
// t's hmac-secret and returns the passphrase it makes: the standard
// base64 of the 32-byte output. pin is used when the token requires one,
// or (for systemd 248 tokens) when the key asks. The caller wipes the
// passphrase.
func FIDO2Secret(ctx context.Context, rw io.ReadWriter, t *FIDO2Token, pin []byte) ([]byte, error) {
	d, err := openFIDO2(ctx, rw)
	if err != nil {
		return nil, err
	}
	o := assertOptions{up: t.UP}
	if t.ClientPIN {
		if pin == nil {
			return nil, ErrNeedPIN
		}
		o.pin = pin
	}
	out, err := d.hmacSecret(ctx, t.RP, t.Credential, t.Salt, o)
	// systemd 248's tokens say nothing of a PIN or a touch: add what the
	// key asks for, once each.
	for range 2 {
		var ce ctapError
		if !errors.As(err, &ce) {
			break
		}
		switch {
		case t.UPIfNeeded && !o.up && (ce == ctapUPRequired || ce == ctapUnsupportedOpt):
			o.up = true
		case t.PINIfNeeded && o.pin == nil && ce == ctapPINRequired && pin != nil:
			o.pin = pin
		default:
			return nil, err
		}
		out, err = d.hmacSecret(ctx, t.RP, t.Credential, t.Salt, o)
	}
	if err != nil {
		return nil, err
	}
	defer clear(out)
	pass := make([]byte, base64.StdEncoding.EncodedLen(len(out)))
	base64.StdEncoding.Encode(pass, out)
	return pass, nil
}

// FIDO2EnrollOptions choose the security key and what the new token
// requires.
type FIDO2EnrollOptions struct {
	EnrollOptions
	// Device is the security key: a hidraw path, or "" / "auto" for the
	// only one present. Transport, when set, is used instead.
	Device    string
	Transport io.ReadWriter
	// PIN, when set, is the key's PIN, and the token requires it
	// (systemd-cryptenroll's --fido2-with-client-pin, its default) unless
	// NoClientPIN: then the PIN only makes the credential (a key with a
	// PIN set wants it for that) and unlocking needs none.
	PIN         []byte
	NoClientPIN bool
	// UP makes the token require a touch (--fido2-with-user-presence,
	// systemd's default).
	UP bool
	// VolumeName is the credential's user display name: systemd gives
	// the volume's device path. "" is the volume's UUID.
	VolumeName string
}

// EnrollFIDO2 does what systemd-cryptenroll --fido2-device does: a new
// non-resident ES256 credential with the hmac-secret extension under
// io.systemd.cryptsetup (user id and name the volume's UUID), a fresh
// 32-byte salt, a keyslot whose passphrase is the base64 of the key's
// hmac-secret of the salt, and the token systemd-cryptenroll 252 writes,
// keyslot and token in one header update. It returns the keyslot and
// token id.
func EnrollFIDO2(ctx context.Context, h *blkcrypt.LUKS, o FIDO2EnrollOptions) (slot, tokenID int, err error) {
	hd, err := h.Header(ctx)
	if err != nil {
		return -1, -1, err
	}
	if _, err := h.TestPassphrase(ctx, o.Existing, blkcrypt.KeyOptions{Keyslot: o.Keyslot}); err != nil {
		return -1, -1, err
	}
	rw := o.Transport
	if rw == nil {
		dev, err := openFIDO2Device(o.Device)
		if err != nil {
			return -1, -1, err
		}
		defer dev.Close()
		rw = dev
	}
	d, err := openFIDO2(ctx, rw)
	if err != nil {
		return -1, -1, err
	}
	uuid := hd.UUID()
	displ := o.VolumeName
	if displ == "" {
		displ = uuid
	}
	cred, err := d.makeCredential(ctx, FIDO2RP, fido2User{id: []byte(uuid), name: uuid, displ: displ}, o.PIN)
	if err != nil {
		return -1, -1, err
	}
	salt := make([]byte, fido2SaltSize)
	if _, err := rand.Read(salt); err != nil {
		return -1, -1, err
	}
	t := &FIDO2Token{Credential: cred, Salt: salt, RP: FIDO2RP, ClientPIN: o.PIN != nil && !o.NoClientPIN, UP: o.UP}
	pass, err := FIDO2Secret(ctx, rw, t, o.PIN)
	if err != nil {
		return -1, -1, err
	}
	defer wipe(pass)
	// systemd-cryptenroll 252's fields, in its order.
	tok, err := json.Marshal(struct {
		Type       string   `json:"type"`
		Keyslots   []string `json:"keyslots"`
		Credential string   `json:"fido2-credential"`
		Salt       string   `json:"fido2-salt"`
		RP         string   `json:"fido2-rp"`
		ClientPIN  bool     `json:"fido2-clientPin-required"`
		UP         bool     `json:"fido2-up-required"`
		UV         bool     `json:"fido2-uv-required"`
	}{TypeFIDO2, []string{}, base64.StdEncoding.EncodeToString(cred), base64.StdEncoding.EncodeToString(salt),
		FIDO2RP, t.ClientPIN, t.UP, false})
	if err != nil {
		return -1, -1, err
	}
	return addWithToken(ctx, h, pass, o.EnrollOptions, tok)
}

// unlockFIDO2 derives a token's passphrase with the security key o
// names: o.FIDO2Transport, else the hidraw device o.FIDO2Device, else
// every FIDO2 key present, the first that knows the credential.
func unlockFIDO2(ctx context.Context, id int, t *FIDO2Token, o Options, pin []byte) ([]byte, error) {
	name := fmt.Sprintf("token %d (%s)", id, TypeFIDO2)
	if o.FIDO2Transport != nil {
		pass, err := FIDO2Secret(ctx, o.FIDO2Transport, t, pin)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return pass, nil
	}
	paths := []string{o.FIDO2Device}
	if o.FIDO2Device == "" || o.FIDO2Device == "auto" {
		var err error
		if paths, err = FIDO2Devices(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s: %w: no FIDO2 security key present", name, ErrFIDO2Device)
		}
	}
	var errs []error
	for _, p := range paths {
		dev, err := openFIDO2Device(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pass, err := FIDO2Secret(ctx, dev, t, pin)
		dev.Close()
		if err == nil {
			return pass, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrNeedPIN) || errors.Is(err, ErrWrongPIN) || errors.Is(err, ErrLockout) {
			return nil, fmt.Errorf("%s: %s: %w", name, p, err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", p, err))
	}
	return nil, fmt.Errorf("%s: %w", name, joined(errs))
}
