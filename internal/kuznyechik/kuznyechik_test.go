package kuznyechik

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/gost"
)

// RFC 7801 section 5 (GOST R 34.12-2015 appendix A.1).
func TestRFC7801(t *testing.T) {
	key, _ := hex.DecodeString("8899aabbccddeeff0011223344556677fedcba98765432100123456789abcdef")
	pt, _ := hex.DecodeString("1122334455667700ffeeddccbbaa9988")
	b, err := NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	// Round keys K3 and K10 of section 5.4.
	c := b.(*kuz)
	if hex.EncodeToString(c.k[2][:]) != "db31485315694343228d6aef8cc78c44" || hex.EncodeToString(c.k[9][:]) != "72e9dd7416bcf45b755dbaa88e4a4043" {
		t.Errorf("round keys K3 %x, K10 %x", c.k[2], c.k[9])
	}
	out := make([]byte, 16)
	b.Encrypt(out, pt)
	if hex.EncodeToString(out) != "7f679d90bebc24305a468d42b9d4edcd" {
		t.Errorf("encrypt: %x", out)
	}
	b.Decrypt(out, out)
	if !bytes.Equal(out, pt) {
		t.Errorf("decrypt: %x", out)
	}
	if _, err := NewCipher(key[:16]); err == nil {
		t.Error("16-byte key accepted")
	}
	seen := map[byte]bool{}
	for _, v := range gost.Pi {
		seen[v] = true
	}
	if len(seen) != 256 {
		t.Error("pi is not a permutation")
	}
}

func TestRoundTrip(t *testing.T) {
	k := make([]byte, 32)
	rand.Read(k)
	b, _ := NewCipher(k)
	for i := 0; i < 100; i++ {
		p := make([]byte, 16)
		rand.Read(p)
		c := make([]byte, 16)
		b.Encrypt(c, p)
		b.Decrypt(c, c)
		if !bytes.Equal(c, p) {
			t.Fatal("round trip")
		}
	}
}
