package capi

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// essiv16Pair returns the best fused essiv(cbc(aes),sha256) driver and the
// template instance over the same implementation's cbc(aes), both keyed.
func essiv16Pair(t testing.TB) (fused, tmpl *Tfm) {
	t.Helper()
	ds, err := Drivers("essiv(cbc(aes),sha256)")
	if err != nil {
		t.Fatal(err)
	}
	var f, p *Alg
	for _, d := range ds {
		if d.SelfTest() != nil {
			continue
		}
		if f == nil && d.Fused {
			f = d
		}
	}
	if f == nil {
		t.Fatal("no fused essiv(cbc(aes),sha256) driver")
	}
	impl := strings.TrimPrefix(f.Driver, "essiv-cbc-aes-sha256-")
	for _, d := range ds {
		if strings.HasPrefix(d.Driver, "essiv(cbc-aes-"+impl+",") {
			p = d
			break
		}
	}
	if p == nil {
		t.Fatalf("no template instance over cbc-aes-%s", impl)
	}
	key := make([]byte, 32)
	if fused, err = f.Skcipher(key); err != nil {
		t.Fatal(err)
	}
	if tmpl, err = p.Skcipher(key); err != nil {
		t.Fatal(err)
	}
	return fused, tmpl
}

func TestSpeedPair(t *testing.T) {
	a, b := essiv16Pair(t)
	r, err := SpeedPair(a, b, 16, time.Millisecond, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Ratios) != 3 {
		t.Fatalf("%d ratios, want 3", len(r.Ratios))
	}
	for i, x := range r.Ratios {
		if x <= 0 {
			t.Errorf("round %d: ratio %v", i, x)
		}
	}
	if r.A.Ops == 0 || r.B.Ops == 0 || r.A.BlockSize != 16 {
		t.Fatalf("best rounds %+v, %+v", r.A, r.B)
	}
	if want := float64(r.A.OpsPerSec()) / float64(r.B.OpsPerSec()); r.Ratio() != want {
		t.Errorf("Ratio() = %v, want %v", r.Ratio(), want)
	}
	t.Logf("%s vs %s at 16 B: best %.2fx, rounds %.2f", a.Alg().Driver, b.Alg().Driver, r.Ratio(), r.Ratios)
	if _, err := SpeedPair(a, b, 15, time.Millisecond, 1, false); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("15-byte requests: %v, want ErrInvalidLength", err)
	}
	if _, err := SpeedPair(a, b, 16, time.Millisecond, 0, false); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("0 rounds: %v, want ErrInvalidLength", err)
	}
}

// BenchmarkESSIV16 is the fused ESSIV driver against the template instance
// over the same implementation, one 16-byte request per call through the
// Tfm, as blkcrypt speed measures them. With -count N the two alternate.
func BenchmarkESSIV16(b *testing.B) {
	fused, tmpl := essiv16Pair(b)
	buf := make([]byte, 16)
	iv := make([]byte, 16)
	for _, t := range []*Tfm{fused, tmpl} {
		b.Run(t.Alg().Driver, func(b *testing.B) {
			b.SetBytes(16)
			b.ReportAllocs()
			for b.Loop() {
				t.Encrypt(buf, buf, iv) //nolint:errcheck // valid by construction
			}
		})
	}
}
