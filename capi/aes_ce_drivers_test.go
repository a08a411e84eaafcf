package capi

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/aes"
)

// TestCEDrivers: where internal/aes has its arm64 kernels, each name's best
// driver is the kernel's arm64 driver at the kernel's priority, after its
// known answers (Lookup self-tests it), and the template instances over
// the same kernels rank below it.
func TestCEDrivers(t *testing.T) {
	if !slices.Contains(aes.Impls(), "ce") {
		t.Skipf("no ce implementation here (Impls %v): it needs arm64 with the Crypto Extensions", aes.Impls())
	}
	for _, c := range []struct {
		name, driver string
		priority     int
	}{
		{"aes", "aes-ce", 250},
		{"ecb(aes)", "ecb-aes-ce", 300},
		{"cbc(aes)", "cbc-aes-ce", 300},
		{"xts(aes)", "xts-aes-ce", 300},
		{"essiv(cbc(aes),sha256)", "essiv-cbc-aes-sha256-ce", 301},
	} {
		a, err := Lookup(c.name)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if a.Driver != c.driver || a.Priority != c.priority {
			t.Errorf("%s: best driver %s at %d, want %s at %d", c.name, a.Driver, a.Priority, c.driver, c.priority)
		}
	}
	ds, err := Drivers("essiv(cbc(aes),sha256)")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Driver == "essiv(cbc-aes-ce,aes-ce,sha256-generic)" && d.Priority != 300 {
			t.Errorf("%s at %d, want 300 (cbc-aes-ce's)", d.Driver, d.Priority)
		}
	}
}

// TestCEMatchesGenericInBatches runs the ce drivers' sector batches
// (multi-buffer CBC, fused ESSIV, XTS per sector) against the generic
// drivers, whose known answers are the kernel's testmgr vectors: batch
// shapes the vectors (one request each) do not reach.
func TestCEMatchesGenericInBatches(t *testing.T) {
	if !slices.Contains(aes.Impls(), "ce") {
		t.Skipf("no ce implementation here (Impls %v)", aes.Impls())
	}
	for _, c := range []struct{ name, ce, generic string }{
		{"cbc(aes)", "cbc-aes-ce", "cbc-aes-generic"},
		{"essiv(cbc(aes),sha256)", "essiv-cbc-aes-sha256-ce", "essiv-cbc-aes-sha256-generic"},
		{"xts(aes)", "xts-aes-ce", "xts-aes-generic"},
	} {
		ce, err := LookupDriver(c.name, c.ce)
		if err != nil {
			t.Fatal(err)
		}
		gen, err := LookupDriver(c.name, c.generic)
		if err != nil {
			t.Fatal(err)
		}
		for _, ks := range ce.KeySizes {
			for _, shape := range [][2]int{{512, 1}, {512, 7}, {512, 8}, {512, 19}, {4096, 9}, {4096 + 16, 3}} {
				ss, n := shape[0], shape[1]
				key := make([]byte, ks)
				for i := range key {
					key[i] = byte(i*13 + ks)
				}
				src := make([]byte, ss*n)
				for i := range src {
					src[i] = byte(i*7 + ks)
				}
				ivs := make([]byte, 16*n)
				for i := 0; i < n; i++ {
					binary.LittleEndian.PutUint64(ivs[16*i:], uint64(1000+i))
				}
				want, got := make([]byte, len(src)), make([]byte, len(src))
				tg, err := gen.Skcipher(key)
				if err != nil {
					t.Fatal(err)
				}
				tc, err := ce.Skcipher(key)
				if err != nil {
					t.Fatal(err)
				}
				if err := tg.EncryptSectors(want, src, ss, bytes.Clone(ivs)); err != nil {
					t.Fatal(err)
				}
				if err := tc.EncryptSectors(got, src, ss, bytes.Clone(ivs)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: key %d, %d sectors of %d: encryption differs from %s", c.ce, ks, n, ss, c.generic)
				}
				if err := tc.DecryptSectors(got, got, ss, bytes.Clone(ivs)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, src) {
					t.Fatalf("%s: key %d, %d sectors of %d: decryption does not invert", c.ce, ks, n, ss)
				}
			}
		}
	}
}
