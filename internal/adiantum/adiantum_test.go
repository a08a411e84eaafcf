package adiantum

import (
	"bytes"
	"crypto/aes"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

type refVector struct {
	Description string `json:"description"`
	Key         string `json:"key_hex"`
	Tweak       string `json:"tweak_hex"`
	Plaintext   string `json:"plaintext_hex"`
	Ciphertext  string `json:"ciphertext_hex"`
}

func loadRef(t testing.TB) map[int][]refVector {
	t.Helper()
	b, err := os.ReadFile("testdata/adiantum_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors map[string][]refVector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[int][]refVector{12: f.Vectors["xchacha12"], 20: f.Vectors["xchacha20"]}
	if len(out[12]) < 20 || len(out[20]) < 20 {
		t.Fatalf("too few reference vectors: %d, %d", len(out[12]), len(out[20]))
	}
	return out
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustNew(t testing.TB, impl string, rounds int, key []byte) *Cipher {
	t.Helper()
	c, err := NewImpl(impl, rounds, key, aes.NewCipher)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReferenceVectors runs the Adiantum reference vectors (32-byte tweaks,
// 16 to 4096 bytes) through every implementation, out of place and in place.
func TestReferenceVectors(t *testing.T) {
	ref := loadRef(t)
	for _, impl := range Impls() {
		for rounds, vs := range ref {
			for _, v := range vs {
				c := mustNew(t, impl, rounds, unhex(t, v.Key))
				tw, pt, ct := unhex(t, v.Tweak), unhex(t, v.Plaintext), unhex(t, v.Ciphertext)
				got := make([]byte, len(pt))
				c.Encrypt(got, pt, tw)
				if !bytes.Equal(got, ct) {
					t.Fatalf("%s xchacha%d %s (%d B): encrypt mismatch", impl, rounds, v.Description, len(pt))
				}
				c.Decrypt(got, got, tw)
				if !bytes.Equal(got, pt) {
					t.Fatalf("%s xchacha%d %s (%d B): in-place decrypt mismatch", impl, rounds, v.Description, len(pt))
				}
			}
		}
	}
}
