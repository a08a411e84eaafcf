package gcm

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testmgr"
)

// One conformance suite for every implementation: each test runs on
// "generic" (crypto/cipher's GCM) and, where the CPU has it,
// "vaes-avx512", and holds both to the specification's and the kernel's
// vectors and to crypto/cipher's GCM on random inputs.

type impl struct {
	name string
	new  func(key []byte) (*GCM, error)
}

func impls(t testing.TB) []impl {
	out := []impl{{"generic", func(k []byte) (*GCM, error) { return newGCM(k, false) }}}
	if useAsm {
		out = append(out, impl{"vaes-avx512", func(k []byte) (*GCM, error) { return newGCM(k, true) }})
	} else {
		t.Logf("vaes-avx512 not tested: no AVX-512 VAES/VPCLMULQDQ here (or purego, or not amd64)")
	}
	return out
}

func forEachImpl(t *testing.T, f func(t *testing.T, im impl)) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) { f(t, im) })
	}
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// specVectors are test cases of D. McGrew and J. Viega, "The
// Galois/Counter Mode of Operation (GCM)", revised 2005 submission to
// NIST, Appendix B: cases 1-4 (AES-128) and 13-16 (AES-256), typed in
// from the document.
var specVectors = []struct {
	name                string
	key, iv, p, a, c, t string
}{
	{"case1", "00000000000000000000000000000000", "000000000000000000000000", "", "", "", "58e2fccefa7e3061367f1d57a4e7455a"},
	{"case2", "00000000000000000000000000000000", "000000000000000000000000", "00000000000000000000000000000000", "",
		"0388dace60b6a392f328c2b971b2fe78", "ab6e47d42cec13bdf53a67b21257bddf"},
	{"case3", "feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
		"d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255", "",
		"42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
		"4d5c2af327cd64a62cf35abd2ba6fab4"},
	{"case4", "feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
		"d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
		"feedfacedeadbeeffeedfacedeadbeefabaddad2",
		"42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
		"5bc94fbc3221a5db94fae95ae7121a47"},
	{"case13", "0000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000", "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"},
	{"case14", "0000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000", "00000000000000000000000000000000", "",
		"cea7403d4d606b6e074ec5d3baf39d18", "d0d1c8a799996bf0265b98b5d48ab919"},
	{"case15", "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
		"d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255", "",
		"522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad",
		"b094dac5d93471bdec1a502270e3cc6c"},
	{"case16", "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
		"d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
		"feedfacedeadbeeffeedfacedeadbeefabaddad2",
		"522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
		"76fc6ece0f4e1768cddf8853bb2d551b"},
}

func checkKAT(t *testing.T, im impl, name string, key, iv, p, a, c, tag []byte) {
	t.Helper()
	g, err := im.new(key)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	want := append(bytes.Clone(c), tag...)
	if got := g.Seal(nil, iv, p, a); !bytes.Equal(got, want) {
		t.Errorf("%s: Seal = %x, want %x", name, got, want)
	}
	if got, err := g.Open(nil, iv, want, a); err != nil || !bytes.Equal(got, p) {
		t.Errorf("%s: Open = %x, %v; want %x", name, got, err, p)
	}
	// In place, with a prefix in dst.
	buf := append([]byte("prefix"), p...)
	buf = g.Seal(buf[:6], iv, buf[6:], a)
	if !bytes.Equal(buf[6:], want) || string(buf[:6]) != "prefix" {
		t.Errorf("%s: in-place Seal = %x, want prefix then %x", name, buf, want)
	}
}

func TestSpecVectors(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		for _, v := range specVectors {
			checkKAT(t, im, v.name, unhex(v.key), unhex(v.iv), unhex(v.p), unhex(v.a), unhex(v.c), unhex(v.t))
		}
	})
}

// TestKernelVectors runs the kernel's testmgr.h gcm(aes) vectors (12-byte
// IVs) as internal/testmgr embeds them.
func TestKernelVectors(t *testing.T) {
	vs, err := testmgr.AEADs("gcm(aes)")
	if err != nil || len(vs) == 0 {
		t.Fatalf("no gcm(aes) vectors: %v", err)
	}
	forEachImpl(t, func(t *testing.T, im impl) {
		n := 0
		for _, v := range vs {
			if len(v.IV) != NonceSize || len(v.Tag) != TagSize {
				continue
			}
			checkKAT(t, im, v.ID, v.Key, v.IV, v.Plaintext, v.Assoc, v.Ciphertext, v.Tag)
			n++
		}
		if n == 0 {
			t.Fatal("no 12-byte-IV, 16-byte-tag gcm(aes) vectors")
		}
	})
}

// TestKeyExpansion checks the assembly's key schedule (AESENCLAST as
// SubWord) on FIPS-197 Appendix A.1 and A.3: the last word of the
// expanded AES-128 and AES-256 keys.
func TestKeyExpansion(t *testing.T) {
	if !useAsm {
		t.Skip("no vaes-avx512 here: the generic implementation has no key schedule of its own")
	}
	for _, c := range []struct {
		key  string
		last uint32
	}{
		{"2b7e151628aed2a6abf7158809cf4f3c", 0xb6630ca6},
		{"603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", 0x706c631e},
	} {
		g, err := newGCM(unhex(c.key), true)
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.Uint32(g.xk[16*g.nr+12:]); got != c.last {
			t.Errorf("key %s: last schedule word %08x, want %08x", c.key, got, c.last)
		}
	}
}

func stdGCM(t testing.TB, key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// compare seals pt with g and with crypto/cipher's GCM, opens the result
// with g (in a new buffer and in place), and checks that corrupting the
// ciphertext, the tag, the associated data or the nonce is rejected with
// the output cleared.
func compare(t testing.TB, r *rand.Rand, g *GCM, std cipher.AEAD, nonce, pt, ad []byte) {
	t.Helper()
	want := std.Seal(nil, nonce, pt, ad)
	got := g.Seal(nil, nonce, pt, ad)
	if !bytes.Equal(got, want) {
		t.Fatalf("len %d ad %d: Seal differs from crypto/cipher from byte %d on", len(pt), len(ad), firstDiff(got, want))
	}
	buf := append(bytes.Clone(pt), make([]byte, TagSize)...)
	inPlace := g.Seal(buf[:0], nonce, buf[:len(pt)], ad)
	if !bytes.Equal(inPlace, want) {
		t.Fatalf("len %d ad %d: in-place Seal differs", len(pt), len(ad))
	}
	if out, err := g.Open(nil, nonce, want, ad); err != nil || !bytes.Equal(out, pt) {
		t.Fatalf("len %d ad %d: Open: %v", len(pt), len(ad), err)
	}
	ct := bytes.Clone(want)
	if out, err := g.Open(ct[:0], nonce, ct, ad); err != nil || !bytes.Equal(out, pt) {
		t.Fatalf("len %d ad %d: in-place Open: %v", len(pt), len(ad), err)
	}

	// Detached: ciphertext in place, tag apart.
	dct := bytes.Clone(pt)
	dtag := make([]byte, TagSize)
	g.SealDetached(dct, dtag, nonce, dct, ad)
	if !bytes.Equal(append(bytes.Clone(dct), dtag...), want) {
		t.Fatalf("len %d ad %d: SealDetached differs from crypto/cipher", len(pt), len(ad))
	}
	if err := g.OpenDetached(dct, nonce, dct, dtag, ad); err != nil || !bytes.Equal(dct, pt) {
		t.Fatalf("len %d ad %d: OpenDetached: %v", len(pt), len(ad), err)
	}

	bad := bytes.Clone(want)
	bad[r.IntN(len(bad))] ^= 1 << r.IntN(8)
	if _, err := std.Open(nil, nonce, bad, ad); err == nil {
		t.Fatalf("crypto/cipher accepted a corrupted message")
	}
	if out, err := g.Open(nil, nonce, bad, ad); err == nil || out != nil {
		t.Fatalf("len %d ad %d: corrupted ciphertext or tag accepted", len(pt), len(ad))
	}
	inBuf := bytes.Clone(bad)
	if _, err := g.Open(inBuf[:0], nonce, inBuf, ad); err == nil {
		t.Fatalf("len %d ad %d: corrupted message accepted in place", len(pt), len(ad))
	} else if !bytes.Equal(inBuf[:len(pt)], make([]byte, len(pt))) {
		t.Fatalf("len %d ad %d: rejected Open left output in dst", len(pt), len(ad))
	}
	dct = bytes.Clone(bad[:len(pt)])
	if err := g.OpenDetached(dct, nonce, dct, bad[len(pt):], ad); err == nil {
		t.Fatalf("len %d ad %d: OpenDetached accepted a corrupted message", len(pt), len(ad))
	} else if !bytes.Equal(dct, make([]byte, len(pt))) {
		t.Fatalf("len %d ad %d: rejected OpenDetached left output in dst", len(pt), len(ad))
	}
	if len(ad) > 0 {
		badAD := bytes.Clone(ad)
		badAD[r.IntN(len(badAD))] ^= 1 << r.IntN(8)
		if _, err := g.Open(nil, nonce, want, badAD); err == nil {
			t.Fatalf("len %d ad %d: corrupted associated data accepted", len(pt), len(ad))
		}
	}
	badNonce := bytes.Clone(nonce)
	badNonce[r.IntN(len(badNonce))] ^= 1 << r.IntN(8)
	if _, err := g.Open(nil, badNonce, want, ad); err == nil {
		t.Fatalf("len %d ad %d: wrong nonce accepted", len(pt), len(ad))
	}
}

// TestVsStdlib compares every length 0..600 and sector sizes around
// 4096 (16-block main loop, 1-block tail, partial last block) with
// crypto/cipher's GCM, for AES-128/192/256 and associated data of
// lengths 0..100 (20 is dm-crypt's: sector number and IV).
func TestVsStdlib(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		r := rand.New(rand.NewPCG(1, 2))
		adLens := []int{0, 1, 8, 13, 15, 16, 17, 20, 32, 33, 64, 100}
		lens := []int{4096, 4096 - 1, 4096 + 1, 4096 + 15, 4096 + 16*15, 512, 1024, 2048, 8192, 65536 + 7}
		for n := 0; n <= 600; n++ {
			lens = append(lens, n)
		}
		for i, n := range lens {
			key := randBytes(r, []int{16, 24, 32}[i%3])
			g, err := im.new(key)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, r, g, stdGCM(t, key), randBytes(r, NonceSize), randBytes(r, n), randBytes(r, adLens[i%len(adLens)]))
		}
	})
}

func TestBadInputs(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		if _, err := im.new(make([]byte, 17)); err == nil {
			t.Error("17-byte key accepted")
		}
		g, err := im.new(make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		for n := range TagSize {
			if _, err := g.Open(nil, make([]byte, NonceSize), make([]byte, n), nil); err == nil {
				t.Errorf("%d-byte ciphertext (shorter than a tag) accepted", n)
			}
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Seal with an 8-byte nonce did not panic")
				}
			}()
			g.Seal(nil, make([]byte, 8), nil, nil)
		}()
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Seal into an inexactly overlapping dst did not panic")
				}
			}()
			buf := make([]byte, 64)
			g.Seal(buf[1:1], make([]byte, NonceSize), buf[:32], nil)
		}()
	})
}

// FuzzVsStdlib compares Seal and Open with crypto/cipher's GCM on
// arbitrary keys, nonces, associated data and plaintexts, and a
// corrupted message's rejection.
func FuzzVsStdlib(f *testing.F) {
	f.Add(uint8(0), make([]byte, 32), make([]byte, 12), []byte("ad"), []byte("plaintext"), uint16(0))
	f.Add(uint8(2), make([]byte, 32), make([]byte, 12), make([]byte, 20), make([]byte, 4096), uint16(100))
	f.Fuzz(func(t *testing.T, ks uint8, keyBytes, nonce, ad, pt []byte, flip uint16) {
		key := make([]byte, []int{16, 24, 32}[ks%3])
		copy(key, keyBytes)
		n := make([]byte, NonceSize)
		copy(n, nonce)
		std := stdGCM(t, key)
		for _, im := range impls(t) {
			g, err := im.new(key)
			if err != nil {
				t.Fatal(err)
			}
			want := std.Seal(nil, n, pt, ad)
			got := g.Seal(nil, n, pt, ad)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: Seal differs from crypto/cipher", im.name)
			}
			got[int(flip)%len(got)] ^= 1 << (flip >> 13)
			if _, err := g.Open(nil, n, got, ad); err == nil {
				t.Fatalf("%s: corrupted message accepted", im.name)
			}
			got[int(flip)%len(got)] ^= 1 << (flip >> 13)
			if out, err := g.Open(nil, n, got, ad); err != nil || !bytes.Equal(out, pt) {
				t.Fatalf("%s: Open: %v", im.name, err)
			}
		}
	})
}

// BenchmarkSeal: one message per call, crypto/cipher's GCM ("stdlib")
// against each implementation.
func BenchmarkSeal(b *testing.B) {
	for _, size := range []int{512, 4096, 65536} {
		for _, ks := range []int{16, 32} {
			key := make([]byte, ks)
			pt := make([]byte, size)
			ad := make([]byte, 20)
			nonce := make([]byte, NonceSize)
			out := make([]byte, 0, size+TagSize)
			run := func(name string, a cipher.AEAD) {
				b.Run(fmt.Sprintf("%s/key%d/%d", name, ks*8, size), func(b *testing.B) {
					b.SetBytes(int64(size))
					for b.Loop() {
						a.Seal(out, nonce, pt, ad)
					}
				})
			}
			run("stdlib", stdGCM(b, key))
			for _, im := range impls(b) {
				g, _ := im.new(key)
				run(im.name, g)
			}
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	const size = 4096
	for _, ks := range []int{16, 32} {
		key := make([]byte, ks)
		nonce := make([]byte, NonceSize)
		ad := make([]byte, 20)
		ct := stdGCM(b, key).Seal(nil, nonce, make([]byte, size), ad)
		out := make([]byte, 0, size)
		run := func(name string, a cipher.AEAD) {
			b.Run(fmt.Sprintf("%s/key%d/%d", name, ks*8, size), func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					if _, err := a.Open(out, nonce, ct, ad); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		run("stdlib", stdGCM(b, key))
		for _, im := range impls(b) {
			g, _ := im.new(key)
			run(im.name, g)
		}
	}
}

// BenchmarkSectors is dm-crypt's aes-gcm-random over 16 sectors of 4096
// bytes, each with its own nonce and 20 bytes of associated data (sector
// number and nonce): crypto/cipher's GCM sealing into a scratch buffer
// and copying out (what package sector did before) against SealDetached
// in place with the tag apart.
func BenchmarkSectors(b *testing.B) {
	const ss, n = 4096, 16
	for _, ks := range []int{16, 32} {
		key := make([]byte, ks)
		buf := make([]byte, n*ss)
		tags := make([]byte, n*TagSize)
		nonces := make([]byte, n*NonceSize)
		ad := make([]byte, 20)
		b.Run(fmt.Sprintf("stdlib/key%d", ks*8), func(b *testing.B) {
			std := stdGCM(b, key)
			scratch := make([]byte, 0, ss+TagSize)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				for i := range n {
					out := std.Seal(scratch[:0], nonces[i*NonceSize:(i+1)*NonceSize], buf[i*ss:(i+1)*ss], ad)
					copy(buf[i*ss:], out[:ss])
					copy(tags[i*TagSize:], out[ss:])
				}
			}
		})
		for _, im := range impls(b) {
			g, _ := im.new(key)
			b.Run(fmt.Sprintf("%s/key%d", im.name, ks*8), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					for i := range n {
						g.SealDetached(buf[i*ss:(i+1)*ss], tags[i*TagSize:(i+1)*TagSize], nonces[i*NonceSize:(i+1)*NonceSize], buf[i*ss:(i+1)*ss], ad)
					}
				}
			})
		}
	}
}
