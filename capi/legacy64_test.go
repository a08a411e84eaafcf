package capi

import (
	"bytes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"strings"
	"testing"
)

// The 64-bit-block ciphers through the templates: the kernel vectors run in
// the self-tests (TestEveryDriverPassesVectors); these tests compare the
// generic modes with the standard library's and check what is refused.

var legacy64 = []struct {
	name string
	key  int
}{{"des", 8}, {"des3_ede", 24}, {"cast5", 16}}

// TestCBC64MatchesStdlib: cbc over an 8-byte block cipher is crypto/cipher's
// CBC, out of place, in place and as a batch of sectors with their own IVs.
func TestCBC64MatchesStdlib(t *testing.T) {
	for _, c := range legacy64 {
		key := make([]byte, c.key)
		rand.Read(key)
		tf, err := NewSkcipher("cbc("+c.name+")", key)
		if err != nil {
			t.Fatal(err)
		}
		if tf.BlockSize() != 8 || tf.IVSize() != 8 {
			t.Fatalf("cbc(%s): block %d, IV %d; want 8 and 8", c.name, tf.BlockSize(), tf.IVSize())
		}
		b, err := NewCipher(c.name, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{8, 16, 24, 512, 4096} {
			src := make([]byte, n)
			iv := make([]byte, 8)
			rand.Read(src)
			rand.Read(iv)
			want := make([]byte, n)
			cipher.NewCBCEncrypter(b, iv).CryptBlocks(want, src)
			got := make([]byte, n)
			if err := tf.Encrypt(got, src, iv); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("cbc(%s) %d bytes: encryption differs from crypto/cipher", c.name, n)
			}
			if err := tf.Decrypt(got, got, iv); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, src) {
				t.Fatalf("cbc(%s) %d bytes: in-place decryption does not invert", c.name, n)
			}
			dec := make([]byte, n)
			cipher.NewCBCDecrypter(b, iv).CryptBlocks(dec, want)
			if !bytes.Equal(dec, src) {
				t.Fatalf("cbc(%s) %d bytes: crypto/cipher does not decrypt ours", c.name, n)
			}
		}
		const sectors, ss = 5, 512
		src := make([]byte, sectors*ss)
		ivs := make([]byte, sectors*8)
		rand.Read(src)
		rand.Read(ivs)
		want := make([]byte, len(src))
		for i := 0; i < sectors; i++ {
			cipher.NewCBCEncrypter(b, ivs[i*8:(i+1)*8]).CryptBlocks(want[i*ss:(i+1)*ss], src[i*ss:(i+1)*ss])
		}
		got := make([]byte, len(src))
		if err := tf.EncryptSectors(got, src, ss, bytes.Clone(ivs)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("cbc(%s): batch differs from crypto/cipher", c.name)
		}
		if err := tf.DecryptSectors(got, got, ss, bytes.Clone(ivs)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("cbc(%s): batch decryption does not invert", c.name)
		}
	}
}

// TestCBCZeroAllocs: the generic cbc path allocates nothing for 8- and
// 16-byte blocks (see the comment above cbcMode.Encrypt).
func TestCBCZeroAllocs(t *testing.T) {
	for _, c := range []struct {
		name, driver string
		key          int
	}{
		{"cbc(des3_ede)", "cbc(des3_ede-generic)", 24},
		{"cbc(cast5)", "cbc(cast5-generic)", 16},
		{"cbc(serpent)", "cbc(serpent-generic)", 32},
	} {
		a, err := LookupDriver(c.name, c.driver)
		if err != nil {
			t.Fatal(err)
		}
		tf, err := a.Skcipher(make([]byte, c.key))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		iv := make([]byte, tf.IVSize())
		ivs := make([]byte, 8*tf.IVSize())
		for name, f := range map[string]func(){
			"encrypt":         func() { tf.Encrypt(buf, buf, iv) },
			"decrypt":         func() { tf.Decrypt(buf, buf, iv) },
			"encrypt sectors": func() { tf.EncryptSectors(buf, buf, 512, ivs) },
			"decrypt sectors": func() { tf.DecryptSectors(buf, buf, 512, ivs) },
		} {
			if n := testing.AllocsPerRun(20, f); n != 0 {
				t.Errorf("%s %s: %v allocs per call", c.driver, name, n)
			}
		}
	}
}

// TestLegacy64Refusals: xts and lrw need 16-byte blocks, as in the kernel;
// the CAST5 keys x/crypto/cast5 cannot schedule (12-round, 5-10 bytes) are
// refused rather than mis-keyed.
func TestLegacy64Refusals(t *testing.T) {
	for _, n := range []string{"xts(des3_ede)", "lrw(cast5)", "xts(des)", "essiv(xts(cast5),sha256)"} {
		_, err := Lookup(n)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), "16-byte block") {
			t.Errorf("Lookup(%s) = %v, want ErrInvalidName about 16-byte blocks", n, err)
		}
	}
	for _, k := range []int{0, 5, 10, 17} {
		if _, err := NewSkcipher("cbc(cast5)", make([]byte, k)); !errors.Is(err, ErrInvalidKeySize) {
			t.Errorf("cbc(cast5) with a %d-byte key: %v, want ErrInvalidKeySize", k, err)
		}
	}
	for _, c := range []struct {
		name string
		key  int
	}{{"cbc(des)", 16}, {"cbc(des3_ede)", 16}, {"cbc(des3_ede)", 8}} {
		if _, err := NewSkcipher(c.name, make([]byte, c.key)); !errors.Is(err, ErrInvalidKeySize) {
			t.Errorf("%s with a %d-byte key: %v, want ErrInvalidKeySize", c.name, c.key, err)
		}
	}
	tf, err := NewSkcipher("cbc(des3_ede)", make([]byte, 24))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	for _, c := range []struct{ n, iv int }{{12, 8}, {16, 16}, {16, 0}} {
		if err := tf.Encrypt(buf[:c.n], buf[:c.n], buf[:c.iv]); !errors.Is(err, ErrInvalidLength) {
			t.Errorf("cbc(des3_ede) %d bytes, %d-byte IV: %v, want ErrInvalidLength", c.n, c.iv, err)
		}
	}
}

// TestCAST5ShortKeys: 11-15 byte keys are zero-padded to 16 (RFC 2144,
// full 16 rounds). The answers were computed with OpenSSL's CAST_set_key,
// given the real key length, through python-cryptography.
func TestCAST5ShortKeys(t *testing.T) {
	for _, c := range []struct{ key, ct string }{
		{"0123456712345678234567", "ec505ba8e49303fe"},
		{"0123456712345678234567893456", "67cfda0d4abcfde1"},
	} {
		key, _ := hex.DecodeString(c.key)
		b, err := NewCipher("cast5", key)
		if err != nil {
			t.Fatal(err)
		}
		pt, _ := hex.DecodeString("0123456789abcdef")
		out := make([]byte, 8)
		b.Encrypt(out, pt)
		if hex.EncodeToString(out) != c.ct {
			t.Errorf("cast5 %d-byte key: %x, want %s", len(key), out, c.ct)
		}
	}
}

// sha256x16 is a 16-byte digest, so that essiv can key CAST5 in a test (no
// registered hash has a 128-bit digest).
type sha256x16 struct{ hash.Hash }

func (h sha256x16) Size() int           { return 16 }
func (h sha256x16) Sum(b []byte) []byte { return h.Hash.Sum(b)[:len(b)+16] }
func newSHA256x16() hash.Hash           { return sha256x16{sha256.New()} }

// TestESSIV64: essiv over an 8-byte block cipher encrypts the 8-byte IV
// with the digest-keyed cipher, one block per request, also in batches.
func TestESSIV64(t *testing.T) {
	if err := Register(&Alg{Name: "sha256x16", Driver: "sha256x16-test", Priority: PriorityGeneric, Type: TypeHash,
		BlockSize: 64, DigestSize: 16, NewHash: newSHA256x16}); err != nil {
		t.Fatal(err)
	}
	defer Unregister("sha256x16-test")
	key := make([]byte, 16)
	rand.Read(key)
	tf, err := NewSkcipher("essiv(cbc(cast5),sha256x16)", key)
	if err != nil {
		t.Fatal(err)
	}
	salt := sha256.Sum256(key)
	ivc, _ := NewCipher("cast5", salt[:16])
	b, _ := NewCipher("cast5", key)
	const sectors, ss = 3, 512
	src := make([]byte, sectors*ss)
	ivs := make([]byte, sectors*8)
	rand.Read(src)
	rand.Read(ivs)
	want := make([]byte, len(src))
	for i := 0; i < sectors; i++ {
		e := make([]byte, 8)
		ivc.Encrypt(e, ivs[i*8:(i+1)*8])
		cipher.NewCBCEncrypter(b, e).CryptBlocks(want[i*ss:(i+1)*ss], src[i*ss:(i+1)*ss])
	}
	got := make([]byte, ss)
	if err := tf.Encrypt(got, src[:ss], ivs[:8]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want[:ss]) {
		t.Fatal("essiv(cbc(cast5)) single request differs from the construction")
	}
	got = make([]byte, len(src))
	if err := tf.EncryptSectors(got, src, ss, bytes.Clone(ivs)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("essiv(cbc(cast5)) batch differs from the construction")
	}
	if err := tf.DecryptSectors(got, got, ss, bytes.Clone(ivs)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("essiv(cbc(cast5)) batch decryption does not invert")
	}
}
