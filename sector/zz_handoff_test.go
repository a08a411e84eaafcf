package sector

import (
	"fmt"
	"runtime"
	"testing"
)

func handoffSpeed(spec string, key, workers int) float64 {
	e := NewEngine(workers)
	if workers > 1 {
		e.SetThreshold(1)
	}
	c, err := New(spec, make([]byte, key), Options{SectorSize: 4096, Engine: e})
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 1<<20)
	r := testing.Benchmark(func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for i := 0; i < b.N; i++ {
			c.EncryptSectors(buf, buf, 0)
		}
	})
	return float64(r.Bytes) * float64(r.N) / r.T.Seconds()
}

func TestZZHandoff(t *testing.T) {
	for _, sp := range []struct {
		s string
		k int
	}{{"aes-xts-plain64", 64}, {"aes-cbc-essiv:sha256", 32}} {
		var b1, b2 float64
		var per []string
		for i := range 5 {
			var v1, v2 float64
			if i%2 == 0 {
				v1 = handoffSpeed(sp.s, sp.k, 1)
				v2 = handoffSpeed(sp.s, sp.k, runtime.GOMAXPROCS(0))
			} else {
				v2 = handoffSpeed(sp.s, sp.k, runtime.GOMAXPROCS(0))
				v1 = handoffSpeed(sp.s, sp.k, 1)
			}
			b1, b2 = max(b1, v1), max(b2, v2)
			per = append(per, fmt.Sprintf("%.2f", v2/v1))
		}
		fmt.Printf("%s: 1w %.0f MB/s, 2w %.0f MB/s, best ratio %.2f, per-round %v\n", sp.s, b1/1e6, b2/1e6, b2/b1, per)
	}
}
