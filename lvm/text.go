package lvm

import (
	"bytes"
	"fmt"
	"strconv"
)

// The metadata text is lvm2's configuration syntax (libdm-config.c): a
// tree of `name = value` and `name { … }` sections, values being integers,
// floats, "double-quoted" strings with \" and \\ escapes, 'single-quoted'
// strings, bare words, and lists `[ v, v ]`; `#` starts a comment that
// runs to the end of the line; a NUL ends the text. The tokenizer follows
// lvm2's: whether a token is a number or a name depends on the token
// before it (a value follows `=`, `[` or `,`), so lvm2 and this parser cut
// the same text into the same tokens.
//
// Hostile text must cost bounded time and memory: the text size is capped
// before it is read, nesting depth is capped (the parser recurses once per
// section level, never more), and so is the number of nodes and values.

const (
	// maxTextSize caps one metadata text. lvm2's default metadata area
	// is 1 MiB and a copy may use at most half of it; a VG of thousands
	// of LVs needs a few MiB. Anything larger is refused before reading.
	maxTextSize = 32 << 20
	// maxDepth caps section nesting. lvm2's metadata nests five deep
	// (root, VG, logical_volumes, an LV, a segment).
	maxDepth = 32
	// maxItems caps nodes plus values, so that a text of short items
	// ("a=1\n" is four bytes) cannot turn into a tree of gigabytes: at
	// most about 60 MB and a second of parsing. An LV with one linear
	// segment is about 20 items, so this allows over 20000 LVs.
	maxItems = 1 << 19
)

type tokKind int

const (
	tokEOF tokKind = iota
	tokInt
	tokFloat
	tokString        // 'single quoted'
	tokStringEscaped // "double quoted"
	tokStringBare    // a bare word in a value position
	tokEq
	tokSectionB
	tokSectionE
	tokArrayB
	tokArrayE
	tokIdent
	tokComma
)

func (k tokKind) String() string {
	switch k {
	case tokEOF:
		return "end of text"
	case tokInt:
		return "integer"
	case tokFloat:
		return "float"
	case tokString, tokStringEscaped, tokStringBare:
		return "string"
	case tokEq:
		return "'='"
	case tokSectionB:
		return "'{'"
	case tokSectionE:
		return "'}'"
	case tokArrayB:
		return "'['"
	case tokArrayE:
		return "']'"
	case tokIdent:
		return "name"
	case tokComma:
		return "','"
	}
	return "token"
}

type valueKind int

const (
	valInt valueKind = iota
	valFloat
	valString
)

// value is one scalar of the text.
type value struct {
	kind valueKind
	i    int64  // valInt
	s    string // valString, or a float's text (nothing reads floats)
}

func (v value) describe() string {
	switch v.kind {
	case valInt:
		return strconv.FormatInt(v.i, 10)
	case valFloat:
		return v.s
	}
	return strconv.Quote(v.s)
}

// node is a section (section true, children) or a setting (values; array
// says the value was written as a list, possibly of one or no item).
type node struct {
	key      string
	line     int
	section  bool
	children []*node
	values   []value
	array    bool
}

type parser struct {
	b      []byte
	tb, te int
	t      tokKind
	line   int // line of the current token
	items  int
}

// parseText parses a metadata text into its root section. The text ends
// at its first NUL, as lvm2's does (the stored copy carries one).
func parseText(b []byte) (*node, error) {
	if len(b) > maxTextSize {
		return nil, fmt.Errorf("metadata text of %d bytes is over the %d-byte limit", len(b), maxTextSize)
	}
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	p := &parser{b: b, line: 1}
	root := &node{section: true, line: 1}
	if err := p.next(tokSectionE); err != nil {
		return nil, err
	}
	for p.t != tokEOF {
		n, err := p.section(1)
		if err != nil {
			return nil, err
		}
		root.children = append(root.children, n)
	}
	return root, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("metadata text line %d: %s", p.line, fmt.Sprintf(format, args...))
}

// next reads the next token. prev is the token just matched: after '=',
// '[' or ',' a token is a value, elsewhere a name (lvm2's rule).
func (p *parser) next(prev tokKind) error {
	values := prev == tokEq || prev == tokArrayB || prev == tokComma
	// Skip white space and comments.
	for p.te < len(p.b) {
		c := p.b[p.te]
		if c == '#' {
			for p.te < len(p.b) && p.b[p.te] != '\n' {
				p.te++
			}
			continue
		}
		if !isSpace(c) {
			break
		}
		if c == '\n' {
			p.line++
		}
		p.te++
	}
	p.tb = p.te
	if p.tb == len(p.b) {
		p.t = tokEOF
		return nil
	}
	te := p.tb + 1
	c := p.b[p.tb]
	switch c {
	case '{':
		p.t = tokSectionB
	case '}':
		p.t = tokSectionE
	case '[':
		p.t = tokArrayB
	case ']':
		p.t = tokArrayE
	case ',':
		p.t = tokComma
	case '=':
		p.t = tokEq
	case '"':
		p.t = tokStringEscaped
		for te < len(p.b) && p.b[te] != '"' {
			if p.b[te] == '\\' && te+1 < len(p.b) {
				te++
			}
			if p.b[te] == '\n' {
				p.line++
			}
			te++
		}
		if te == len(p.b) {
			return p.errorf("unterminated string")
		}
		te++
	case '\'':
		p.t = tokString
		for te < len(p.b) && p.b[te] != '\'' {
			if p.b[te] == '\n' {
				p.line++
			}
			te++
		}
		if te == len(p.b) {
			return p.errorf("unterminated string")
		}
		te++
	default:
		if values && (c == '.' || c == '+' || c == '-' || isDigit(c)) {
			p.t = tokInt
			if c == '.' {
				p.t = tokFloat
			}
			for ; te < len(p.b); te++ {
				if isDigit(p.b[te]) {
					continue
				}
				if p.b[te] == '.' && p.t != tokFloat {
					p.t = tokFloat
					continue
				}
				break
			}
			break
		}
		p.t = tokIdent
		if values {
			p.t = tokStringBare
		}
		for te < len(p.b) {
			c := p.b[te]
			if isSpace(c) || c == '#' || c == '=' || c == '{' || c == '}' {
				break
			}
			te++
		}
	}
	p.te = te
	return nil
}

func (p *parser) tok() string { return string(p.b[p.tb:p.te]) }

func (p *parser) match(k tokKind) error {
	if p.t != k {
		return p.unexpected(k.String())
	}
	return p.next(k)
}

func (p *parser) unexpected(want string) error {
	if p.t == tokEOF {
		return p.errorf("unexpected end of text, expected %s", want)
	}
	t := p.tok()
	if len(t) > 40 {
		t = t[:40] + "…"
	}
	return p.errorf("unexpected %q, expected %s", t, want)
}

func (p *parser) count() error {
	p.items++
	if p.items > maxItems {
		return p.errorf("more than %d nodes and values", maxItems)
	}
	return nil
}

// section parses `name { … }` or `name = value`. It recurses once per
// nesting level, at most maxDepth deep.
func (p *parser) section(depth int) (*node, error) {
	if depth > maxDepth {
		return nil, p.errorf("sections nested more than %d deep", maxDepth)
	}
	if err := p.count(); err != nil {
		return nil, err
	}
	n := &node{line: p.line}
	switch p.t {
	case tokStringEscaped:
		n.key = unescape(p.b[p.tb+1 : p.te-1])
	case tokString:
		n.key = string(p.b[p.tb+1 : p.te-1])
	case tokIdent:
		n.key = p.tok()
	default:
		return nil, p.unexpected("a name")
	}
	if err := p.next(p.t); err != nil {
		return nil, err
	}
	if n.key == "" {
		return nil, p.errorf("empty name")
	}
	// lvm2 names are [a-zA-Z0-9+_.-]; a quoted name could hold anything,
	// and names appear in error messages, which must stay one line.
	for i := 0; i < len(n.key); i++ {
		if n.key[i] < 0x20 || n.key[i] == 0x7f {
			return nil, p.errorf("name %q has a control character", n.key)
		}
	}
	if p.t == tokSectionB {
		n.section = true
		if err := p.match(tokSectionB); err != nil {
			return nil, err
		}
		for p.t != tokSectionE {
			c, err := p.section(depth + 1)
			if err != nil {
				return nil, err
			}
			n.children = append(n.children, c)
		}
		return n, p.match(tokSectionE)
	}
	if p.t != tokEq {
		return nil, p.unexpected("'=' or '{' after " + strconv.Quote(n.key))
	}
	if err := p.match(tokEq); err != nil {
		return nil, err
	}
	if p.t != tokArrayB {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		n.values = []value{v}
		return n, nil
	}
	n.array = true
	if err := p.match(tokArrayB); err != nil {
		return nil, err
	}
	for p.t != tokArrayE {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		n.values = append(n.values, v)
		if p.t == tokComma {
			if err := p.match(tokComma); err != nil {
				return nil, err
			}
		}
	}
	return n, p.match(tokArrayE)
}

func (p *parser) value() (value, error) {
	if err := p.count(); err != nil {
		return value{}, err
	}
	var v value
	switch p.t {
	case tokInt:
		// strtoll with base 0 as lvm2 calls it: a leading 0 means
		// octal. The token holds only a sign and digits, so Go's
		// base-0 prefixes (0x, 0o, 0b, _) cannot occur.
		i, err := strconv.ParseInt(p.tok(), 0, 64)
		if err != nil {
			return v, p.errorf("bad integer %q", p.tok())
		}
		v = value{kind: valInt, i: i}
	case tokFloat:
		// lvm2 takes strtod's answer unchecked; no float is read
		// from VG metadata, so the text is kept as it is.
		v = value{kind: valFloat, s: p.tok()}
	case tokString:
		v = value{kind: valString, s: string(p.b[p.tb+1 : p.te-1])}
	case tokStringEscaped:
		v = value{kind: valString, s: unescape(p.b[p.tb+1 : p.te-1])}
	case tokStringBare:
		v = value{kind: valString, s: p.tok()}
	default:
		return v, p.unexpected("a value")
	}
	return v, p.next(p.t)
}

// unescape undoes lvm2's double-quote escaping: \" is ", \\ is \, and a
// backslash before anything else stays.
func unescape(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) && (b[i+1] == '"' || b[i+1] == '\\') {
			i++
		}
		out = append(out, b[i])
	}
	return string(out)
}
