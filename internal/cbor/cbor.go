// Package cbor is the subset of CBOR (RFC 8949) that CTAP2 speaks, in
// CTAP2's canonical form: unsigned and negative integers, byte and text
// strings, arrays, maps, booleans and null; definite lengths only; map
// keys sorted by major type, then shorter encoding first, then bytewise
// (CTAP2 §6's canonical order). It exists for the FIDO2 token and its
// software authenticator (token/fido2*.go, internal/fido2test).
//
// Decoded values are int64, []byte, string, []any, Map, bool and nil.
// Decoding refuses what CTAP2 never sends (floats, tags, indefinite
// lengths, integers beyond int64), nests at most MaxDepth deep and never
// allocates more than the input's length promises, so hostile input is
// an error, not a panic or an unbounded allocation.
package cbor

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
)

// MaxDepth bounds nesting: CTAP2 messages nest four or five deep.
const MaxDepth = 16

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed CBOR")

// Pair is one map entry: key, value. (An array, not a struct, so that
// messages are written as nested literals.)
type Pair [2]any

// Map is a CBOR map in the order it was decoded or built; Marshal sorts
// it canonically.
type Map []Pair

// Get returns the value of key (an int, int64 or string), and whether
// the map holds it.
func (m Map) Get(key any) (any, bool) {
	k := normInt(key)
	for _, p := range m {
		if equalKey(p[0], k) {
			return p[1], true
		}
	}
	return nil, false
}

func normInt(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
	}
	return v
}

func equalKey(a, b any) bool {
	switch x := a.(type) {
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	}
	return false
}

// Marshal encodes v canonically. v is built of int, int64, uint64,
// []byte, string, []any, Map, map[string]bool, bool and nil.
func Marshal(v any) ([]byte, error) {
	return appendValue(nil, v, 0)
}

func appendHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= math.MaxUint8:
		return append(b, m|24, byte(n))
	case n <= math.MaxUint16:
		return append(b, m|25, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(b, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("cbor: nesting deeper than %d", MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(b, 0xf6), nil
	case bool:
		if x {
			return append(b, 0xf5), nil
		}
		return append(b, 0xf4), nil
	case int:
		return appendInt(b, int64(x)), nil
	case int64:
		return appendInt(b, x), nil
	case uint64:
		return appendHead(b, 0, x), nil
	case []byte:
		return append(appendHead(b, 2, uint64(len(x))), x...), nil
	case string:
		return append(appendHead(b, 3, uint64(len(x))), x...), nil
	case []any:
		b = appendHead(b, 4, uint64(len(x)))
		var err error
		for _, e := range x {
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]bool:
		m := make(Map, 0, len(x))
		for k, v := range x {
			m = append(m, Pair{k, v})
		}
		return appendValue(b, m, depth)
	case Map:
		type enc struct{ k, v []byte }
		es := make([]enc, len(x))
		for i, p := range x {
			switch normInt(p[0]).(type) {
			case int64, string:
			default:
				return nil, fmt.Errorf("cbor: map key of type %T", p[0])
			}
			k, err := appendValue(nil, p[0], depth+1)
			if err != nil {
				return nil, err
			}
			val, err := appendValue(nil, p[1], depth+1)
			if err != nil {
				return nil, err
			}
			es[i] = enc{k, val}
		}
		slices.SortFunc(es, func(a, b enc) int {
			if a.k[0]>>5 != b.k[0]>>5 {
				return int(a.k[0]>>5) - int(b.k[0]>>5)
			}
			if len(a.k) != len(b.k) {
				return len(a.k) - len(b.k)
			}
			return bytes.Compare(a.k, b.k)
		})
		for i := 1; i < len(es); i++ {
			if bytes.Equal(es[i-1].k, es[i].k) {
				return nil, errors.New("cbor: duplicate map key")
			}
		}
		b = appendHead(b, 5, uint64(len(es)))
		for _, e := range es {
			b = append(append(b, e.k...), e.v...)
		}
		return b, nil
	}
	return nil, fmt.Errorf("cbor: cannot encode %T", v)
}

func appendInt(b []byte, n int64) []byte {
	if n >= 0 {
		return appendHead(b, 0, uint64(n))
	}
	return appendHead(b, 1, uint64(-(n + 1)))
}

// Unmarshal decodes exactly one value filling b.
func Unmarshal(b []byte) (any, error) {
	v, rest, err := Decode(b)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the value", ErrMalformed, len(rest))
	}
	return v, nil
}

// Decode decodes the value at the start of b and returns the bytes
// after it (authenticator data holds a COSE key followed by more).
func Decode(b []byte) (v any, rest []byte, err error) {
	d := decoder{b: b}
	v, err = d.value(0)
	if err != nil {
		return nil, nil, err
	}
	return v, d.b[d.off:], nil
}

type decoder struct {
	b   []byte
	off int
}

func (d *decoder) errf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", ErrMalformed, d.off, fmt.Sprintf(format, args...))
}

// head reads an item's initial byte and argument.
func (d *decoder) head() (major byte, info byte, n uint64, err error) {
	if d.off >= len(d.b) {
		return 0, 0, 0, d.errf("truncated")
	}
	ib := d.b[d.off]
	d.off++
	major, info = ib>>5, ib&31
	switch {
	case info < 24:
		return major, info, uint64(info), nil
	case info <= 27:
		size := 1 << (info - 24)
		if len(d.b)-d.off < size {
			return 0, 0, 0, d.errf("truncated argument")
		}
		for _, c := range d.b[d.off : d.off+size] {
			n = n<<8 | uint64(c)
		}
		d.off += size
		return major, info, n, nil
	}
	return 0, 0, 0, d.errf("indefinite length or reserved argument %d", info)
}

func (d *decoder) value(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, d.errf("nesting deeper than %d", MaxDepth)
	}
	major, info, n, err := d.head()
	if err != nil {
		return nil, err
	}
	switch major {
	case 0:
		if n > math.MaxInt64 {
			return nil, d.errf("integer %d out of range", n)
		}
		return int64(n), nil
	case 1:
		if n > math.MaxInt64 {
			return nil, d.errf("negative integer out of range")
		}
		return -int64(n) - 1, nil
	case 2, 3:
		if n > uint64(len(d.b)-d.off) {
			return nil, d.errf("string of %d bytes, %d left", n, len(d.b)-d.off)
		}
		s := d.b[d.off : d.off+int(n)]
		d.off += int(n)
		if major == 2 {
			return bytes.Clone(s), nil
		}
		return string(s), nil
	case 4:
		// Each element takes at least one byte: a count beyond what is
		// left is a lie, refused before allocating.
		if n > uint64(len(d.b)-d.off) {
			return nil, d.errf("array of %d items, %d bytes left", n, len(d.b)-d.off)
		}
		a := make([]any, 0, n)
		for range n {
			e, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, e)
		}
		return a, nil
	case 5:
		if n > uint64(len(d.b)-d.off)/2 {
			return nil, d.errf("map of %d pairs, %d bytes left", n, len(d.b)-d.off)
		}
		m := make(Map, 0, n)
		for range n {
			k, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			switch k.(type) {
			case int64, string:
			default:
				return nil, d.errf("map key of type %T", k)
			}
			if _, dup := m.Get(k); dup {
				return nil, d.errf("duplicate map key %v", k)
			}
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m = append(m, Pair{k, v})
		}
		return m, nil
	case 6:
		return nil, d.errf("tags are not CTAP2")
	}
	// major 7
	switch info {
	case 20:
		return false, nil
	case 21:
		return true, nil
	case 22:
		return nil, nil
	}
	return nil, d.errf("simple value or float %d is not CTAP2", info)
}

// Typed accessors for decoded maps: each says what was wrong.

// Int returns m[key] as an int64.
func (m Map) Int(key any) (int64, error) {
	v, ok := m.Get(key)
	if !ok {
		return 0, fmt.Errorf("%w: missing key %v", ErrMalformed, key)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: key %v is %T, want an integer", ErrMalformed, key, v)
	}
	return n, nil
}

// Bytes returns m[key] as a byte string.
func (m Map) Bytes(key any) ([]byte, error) {
	v, ok := m.Get(key)
	if !ok {
		return nil, fmt.Errorf("%w: missing key %v", ErrMalformed, key)
	}
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("%w: key %v is %T, want a byte string", ErrMalformed, key, v)
	}
	return b, nil
}

// Text returns m[key] as a text string.
func (m Map) Text(key any) (string, error) {
	v, ok := m.Get(key)
	if !ok {
		return "", fmt.Errorf("%w: missing key %v", ErrMalformed, key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: key %v is %T, want a text string", ErrMalformed, key, v)
	}
	return s, nil
}

// Sub returns m[key] as a map.
func (m Map) Sub(key any) (Map, error) {
	v, ok := m.Get(key)
	if !ok {
		return nil, fmt.Errorf("%w: missing key %v", ErrMalformed, key)
	}
	s, ok := v.(Map)
	if !ok {
		return nil, fmt.Errorf("%w: key %v is %T, want a map", ErrMalformed, key, v)
	}
	return s, nil
}
