package capi

import (
	"fmt"
	"strings"
)

// maxNameLen and maxNameDepth bound what ParseName accepts, so that a hostile
// cipher spec cannot make the parser recurse or allocate without limit. The
// kernel's CRYPTO_MAX_ALG_NAME is 128.
const (
	maxNameLen   = 128
	maxNameDepth = 8
)

// Name is a parsed crypto API algorithm name: an identifier, optionally
// followed by a parenthesised, comma-separated list of argument names, as in
// "essiv(cbc(aes),sha256)".
type Name struct {
	Ident string
	Args  []*Name
}

// String returns the canonical form of n (no spaces).
func (n *Name) String() string {
	if len(n.Args) == 0 {
		return n.Ident
	}
	var b strings.Builder
	b.WriteString(n.Ident)
	b.WriteByte('(')
	for i, a := range n.Args {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(a.String())
	}
	b.WriteByte(')')
	return b.String()
}

// ParseName parses a crypto API name. Errors wrap ErrInvalidName.
func ParseName(s string) (*Name, error) {
	if len(s) > maxNameLen {
		return nil, fmt.Errorf("%w: %q is longer than %d characters", ErrInvalidName, truncate(s), maxNameLen)
	}
	p := &nameParser{s: s}
	n, err := p.parse(0)
	if err != nil {
		return nil, err
	}
	if p.pos != len(s) {
		return nil, fmt.Errorf("%w: %q: unexpected %q at offset %d", ErrInvalidName, s, s[p.pos], p.pos)
	}
	return n, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

type nameParser struct {
	s   string
	pos int
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

func (p *nameParser) parse(depth int) (*Name, error) {
	if depth > maxNameDepth {
		return nil, fmt.Errorf("%w: %q nests deeper than %d", ErrInvalidName, p.s, maxNameDepth)
	}
	start := p.pos
	for p.pos < len(p.s) && isIdentByte(p.s[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		if p.pos == len(p.s) {
			return nil, fmt.Errorf("%w: %q: missing algorithm name at end", ErrInvalidName, p.s)
		}
		return nil, fmt.Errorf("%w: %q: missing algorithm name at offset %d", ErrInvalidName, p.s, p.pos)
	}
	n := &Name{Ident: p.s[start:p.pos]}
	if p.pos == len(p.s) || p.s[p.pos] != '(' {
		return n, nil
	}
	p.pos++ // '('
	for {
		a, err := p.parse(depth + 1)
		if err != nil {
			return nil, err
		}
		n.Args = append(n.Args, a)
		if p.pos == len(p.s) {
			return nil, fmt.Errorf("%w: %q: missing ')'", ErrInvalidName, p.s)
		}
		switch p.s[p.pos] {
		case ',':
			p.pos++
		case ')':
			p.pos++
			return n, nil
		default:
			return nil, fmt.Errorf("%w: %q: unexpected %q at offset %d", ErrInvalidName, p.s, p.s[p.pos], p.pos)
		}
	}
}
