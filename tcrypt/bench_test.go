package tcrypt

import (
	"crypto/rand"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkSearch measures a header search that finds nothing (a wrong
// passphrase): every derivation and every cipher chain, as cryptsetup does
// it, one after another (workers=1) and in parallel on every core. This is
// the worst case a user waits for; report with
//
//	go test -run XXX -bench Search -benchtime 1x ./tcrypt
func BenchmarkSearch(b *testing.B) {
	sec := make([]byte, SectorLen)
	rand.Read(sec)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"all", Options{}},
		{"truecrypt-only", Options{NoVeraCrypt: true}},
		{"pim-1", Options{PIM: 1}},
	} {
		for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/workers=%d", c.name, w), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					o := c.o
					o.Passphrase, o.Workers = []byte("wrong passphrase"), w
					if _, err := Search(sec, &o); err == nil {
						b.Fatal("found a header in random bytes")
					}
				}
			})
		}
	}
}

// BenchmarkKDF is the time of each derivation alone (PBKDF2 blocks one
// after another), for comparison with the search.
func BenchmarkKDF(b *testing.B) {
	salt := make([]byte, SaltLen)
	for _, k := range KDFs {
		if !k.Available() || k.Name != "pbkdf2" || !k.VeraCrypt || k.PIMConst == 0 {
			continue
		}
		hf, _ := k.hashFunc()
		b.Run(k.String(), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				start := time.Now()
				pbkdf2(hf, []byte("p"), salt, k.Iterations, DerivedLen)
				b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/derivation")
			}
		})
	}
}
