package token

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// PKCS11URI is a parsed RFC 7512 pkcs11: URI: which module, token and
// object it names, and optionally the PIN (pin-value) or where to read it
// (pin-source). Attributes a URI leaves out match anything.
//
// A pin-value in a URI is a secret in the token's JSON and, if the URI
// is typed, on a command line; systemd accepts it, and so does this
// package, but pin-source (a file) or a PIN asked for is the better
// choice.
type PKCS11URI struct {
	// Token attributes (matched against C_GetTokenInfo).
	Token, Manufacturer, Model, Serial string
	// Slot attributes (C_GetSlotList, C_GetSlotInfo); SlotID is nil
	// when the URI names none.
	SlotDescription, SlotManufacturer string
	SlotID                            *uint64
	// Library attributes (C_GetInfo); LibraryVersion is "M" or "M.N".
	LibraryManufacturer, LibraryDescription, LibraryVersion string
	// Object attributes: the label (object=), CKA_ID (id=, raw bytes;
	// nil when absent) and the class (type=: public, private, cert,
	// secret-key or data; "" when absent).
	Object string
	ID     []byte
	Type   string
	// Query attributes: the PIN itself or a file (file:PATH or PATH)
	// holding it, and the module to load (module-path; module-name is
	// kept but the p11-kit proxy, which loads every registered module,
	// is what a URI without module-path reaches).
	PINValue, PINSource    string
	ModuleName, ModulePath string

	has map[string]bool // the attributes the URI names
}

// errURI is the one error ParsePKCS11URI returns, wrapped with the reason.
var errURI = errors.New("invalid pkcs11: URI")

// maxURILen bounds a URI (and so the work of parsing one).
const maxURILen = 4096

var pkcs11Types = map[string]bool{"public": true, "private": true, "cert": true, "secret-key": true, "data": true}

// ParsePKCS11URI parses an RFC 7512 URI ("pkcs11:" path attributes
// joined by ';', then optionally '?' and query attributes joined by
// '&'; values percent-encoded). An attribute given twice, an unknown
// standard attribute or a malformed value is an error; vendor attributes
// (x-…) are ignored.
func ParsePKCS11URI(s string) (*PKCS11URI, error) {
	if len(s) > maxURILen {
		return nil, fmt.Errorf("%w: longer than %d bytes", errURI, maxURILen)
	}
	const scheme = "pkcs11:"
	if len(s) < len(scheme) || !strings.EqualFold(s[:len(scheme)], scheme) {
		return nil, fmt.Errorf("%w: does not start with %q", errURI, scheme)
	}
	rest := s[len(scheme):]
	path, query, _ := strings.Cut(rest, "?")
	u := &PKCS11URI{has: map[string]bool{}}
	for _, part := range []struct {
		text, sep string
		query     bool
	}{{path, ";", false}, {query, "&", true}} {
		if part.text == "" {
			continue
		}
		for _, attr := range strings.Split(part.text, part.sep) {
			if attr == "" {
				continue
			}
			name, raw, ok := strings.Cut(attr, "=")
			if !ok {
				return nil, fmt.Errorf("%w: attribute %q has no '='", errURI, clip(attr))
			}
			name = strings.ToLower(name)
			val, err := pctDecode(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: attribute %q: %v", errURI, clip(name), err)
			}
			if err := u.set(name, val, part.query); err != nil {
				return nil, err
			}
		}
	}
	return u, nil
}

func (u *PKCS11URI) set(name, val string, query bool) error {
	if strings.HasPrefix(name, "x-") {
		return nil
	}
	if u.has[name] {
		return fmt.Errorf("%w: attribute %q given twice", errURI, name)
	}
	var dst *string
	if query {
		switch name {
		case "pin-value":
			dst = &u.PINValue
		case "pin-source":
			dst = &u.PINSource
		case "module-name":
			dst = &u.ModuleName
		case "module-path":
			dst = &u.ModulePath
		}
	} else {
		switch name {
		case "token":
			dst = &u.Token
		case "manufacturer":
			dst = &u.Manufacturer
		case "model":
			dst = &u.Model
		case "serial":
			dst = &u.Serial
		case "slot-description":
			dst = &u.SlotDescription
		case "slot-manufacturer":
			dst = &u.SlotManufacturer
		case "library-manufacturer":
			dst = &u.LibraryManufacturer
		case "library-description":
			dst = &u.LibraryDescription
		case "object":
			dst = &u.Object
		case "slot-id":
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: slot-id %q is not a number", errURI, clip(val))
			}
			u.SlotID = &n
		case "id":
			u.ID = []byte(val)
		case "type":
			if !pkcs11Types[val] {
				return fmt.Errorf("%w: type %q (public, private, cert, secret-key and data are)", errURI, clip(val))
			}
			dst = &u.Type
		case "library-version":
			maj, min, dot := strings.Cut(val, ".")
			if _, err := strconv.ParseUint(maj, 10, 8); err != nil {
				return fmt.Errorf("%w: library-version %q is not M or M.N", errURI, clip(val))
			}
			if _, err := strconv.ParseUint(min, 10, 8); dot && err != nil {
				return fmt.Errorf("%w: library-version %q is not M or M.N", errURI, clip(val))
			}
			dst = &u.LibraryVersion
		}
	}
	if dst == nil && name != "slot-id" && name != "id" {
		where := "path"
		if query {
			where = "query"
		}
		return fmt.Errorf("%w: unknown %s attribute %q", errURI, where, clip(name))
	}
	if dst != nil {
		*dst = val
	}
	u.has[name] = true
	return nil
}

// Has reports whether the URI names the attribute (e.g. "type", "id").
func (u *PKCS11URI) Has(name string) bool { return u.has[name] }

// clip keeps an error message short when it quotes hostile input.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func pctDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("truncated percent escape")
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad percent escape %q", s[i:i+3])
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}

// pctEncode encodes everything but RFC 7512's unreserved characters and
// the few it allows unescaped in attribute values.
func pctEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~:[]@!$'()*+,=&", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// maxPINLen bounds a PIN read from a pin-source file.
const maxPINLen = 1024

// pin returns the URI's PIN: pin-value, else the contents of pin-source
// (one trailing newline dropped), else nil. The caller wipes it.
func (u *PKCS11URI) pin() ([]byte, error) {
	if u.has["pin-value"] {
		return []byte(u.PINValue), nil
	}
	if !u.has["pin-source"] {
		return nil, nil
	}
	p := u.PINSource
	if rest, ok := strings.CutPrefix(p, "file://"); ok {
		p = rest
	} else if rest, ok := strings.CutPrefix(p, "file:"); ok {
		p = rest
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("pin-source %q: only a file (file:/PATH or /PATH) is supported", clip(u.PINSource))
	}
	pin, err := ReadPINFile(p)
	if err != nil {
		return nil, fmt.Errorf("pin-source: %w", err)
	}
	return pin, nil
}

// ReadPINFile reads a PIN from the file at path, as a pkcs11: URI's
// pin-source and systemd's --tpm2-pin-file are read: the whole file, one
// trailing newline dropped, at most 1024 bytes. The caller wipes it.
func ReadPINFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, maxPINLen+2)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		wipe(buf)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pin := buf[:n]
	if n > 0 && pin[n-1] == '\n' {
		pin[n-1] = 0
		pin = pin[:n-1]
	}
	if len(pin) > maxPINLen {
		wipe(buf)
		return nil, fmt.Errorf("%s: longer than %d bytes", path, maxPINLen)
	}
	return pin, nil
}

// withType returns the URI text s with its type attribute set to typ
// (added when absent). Other attributes keep their spelling.
func withType(s, typ string) string {
	rest := s[len("pkcs11:"):]
	path, query, hasQuery := strings.Cut(rest, "?")
	var out []string
	found := false
	for _, a := range strings.Split(path, ";") {
		if a == "" {
			continue
		}
		if name, _, _ := strings.Cut(a, "="); strings.EqualFold(name, "type") {
			a, found = "type="+typ, true
		}
		out = append(out, a)
	}
	if !found {
		out = append(out, "type="+typ)
	}
	r := "pkcs11:" + strings.Join(out, ";")
	if hasQuery {
		r += "?" + query
	}
	return r
}
