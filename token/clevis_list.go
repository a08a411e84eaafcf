package token

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
)

// ClevisBinding is one clevis binding of a volume, as clevis luks list
// shows it ("SLOT: PIN 'CONFIG'").
type ClevisBinding struct {
	Keyslot int
	TokenID int
	Pin     string
	// Config is the pin configuration clevis luks list prints for the
	// binding (the one clevis luks bind would take to make it again).
	Config string
}

// String is clevis luks list's line for the binding.
func (b ClevisBinding) String() string {
	return strconv.Itoa(b.Keyslot) + ": " + b.Pin + " '" + b.Config + "'"
}

// ListClevis lists the volume's clevis bindings by keyslot, as clevis
// luks list does (a token naming several keyslots is listed for each).
// Tokens that do not parse are skipped, as clevis skips them. On LUKS1
// the bindings are luksmeta's (TokenID -1).
func ListClevis(ctx context.Context, h *blkcrypt.LUKS) ([]ClevisBinding, error) {
	toks, err := h.Tokens(ctx)
	if err != nil {
		return nil, err
	}
	var out []ClevisBinding
	if len(toks) == 0 {
		lm, _, err := luksmetaClevis(ctx, h)
		if err != nil {
			return nil, err
		}
		for slot, t := range lm {
			if pin, cfg, err := ClevisConfig(t.JWE); err == nil {
				out = append(out, ClevisBinding{Keyslot: slot, TokenID: -1, Pin: pin, Config: cfg})
			}
		}
	}
	for id, js := range toks {
		if tokenType(js) != TypeClevis {
			continue
		}
		t, err := ParseClevisToken(js)
		if err != nil {
			continue
		}
		pin, cfg, err := ClevisConfig(t.JWE)
		if err != nil {
			continue
		}
		for _, ks := range t.Keyslots {
			out = append(out, ClevisBinding{Keyslot: ks, TokenID: id, Pin: pin, Config: cfg})
		}
	}
	slices.SortFunc(out, func(a, b ClevisBinding) int { return a.Keyslot - b.Keyslot })
	return out, nil
}

// ClevisConfig returns a clevis JWE's pin and its configuration as
// clevis luks list prints them: tang {"url"}, tpm2 {"hash", "key",
// "pcr_bank", "pcr_ids", "pcr_digest"} (those present), sss {"t", "pins"}
// with the tang and tpm2 children in lists and a nested sss last.
func ClevisConfig(jwe string) (pin, config string, err error) {
	return clevisConfig(jwe, 0)
}

func clevisConfig(jwe string, depth int) (string, string, error) {
	if depth > maxClevisDepth {
		return "", "", fmt.Errorf("%w: sss pins nested deeper than %d", ErrBadToken, maxClevisDepth)
	}
	h, err := parseProtected(jwe)
	if err != nil {
		return "", "", err
	}
	q := func(s string) string {
		// As clevis prints it: no HTML escaping of & < >.
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		_ = e.Encode(s)
		return strings.TrimSuffix(b.String(), "\n")
	}
	switch h.Clevis.Pin {
	case "tang":
		if h.Clevis.Tang == nil {
			return "", "", fmt.Errorf("%w: tang pin: header clevis.tang missing", ErrBadToken)
		}
		return "tang", `{"url":` + q(h.Clevis.Tang.URL) + `}`, nil
	case "tpm2":
		if h.Clevis.TPM2 == nil {
			return "", "", fmt.Errorf("%w: tpm2 pin: header clevis.tpm2 missing", ErrBadToken)
		}
		t := h.Clevis.TPM2
		var parts []string
		for _, kv := range [][2]string{{"hash", t.Hash}, {"key", t.Key}, {"pcr_bank", t.PCRBank}, {"pcr_ids", t.PCRIDs}, {"pcr_digest", t.PCRDigest}} {
			if kv[1] != "" {
				parts = append(parts, q(kv[0])+":"+q(kv[1]))
			}
		}
		return "tpm2", "{" + strings.Join(parts, ",") + "}", nil
	case "sss":
		s := h.Clevis.SSS
		if s == nil {
			return "", "", fmt.Errorf("%w: sss pin: header clevis.sss missing", ErrBadToken)
		}
		var tang, tpm, nested []string
		for _, child := range s.JWE {
			pin, cfg, err := clevisConfig(child, depth+1)
			if err != nil {
				continue // clevis skips a share it cannot read
			}
			switch pin {
			case "tang":
				tang = append(tang, cfg)
			case "tpm2":
				tpm = append(tpm, cfg)
			case "sss":
				nested = append(nested[:0], cfg) // clevis keeps the last
			}
		}
		var pins []string
		if len(tang) > 0 {
			pins = append(pins, `"tang":[`+strings.Join(tang, ",")+`]`)
		}
		if len(tpm) > 0 {
			pins = append(pins, `"tpm2":[`+strings.Join(tpm, ",")+`]`)
		}
		if len(nested) > 0 {
			pins = append(pins, `"sss":`+nested[0])
		}
		return "sss", `{"t":` + strconv.FormatInt(s.T, 10) + `,"pins":{` + strings.Join(pins, ",") + `}}`, nil
	}
	return h.Clevis.Pin, "", fmt.Errorf("%w: clevis pin %q is not built in (tang, tpm2 and sss are)", ErrUnsupported, h.Clevis.Pin)
}

// UnbindClevis removes the clevis binding of keyslot slot, as clevis
// luks unbind -d DEV -s SLOT does: the keyslot, then the token (a token
// left naming no keyslot by a crash between the two is harmless, and
// clevis luks bind removes such tokens). The last keyslot is refused
// unless force (blkcrypt.ErrWouldDestroy). A LUKS1 binding (luksmeta's)
// is refused (ErrUnsupported) and nothing is written.
func UnbindClevis(ctx context.Context, h *blkcrypt.LUKS, slot int, force bool) error {
	bs, err := ListClevis(ctx, h)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(bs, func(b ClevisBinding) bool { return b.Keyslot == slot })
	if i < 0 {
		return fmt.Errorf("%w: keyslot %d has no clevis binding", blkcrypt.ErrInvalidOptions, slot)
	}
	if bs[i].TokenID < 0 {
		return fmt.Errorf("%w: keyslot %d's clevis binding is in LUKS1's luksmeta, which blkcrypt only reads (clevis luks unbind removes it)", ErrUnsupported, slot)
	}
	if err := h.KillSlot(ctx, slot, blkcrypt.KeyOptions{Force: force}); err != nil {
		return err
	}
	toks, err := h.Tokens(ctx)
	if err != nil {
		return err
	}
	if t, err := ParseClevisToken(toks[bs[i].TokenID]); err == nil && len(t.Keyslots) > 0 {
		return nil // the token still names other keyslots
	}
	return h.RemoveToken(ctx, bs[i].TokenID)
}
