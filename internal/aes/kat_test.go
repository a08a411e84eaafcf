package aes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// katVector holds the fields used here from the dmcrypt-kat-v1 files in
// testdata (see /work/shared/vectors/README.md for the layout).
type katVector struct {
	ID         string `json:"id"`
	Key        string `json:"key"`
	IV         string `json:"iv"`
	Tweak      string `json:"tweak"`
	IVOut      string `json:"iv_out"`
	Plaintext  string `json:"plaintext"`
	Ciphertext string `json:"ciphertext"`
	Length     int    `json:"length"`
}

func loadKAT(t *testing.T, name string) []katVector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Format  string      `json:"format"`
		Count   int         `json:"vector_count"`
		Vectors []katVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if f.Format != "dmcrypt-kat-v1" || len(f.Vectors) != f.Count || f.Count == 0 {
		t.Fatalf("%s: format %q, %d vectors, vector_count %d", name, f.Format, len(f.Vectors), f.Count)
	}
	return f.Vectors
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkXTSKAT(t *testing.T, impl string, v katVector, tweakHex string) {
	key, pt, ct := unhex(t, v.Key), unhex(t, v.Plaintext), unhex(t, v.Ciphertext)
	iv := [16]byte(unhex(t, tweakHex))
	if len(pt) != v.Length || len(ct) != v.Length {
		t.Fatalf("%s: length field %d, plaintext %d, ciphertext %d", v.ID, v.Length, len(pt), len(ct))
	}
	x := xtsPair(t, impl, key)
	got := make([]byte, len(pt))
	x.Encrypt(got, pt, &iv)
	if !bytes.Equal(got, ct) {
		t.Fatalf("%s: encrypt\ngot  %x\nwant %x", v.ID, got, ct)
	}
	x.Decrypt(got, got, &iv) // in place
	if !bytes.Equal(got, pt) {
		t.Fatalf("%s: decrypt\ngot  %x\nwant %x", v.ID, got, pt)
	}
	if len(pt)%16 == 0 {
		// The same data unit through the sector batch API.
		copy(got, pt)
		x.EncryptSectors(got, got, len(pt), iv[:])
		if !bytes.Equal(got, ct) {
			t.Fatalf("%s: EncryptSectors mismatch", v.ID)
		}
		x.DecryptSectors(got, got, len(pt), iv[:])
		if !bytes.Equal(got, pt) {
			t.Fatalf("%s: DecryptSectors mismatch", v.ID)
		}
	}
}

func TestKATXTS(t *testing.T) {
	ieee := loadKAT(t, "ieee_p1619_xts_aes.json")
	kernel := loadKAT(t, "kernel_xts_aes.json")
	nist := loadKAT(t, "nist_cavp_xts_aes_dataunitseqno.json")
	forEachImpl(t, func(t *testing.T, impl string) {
		stealing := 0
		for _, v := range ieee {
			checkXTSKAT(t, impl, v, v.Tweak)
			if v.Length%16 != 0 {
				stealing++
			}
		}
		for _, v := range kernel {
			checkXTSKAT(t, impl, v, v.IV)
		}
		for _, v := range nist {
			checkXTSKAT(t, impl, v, v.Tweak)
			if v.Length%16 != 0 {
				stealing++
			}
		}
		if stealing != 4+200 {
			t.Errorf("%d ciphertext-stealing vectors, want 204", stealing)
		}
	})
}

func TestKATCBC(t *testing.T) {
	vs := loadKAT(t, "kernel_cbc_aes.json")
	forEachImpl(t, func(t *testing.T, impl string) {
		for _, v := range vs {
			b := mustNew(t, impl, unhex(t, v.Key))
			pt, ct := unhex(t, v.Plaintext), unhex(t, v.Ciphertext)
			iv0 := [16]byte(unhex(t, v.IV))
			ivOut := [16]byte(unhex(t, v.IVOut))
			got := make([]byte, len(pt))
			iv := iv0
			b.EncryptCBC(got, pt, &iv)
			if !bytes.Equal(got, ct) || iv != ivOut {
				t.Fatalf("%s: encrypt got %x iv_out %x", v.ID, got, iv)
			}
			iv = iv0
			b.DecryptCBC(got, got, &iv)
			if !bytes.Equal(got, pt) || iv != ivOut {
				t.Fatalf("%s: decrypt got %x iv_out %x", v.ID, got, iv)
			}
			// One sector through the multi-sector API.
			b.EncryptCBCSectors(got, pt, len(pt), iv0[:])
			if !bytes.Equal(got, ct) {
				t.Fatalf("%s: EncryptCBCSectors mismatch", v.ID)
			}
			b.DecryptCBCSectors(got, got, len(pt), iv0[:])
			if !bytes.Equal(got, pt) {
				t.Fatalf("%s: DecryptCBCSectors mismatch", v.ID)
			}
		}
	})
}

func TestKATESSIV(t *testing.T) {
	vs := loadKAT(t, "kernel_essiv_aes_cbc_sha256.json")
	forEachImpl(t, func(t *testing.T, impl string) {
		for _, v := range vs {
			key := unhex(t, v.Key)
			salt := sha256.Sum256(key)
			b := mustNew(t, impl, key)
			ivKey := mustNew(t, impl, salt[:])
			pt, ct := unhex(t, v.Plaintext), unhex(t, v.Ciphertext)
			iv := [16]byte(unhex(t, v.IV))
			got := make([]byte, len(pt))
			b.EncryptESSIVCBC(ivKey, got, pt, &iv)
			if !bytes.Equal(got, ct) {
				t.Fatalf("%s: encrypt got %x", v.ID, got)
			}
			b.DecryptESSIVCBC(ivKey, got, got, &iv)
			if !bytes.Equal(got, pt) {
				t.Fatalf("%s: decrypt got %x", v.ID, got)
			}
			if [16]byte(unhex(t, v.IV)) != iv {
				t.Fatalf("%s: iv modified", v.ID)
			}
			// Sector path: ESSIV IVs computed by one ECB pass, then the
			// multi-buffer kernel.
			var civ [16]byte
			ivKey.EncryptECB(civ[:], iv[:])
			b.EncryptCBCSectors(got, pt, len(pt), civ[:])
			if !bytes.Equal(got, ct) {
				t.Fatalf("%s: EncryptCBCSectors mismatch", v.ID)
			}
		}
	})
}
