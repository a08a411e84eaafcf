package capi

import (
	"slices"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/adiantum"
	"github.com/blkcrypt/blkcrypt/internal/testmgr"
)

const (
	adiantum12Generic = "adiantum(xchacha12-generic,aes-generic,nhpoly1305-generic)"
	adiantum20Generic = "adiantum(xchacha20-generic,aes-generic,nhpoly1305-generic)"
)

// TestAdiantumDrivers checks that every internal/adiantum implementation
// is a driver of both names, passes the testmgr vectors (all lengths from
// 16 to 4096 bytes), and that the best one is chosen.
func TestAdiantumDrivers(t *testing.T) {
	for _, name := range []string{"adiantum(xchacha12,aes)", "adiantum(xchacha20,aes)"} {
		vs, err := testmgr.Ciphers(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) < 7 {
			t.Fatalf("%s: only %d testmgr vectors", name, len(vs))
		}
		ds, err := Drivers(name)
		if err != nil {
			t.Fatal(err)
		}
		var impls []string
		for _, d := range ds {
			if err := d.SelfTest(); err != nil {
				t.Errorf("%s: %v", d.Driver, err)
			}
			stream := strings.TrimPrefix(strings.Split(d.Driver, ",")[0], "adiantum(xchacha")
			impls = append(impls, stream[strings.Index(stream, "-")+1:])
		}
		if want := adiantum.Impls(); !slices.Equal(impls, want) {
			t.Errorf("%s: drivers by priority %v, want %v", name, impls, want)
		}
		best, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if best != ds[0] {
			t.Errorf("%s: Lookup chose %s, want %s", name, best.Driver, ds[0].Driver)
		}
	}
}

func FuzzAdiantum12(f *testing.F) { fuzzEquivalence(f, "adiantum(xchacha12,aes)", adiantum12Generic) }
func FuzzAdiantum20(f *testing.F) { fuzzEquivalence(f, "adiantum(xchacha20,aes)", adiantum20Generic) }
