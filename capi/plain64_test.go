package capi

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"testing"
)

// TestPlain64MatchesIV: a driver's by-value IV form (Plain64Skcipher) is the
// same transform as Encrypt/Decrypt with the IV n, little-endian and
// zero-padded, for every driver that has one, and the AES drivers do.
func TestPlain64MatchesIV(t *testing.T) {
	r := mrand.New(mrand.NewPCG(3, 4))
	found := map[string]bool{}
	for _, a := range List() {
		if a.Type != TypeSkcipher {
			continue
		}
		key := make([]byte, a.KeySizes[len(a.KeySizes)-1])
		rand.Read(key)
		tfm, err := a.Skcipher(key)
		if err != nil {
			t.Fatalf("%s: %v", a.Driver, err)
		}
		p := tfm.UncheckedPlain64()
		if p == nil {
			continue
		}
		found[a.Name] = true
		for range 50 {
			size := 512 << r.IntN(4)
			n := r.Uint64()
			src := make([]byte, size)
			rand.Read(src)
			iv := make([]byte, a.IVSize)
			binary.LittleEndian.PutUint64(iv, n)
			want := make([]byte, size)
			if err := tfm.Encrypt(want, src, iv); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, size)
			p.EncryptPlain64(got, src, n)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: EncryptPlain64(%d) differs from Encrypt with its IV (%d bytes)", a.Driver, n, size)
			}
			p.DecryptPlain64(got, got, n) // in place
			if !bytes.Equal(got, src) {
				t.Fatalf("%s: DecryptPlain64(%d) does not invert (%d bytes)", a.Driver, n, size)
			}
		}
	}
	for _, name := range []string{"xts(aes)", "cbc(aes)", "essiv(cbc(aes),sha256)"} {
		if !found[name] {
			t.Errorf("no %s driver takes the IV by value", name)
		}
	}
}
