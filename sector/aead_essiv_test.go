package sector

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"math/rand/v2"
	"os"
	"testing"
)

// essivAuthencRef is dm-crypt's essiv(authenc(hmac(H),cbc(aes)),sha256)
// for one sector, built from the standard library alone: the salt is
// SHA-256 over the cipher key then the HMAC key (crypto/essiv.c hashes
// both halves of the authenc key), the IV is AES-salt(LE64(IV sector)),
// the data is AES-CBC with that IV, the tag HMAC(LE64(sector) || IV ||
// ciphertext).
func essivAuthencRef(encKey, macKey []byte, h func() hash.Hash, sector, ivOffset uint64, pt []byte) (ct, tag []byte) {
	salt := sha256.Sum256(append(bytes.Clone(encKey), macKey...))
	eb, _ := aes.NewCipher(salt[:])
	iv := make([]byte, 16)
	binary.LittleEndian.PutUint64(iv, sector+ivOffset)
	eb.Encrypt(iv, iv)
	b, _ := aes.NewCipher(encKey)
	ct = make([]byte, len(pt))
	cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, pt)
	mac := hmac.New(h, macKey)
	mac.Write(binary.LittleEndian.AppendUint64(nil, sector))
	mac.Write(iv)
	mac.Write(ct)
	return ct, mac.Sum(nil)
}

// TestAEADESSIVConstruction: aes-cbc-essiv:sha256 with hmac(sha256) and
// hmac(sha512), 512 and 4096-byte sectors, AES-128 and AES-256, with and
// without an IV offset, equals the reference sector by sector, and opens
// only at its own sector number.
func TestAEADESSIVConstruction(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 29))
	for _, integ := range []string{"hmac(sha256)", "hmac(sha512)"} {
		h, _ := hmacHash(integ)
		mk := h().Size()
		for _, encLen := range []int{16, 32} {
			for _, ss := range []int{512, 4096} {
				for _, ivOff := range []uint64{0, 64} {
					key := fill(r, make([]byte, encLen+mk))
					a, err := NewAEAD("aes-cbc-essiv:sha256", integ, key, ss, ivOff)
					if err != nil {
						t.Fatalf("%s %d: %v", integ, ss, err)
					}
					if m, ok := AEADMetaSize("aes-cbc-essiv:sha256", integ); !ok || m != mk || a.MetaSize() != mk || a.IVSize() != 0 {
						t.Fatalf("%s: metadata %d (%v), %d, IV %d; want %d, no IV", integ, m, ok, a.MetaSize(), a.IVSize(), mk)
					}
					n, first := 3, uint64(40)
					pt := fill(r, make([]byte, n*ss))
					ct := make([]byte, len(pt))
					meta := make([]byte, n*mk)
					if err := a.EncryptSectors(ct, meta, pt, first); err != nil {
						t.Fatal(err)
					}
					for i := range n {
						s := first + uint64(i*ss/512)
						wantCT, wantTag := essivAuthencRef(key[:encLen], key[encLen:], h, s, ivOff, pt[i*ss:(i+1)*ss])
						if !bytes.Equal(ct[i*ss:(i+1)*ss], wantCT) || !bytes.Equal(meta[i*mk:(i+1)*mk], wantTag) {
							t.Fatalf("%s AES-%d %d-byte sectors, iv offset %d: sector %d differs from the reference", integ, encLen*8, ss, ivOff, i)
						}
					}
					got := make([]byte, len(ct))
					if err := a.DecryptSectors(got, ct, meta, first); err != nil || !bytes.Equal(got, pt) {
						t.Fatalf("%s %d: round trip: %v", integ, ss, err)
					}
					// In place, as the Volume calls it.
					inPlace := bytes.Clone(ct)
					if err := a.DecryptSectors(inPlace, inPlace, meta, first); err != nil || !bytes.Equal(inPlace, pt) {
						t.Fatalf("%s %d: in-place round trip: %v", integ, ss, err)
					}
					var ae *AuthError
					if err := a.DecryptSectors(got, ct, meta, first+uint64(ss/512)); !errors.As(err, &ae) || ae.Sector != first+uint64(ss/512) {
						t.Fatalf("%s %d: sectors moved: %v", integ, ss, err)
					}
				}
			}
		}
	}
}

// TestAEADESSIVTamper: a flipped bit in the data or the tag of the
// middle sector fails exactly that sector; the sector before it decrypts
// and nothing of it or after it is returned.
func TestAEADESSIVTamper(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 29))
	key := fill(r, make([]byte, 64))
	a, err := NewAEAD("aes-cbc-essiv:sha256", "hmac(sha256)", key, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	pt := fill(r, make([]byte, 3*4096))
	ct := make([]byte, len(pt))
	meta := make([]byte, 3*32)
	if err := a.EncryptSectors(ct, meta, pt, 8); err != nil {
		t.Fatal(err)
	}
	for _, flip := range []struct {
		name string
		at   func(ct, meta []byte) []byte
	}{
		{"data", func(ct, meta []byte) []byte { return ct[4096+4095:] }},
		{"tag", func(ct, meta []byte) []byte { return meta[32+7:] }},
	} {
		c, m := bytes.Clone(ct), bytes.Clone(meta)
		flip.at(c, m)[0] ^= 0x20
		got := bytes.Repeat([]byte{0xee}, len(c))
		err := a.DecryptSectors(got, c, m, 8)
		var ae *AuthError
		if !errors.As(err, &ae) || !errors.Is(err, ErrAuth) || ae.Sector != 16 {
			t.Fatalf("%s: %v, want an AuthError at sector 16", flip.name, err)
		}
		if !bytes.Equal(got[:4096], pt[:4096]) || !bytes.Equal(got[4096:], make([]byte, 2*4096)) {
			t.Fatalf("%s: the verified sector is not returned, or the failed ones are not zeroed", flip.name)
		}
	}
}

// TestAEADESSIVKernelVectors opens sectors the kernel wrote (dm-crypt's
// essiv(authenc(hmac(…),cbc(aes)),sha256) in a qemu guest, see
// testdata/authenc_essiv_kernel.json) and encrypts their plaintext to
// the kernel's bytes: the IV is fixed by the sector, so encryption is
// deterministic.
func TestAEADESSIVKernelVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/authenc_essiv_kernel.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []struct {
			ID, Spec, Integrity string
			SectorSize          int    `json:"sector_size"`
			Sector              uint64 `json:"sector"`
			Key                 string `json:"key_hex"`
			CT                  string `json:"ciphertext_hex"`
			CTSum               string `json:"ciphertext_sha256"`
			Tag                 string `json:"tag_hex"`
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) != 2 {
		t.Fatalf("%d vectors, want 2", len(doc.Vectors))
	}
	// The plaintext: the kernel tests' pattern (test/kernel's
	// integrityPattern), the low byte of each PCG(29, 29) Uint32.
	pr := rand.New(rand.NewPCG(29, 29))
	pat := make([]byte, 4096)
	for i := range pat {
		pat[i] = byte(pr.Uint32())
	}
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, v := range doc.Vectors {
		a, err := NewAEAD(v.Spec, v.Integrity, unhex(v.Key), v.SectorSize, 0)
		if err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		pt := pat[:v.SectorSize]
		ct := make([]byte, v.SectorSize)
		tag := make([]byte, a.MetaSize())
		if err := a.EncryptSectors(ct, tag, pt, v.Sector); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(ct)
		if hex.EncodeToString(sum[:]) != v.CTSum || !bytes.Equal(tag, unhex(v.Tag)) {
			t.Errorf("%s: blkcrypt's sector differs from the kernel's", v.ID)
		}
		if v.CT == "" {
			continue
		}
		got := make([]byte, v.SectorSize)
		if err := a.DecryptSectors(got, unhex(v.CT), unhex(v.Tag), v.Sector); err != nil || !bytes.Equal(got, pt) {
			t.Errorf("%s: the kernel's sector does not open: %v", v.ID, err)
		}
	}
}

// TestAEADESSIVRefused: the essiv instantiations the kernel refuses (a
// digest that is no AES key size, a mode whose IV is not one block) and
// IV generators dm-crypt's authenc cannot use are refused here too.
func TestAEADESSIVRefused(t *testing.T) {
	for _, c := range []struct{ spec, integ string }{
		{"aes-cbc-essiv:sha1", "hmac(sha256)"},   // 20-byte salt
		{"aes-cbc-essiv:sha512", "hmac(sha256)"}, // 64-byte salt
		{"aes-cbc-benbi", "hmac(sha256)"},
		{"aes-cbc-null", "hmac(sha256)"},
	} {
		if _, err := NewAEAD(c.spec, c.integ, make([]byte, 64), 512, 0); err == nil {
			t.Errorf("%s with %s: accepted", c.spec, c.integ)
		}
	}
	a, err := NewAEAD("aes-cbc-essiv:sha256", "hmac(sha512)", make([]byte, 96), 512, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.KernelName(); got != "capi:authenc(hmac(sha512),cbc(aes))-essiv:sha256" {
		t.Errorf("KernelName %q", got)
	}
}
