package luks2

import (
	"math"
	"strconv"
	"strings"
)

// PrettyJSON is the metadata as cryptsetup's luksDump --dump-json-metadata
// prints it: json-c's pretty form (two-space indent, no space after the
// colon, an empty object or array still broken over two lines, slashes
// unescaped) of the tree json-c parsed. Integers are printed as json-c
// stores them (an int64, a uint64 above it, clamped beyond both); other
// numbers keep their text, as json-c keeps a double's source text. No
// newline follows the closing brace, as cryptsetup prints none.
func (h *Header) PrettyJSON() []byte {
	return h.md.root.appendPretty(nil, 0)
}

func indent(b []byte, level int) []byte {
	for i := 0; i < level; i++ {
		b = append(b, ' ', ' ')
	}
	return b
}

func (v *jval) appendPretty(b []byte, level int) []byte {
	switch v.kind {
	case jNum:
		if v.isInt() {
			return append(b, jsoncInt(v.s)...)
		}
		return append(b, v.s...)
	case jArr:
		b = append(b, '[')
		for i, e := range v.arr {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '\n')
			b = indent(b, level+1)
			b = e.appendPretty(b, level+1)
		}
		b = append(b, '\n')
		return append(indent(b, level), ']')
	case jObj:
		b = append(b, '{')
		for i, m := range v.obj {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '\n')
			b = indent(b, level+1)
			b = appendJSONString(b, m.key)
			b = append(b, ':')
			b = m.val.appendPretty(b, level+1)
		}
		b = append(b, '\n')
		return append(indent(b, level), '}')
	}
	return v.appendJSON(b)
}

// jsoncInt is how json-c prints an integer it parsed from s: "-0" and
// leading zeros disappear, a value above int64 is kept as a uint64 and
// clamped at its maximum, one below int64 clamps at its minimum.
func jsoncInt(s string) string {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(n, 10)
	}
	if strings.HasPrefix(s, "-") {
		return strconv.FormatInt(math.MinInt64, 10)
	}
	if u, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 10, 64); err == nil {
		return strconv.FormatUint(u, 10)
	}
	return strconv.FormatUint(math.MaxUint64, 10)
}
