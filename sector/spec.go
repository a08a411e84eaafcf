package sector

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/capi"
)

// Spec is a parsed dm-crypt cipher specification.
type Spec struct {
	// CAPI is the crypto API name of the transform, without the IV
	// generator: "xts(aes)", "cbc(serpent)". For essiv it is the whole
	// template, "essiv(cbc(aes),sha256)", and the IV passed to it is plain64.
	CAPI string
	// Cipher and Chain are the legacy form's parts ("aes", "xts"); empty for
	// the capi: form.
	Cipher, Chain string
	// KeyCount is the number of subkeys (the legacy ":keycount"), a power of
	// two, 1 by default.
	KeyCount int
	// IVMode and IVOpts are the IV generator and its option ("essiv",
	// "sha256"). IVMode is empty for ecb.
	IVMode, IVOpts string
}

// String returns the spec in the legacy form where it has one, as
// cryptsetup prints it.
func (s *Spec) String() string {
	var b strings.Builder
	if s.Cipher != "" {
		b.WriteString(s.Cipher)
		if s.KeyCount > 1 {
			fmt.Fprintf(&b, ":%d", s.KeyCount)
		}
		b.WriteString("-" + s.Chain)
	} else {
		b.WriteString("capi:" + s.innerCAPI())
	}
	if s.IVMode != "" {
		b.WriteString("-" + s.IVMode)
		if s.IVOpts != "" {
			b.WriteString(":" + s.IVOpts)
		}
	}
	return b.String()
}

// innerCAPI is the transform without the essiv wrapper.
func (s *Spec) innerCAPI() string {
	if s.IVMode == "essiv" {
		n, err := capi.ParseName(s.CAPI)
		if err == nil && n.Ident == "essiv" && len(n.Args) == 2 {
			return n.Args[0].String()
		}
	}
	return s.CAPI
}

// ivModes lists the IV generators and whether they take an option.
var ivModes = map[string]struct{ opts, needsOpts bool }{
	"plain": {}, "plain64": {}, "plain64be": {}, "null": {}, "benbi": {}, "eboiv": {},
	"essiv": {true, true}, "lmk": {}, "tcw": {}, "elephant": {}, "random": {},
}

// maxSpecLen bounds a whole spec; maxPartLen each legacy part (cryptsetup's
// MAX_CIPHER_LEN), so that the canonical form stays within maxSpecLen.
const (
	maxSpecLen = 256
	maxPartLen = 32
)

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ParseSpec parses a dm-crypt cipher specification, in the legacy form
// "cipher[:keycount]-chainmode-ivmode[:ivopts]" or the "capi:NAME-ivmode[:ivopts]"
// form. Errors wrap ErrInvalidSpec and name the part that is wrong.
func ParseSpec(spec string) (*Spec, error) {
	if spec == "" {
		return nil, fmt.Errorf("%w: empty cipher specification", ErrInvalidSpec)
	}
	if len(spec) > maxSpecLen {
		return nil, fmt.Errorf("%w: cipher specification longer than %d characters", ErrInvalidSpec, maxSpecLen)
	}
	s := &Spec{KeyCount: 1}
	if rest, ok := strings.CutPrefix(spec, "capi:"); ok {
		// ivopts after the last ':', ivmode after the last '-'.
		if i := strings.LastIndexByte(rest, '-'); i >= 0 && !strings.ContainsAny(rest[i:], "()") {
			s.CAPI, s.IVMode = rest[:i], rest[i+1:]
			if j := strings.LastIndexByte(s.IVMode, ':'); j >= 0 {
				s.IVMode, s.IVOpts = s.IVMode[:j], s.IVMode[j+1:]
			}
		} else {
			s.CAPI = rest
		}
		if s.CAPI == "" {
			return nil, fmt.Errorf("%w: %q: missing crypto API name after capi:", ErrInvalidSpec, spec)
		}
		n, err := capi.ParseName(s.CAPI)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrInvalidSpec, spec, err)
		}
		s.CAPI = n.String()
		if s.IVMode == "lmk" || strings.HasPrefix(s.IVMode, "lmk:") {
			s.KeyCount = 64 // dm-crypt: the capi: form of lmk always takes 64 keys
		}
		if s.IVMode == "" && n.Ident != "ecb" {
			return nil, fmt.Errorf("%w: %q: IV mechanism required for %s", ErrInvalidSpec, spec, s.CAPI)
		}
	} else {
		parts := strings.SplitN(spec, "-", 3)
		cipherPart := parts[0]
		if c, k, ok := strings.Cut(cipherPart, ":"); ok {
			n, err := strconv.Atoi(k)
			if err != nil || n < 1 || n > 64 || n&(n-1) != 0 {
				return nil, fmt.Errorf("%w: %q: key count %q is not a power of two from 1 to 64", ErrInvalidSpec, spec, k)
			}
			cipherPart, s.KeyCount = c, n
		}
		if len(cipherPart) > maxPartLen || len(parts) > 1 && len(parts[1]) > maxPartLen || len(parts) > 2 && len(parts[2]) > 2*maxPartLen {
			return nil, fmt.Errorf("%w: %q: a part is longer than %d characters", ErrInvalidSpec, truncate(spec), maxPartLen)
		}
		// A comma is allowed: cryptsetup spells Adiantum
		// "xchacha12,aes-adiantum-plain64", i.e. adiantum(xchacha12,aes).
		if cipherPart == "" || strings.ContainsAny(cipherPart, "():") || strings.HasPrefix(cipherPart, ",") || strings.HasSuffix(cipherPart, ",") {
			return nil, fmt.Errorf("%w: %q: bad cipher name %q", ErrInvalidSpec, spec, cipherPart)
		}
		s.Cipher = cipherPart
		switch len(parts) {
		case 1:
			s.Chain, s.IVMode = "cbc", "plain"
		case 2:
			if parts[1] == "plain" {
				s.Chain, s.IVMode = "cbc", "plain"
			} else {
				s.Chain = parts[1]
			}
		case 3:
			s.Chain, s.IVMode = parts[1], parts[2]
			if i := strings.IndexByte(s.IVMode, ':'); i >= 0 {
				s.IVMode, s.IVOpts = s.IVMode[:i], s.IVMode[i+1:]
			}
		}
		if s.Chain == "" || strings.ContainsAny(s.Chain, "(),:") {
			return nil, fmt.Errorf("%w: %q: bad chaining mode %q", ErrInvalidSpec, spec, s.Chain)
		}
		if s.IVMode == "" && s.Chain != "ecb" {
			return nil, fmt.Errorf("%w: %q: IV mechanism required for %s mode", ErrInvalidSpec, spec, s.Chain)
		}
		if s.Chain == "ecb" {
			s.IVMode, s.IVOpts = "", "" // dm-crypt ignores an IV for ecb
		}
		s.CAPI = s.Chain + "(" + s.Cipher + ")"
		if _, err := capi.ParseName(s.CAPI); err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrInvalidSpec, spec, err)
		}
	}
	if s.IVMode != "" {
		m, ok := ivModes[s.IVMode]
		if !ok {
			return nil, fmt.Errorf("%w: %q: unknown IV mode %q", ErrInvalidSpec, spec, s.IVMode)
		}
		if m.needsOpts && s.IVOpts == "" {
			return nil, fmt.Errorf("%w: %q: IV mode %s needs an option (e.g. %s:sha256)", ErrInvalidSpec, spec, s.IVMode, s.IVMode)
		}
		if !m.opts && s.IVOpts != "" && s.IVMode != "lmk" {
			return nil, fmt.Errorf("%w: %q: IV mode %s takes no option", ErrInvalidSpec, spec, s.IVMode)
		}
		if s.IVMode == "random" {
			// A random IV lives in per-sector metadata (dm-integrity): an
			// AEAD (NewAEAD) over an integrity device, never a Cipher.
			return nil, fmt.Errorf("%w: %q: IV mode random needs per-sector metadata: an authenticated cipher over dm-integrity (LUKS2 --integrity, NewAEAD)", ErrUnsupported, spec)
		}
		if s.IVMode == "essiv" {
			if _, err := capi.ParseName(s.IVOpts); err != nil {
				return nil, fmt.Errorf("%w: %q: bad essiv hash %q", ErrInvalidSpec, spec, s.IVOpts)
			}
			s.CAPI = "essiv(" + s.CAPI + "," + s.IVOpts + ")"
		}
	}
	return s, nil
}
