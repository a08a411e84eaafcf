package aead

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// Known answers of the AEGIS-128 specification (Wu and Preneel), as
// Wycheproof's aegis128_test.json lists them (tcId 1-4, 6, 8, 10, 11).
var aegisKAT = []struct{ key, iv, ad, msg, ct, tag string }{
	{"00000000000000000000000000000000", "00000000000000000000000000000000", "", "00000000000000000000000000000000", "951b050fa72b1a2fc16d2e1f01b07d7e", "a7d2a99773249542f422217ee888d5f1"},
	{"00000000000000000000000000000000", "00000000000000000000000000000000", "00000000000000000000000000000000", "00000000000000000000000000000000", "10b0dee65a97d751205c128a992473a1", "46dcb9ee93c46cf13731d41b9646c131"},
	{"00010000000000000000000000000000", "00000200000000000000000000000000", "00010203", "00000000000000000000000000000000", "2b78f5c1618da39afbb2920f5dae02b0", "74759cd0e19314650d6c635b563d80fd"},
	{"10010000000000000000000000000000", "10000200000000000000000000000000", "0001020304050607", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", "e08ec10685d63c7364eca78ff6e1a1ddfdfc15d5311a7f2988a0471a13973fd7", "27e84b6c4cc46cb6ece8f1f3e4aa0e78"},
	{"00000000000000000000000000000000", "00000000000000000000000000000000", "", "01", "94", "7cb6018c1bb027166d17b40c3b2a9628"},
	{"01000000000000000000000000000000", "00000000000000000000000000000000", "00", "00", "f3", "82ad581c234f6d1b59876602b4044c3d"},
	{"01010101010101010101010101010101", "01010101010101010101010101010101", "01010101010101010101010101010101", "01010101010101010101010101010101", "d48151ffb81b297ea5c739ead4a7f1e9", "929f4674a8a3cea123b5246cfe978a77"},
	{"000102030405060708090a0b0c0d0e0f", "000306090c0f1215181b1e2124272a2d", "01010101010101010101010101010101", "01010101010101010101010101010101", "66d71d9d0b10f3ad3b4074ec8d6829f0", "e0b479e968258e4c993e5b4900493a7d"},
}

func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAEGIS128KAT(t *testing.T) {
	for i, v := range aegisKAT {
		a, err := NewAEGIS128(unhex(t, v.key), 16)
		if err != nil {
			t.Fatal(err)
		}
		iv, ad, msg := unhex(t, v.iv), unhex(t, v.ad), unhex(t, v.msg)
		want := append(unhex(t, v.ct), unhex(t, v.tag)...)
		got := a.Seal(nil, iv, msg, ad)
		if !bytes.Equal(got, want) {
			t.Errorf("vector %d: Seal = %x, want %x", i, got, want)
		}
		pt, err := a.Open(nil, iv, want, ad)
		if err != nil || !bytes.Equal(pt, msg) {
			t.Errorf("vector %d: Open = %x, %v", i, pt, err)
		}
		for bit := 0; bit < len(want)*8; bit += 7 {
			bad := bytes.Clone(want)
			bad[bit/8] ^= 1 << (bit % 8)
			if _, err := a.Open(nil, iv, bad, ad); err != ErrOpen {
				t.Errorf("vector %d: bit %d flipped: Open err %v", i, bit, err)
			}
		}
	}
}

func TestAEGIS128Refusals(t *testing.T) {
	if _, err := NewAEGIS128(make([]byte, 32), 16); err == nil {
		t.Error("32-byte key accepted")
	}
	if _, err := NewAEGIS128(make([]byte, 16), 17); err == nil {
		t.Error("17-byte tag accepted")
	}
	a, _ := NewAEGIS128(make([]byte, 16), 16)
	if _, err := a.Open(nil, make([]byte, 16), make([]byte, 5), nil); err != ErrOpen {
		t.Errorf("short ciphertext: %v", err)
	}
}

func FuzzAEGIS128RoundTrip(f *testing.F) {
	f.Add(make([]byte, 16), make([]byte, 16), []byte("ad"), []byte("message of some length"))
	f.Fuzz(func(t *testing.T, key, iv, ad, msg []byte) {
		if len(key) != 16 || len(iv) != 16 {
			return
		}
		a, _ := NewAEGIS128(key, 16)
		ct := a.Seal(nil, iv, msg, ad)
		pt, err := a.Open(nil, iv, ct, ad)
		if err != nil || !bytes.Equal(pt, msg) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// aesRoundBytes is AESENC written from its definition, byte by byte: the
// reference the table-driven round must equal.
func aesRoundBytes(src, key [16]byte) [16]byte {
	var t, d [16]byte
	for c := range 4 {
		for r := range 4 {
			t[4*c+r] = sbox[src[4*((c+r)&3)+r]]
		}
	}
	for c := range 4 {
		a0, a1, a2, a3 := t[4*c], t[4*c+1], t[4*c+2], t[4*c+3]
		all := a0 ^ a1 ^ a2 ^ a3
		d[4*c] = a0 ^ all ^ xtime(a0^a1) ^ key[4*c]
		d[4*c+1] = a1 ^ all ^ xtime(a1^a2) ^ key[4*c+1]
		d[4*c+2] = a2 ^ all ^ xtime(a2^a3) ^ key[4*c+2]
		d[4*c+3] = a3 ^ all ^ xtime(a3^a0) ^ key[4*c+3]
	}
	return d
}

func FuzzAESRound(f *testing.F) {
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 32 {
			return
		}
		var s, k, got [16]byte
		copy(s[:], b)
		copy(k[:], b[16:])
		store(got[:], aesRound(load(s[:]), load(k[:])))
		if want := aesRoundBytes(s, k); got != want {
			t.Fatalf("round(%x, %x) = %x, want %x", s, k, got, want)
		}
	})
}

func TestSbox(t *testing.T) {
	// FIPS-197's S-box, a few entries.
	for x, want := range map[byte]byte{0x00: 0x63, 0x01: 0x7c, 0x53: 0xed, 0xff: 0x16, 0x10: 0xca} {
		if sbox[x] != want {
			t.Errorf("sbox[%#x] = %#x, want %#x", x, sbox[x], want)
		}
	}
}
