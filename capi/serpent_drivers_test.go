package capi

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/serpent"
)

func hasSerpentAVX2() bool { return slices.Contains(serpent.Impls(), "avx2") }

// TestSerpentAVX2Drivers: where the kernels run, the AVX2 drivers exist and
// are chosen first; elsewhere (purego, other CPUs) they are absent.
func TestSerpentAVX2Drivers(t *testing.T) {
	for _, c := range []struct{ name, driver string }{
		{"ecb(serpent)", "ecb-serpent-avx2"},
		{"cbc(serpent)", "cbc-serpent-avx2"},
		{"xts(serpent)", "xts-serpent-avx2"},
	} {
		ds, err := Drivers(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if !hasSerpentAVX2() {
			for _, d := range ds {
				if strings.Contains(d.Driver, "avx2") {
					t.Errorf("%s registered without AVX2", d.Driver)
				}
			}
			continue
		}
		best, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if best.Driver != c.driver || best.Priority != 600 {
			t.Errorf("%s: best driver %s (%d), want %s (600)", c.name, best.Driver, best.Priority, c.driver)
		}
		if best.Base == nil || best.Base.Driver != "serpent-generic" {
			t.Errorf("%s: base %v, want serpent-generic", c.driver, best.Base)
		}
	}
}

// TestSerpentDriversAgree compares every serpent mode driver with the
// template over serpent-generic through Tfm: single requests of 16 bytes
// to 64 KiB (with ciphertext stealing for xts) and batches of 512- and
// 4096-byte sectors, in place and out of place.
func TestSerpentDriversAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, name := range []string{"ecb(serpent)", "cbc(serpent)", "xts(serpent)", "essiv(cbc(serpent),sha256)"} {
		ds, err := Drivers(name)
		if err != nil {
			t.Fatal(err)
		}
		var ref *Alg
		for _, d := range ds {
			if !strings.Contains(d.Driver, "avx2") && strings.Contains(d.Driver, "serpent-generic") {
				ref = d
			}
		}
		if ref == nil {
			t.Fatalf("%s: no generic reference driver", name)
		}
		sawAVX2 := false
		for _, d := range ds {
			if d == ref {
				continue
			}
			sawAVX2 = sawAVX2 || strings.Contains(d.Driver, "serpent-avx2")
			for _, ks := range d.KeySizes {
				key := make([]byte, ks)
				fill(r, key)
				a, err := d.Skcipher(key)
				if err != nil {
					t.Fatal(err)
				}
				b, err := ref.Skcipher(key)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []int{16, 32, 48, 112, 128, 144, 240, 256, 272, 400, 512, 1008, 4096, 4112, 65536} {
					for _, extra := range []int{0, 5} {
						if extra > 0 && d.MinLen == 0 {
							continue
						}
						src := make([]byte, n+extra)
						fill(r, src)
						iv := make([]byte, d.IVSize)
						fill(r, iv)
						compareTfm(t, d.Driver, a, b, src, iv)
					}
				}
				for _, ss := range []int{512, 4096} {
					for _, ns := range []int{1, 2, 5, 8, 9, 16, 17, 31} {
						if ss == 4096 && ns > 17 {
							continue
						}
						src := make([]byte, ns*ss)
						fill(r, src)
						ivs := make([]byte, ns*d.IVSize)
						fill(r, ivs)
						compareSectors(t, d.Driver, a, b, src, ss, ivs)
					}
				}
			}
		}
		if hasSerpentAVX2() && !sawAVX2 {
			t.Errorf("%s: no driver over the AVX2 kernels compared", name)
		}
	}
}

func fill(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func compareTfm(t *testing.T, driver string, a, b *Tfm, src, iv []byte) {
	t.Helper()
	for _, enc := range []bool{true, false} {
		do := func(m *Tfm, dst, src []byte) {
			var err error
			if enc {
				err = m.Encrypt(dst, src, iv)
			} else {
				err = m.Decrypt(dst, src, iv)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		want := make([]byte, len(src))
		do(b, want, src)
		got := make([]byte, len(src))
		do(a, got, src)
		inPlace := bytes.Clone(src)
		do(a, inPlace, inPlace)
		if !bytes.Equal(got, want) || !bytes.Equal(inPlace, want) {
			t.Fatalf("%s: encrypt=%v of %d bytes differs from the generic driver", driver, enc, len(src))
		}
	}
}

func compareSectors(t *testing.T, driver string, a, b *Tfm, src []byte, ss int, ivs []byte) {
	t.Helper()
	for _, enc := range []bool{true, false} {
		do := func(m *Tfm, dst, src []byte) {
			v := bytes.Clone(ivs)
			var err error
			if enc {
				err = m.EncryptSectors(dst, src, ss, v)
			} else {
				err = m.DecryptSectors(dst, src, ss, v)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		want := make([]byte, len(src))
		do(b, want, src)
		got := make([]byte, len(src))
		do(a, got, src)
		inPlace := bytes.Clone(src)
		do(a, inPlace, inPlace)
		if !bytes.Equal(got, want) || !bytes.Equal(inPlace, want) {
			t.Fatalf("%s: sectors encrypt=%v, %d×%d bytes, differ from the generic driver", driver, enc, len(src)/ss, ss)
		}
	}
}

func FuzzSerpentXTS(f *testing.F) { fuzzEquivalence(f, "xts(serpent)", "xts(serpent-generic)") }
func FuzzSerpentCBC(f *testing.F) { fuzzEquivalence(f, "cbc(serpent)", "cbc(serpent-generic)") }
func FuzzSerpentECB(f *testing.F) { fuzzEquivalence(f, "ecb(serpent)", "ecb(serpent-generic)") }

// BenchmarkSerpentDrivers times every xts(serpent) and cbc(serpent) driver
// on 4096-byte requests (cbc encryption also as a batch of 16 sectors,
// which the multi-buffer path runs side by side).
func BenchmarkSerpentDrivers(b *testing.B) {
	for _, name := range []string{"xts(serpent)", "cbc(serpent)"} {
		ds, err := Drivers(name)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			key := make([]byte, d.KeySizes[len(d.KeySizes)-1])
			tfm, err := d.Skcipher(key)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 16*4096)
			iv := make([]byte, 16)
			ivs := make([]byte, 16*16)
			b.Run(d.Driver+"/enc4096", func(b *testing.B) {
				b.SetBytes(4096)
				for b.Loop() {
					tfm.Encrypt(buf[:4096], buf[:4096], iv)
				}
			})
			b.Run(d.Driver+"/dec4096", func(b *testing.B) {
				b.SetBytes(4096)
				for b.Loop() {
					tfm.Decrypt(buf[:4096], buf[:4096], iv)
				}
			})
			b.Run(d.Driver+"/enc16x4096", func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					tfm.EncryptSectors(buf, buf, 4096, ivs)
				}
			})
		}
	}
}
