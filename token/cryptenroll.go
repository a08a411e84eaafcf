package token

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
)

// Enrollment is one systemd-cryptenroll run for Enroll: at most one of a
// TPM2 token, a PKCS#11 token, a FIDO2 token and a recovery key, each in
// a new keyslot, then the keyslots Wipe names removed.
type Enrollment struct {
	// EnrollOptions authorise the run (Existing, tested before anything
	// else) and choose the new keyslot's KDF.
	EnrollOptions
	// TPM2Device, when set, enrolls a systemd-tpm2 token (EnrollTPM2) on
	// this TPM, in systemd's spelling ("auto" is /dev/tpmrm0), sealed to
	// TPM2PCRs: nil is PCR 7, empty is none (ParsePCRs reads systemd's
	// spelling).
	TPM2Device string
	TPM2PCRs   []int
	// TPM2WithPIN makes the TPM2 token need a PIN too: TPM2PIN, or when
	// that is nil a new PIN AskPIN is asked for twice (PromptTPM2PIN,
	// PromptTPM2PINAgain); the answers must match and not be empty.
	TPM2WithPIN bool
	TPM2PIN     []byte
	// PKCS11URI, when set, enrolls a systemd-pkcs11 token (EnrollPKCS11)
	// for the security token this pkcs11: URI names; "auto" is the only
	// initialised token present (PKCS11TokenURIs).
	PKCS11URI string
	// PKCS11PIN logs in to the security token if it needs a login to show
	// its certificate; nil is the URI's pin-value or pin-source, else the
	// PIN AskPIN gives (PromptPKCS11PIN).
	PKCS11PIN []byte
	// FIDO2Device, when set, enrolls a systemd-fido2 token (EnrollFIDO2)
	// with this security key: a /dev/hidrawN path, or "auto" for the only
	// one present. As systemd-cryptenroll's defaults, the token needs the
	// key's PIN and a touch; FIDO2NoClientPIN and FIDO2NoUserPresence are
	// its --fido2-with-client-pin=no and --fido2-with-user-presence=no.
	// The PIN is FIDO2PIN, or when that is nil the one AskPIN gives
	// (PromptFIDO2PIN, asked once: it is the key's own PIN, not a new one).
	// FIDO2Transport, when set, is the security key instead (64-byte
	// CTAPHID reports, as Options.FIDO2Transport).
	FIDO2Device         string
	FIDO2Transport      io.ReadWriter
	FIDO2PIN            []byte
	FIDO2NoClientPIN    bool
	FIDO2NoUserPresence bool
	// RecoveryKey enrolls a systemd recovery key (EnrollRecovery).
	RecoveryKey bool
	// Wipe names the keyslots removed after enrolling, in
	// systemd-cryptenroll's --wipe-slot words (see WipeKeyslots).
	Wipe []string
	// AskPIN, when set, asks the user for a PIN the fields above do not
	// hold, with one of the Prompt strings, only after Existing opened a
	// keyslot. Enroll wipes what it returns. Without AskPIN a PIN that is
	// needed and not given is ErrNeedPIN.
	AskPIN func(prompt string) ([]byte, error)
}

// The prompts Enrollment.AskPIN and UnlockWithPIN's ask are called with:
// systemd's words.
const (
	PromptTPM2PIN      = "Please enter TPM2 PIN: "
	PromptTPM2PINAgain = "Please enter TPM2 PIN (repeat): "
	PromptPKCS11PIN    = "Please enter security token PIN: "
)

// Enrolled is what Enroll did.
type Enrolled struct {
	// Type is the type of the token enrolled (TypeTPM2, TypePKCS11,
	// TypeFIDO2, TypeRecovery), "" when Enroll only wiped keyslots.
	Type string
	// Keyslot and TokenID are the new keyslot and token, -1 without one.
	Keyslot, TokenID int
	// Authorised is the keyslot Existing opened.
	Authorised int
	// RecoveryKey is the new recovery key, to show once; the caller
	// wipes it.
	RecoveryKey []byte
	// Wiped are the keyslots removed, in order.
	Wiped []int
}

// wipeClasses are --wipe-slot's words for the keyslots of a kind: the
// token type naming them ("" for password: named by no token).
var wipeClasses = map[string]string{
	"password": "", "recovery": TypeRecovery, "tpm2": TypeTPM2, "clevis": TypeClevis,
	"pkcs11": TypePKCS11, "fido2": "systemd-fido2",
}

// Check reports, before any device is touched, whether e asks for one
// thing that can be done: at most one of TPM2Device, PKCS11URI,
// FIDO2Device and RecoveryKey, or a Wipe; a PKCS#11 URI that parses; PCRs in 0..23;
// --wipe-slot words that exist. Its errors wrap
// blkcrypt.ErrInvalidOptions.
func (e *Enrollment) Check() error {
	tpm, pkcs11 := e.TPM2Device != "", e.PKCS11URI != ""
	n := 0
	for _, b := range []bool{tpm, pkcs11, e.FIDO2Device != "" || e.FIDO2Transport != nil, e.RecoveryKey} {
		if b {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w: only one of a TPM2 token, a PKCS#11 token, a FIDO2 token and a recovery key can be enrolled at once", blkcrypt.ErrInvalidOptions)
	}
	if n == 0 && len(e.Wipe) == 0 {
		return fmt.Errorf("%w: nothing to do: no TPM2 token, PKCS#11 token, FIDO2 token, recovery key or keyslot to wipe", blkcrypt.ErrInvalidOptions)
	}
	if pkcs11 && e.PKCS11URI != "auto" {
		if _, err := ParsePKCS11URI(e.PKCS11URI); err != nil {
			return fmt.Errorf("%w: %w", blkcrypt.ErrInvalidOptions, err)
		}
	}
	for _, p := range e.TPM2PCRs {
		if p < 0 || p > 23 {
			return fmt.Errorf("%w: PCR %d out of range 0..23", blkcrypt.ErrInvalidOptions, p)
		}
	}
	for _, w := range e.Wipe {
		w = strings.TrimSpace(w)
		if _, class := wipeClasses[w]; !class && w != "all" && w != "empty" {
			if n, err := strconv.Atoi(w); err != nil || n < 0 {
				return fmt.Errorf("%w: wipe-slot %q is no keyslot number or slot class", blkcrypt.ErrInvalidOptions, w)
			}
		}
	}
	return nil
}

// Enroll does what systemd-cryptenroll does for e: it checks e (Check)
// and Existing (ErrWrongPassphrase when it opens no keyslot), enrolls the
// token or recovery key e names, keyslot and token in one header update,
// then removes the keyslots e.Wipe names (WipeKeyslots), never the one
// just enrolled nor, when nothing was, the one Existing opened. On an
// error while wiping, the returned Enrolled says what was done, the new
// recovery key included.
func Enroll(ctx context.Context, h *blkcrypt.LUKS, e Enrollment) (Enrolled, error) {
	r := Enrolled{Keyslot: -1, TokenID: -1, Authorised: -1}
	if err := e.Check(); err != nil {
		return r, err
	}
	var err error
	if r.Authorised, err = h.TestPassphrase(ctx, e.Existing, blkcrypt.KeyOptions{Keyslot: e.Keyslot}); err != nil {
		return r, err
	}
	switch {
	case e.TPM2Device != "":
		pin := e.TPM2PIN
		if pin == nil && e.TPM2WithPIN {
			if e.AskPIN == nil {
				return r, fmt.Errorf("%w: a new TPM2 PIN", ErrNeedPIN)
			}
			if pin, err = newPIN(e.AskPIN); err != nil {
				return r, err
			}
			defer wipe(pin)
		}
		r.Keyslot, r.TokenID, err = EnrollTPM2(ctx, h, TPM2EnrollOptions{EnrollOptions: e.EnrollOptions,
			TPM2Device: e.TPM2Device, PCRs: e.TPM2PCRs, PIN: pin})
		r.Type = TypeTPM2
	case e.PKCS11URI != "":
		r.Keyslot, r.TokenID, err = e.enrollPKCS11(ctx, h)
		r.Type = TypePKCS11
	case e.FIDO2Device != "" || e.FIDO2Transport != nil:
		r.Keyslot, r.TokenID, err = e.enrollFIDO2(ctx, h)
		r.Type = TypeFIDO2
	case e.RecoveryKey:
		r.RecoveryKey, r.Keyslot, r.TokenID, err = EnrollRecovery(ctx, h, e.EnrollOptions)
		r.Type = TypeRecovery
	}
	if err != nil {
		return Enrolled{Keyslot: -1, TokenID: -1, Authorised: r.Authorised}, err
	}
	if len(e.Wipe) > 0 {
		keep := r.Keyslot
		if keep < 0 {
			keep = r.Authorised
		}
		r.Wiped, err = WipeKeyslots(ctx, h, e.Wipe, keep)
	}
	return r, err
}

// enrollFIDO2 enrolls the FIDO2 key e names. The token requires the
// key's PIN unless FIDO2NoClientPIN; then a PIN is still asked for when
// the key wants one to make the credential, as systemd-cryptenroll does.
func (e *Enrollment) enrollFIDO2(ctx context.Context, h *blkcrypt.LUKS) (slot, tokenID int, err error) {
	fo := FIDO2EnrollOptions{EnrollOptions: e.EnrollOptions, Device: e.FIDO2Device, Transport: e.FIDO2Transport,
		PIN: e.FIDO2PIN, NoClientPIN: e.FIDO2NoClientPIN, UP: !e.FIDO2NoUserPresence}
	ask := func() error {
		if e.AskPIN == nil {
			return fmt.Errorf("%w: the FIDO2 security key's PIN", ErrNeedPIN)
		}
		pin, err := e.AskPIN(PromptFIDO2PIN)
		if err != nil {
			return err
		}
		if len(pin) == 0 {
			return fmt.Errorf("%w: an empty FIDO2 PIN", blkcrypt.ErrInvalidOptions)
		}
		fo.PIN = pin
		return nil
	}
	defer func() {
		if e.FIDO2PIN == nil {
			wipe(fo.PIN)
		}
	}()
	if fo.PIN == nil && !fo.NoClientPIN {
		if err := ask(); err != nil {
			return -1, -1, err
		}
	}
	slot, tokenID, err = EnrollFIDO2(ctx, h, fo)
	if errors.Is(err, ErrNeedPIN) && fo.PIN == nil {
		if err := ask(); err != nil {
			return -1, -1, err
		}
		slot, tokenID, err = EnrollFIDO2(ctx, h, fo)
	}
	return slot, tokenID, err
}

// enrollPKCS11 enrolls the security token e.PKCS11URI names ("auto": the
// only one present), asking for its PIN when it needs one and e holds none.
func (e *Enrollment) enrollPKCS11(ctx context.Context, h *blkcrypt.LUKS) (slot, tokenID int, err error) {
	uri := e.PKCS11URI
	if uri == "auto" {
		uris, err := PKCS11TokenURIs("")
		if err != nil {
			return -1, -1, err
		}
		if len(uris) != 1 {
			return -1, -1, fmt.Errorf("%w: pkcs11 URI auto: %d security tokens present, want exactly one", blkcrypt.ErrInvalidOptions, len(uris))
		}
		uri = uris[0]
	}
	po := PKCS11EnrollOptions{EnrollOptions: e.EnrollOptions, URI: uri, PIN: e.PKCS11PIN}
	slot, tokenID, err = EnrollPKCS11(ctx, h, po)
	if errors.Is(err, ErrNeedPIN) && po.PIN == nil && e.AskPIN != nil {
		pin, askErr := e.AskPIN(PromptPKCS11PIN)
		if askErr != nil {
			return -1, -1, fmt.Errorf("%w: %w", err, askErr)
		}
		defer wipe(pin)
		po.PIN = pin
		slot, tokenID, err = EnrollPKCS11(ctx, h, po)
	}
	return slot, tokenID, err
}

// newPIN asks for a new TPM2 PIN twice, as systemd-cryptenroll does; the
// answers must match and not be empty.
func newPIN(ask func(string) ([]byte, error)) ([]byte, error) {
	a, err := ask(PromptTPM2PIN)
	if err != nil {
		return nil, err
	}
	b, err := ask(PromptTPM2PINAgain)
	if err != nil {
		wipe(a)
		return nil, err
	}
	defer wipe(b)
	if len(a) == 0 || subtle.ConstantTimeCompare(a, b) != 1 {
		wipe(a)
		return nil, fmt.Errorf("%w: the PINs do not match or are empty", blkcrypt.ErrInvalidOptions)
	}
	return a, nil
}

// ParsePCRs reads systemd's list of PCRs (--tpm2-pcrs): numbers in 0..23
// joined by + or ,. "" is none (an empty, non-nil list), unlike a nil
// Enrollment.TPM2PCRs, which is PCR 7. Its errors wrap
// blkcrypt.ErrInvalidOptions.
func ParsePCRs(s string) ([]int, error) {
	out := []int{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 23 {
			return nil, fmt.Errorf("%w: %q is not a PCR number 0..23", blkcrypt.ErrInvalidOptions, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// WipeKeyslots removes the keyslots words name, as systemd-cryptenroll's
// --wipe-slot does, and then the tokens left naming none of the
// remaining keyslots. A word is a keyslot number, "all", "empty" (the
// keyslots an empty passphrase opens), "password" (those no token
// names), or "recovery", "tpm2", "clevis", "pkcs11", "fido2" (those a
// token of that kind names). Keyslot keep is never removed (-1: none
// kept). A number that is no active keyslot wraps
// blkcrypt.ErrInvalidOptions, and nothing is removed then. It returns
// the keyslots removed, also on an error part way.
func WipeKeyslots(ctx context.Context, h *blkcrypt.LUKS, words []string, keep int) (wiped []int, err error) {
	hd, err := h.Header(ctx)
	if err != nil {
		return nil, err
	}
	toks, err := h.Tokens(ctx)
	if err != nil {
		return nil, err
	}
	byType := map[int]string{} // keyslot → the type of a token naming it
	for _, js := range toks {
		typ, slots := typeAndKeyslots(js)
		for _, s := range slots {
			byType[s] = typ
		}
	}
	active := hd.ActiveKeyslots()
	var wipeSet []int
	for _, w := range words {
		w = strings.TrimSpace(w)
		typ, class := wipeClasses[w]
		switch {
		case w == "all":
			wipeSet = append(wipeSet, active...)
		case w == "empty":
			for _, s := range active {
				if _, err := h.TestPassphrase(ctx, []byte{}, blkcrypt.KeyOptions{Keyslot: &s}); err == nil {
					wipeSet = append(wipeSet, s)
				}
			}
		case class:
			for _, s := range active {
				if t, named := byType[s]; (typ == "" && !named) || (typ != "" && t == typ) {
					wipeSet = append(wipeSet, s)
				}
			}
		default:
			n, err := strconv.Atoi(w)
			if err != nil || !slices.Contains(active, n) {
				return nil, fmt.Errorf("%w: wipe-slot %q is no active keyslot or slot class", blkcrypt.ErrInvalidOptions, w)
			}
			wipeSet = append(wipeSet, n)
		}
	}
	slices.Sort(wipeSet)
	for _, s := range slices.Compact(wipeSet) {
		if s == keep {
			continue
		}
		if err := h.KillSlot(ctx, s, blkcrypt.KeyOptions{Force: true}); err != nil {
			return wiped, fmt.Errorf("wiping keyslot %d: %w", s, err)
		}
		wiped = append(wiped, s)
	}
	// Tokens that now name no active keyslot go too.
	if hd, err = h.Header(ctx); err != nil {
		return wiped, err
	}
	left := hd.ActiveKeyslots()
	for id, js := range toks {
		_, slots := typeAndKeyslots(js)
		if len(slots) > 0 && !slices.ContainsFunc(slots, func(s int) bool { return slices.Contains(left, s) }) {
			if err := h.RemoveToken(ctx, id); err != nil && !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				return wiped, fmt.Errorf("removing token %d: %w", id, err)
			}
		}
	}
	return wiped, nil
}

// typeAndKeyslots is a token's type and keyslots, as far as they parse.
func typeAndKeyslots(js []byte) (string, []int) {
	var t struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
	}
	if json.Unmarshal(js, &t) != nil {
		return "", nil
	}
	var out []int
	for _, k := range t.Keyslots {
		if n, err := strconv.Atoi(k); err == nil {
			out = append(out, n)
		}
	}
	return t.Type, out
}

// UnlockWithPIN is Unlock asking for a PIN only when one is needed, as
// systemd-cryptsetup does: when o.PIN is nil and Unlock fails because a
// token needs a PIN (ErrNeedPIN), ask is called with PromptPKCS11PIN
// when a systemd-pkcs11 token needs it, PromptFIDO2PIN for a
// systemd-fido2 one, else PromptTPM2PIN, and Unlock
// tries again with the answer, which is then wiped. A nil ask is Unlock
// alone.
func UnlockWithPIN(ctx context.Context, h *blkcrypt.LUKS, o Options, ask func(prompt string) ([]byte, error)) (passphrase []byte, tokenID int, err error) {
	pass, id, err := Unlock(ctx, h, o)
	if err == nil || o.PIN != nil || ask == nil || !errors.Is(err, ErrNeedPIN) {
		return pass, id, err
	}
	prompt := PromptTPM2PIN
	switch msg := err.Error(); {
	case strings.Contains(msg, TypePKCS11):
		prompt = PromptPKCS11PIN
	case strings.Contains(msg, TypeFIDO2):
		prompt = PromptFIDO2PIN
	}
	if o.PIN, err = ask(prompt); err != nil {
		return nil, -1, err
	}
	defer wipe(o.PIN)
	return Unlock(ctx, h, o)
}
