package luks2

import (
	"bytes"
	"testing"
)

// FuzzJSONTree: the tree parser never panics or recurses without bound;
// what it accepts serialises to JSON it accepts again, identically, with
// every object's names unique (a repeated name folded json-c's way).
func FuzzJSONTree(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1,"a":2}`, `{"tokens":{"0":{"type":"x","keyslots":[],"type":"y"}}}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"k":"\u00e9\ud83d\ude00\n","n":-1.5e+3,"t":true,"f":false,"z":null}`,
		`{"a":{"b":{"c":[1,2,{"d":"e"}]}},"a":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseJSON(b)
		if err != nil {
			return
		}
		out := v.appendJSON(nil)
		v2, err := parseJSON(out)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
		if out2 := v2.appendJSON(nil); !bytes.Equal(out, out2) {
			t.Fatalf("not stable:\n%q\n%q", out, out2)
		}
		var walk func(v *jval)
		walk = func(v *jval) {
			seen := map[string]bool{}
			for _, m := range v.obj {
				if seen[m.key] {
					t.Fatalf("repeated member %q kept in %q", m.key, out)
				}
				seen[m.key] = true
				if v.get(m.key) != m.val {
					t.Fatalf("lookup of %q finds another value", m.key)
				}
				walk(m.val)
			}
			for _, e := range v.arr {
				walk(e)
			}
		}
		walk(v)
	})
}
