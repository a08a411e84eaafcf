package camellia

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"testing"
)

// RFC 3713, Appendix A.
func TestRFC3713(t *testing.T) {
	pt, _ := hex.DecodeString("0123456789abcdeffedcba9876543210")
	for _, c := range []struct{ key, ct string }{
		{"0123456789abcdeffedcba9876543210", "67673138549669730857065648eabe43"},
		{"0123456789abcdeffedcba98765432100011223344556677", "b4993401b3e996f84ee5cee7d79b09b9"},
		{"0123456789abcdeffedcba987654321000112233445566778899aabbccddeeff", "9acc237dff16d76c20ef7c919e3a7509"},
	} {
		k, _ := hex.DecodeString(c.key)
		b, err := NewCipher(k)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 16)
		b.Encrypt(out, pt)
		if hex.EncodeToString(out) != c.ct {
			t.Errorf("%d-bit key: %x, want %s", len(k)*8, out, c.ct)
		}
		b.Decrypt(out, out)
		if !bytes.Equal(out, pt) {
			t.Errorf("%d-bit key: decryption gives %x", len(k)*8, out)
		}
	}
	if _, err := NewCipher(make([]byte, 20)); err == nil {
		t.Error("20-byte key accepted")
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		k := make([]byte, n)
		rand.Read(k)
		b, _ := NewCipher(k)
		p := make([]byte, 16)
		rand.Read(p)
		c := make([]byte, 16)
		b.Encrypt(c, p)
		b.Decrypt(c, c)
		if !bytes.Equal(c, p) {
			t.Errorf("%d: round trip", n)
		}
	}
}
