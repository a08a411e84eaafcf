package luks2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The LUKS2 JSON metadata is kept as an ordered tree, the way json-c keeps
// it for cryptsetup: members stay in file order, numbers keep their text,
// and objects this package does not understand (tokens, unknown segment
// types, flags) survive a rewrite untouched. Token objects are also kept
// as their raw bytes and written back verbatim.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
)

var kindNames = [...]string{"null", "boolean", "number", "string", "array", "object"}

func (k jkind) String() string { return kindNames[k] }

type jmember struct {
	key string
	val *jval
}

type jval struct {
	kind jkind
	s    string // string value, number text, "true"/"false"
	arr  []*jval
	obj  []jmember
	raw  []byte // when set, written verbatim
	// idx maps member names to their position in obj for large objects,
	// so lookups stay O(1) on a token with 100k members. It is a cache:
	// code that edits obj directly (write.go) need not maintain it, since
	// get rebuilds it whenever obj no longer matches.
	idx    map[string]int
	idxLen int
}

// json-c (cryptsetup's parser) refuses a value nested 32 levels below the
// top-level one (JSON_TOKENER_DEFAULT_DEPTH, the depth json_tokener_new
// uses). The same limit here means a header cryptsetup loads is never
// refused for its depth, and recursion stays shallow.
const maxJSONDepth = 32

// indexMin is the member count from which an object keeps a name index;
// below it a linear scan is cheaper than hashing.
const indexMin = 16

// ctxEvery is how many values the parser reads between looks at its
// context: often enough to stop within a millisecond, rarely enough to
// cost nothing measurable.
const ctxEvery = 1 << 12

var errJSON = errors.New("malformed JSON")

type jparser struct {
	ctx   context.Context
	b     []byte
	pos   int
	count int // values parsed, for the periodic context check
}

// parseJSONArea parses one JSON value from the start of b and returns it
// with the offset just past it.
func parseJSONArea(b []byte) (*jval, int, error) {
	return parseJSONAreaContext(context.Background(), b)
}

// parseJSONAreaContext is parseJSONArea, stopping with ctx's error (in the
// chain) when ctx ends.
func parseJSONAreaContext(ctx context.Context, b []byte) (*jval, int, error) {
	p := &jparser{ctx: ctx, b: b}
	v, err := p.value(0)
	if err != nil {
		return nil, 0, err
	}
	return v, p.pos, nil
}

// parseJSON parses exactly one JSON value (surrounding whitespace allowed).
func parseJSON(b []byte) (*jval, error) {
	p := &jparser{ctx: context.Background(), b: b}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.pos != len(p.b) {
		return nil, fmt.Errorf("%w: trailing data at offset %d", errJSON, p.pos)
	}
	return v, nil
}

func (p *jparser) errf(format string, a ...any) error {
	return fmt.Errorf("%w at offset %d: %s", errJSON, p.pos, fmt.Sprintf(format, a...))
}

func (p *jparser) ws() {
	for p.pos < len(p.b) {
		switch p.b[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses the value at p.pos, which sits depth levels below the
// top-level value.
func (p *jparser) value(depth int) (*jval, error) {
	if depth >= maxJSONDepth {
		return nil, p.errf("nested deeper than %d levels", maxJSONDepth)
	}
	p.count++
	if p.count%ctxEvery == 0 {
		if err := p.ctx.Err(); err != nil {
			return nil, fmt.Errorf("parsing the LUKS2 metadata: %w", err)
		}
	}
	p.ws()
	if p.pos >= len(p.b) {
		return nil, p.errf("unexpected end")
	}
	switch c := p.b[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jval{kind: jStr, s: s}, nil
	case c == 't' && bytes.HasPrefix(p.b[p.pos:], []byte("true")):
		p.pos += 4
		return &jval{kind: jBool, s: "true"}, nil
	case c == 'f' && bytes.HasPrefix(p.b[p.pos:], []byte("false")):
		p.pos += 5
		return &jval{kind: jBool, s: "false"}, nil
	case c == 'n' && bytes.HasPrefix(p.b[p.pos:], []byte("null")):
		p.pos += 4
		return &jval{kind: jNull}, nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		return nil, p.errf("unexpected character %q", c)
	}
}

func (p *jparser) object(depth int) (*jval, error) {
	p.pos++ // '{'
	v := &jval{kind: jObj}
	p.ws()
	if p.pos < len(p.b) && p.b[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		p.ws()
		if p.pos >= len(p.b) || p.b[p.pos] != '"' {
			return nil, p.errf("expected a member name")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if p.pos >= len(p.b) || p.b[p.pos] != ':' {
			return nil, p.errf("expected ':'")
		}
		p.pos++
		p.ws()
		start := p.pos
		m, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if depth == 1 && m.kind == jObj {
			// Members of the top-level sections keep their raw text
			// (used for tokens); it is dropped as soon as they change.
			m.raw = p.b[start:p.pos]
		}
		// A repeated name keeps its first place and takes the last value,
		// as json-c's json_object_object_add does for cryptsetup.
		if i := v.find(k); i >= 0 {
			v.obj[i].val = m
		} else {
			v.obj = append(v.obj, jmember{k, m})
			if v.idx != nil {
				v.idx[k] = len(v.obj) - 1
				v.idxLen = len(v.obj)
			}
		}
		p.ws()
		if p.pos >= len(p.b) {
			return nil, p.errf("unterminated object")
		}
		if p.b[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.b[p.pos] == '}' {
			p.pos++
			return v, nil
		}
		return nil, p.errf("expected ',' or '}'")
	}
}

func (p *jparser) array(depth int) (*jval, error) {
	p.pos++ // '['
	v := &jval{kind: jArr}
	p.ws()
	if p.pos < len(p.b) && p.b[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		e, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.arr = append(v.arr, e)
		p.ws()
		if p.pos >= len(p.b) {
			return nil, p.errf("unterminated array")
		}
		if p.b[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.b[p.pos] == ']' {
			p.pos++
			return v, nil
		}
		return nil, p.errf("expected ',' or ']'")
	}
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func (p *jparser) hex4() (rune, error) {
	if p.pos+4 > len(p.b) {
		return 0, p.errf("short \\u escape")
	}
	var r rune
	for i := 0; i < 4; i++ {
		h := hexVal(p.b[p.pos+i])
		if h < 0 {
			return 0, p.errf("bad \\u escape")
		}
		r = r<<4 | rune(h)
	}
	p.pos += 4
	return r, nil
}

func (p *jparser) str() (string, error) {
	p.pos++ // '"'
	var sb []byte
	for {
		if p.pos >= len(p.b) {
			return "", p.errf("unterminated string")
		}
		c := p.b[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(sb), nil
		case c == '\\':
			p.pos++
			if p.pos >= len(p.b) {
				return "", p.errf("unterminated escape")
			}
			e := p.b[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				sb = append(sb, e)
			case 'b':
				sb = append(sb, '\b')
			case 'f':
				sb = append(sb, '\f')
			case 'n':
				sb = append(sb, '\n')
			case 'r':
				sb = append(sb, '\r')
			case 't':
				sb = append(sb, '\t')
			case 'u':
				r, err := p.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(r) && p.pos+6 <= len(p.b) && p.b[p.pos] == '\\' && p.b[p.pos+1] == 'u' {
					p.pos += 2
					r2, err := p.hex4()
					if err != nil {
						return "", err
					}
					r = utf16.DecodeRune(r, r2)
				}
				sb = utf8.AppendRune(sb, r)
			default:
				return "", p.errf("bad escape \\%c", e)
			}
		case c < 0x20:
			if c == 0 {
				return "", p.errf("NUL byte inside a string")
			}
			return "", p.errf("control character in a string")
		default:
			sb = append(sb, c)
			p.pos++
		}
	}
}

func (p *jparser) number() (*jval, error) {
	start := p.pos
	if p.b[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.b) && p.b[p.pos] >= '0' && p.b[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if digits() == 0 {
		return nil, p.errf("bad number")
	}
	if p.pos < len(p.b) && p.b[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.errf("bad number")
		}
	}
	if p.pos < len(p.b) && (p.b[p.pos] == 'e' || p.b[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.b) && (p.b[p.pos] == '+' || p.b[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errf("bad number")
		}
	}
	return &jval{kind: jNum, s: string(p.b[start:p.pos])}, nil
}

// ---- accessors ----

// find returns the position of member key in object v, or -1.
func (v *jval) find(key string) int {
	if len(v.obj) < indexMin {
		for i := range v.obj {
			if v.obj[i].key == key {
				return i
			}
		}
		return -1
	}
	if v.idx == nil || v.idxLen != len(v.obj) {
		v.reindex()
	}
	i, ok := v.idx[key]
	if !ok {
		return -1
	}
	if v.obj[i].key != key {
		// obj was rearranged behind the index's back.
		v.reindex()
		if i, ok = v.idx[key]; !ok {
			return -1
		}
	}
	return i
}

func (v *jval) reindex() {
	v.idx = make(map[string]int, len(v.obj))
	for i, m := range v.obj {
		if _, dup := v.idx[m.key]; !dup {
			v.idx[m.key] = i
		}
	}
	v.idxLen = len(v.obj)
}

func (v *jval) get(key string) *jval {
	if v == nil || v.kind != jObj {
		return nil
	}
	if i := v.find(key); i >= 0 {
		return v.obj[i].val
	}
	return nil
}

// set replaces or appends a member and drops the raw text of v.
func (v *jval) set(key string, val *jval) {
	v.raw = nil
	if i := v.find(key); i >= 0 {
		v.obj[i].val = val
		return
	}
	v.obj = append(v.obj, jmember{key, val})
}

func (v *jval) del(key string) {
	v.raw = nil
	if i := v.find(key); i >= 0 {
		v.obj = append(v.obj[:i], v.obj[i+1:]...)
		v.idx = nil
	}
}

// isInt reports whether v is a number json-c parses as an integer
// (json_type_int): no fraction and no exponent.
func (v *jval) isInt() bool {
	return v != nil && v.kind == jNum && !strings.ContainsAny(v.s, ".eE")
}

// getInt64 is json-c's json_object_get_int64, which cryptsetup uses for
// values it reads without checking their type: integers as they are
// (beyond int64 clamped, as strtoll clamps), fractions truncated, strings
// parsed from their leading decimal digits, booleans as 0 or 1, anything
// else 0.
func (v *jval) getInt64() int64 {
	if v == nil {
		return 0
	}
	switch v.kind {
	case jBool:
		if v.s == "true" {
			return 1
		}
		return 0
	case jNum:
		if v.isInt() {
			return clampedInt(v.s)
		}
		f, err := strconv.ParseFloat(v.s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0
		}
		switch {
		case f != f:
			return 0
		case f >= math.MaxInt64:
			return math.MaxInt64
		case f <= math.MinInt64:
			return math.MinInt64
		}
		return int64(f)
	case jStr:
		return clampedInt(v.s)
	}
	return 0
}

// getInt is json-c's json_object_get_int: getInt64 clamped to int32.
func (v *jval) getInt() int32 {
	return int32(min(max(v.getInt64(), math.MinInt32), math.MaxInt32))
}

// clampedInt is strtoll(s, NULL, 10): leading space, a sign, then the
// longest run of digits; out of range values clamp; no digits gives 0.
func clampedInt(s string) int64 {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] >= '\t' && s[i] <= '\r') {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	var n uint64
	over := false
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if n > (1<<63-d)/10 {
			over = true
			continue
		}
		n = n*10 + d
	}
	switch {
	case neg && (over || n > 1<<63):
		return math.MinInt64
	case neg:
		return -int64(n)
	case over || n > math.MaxInt64:
		return math.MaxInt64
	}
	return int64(n)
}

// int64Val returns an integer number's value.
func (v *jval) int64Val() (int64, bool) {
	if v == nil || v.kind != jNum {
		return 0, false
	}
	n, err := strconv.ParseInt(v.s, 10, 64)
	return n, err == nil
}

// uint32Val is json-c's validate_json_uint32 plus the value.
func (v *jval) uint32Val() (uint32, bool) {
	n, ok := v.int64Val()
	if !ok || n < 0 || n > 1<<32-1 {
		return 0, false
	}
	return uint32(n), true
}

func jstr(s string) *jval  { return &jval{kind: jStr, s: s} }
func jint(n int64) *jval   { return &jval{kind: jNum, s: strconv.FormatInt(n, 10)} }
func ju64s(n uint64) *jval { return jstr(strconv.FormatUint(n, 10)) }
func jobj(m ...jmember) *jval {
	return &jval{kind: jObj, obj: m}
}
func jarrStr(ss ...string) *jval {
	v := &jval{kind: jArr, arr: []*jval{}}
	for _, s := range ss {
		v.arr = append(v.arr, jstr(s))
	}
	return v
}

// clone deep-copies v (raw text is shared; it is never modified).
func (v *jval) clone() *jval {
	if v == nil {
		return nil
	}
	c := &jval{kind: v.kind, s: v.s, raw: v.raw}
	if v.arr != nil {
		c.arr = make([]*jval, len(v.arr))
		for i, e := range v.arr {
			c.arr[i] = e.clone()
		}
	}
	if v.obj != nil {
		c.obj = make([]jmember, len(v.obj))
		for i, m := range v.obj {
			c.obj[i] = jmember{m.key, m.val.clone()}
		}
	}
	return c
}

// ---- serialisation (compact, like json-c's plain mode without slash
// escaping) ----

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			if c < 0x20 {
				b = append(b, fmt.Sprintf("\\u%04x", c)...)
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// appendJSON serialises v; raw marks whether raw member text may be used
// (tokens only).
func (v *jval) appendJSON(b []byte) []byte {
	switch v.kind {
	case jNull:
		return append(b, "null"...)
	case jBool, jNum:
		return append(b, v.s...)
	case jStr:
		return appendJSONString(b, v.s)
	case jArr:
		b = append(b, '[')
		for i, e := range v.arr {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.appendJSON(b)
		}
		return append(b, ']')
	default:
		b = append(b, '{')
		for i, m := range v.obj {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m.key)
			b = append(b, ':')
			b = m.val.appendJSON(b)
		}
		return append(b, '}')
	}
}

// marshalMetadata serialises the top-level object; members of "tokens"
// that still have their raw text are written verbatim.
func marshalMetadata(root *jval) []byte {
	b := []byte{'{'}
	for i, m := range root.obj {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, m.key)
		b = append(b, ':')
		if m.key == "tokens" && m.val.kind == jObj {
			b = append(b, '{')
			for j, t := range m.val.obj {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, t.key)
				b = append(b, ':')
				if t.val.raw != nil {
					b = append(b, t.val.raw...)
				} else {
					b = t.val.appendJSON(b)
				}
			}
			b = append(b, '}')
			continue
		}
		b = m.val.appendJSON(b)
	}
	return append(b, '}')
}
