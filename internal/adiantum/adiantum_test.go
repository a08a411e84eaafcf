package adiantum

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/aes"
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
	c, err := NewImpl(impl, rounds, key, aes.New)
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

func TestImpls(t *testing.T) {
	impls := Impls()
	if impls[len(impls)-1] != "generic" {
		t.Fatalf("Impls() = %v, want generic last", impls)
	}
	want := map[string]bool{"generic": true}
	if hasAVX2 {
		want["avx2"] = true
	}
	if hasAVX2 && hasAVX512 {
		want["avx512"] = true
	}
	if len(impls) != len(want) {
		t.Fatalf("Impls() = %v, want %v", impls, want)
	}
	key := make([]byte, KeySize)
	for _, impl := range impls {
		if !want[impl] {
			t.Errorf("unexpected implementation %q", impl)
		}
		if got := mustNew(t, impl, 12, key).Impl(); got != impl {
			t.Errorf("NewImpl(%q).Impl() = %q", impl, got)
		}
	}
	for _, bad := range []struct {
		impl   string
		rounds int
		key    int
	}{{"nope", 12, 32}, {"generic", 8, 32}, {"generic", 12, 31}, {"generic", 20, 0}} {
		if _, err := NewImpl(bad.impl, bad.rounds, make([]byte, bad.key), aes.New); err == nil {
			t.Errorf("NewImpl(%q, %d, %d-byte key) accepted", bad.impl, bad.rounds, bad.key)
		}
	}
}

// TestImplsAgree compares every implementation with the generic one on
// every length up to 2100 bytes and a few large ones, so each tail path
// of the vector kernels (partial batches, odd NH units, partial units)
// is exercised.
func TestImplsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := make([]byte, KeySize)
	tweak := make([]byte, TweakSize)
	buf := make([]byte, 70000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{4096, 4097, 8192, 65536, 65536 + 1040 + 7}
	for n := MinLen; n <= 2100; n++ {
		lengths = append(lengths, n)
	}
	for _, rounds := range []int{12, 20} {
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		ref := mustNew(t, "generic", rounds, key)
		for _, impl := range Impls()[:len(Impls())-1] {
			c := mustNew(t, impl, rounds, key)
			for _, n := range lengths {
				for i := range tweak {
					tweak[i] = byte(rng.Uint32())
				}
				src := buf[:n]
				want := make([]byte, n)
				got := make([]byte, n)
				ref.Encrypt(want, src, tweak)
				c.Encrypt(got, src, tweak)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s xchacha%d: encrypt of %d bytes differs from generic", impl, rounds, n)
				}
				c.Decrypt(got, got, tweak)
				if !bytes.Equal(got, src) {
					t.Fatalf("%s xchacha%d: decrypt of %d bytes does not invert", impl, rounds, n)
				}
			}
		}
	}
}

// TestConcurrent encrypts with one Cipher from several goroutines: a
// Cipher keeps no request state, so results stay equal (and go test -race
// reports no shared buffer).
func TestConcurrent(t *testing.T) {
	for _, impl := range Impls() {
		c := mustNew(t, impl, 12, bytes.Repeat([]byte{9}, KeySize))
		src := bytes.Repeat([]byte{1, 2, 3}, 1400)
		tweak := make([]byte, TweakSize)
		want := make([]byte, len(src))
		c.Encrypt(want, src, tweak)
		errs := make(chan string, 4)
		for range 4 {
			go func() {
				got := make([]byte, len(src))
				for range 50 {
					c.Encrypt(got, src, tweak)
					if !bytes.Equal(got, want) {
						errs <- impl + ": concurrent encryption differs"
						return
					}
				}
				errs <- ""
			}()
		}
		for range 4 {
			if e := <-errs; e != "" {
				t.Fatal(e)
			}
		}
	}
}
