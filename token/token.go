// Package token unlocks and enrolls the LUKS2 tokens systemd-cryptenroll
// writes: systemd-tpm2 (a secret sealed by a TPM 2.0 under a PCR policy,
// optionally with a PIN), systemd-fido2 (a FIDO2 security key's
// hmac-secret, over Linux hidraw; EnrollFIDO2) and systemd-recovery (a
// recovery key typed as a passphrase); and the clevis tokens clevis luks bind writes, with the
// tang, tpm2 and sss pins (BindClevis, DecryptClevis). A token yields a
// passphrase; the volume then opens through blkcrypt.Open with
// OpenOptions.Passphrase, as any passphrase does.
//
// Enroll is systemd-cryptenroll as a call: one TPM2 token, PKCS#11 token
// or recovery key in a new keyslot, then its --wipe-slot (WipeKeyslots);
// UnlockWithPIN is Unlock asking for a PIN only when a token needs one.
//
// The package talks to a TPM with go-tpm over the TCTI strings systemd
// accepts (device:/dev/tpmrm0, swtpm:host=H,port=P, swtpm:path=SOCKET,
// and /dev/tpmrm0 when none is given). It sits above the root package, as
// nbd/nbdclient does: the root compiles no TPM or network code.
//
// systemd-pkcs11 tokens (a secret encrypted to a security token's RSA
// certificate; EnrollPKCS11, DecryptPKCS11) need the pkcs11 build tag,
// which compiles a cgo PKCS#11 binding; the default build has no cgo and
// reports ErrPKCS11NotBuilt for them.
package token

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/blkcrypt/blkcrypt"
)

// Sentinel errors. Each failure is a one-line error naming the token and
// wrapping one of these.
var (
	// ErrNoToken: the header holds no token that Unlock may use
	// (or none of the id or type asked for).
	ErrNoToken = errors.New("no usable token")
	// ErrNoTPM: the TPM device cannot be reached.
	ErrNoTPM = errors.New("no TPM2 device")
	// ErrBadToken: the token's JSON or blob is malformed, or the TPM
	// refuses the blob.
	ErrBadToken = errors.New("malformed token")
	// ErrUnsupported: the token uses a feature this package does not
	// implement (named in the message).
	ErrUnsupported = errors.New("unsupported token")
	// ErrPCRMismatch: the PCRs no longer hold the values the secret was
	// sealed to.
	ErrPCRMismatch = errors.New("the PCR values do not match the policy")
	// ErrNeedPIN: the token needs a PIN and none was given.
	ErrNeedPIN = errors.New("the token needs a PIN")
	// ErrWrongPIN: the TPM refused the PIN.
	ErrWrongPIN = errors.New("wrong PIN")
	// ErrLockout: the TPM is in dictionary-attack lockout.
	ErrLockout = errors.New("the TPM is in lockout")
	// ErrWrongSecret: the unsealed passphrase opens none of the token's
	// keyslots.
	ErrWrongSecret = errors.New("the unsealed passphrase opens none of the token's keyslots")
)

// Options choose the tokens Unlock tries and how.
type Options struct {
	// TPM2Device is the TPM in systemd's spelling; "" or "auto" is
	// /dev/tpmrm0.
	TPM2Device string
	// PIN, when set, lets Unlock try the tokens that need one (after
	// those that need none). Unlock does not keep it.
	PIN []byte
	// TokenID restricts Unlock to one token (cryptsetup's --token-id).
	TokenID *int
	// TokenType restricts Unlock to one token type (--token-type).
	TokenType string
	// TangTimeout bounds each exchange with a tang server (clevis
	// tokens); zero is DefaultTangTimeout.
	TangTimeout time.Duration
	// HTTPClient, when set, talks to tang servers (see ClevisOptions).
	HTTPClient *http.Client
	// FIDO2Device is the FIDO2 security key for systemd-fido2 tokens: a
	// /dev/hidrawN path, or "auto" for each key present. systemd-fido2
	// tokens are tried only when it or FIDO2Transport is set, or when
	// TokenID or TokenType names them (then as "auto"): a key may wait
	// for a touch.
	FIDO2Device string
	// FIDO2Transport, when set, is the security key instead: 64-byte
	// CTAPHID reports (tests, or a key reached another way).
	FIDO2Transport io.ReadWriter
}

// Unlock tries the header's tokens and returns the passphrase the first
// that works yields, and its id: first the tokens that need no
// interaction (systemd-tpm2 without a PIN, clevis, and systemd-fido2
// without a PIN when o.FIDO2Device or o.FIDO2Transport names a key), then
// systemd-pkcs11 (with o.PIN, else the URI's pin-value or pin-source, else
// none if the token needs no login), then, when o.PIN is set,
// systemd-tpm2 and systemd-fido2 tokens that need a PIN, each in id order. The passphrase is checked against the
// token's keyslots before it is returned; the caller wipes it. Tokens of
// other types are skipped unless o.TokenID or o.TokenType name them
// (systemd-pkcs11 too in a build without the pkcs11 tag); a
// systemd-recovery token is typed, never unlocked. When none works the
// error says why for each token tried (one line).
//
// A LUKS1 volume has no tokens: there Unlock tries the clevis bindings
// clevis luks bind stored with luksmeta (ReadLUKSMeta), each as a clevis
// token whose id is its luksmeta slot (the keyslot it opens), and says
// "luksmeta slot N" where it would say "token N".
func Unlock(ctx context.Context, h *blkcrypt.LUKS, o Options) (passphrase []byte, tokenID int, err error) {
	toks, err := h.Tokens(ctx)
	if err != nil {
		return nil, -1, err
	}
	ids := make([]int, 0, len(toks))
	for id := range toks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	type cand struct {
		id     int
		tok    *TPM2Token
		clevis *ClevisToken
		pkcs11 *PKCS11Token
		fido2  *FIDO2Token
		lm     bool // a LUKS1 clevis binding, in luksmeta slot id
	}
	var noPIN, withPIN, pkcs11 []cand
	notBuilt := -1 // a systemd-pkcs11 token skipped: no PKCS#11 in this build
	var errs []error
	asked := o.TokenID != nil || o.TokenType != ""
	if len(toks) == 0 {
		lm, lmErrs, err := luksmetaClevis(ctx, h)
		if err != nil {
			return nil, -1, err
		}
		if o.TokenID == nil && (o.TokenType == "" || o.TokenType == TypeClevis) {
			errs = append(errs, lmErrs...)
		}
		for id := range luksmetaSlots {
			if t := lm[id]; t != nil && (o.TokenID == nil || *o.TokenID == id) && (o.TokenType == "" || o.TokenType == TypeClevis) {
				noPIN = append(noPIN, cand{id: id, clevis: t, lm: true})
			}
		}
	}
	for _, id := range ids {
		if o.TokenID != nil && *o.TokenID != id {
			continue
		}
		typ := tokenType(toks[id])
		if o.TokenType != "" && o.TokenType != typ {
			continue
		}
		switch typ {
		case TypeTPM2:
			t, err := ParseTPM2Token(toks[id])
			if err != nil {
				errs = append(errs, fmt.Errorf("token %d (%s): %w", id, typ, err))
				continue
			}
			if t.PIN {
				withPIN = append(withPIN, cand{id: id, tok: t})
			} else {
				noPIN = append(noPIN, cand{id: id, tok: t})
			}
		case TypeClevis:
			t, err := ParseClevisToken(toks[id])
			if err != nil {
				errs = append(errs, fmt.Errorf("token %d (%s): %w", id, typ, err))
				continue
			}
			noPIN = append(noPIN, cand{id: id, clevis: t})
		case TypePKCS11:
			if loadPKCS11 == nil {
				if asked {
					errs = append(errs, fmt.Errorf("token %d (%s): %w", id, typ, ErrPKCS11NotBuilt))
				} else if notBuilt < 0 {
					notBuilt = id
				}
				continue
			}
			t, err := ParsePKCS11Token(toks[id])
			if err != nil {
				errs = append(errs, fmt.Errorf("token %d (%s): %w", id, typ, err))
				continue
			}
			// Tried with o.PIN, or the URI's PIN, or none when the token
			// needs no login; else ErrNeedPIN.
			pkcs11 = append(pkcs11, cand{id: id, pkcs11: t})
		case TypeFIDO2:
			if !asked && o.FIDO2Device == "" && o.FIDO2Transport == nil {
				continue
			}
			t, err := ParseFIDO2Token(toks[id])
			if err != nil {
				errs = append(errs, fmt.Errorf("token %d (%s): %w", id, typ, err))
				continue
			}
			if t.ClientPIN {
				withPIN = append(withPIN, cand{id: id, fido2: t})
			} else {
				noPIN = append(noPIN, cand{id: id, fido2: t})
			}
		case TypeRecovery:
			if asked {
				errs = append(errs, fmt.Errorf("token %d (%s): %w: a recovery key is typed as a passphrase", id, typ, ErrUnsupported))
			}
		default:
			if asked {
				errs = append(errs, fmt.Errorf("token %d (%q): %w: type not built in", id, typ, ErrUnsupported))
			}
		}
	}
	try := func(c cand, pin []byte) ([]byte, error) {
		var pass []byte
		var err error
		typ, keyslots := TypeTPM2, []int(nil)
		name := fmt.Sprintf("token %d", c.id)
		if c.lm {
			name = fmt.Sprintf("luksmeta slot %d", c.id)
		}
		if c.fido2 != nil {
			typ, keyslots = TypeFIDO2, c.fido2.Keyslots
			pass, err = unlockFIDO2(ctx, c.id, c.fido2, o, pin)
		} else if c.pkcs11 != nil {
			typ, keyslots = TypePKCS11, c.pkcs11.Keyslots
			pass, err = unlockPKCS11(ctx, c.id, c.pkcs11, pin)
		} else if c.clevis != nil {
			typ, keyslots = TypeClevis, c.clevis.Keyslots
			co := ClevisOptions{TPM2Device: o.TPM2Device, TangTimeout: o.TangTimeout, HTTPClient: o.HTTPClient}
			if c.lm {
				pass, err = unlockLUKSMetaClevis(ctx, c.id, c.clevis, co)
			} else {
				pass, err = unlockClevis(ctx, c.id, c.clevis, co)
			}
		} else {
			keyslots = c.tok.Keyslots
			pass, err = unsealTPM2(ctx, c.id, c.tok, o.TPM2Device, pin)
		}
		if err != nil {
			return nil, err
		}
		for _, ks := range keyslots {
			if _, err := h.TestPassphrase(ctx, pass, blkcrypt.KeyOptions{Keyslot: &ks}); err == nil {
				return pass, nil
			} else if ctx.Err() != nil {
				wipe(pass)
				return nil, ctx.Err()
			}
		}
		wipe(pass)
		return nil, fmt.Errorf("%s (%s): %w %v", name, typ, ErrWrongSecret, keyslots)
	}
	for _, c := range noPIN {
		// A systemd 248 FIDO2 token may need a PIN the key asks for.
		var pin []byte
		if c.fido2 != nil {
			pin = o.PIN
		}
		pass, err := try(c, pin)
		if err == nil {
			return pass, c.id, nil
		}
		errs = append(errs, err)
	}
	for _, c := range pkcs11 {
		pass, err := try(c, o.PIN)
		if err == nil {
			return pass, c.id, nil
		}
		errs = append(errs, err)
	}
	for _, c := range withPIN {
		if o.PIN == nil {
			typ := TypeTPM2
			if c.fido2 != nil {
				typ = TypeFIDO2
			}
			errs = append(errs, fmt.Errorf("token %d (%s): %w", c.id, typ, ErrNeedPIN))
			continue
		}
		pass, err := try(c, o.PIN)
		if err == nil {
			return pass, c.id, nil
		}
		errs = append(errs, err)
	}
	switch len(errs) {
	case 0:
		if notBuilt >= 0 {
			return nil, -1, fmt.Errorf("%w (token %d is %s: %v)", ErrNoToken, notBuilt, TypePKCS11, ErrPKCS11NotBuilt)
		}
		return nil, -1, ErrNoToken
	case 1:
		return nil, -1, errs[0]
	}
	// One line: the reasons joined with "; ", each still matchable.
	return nil, -1, joined(errs)
}

type joinErr []error

func joined(errs []error) error { return joinErr(errs) }

func (j joinErr) Error() string {
	s := ""
	for i, e := range j {
		if i > 0 {
			s += "; "
		}
		s += e.Error()
	}
	return s
}

func (j joinErr) Unwrap() []error { return j }
