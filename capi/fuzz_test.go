package capi

import (
	"bytes"
	"crypto/cipher"
	"strings"
	"testing"
)

// fuzzEquivalence compares every driver of name with the reference driver
// (the template over the pure-Go aes-generic) on fuzzer-chosen keys, IVs,
// lengths and batch shapes, in place and out of place.
func fuzzEquivalence(f *testing.F, name, ref string) {
	f.Add(uint8(0), []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), []byte("iv-iv-iv-iv-iv-i"), bytes.Repeat([]byte{7}, 512), uint8(1))
	f.Add(uint8(1), bytes.Repeat([]byte{1}, 64), make([]byte, 16), bytes.Repeat([]byte{0xaa}, 4096), uint8(8))
	f.Add(uint8(2), []byte{}, []byte{}, []byte("short"), uint8(0))
	f.Add(uint8(2), bytes.Repeat([]byte{3}, 64), bytes.Repeat([]byte{0xff}, 16), bytes.Repeat([]byte{5}, 33), uint8(3))
	// Batches of 16 and 32 sectors reach the multi-buffer kernels that take
	// 16 sectors per call; 4 KiB sectors their cache-set workaround.
	f.Add(uint8(2), bytes.Repeat([]byte{9}, 64), []byte("sixteen-lanes..."), bytes.Repeat([]byte{0x5c}, 1<<16), uint8(15))
	f.Add(uint8(0), bytes.Repeat([]byte{4}, 64), []byte("thirty-two-lanes"), bytes.Repeat([]byte{0x3a}, 32*512), uint8(31))
	ds, err := Drivers(name)
	if err != nil {
		f.Fatal(err)
	}
	var refAlg *Alg
	for _, d := range ds {
		// ref may be a prefix: the IV cipher of essiv's reference is
		// whatever aes driver is best on this build (aesni, or stdlib
		// under purego).
		if d.Driver == ref || strings.HasSuffix(ref, ",") && strings.HasPrefix(d.Driver, ref) {
			refAlg = d
			break
		}
	}
	if refAlg == nil {
		f.Fatalf("%s has no driver %q", name, ref)
	}
	f.Fuzz(func(t *testing.T, ksel uint8, keyMat, ivMat, data []byte, nsec uint8) {
		ks := refAlg.KeySizes[int(ksel)%len(refAlg.KeySizes)]
		key := make([]byte, ks)
		copy(key, keyMat)
		iv := make([]byte, refAlg.IVSize)
		copy(iv, ivMat)
		rt, err := refAlg.Skcipher(key)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 1<<16 {
			data = data[:1<<16]
		}
		if !rt.ValidLength(len(data)) {
			return
		}
		want := make([]byte, len(data))
		if err := rt.Encrypt(want, data, iv); err != nil {
			t.Fatal(err)
		}
		// A batch of n requests, each the first `each` bytes of data with its
		// own IV (the IV with its first byte bumped).
		n := int(nsec%48) + 1
		each := len(data) / n
		if refAlg.BlockSize > 1 {
			each -= each % refAlg.BlockSize
		}
		batch := each > 0 && rt.ValidLength(each)
		var bsrc, bwant, ivs []byte
		if batch {
			bsrc = data[:each*n]
			bwant = make([]byte, len(bsrc))
			ivs = make([]byte, n*len(iv))
			for i := 0; i < n; i++ {
				v := ivs[i*len(iv) : (i+1)*len(iv)]
				copy(v, iv)
				if len(v) > 0 {
					v[0] += byte(i)
				}
				rt.Encrypt(bwant[i*each:(i+1)*each], bsrc[i*each:(i+1)*each], v)
			}
		}
		for _, d := range ds {
			if d.SelfTest() != nil {
				continue
			}
			tf, err := d.Skcipher(key)
			if err != nil {
				t.Fatalf("%s: %v", d.Driver, err)
			}
			got := make([]byte, len(data)+1)[1:] // unaligned
			tf.Encrypt(got, data, iv)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: encryption differs from %s (key %d, len %d)", d.Driver, ref, ks, len(data))
			}
			inplace := bytes.Clone(data)
			tf.Encrypt(inplace, inplace, iv)
			if !bytes.Equal(inplace, want) {
				t.Fatalf("%s: in-place encryption differs", d.Driver)
			}
			tf.Decrypt(inplace, inplace, iv)
			if !bytes.Equal(inplace, data) {
				t.Fatalf("%s: decryption does not invert", d.Driver)
			}
			if batch {
				bgot := make([]byte, len(bsrc))
				if err := tf.EncryptSectors(bgot, bsrc, each, bytes.Clone(ivs)); err != nil {
					t.Fatalf("%s: %v", d.Driver, err)
				}
				if !bytes.Equal(bgot, bwant) {
					t.Fatalf("%s: batch of %d×%d differs", d.Driver, n, each)
				}
				if err := tf.DecryptSectors(bgot, bgot, each, bytes.Clone(ivs)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(bgot, bsrc) {
					t.Fatalf("%s: batch decryption does not invert", d.Driver)
				}
			}
		}
	})
}

func FuzzECB(f *testing.F) { fuzzEquivalence(f, "ecb(aes)", "ecb(aes-generic)") }
func FuzzCBC(f *testing.F) { fuzzEquivalence(f, "cbc(aes)", "cbc(aes-generic)") }
func FuzzCTR(f *testing.F) { fuzzEquivalence(f, "ctr(aes)", "ctr(aes-generic)") }
func FuzzXTS(f *testing.F) { fuzzEquivalence(f, "xts(aes)", "xts(aes-generic)") }
func FuzzLRW(f *testing.F) { fuzzEquivalence(f, "lrw(aes)", "lrw(aes-generic)") }
func FuzzESSIV(f *testing.F) {
	fuzzEquivalence(f, "essiv(cbc(aes),sha256)", "essiv(cbc(aes-generic),")
}

// FuzzCBC64 compares cbc over the 8-byte block ciphers, which have only the
// generic template driver, with crypto/cipher's CBC, whole and as a batch.
func FuzzCBC64(f *testing.F) {
	f.Add(uint8(0), []byte("0123456789abcdef01234567"), []byte("iv-iv-iv"), bytes.Repeat([]byte{7}, 512), uint8(1))
	f.Add(uint8(1), bytes.Repeat([]byte{1}, 24), make([]byte, 8), bytes.Repeat([]byte{0xaa}, 4096), uint8(8))
	f.Add(uint8(2), []byte{}, []byte{}, []byte("short"), uint8(0))
	f.Fuzz(func(t *testing.T, csel uint8, keyMat, ivMat, data []byte, nsec uint8) {
		c := legacy64[int(csel)%len(legacy64)]
		key := make([]byte, c.key)
		copy(key, keyMat)
		iv := make([]byte, 8)
		copy(iv, ivMat)
		data = data[:min(len(data), 1<<16)&^7]
		tf, err := NewSkcipher("cbc("+c.name+")", key)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewCipher(c.name, key)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, len(data))
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(want, data)
		got := make([]byte, len(data)+1)[1:] // unaligned
		if err := tf.Encrypt(got, data, iv); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("cbc(%s): %d bytes differ from crypto/cipher", c.name, len(data))
		}
		if err := tf.Decrypt(got, got, iv); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("cbc(%s): in-place decryption does not invert", c.name)
		}
		// n requests of `each` bytes, request i with the IV's first byte
		// bumped by i.
		n := int(nsec%48) + 1
		each := len(data) / n &^ 7
		if each == 0 {
			return
		}
		src := data[:each*n]
		ivs := make([]byte, 8*n)
		bwant := make([]byte, len(src))
		for i := 0; i < n; i++ {
			v := ivs[8*i : 8*i+8]
			copy(v, iv)
			v[0] += byte(i)
			cipher.NewCBCEncrypter(b, v).CryptBlocks(bwant[i*each:(i+1)*each], src[i*each:(i+1)*each])
		}
		bgot := make([]byte, len(src))
		if err := tf.EncryptSectors(bgot, src, each, bytes.Clone(ivs)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bgot, bwant) {
			t.Fatalf("cbc(%s): batch of %d×%d differs from crypto/cipher", c.name, n, each)
		}
		if err := tf.DecryptSectors(bgot, bgot, each, ivs); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bgot, src) {
			t.Fatalf("cbc(%s): batch decryption does not invert", c.name)
		}
	})
}

// FuzzName feeds arbitrary strings to the name parser and the registry:
// errors are fine, panics and hangs are not, and a parsed name prints back
// to a string that parses to the same name.
func FuzzName(f *testing.F) {
	for _, s := range []string{"essiv(cbc(aes),sha256)", "xts(aes)", "cbc(aes", "(", ",", "a(b(c(d(e(f(g(h(i(j))))))))))", "cbc(nosuch)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		if err == nil {
			n2, err := ParseName(n.String())
			if err != nil || n2.String() != n.String() {
				t.Fatalf("%q: reparse of %q: %v", s, n.String(), err)
			}
		}
		Lookup(s) //nolint:errcheck // must not panic
	})
}
