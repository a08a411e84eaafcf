package sector

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/rand/v2"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/blkcrypt/blkcrypt/internal/aead"
	"github.com/blkcrypt/blkcrypt/internal/testmgr"
)

// aeadCases are the pairs cryptsetup makes, with the independent
// construction each must equal (nil for authenc, checked separately).
var aeadCases = []struct {
	spec, integ string
	keyLen      int
	ref         func(key []byte) cipher.AEAD
}{
	{"aes-gcm-random", "aead", 32, func(k []byte) cipher.AEAD { b, _ := aes.NewCipher(k); g, _ := cipher.NewGCM(b); return g }},
	{"aes-gcm-random", "aead", 16, func(k []byte) cipher.AEAD { b, _ := aes.NewCipher(k); g, _ := cipher.NewGCM(b); return g }},
	{"chacha20-random", "poly1305", 32, func(k []byte) cipher.AEAD { a, _ := chacha20poly1305.New(k); return a }},
	{"aegis128-random", "aead", 16, func(k []byte) cipher.AEAD { a, _ := aead.NewAEGIS128(k, 16); return a }},
	{"aes-xts-plain64", "hmac(sha256)", 64 + 32, nil},
	{"aes-xts-plain64", "hmac(sha512)", 32 + 64, nil},
}

func fill(r *rand.Rand, b []byte) []byte {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestAEADConstruction checks the per-sector layout against the
// reference ciphers used directly: associated data = LE64(512-byte
// sector) || IV, metadata = tag || IV for -random modes; for authenc the
// data is dm-crypt's sector cipher and the tag the HMAC over associated
// data (the plain64 IV) and ciphertext, the HMAC key at the end of the
// volume key.
func TestAEADConstruction(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range aeadCases {
		for _, ss := range []int{512, 4096} {
			key := fill(r, make([]byte, c.keyLen))
			a, err := NewAEAD(c.spec, c.integ, key, ss, 0)
			if err != nil {
				t.Fatalf("%s %s: %v", c.spec, c.integ, err)
			}
			want, _ := AEADMetaSize(c.spec, c.integ)
			if a.MetaSize() != want {
				t.Fatalf("%s: meta size %d, want %d", c.spec, a.MetaSize(), want)
			}
			n := 3
			pt := fill(r, make([]byte, n*ss))
			ct := make([]byte, len(pt))
			meta := make([]byte, n*a.MetaSize())
			first := uint64(40)
			if err := a.EncryptSectors(ct, meta, pt, first); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				s := first + uint64(i*ss/512)
				m := meta[i*a.MetaSize() : (i+1)*a.MetaSize()]
				sct := ct[i*ss : (i+1)*ss]
				if c.ref != nil {
					iv := m[a.TagSize():]
					ad := binary.LittleEndian.AppendUint64(nil, s)
					ad = append(ad, iv...)
					got, err := c.ref(key).Open(nil, iv, append(bytes.Clone(sct), m[:a.TagSize()]...), ad)
					if err != nil || !bytes.Equal(got, pt[i*ss:(i+1)*ss]) {
						t.Fatalf("%s %d: sector %d does not open with the reference: %v", c.spec, ss, i, err)
					}
					continue
				}
				enc, _ := New(c.spec, key[:len(key)-(a.TagSize())], Options{SectorSize: ss})
				want := make([]byte, ss)
				enc.EncryptSectors(want, pt[i*ss:(i+1)*ss], s)
				if !bytes.Equal(want, sct) {
					t.Fatalf("%s %d: data is not the sector cipher's", c.spec, ss)
				}
				hf := sha256.New
				if c.integ == "hmac(sha512)" {
					hf = sha512New
				}
				mac := hmac.New(hf, key[len(key)-a.TagSize():])
				iv := make([]byte, 16)
				binary.LittleEndian.PutUint64(iv, s)
				mac.Write(binary.LittleEndian.AppendUint64(nil, s))
				mac.Write(iv)
				mac.Write(sct)
				if !bytes.Equal(mac.Sum(nil), m) {
					t.Fatalf("%s %s %d: tag is not the HMAC over sector, IV and ciphertext", c.spec, c.integ, ss)
				}
			}
			got := make([]byte, len(ct))
			if err := a.DecryptSectors(got, ct, meta, first); err != nil || !bytes.Equal(got, pt) {
				t.Fatalf("%s: round trip: %v", c.spec, err)
			}
			// A sector read at another number does not verify.
			if err := a.DecryptSectors(got, ct, meta, first+uint64(ss/512)); !errors.Is(err, ErrAuth) {
				t.Fatalf("%s: sectors moved: %v", c.spec, err)
			}
		}
	}
}

// TestAEADTamper flips a bit in data, tag and IV: exactly that sector
// fails, naming itself, with no plaintext of it or after it.
func TestAEADTamper(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range aeadCases {
		a, err := NewAEAD(c.spec, c.integ, fill(r, make([]byte, c.keyLen)), 512, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 8
		pt := fill(r, make([]byte, n*512))
		ct := make([]byte, len(pt))
		meta := make([]byte, n*a.MetaSize())
		if err := a.EncryptSectors(ct, meta, pt, 0); err != nil {
			t.Fatal(err)
		}
		spots := []struct {
			what string
			buf  []byte
			at   int
		}{{"data", ct, 5*512 + 17}, {"tag", meta, 5*a.MetaSize() + 3}}
		if a.IVSize() > 0 {
			spots = append(spots, struct {
				what string
				buf  []byte
				at   int
			}{"iv", meta, 5*a.MetaSize() + a.TagSize() + 1})
		}
		for _, sp := range spots {
			sp.buf[sp.at] ^= 0x20
			got := make([]byte, len(pt))
			err := a.DecryptSectors(got, ct, meta, 0)
			var ae *AuthError
			if !errors.As(err, &ae) || ae.Sector != 5 || !errors.Is(err, ErrAuth) {
				t.Errorf("%s %s: flipped %s: %v", c.spec, c.integ, sp.what, err)
			}
			if !bytes.Equal(got[:5*512], pt[:5*512]) || !bytes.Equal(got[5*512:], make([]byte, 3*512)) {
				t.Errorf("%s %s: flipped %s: wrong or leaked plaintext", c.spec, c.integ, sp.what)
			}
			sp.buf[sp.at] ^= 0x20
		}
	}
}

func TestAEADRefusals(t *testing.T) {
	for _, c := range []struct{ spec, integ string }{
		{"aes-gcm-random", "hmac(sha256)"}, {"aes-xts-random", "hmac(sha256)"}, {"aes-xts-plain64", "aead"},
		{"aes-cbc-essiv:sha256", "hmac(sha256)"}, {"chacha20-random", "aead"}, {"aes-gcm-random", ""},
	} {
		if _, err := NewAEAD(c.spec, c.integ, make([]byte, 96), 512, 0); err == nil {
			t.Errorf("%s with %q accepted", c.spec, c.integ)
		}
	}
	if _, err := NewAEAD("aes-gcm-random", "aead", make([]byte, 33), 512, 0); err == nil {
		t.Error("a 33-byte GCM key accepted")
	}
	if _, err := NewAEAD("aes-xts-plain64", "hmac(sha256)", make([]byte, 32), 512, 0); err == nil {
		t.Error("an authenc key with nothing for the cipher accepted")
	}
	a, _ := NewAEAD("aes-gcm-random", "aead", make([]byte, 32), 4096, 0)
	if err := a.EncryptSectors(make([]byte, 4096), make([]byte, 27), make([]byte, 4096), 0); err == nil {
		t.Error("short metadata accepted")
	}
	if err := a.DecryptSectors(make([]byte, 512), make([]byte, 512), make([]byte, 28), 0); err == nil {
		t.Error("a partial sector accepted")
	}
}

// FuzzAEADOpen feeds arbitrary ciphertext and metadata to every mode:
// an error or the plaintext of what EncryptSectors made, never a panic.
func FuzzAEADOpen(f *testing.F) {
	f.Add(uint8(0), make([]byte, 512), make([]byte, 32), uint64(0))
	f.Fuzz(func(t *testing.T, mode uint8, data, meta []byte, sec uint64) {
		c := aeadCases[int(mode)%len(aeadCases)]
		a, err := NewAEAD(c.spec, c.integ, make([]byte, c.keyLen), 512, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != 512 || len(meta) < a.MetaSize() {
			return
		}
		meta = meta[:a.MetaSize()]
		if err := a.DecryptSectors(make([]byte, 512), data, meta, sec); err == nil {
			t.Fatalf("%s: random bytes verified", c.spec)
		}
	})
}

// BenchmarkAEAD is per-sector AEAD encryption of 4096-byte sectors
// (bench/aead.sh sets it against OpenSSL).
func BenchmarkAEAD(b *testing.B) {
	type benchCase struct {
		spec, integ string
		keyLen      int
	}
	var cases []benchCase
	for _, c := range aeadCases {
		cases = append(cases, benchCase{c.spec, c.integ, c.keyLen})
	}
	cases = append(cases, benchCase{"aes-cbc-essiv:sha256", "hmac(sha256)", 32 + 32})
	for _, c := range cases {
		a, err := NewAEAD(c.spec, c.integ, make([]byte, c.keyLen), 4096, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s+%s/key%d", c.spec, c.integ, c.keyLen*8), func(b *testing.B) {
			const n = 16
			buf := make([]byte, n*4096)
			meta := make([]byte, n*a.MetaSize())
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := a.EncryptSectors(buf, meta, buf, 8); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func sha512New() hash.Hash { return sha512.New() }

// TestAEADPrimitivesKAT runs internal/testmgr's AEAD known answers (GCM
// specification, RFC 7539, AEGIS-128 specification) through the
// primitives NewAEAD builds on, constructed as NewAEAD constructs them.
func TestAEADPrimitivesKAT(t *testing.T) {
	for name, mk := range map[string]func(key []byte) (cipher.AEAD, error){
		"gcm(aes)": func(k []byte) (cipher.AEAD, error) {
			b, err := aes.NewCipher(k)
			if err != nil {
				return nil, err
			}
			return cipher.NewGCM(b)
		},
		"rfc7539(chacha20,poly1305)": chacha20poly1305.New,
		"aegis128":                   func(k []byte) (cipher.AEAD, error) { return aead.NewAEGIS128(k, 16) },
	} {
		vs, err := testmgr.AEADs(name)
		if err != nil || len(vs) == 0 {
			t.Fatalf("%s: no vectors (%v)", name, err)
		}
		for _, v := range vs {
			a, err := mk(v.Key)
			if err != nil {
				t.Fatalf("%s: %v", v.ID, err)
			}
			want := append(bytes.Clone(v.Ciphertext), v.Tag...)
			if got := a.Seal(nil, v.IV, v.Plaintext, v.Assoc); !bytes.Equal(got, want) {
				t.Errorf("%s: Seal = %x, want %x", v.ID, got, want)
			}
			if pt, err := a.Open(nil, v.IV, want, v.Assoc); err != nil || !bytes.Equal(pt, v.Plaintext) {
				t.Errorf("%s: Open: %v", v.ID, err)
			}
		}
	}
}
