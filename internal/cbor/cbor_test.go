package cbor

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

// RFC 8949 Appendix A's examples that CTAP2 uses: the encoding of each
// value (its preferred, canonical serialisation) and back.
var rfcVectors = []struct {
	hex string
	v   any
}{
	{"00", int64(0)},
	{"01", int64(1)},
	{"0a", int64(10)},
	{"17", int64(23)},
	{"1818", int64(24)},
	{"1819", int64(25)},
	{"1864", int64(100)},
	{"1903e8", int64(1000)},
	{"1a000f4240", int64(1000000)},
	{"1b000000e8d4a51000", int64(1000000000000)},
	{"20", int64(-1)},
	{"29", int64(-10)},
	{"3863", int64(-100)},
	{"3903e7", int64(-1000)},
	{"f4", false},
	{"f5", true},
	{"f6", nil},
	{"40", []byte{}},
	{"4401020304", []byte{1, 2, 3, 4}},
	{"60", ""},
	{"6161", "a"},
	{"6449455446", "IETF"},
	{"62225c", "\"\\"},
	{"62c3bc", "\u00fc"},
	{"80", []any{}},
	{"83010203", []any{int64(1), int64(2), int64(3)}},
	{"8301820203820405", []any{int64(1), []any{int64(2), int64(3)}, []any{int64(4), int64(5)}}},
	{"a0", Map{}},
	{"a201020304", Map{{int64(1), int64(2)}, {int64(3), int64(4)}}},
	{"a26161016162820203", Map{{"a", int64(1)}, {"b", []any{int64(2), int64(3)}}}},
	{"826161a161626163", []any{"a", Map{{"b", "c"}}}},
}

func TestRFC8949Vectors(t *testing.T) {
	for _, v := range rfcVectors {
		want, _ := hex.DecodeString(v.hex)
		got, err := Marshal(v.v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Marshal(%#v) = %x, %v; want %s", v.v, got, err, v.hex)
		}
		dec, err := Unmarshal(want)
		if err != nil || !reflect.DeepEqual(dec, v.v) {
			t.Errorf("Unmarshal(%s) = %#v, %v; want %#v", v.hex, dec, err, v.v)
		}
	}
}

// TestCanonicalOrder is CTAP2 §6's example of canonical key order
// (integer and text keys): 10, 100, -1, "z", "aa".
func TestCanonicalOrder(t *testing.T) {
	m := Map{{"aa", int64(5)}, {"z", int64(4)}, {int64(-1), int64(3)}, {int64(100), int64(2)}, {int64(10), int64(1)}}
	got, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := hex.DecodeString("a5" + "0a01" + "186402" + "2003" + "617a04" + "62616105")
	if !bytes.Equal(got, want) {
		t.Fatalf("canonical map = %x, want %x", got, want)
	}
	if _, err := Marshal(Map{{int64(1), true}, {1, false}}); err == nil {
		t.Fatal("a map with a duplicate key encoded")
	}
}

func TestRejects(t *testing.T) {
	for _, h := range []string{
		"",                   // nothing
		"18",                 // truncated argument
		"1b8000000000000000", // > int64
		"5f",                 // indefinite byte string
		"9f",                 // indefinite array
		"c0",                 // tag
		"f93c00",             // float16
		"f7",                 // undefined
		"45010203",           // string longer than the input
		"9bffffffffffffffff", // huge array
		"bbffffffffffffffff", // huge map
		"a2010201",           // truncated map
		"a201020103",         // duplicate key
		"a1f401",             // boolean key
		"0000",               // trailing byte
	} {
		b, _ := hex.DecodeString(h)
		if v, err := Unmarshal(b); err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("Unmarshal(%s) = %#v, %v; want ErrMalformed", h, v, err)
		}
	}
	deep := bytes.Repeat([]byte{0x81}, MaxDepth+2)
	if _, err := Unmarshal(append(deep, 0)); err == nil {
		t.Error("nesting beyond MaxDepth decoded")
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, v := range rfcVectors {
		b, _ := hex.DecodeString(v.hex)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Unmarshal(b)
		if err != nil {
			return
		}
		enc, err := Marshal(v)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", v, err)
		}
		// The canonical form is a fixed point (maps may come back
		// reordered, so encodings are compared).
		v2, err := Unmarshal(enc)
		if err != nil {
			t.Fatalf("re-encoding %x: %v", enc, err)
		}
		enc2, _ := Marshal(v2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("canonical form not stable: %x then %x", enc, enc2)
		}
	})
}
