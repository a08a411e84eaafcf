//go:build linux

package cli

import (
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/blkcrypt/blkcrypt/sector"
)

// printAFALG reports the AF_ALG offload engine: whether the kernel offers
// it and, when it does, the kernel driver, its throughput against the
// in-process drivers at 512, 4096 and 65536 bytes, and the measured
// break-even below which the engine keeps requests in-process.
func printAFALG(w io.Writer) {
	if err := sector.AFALGAvailable(); err != nil {
		fmt.Fprintf(w, "# engine: AF_ALG offload: absent (%v); every request runs in-process\n", err)
		return
	}
	for _, r := range []struct {
		spec string
		bits int
	}{{"aes-xts-plain64", 512}, {"aes-cbc-essiv:sha256", 256}} {
		key := make([]byte, r.bits/8)
		rand.Read(key)
		var cells []string
		name := ""
		for _, size := range []int{512, 4096, 65536} {
			a, err := sector.NewAFALGCipher(r.spec, key, sector.Options{SectorSize: min(size, 4096)}, sector.AFALGOptions{Threshold: -1})
			if err != nil {
				cells = append(cells, fmt.Sprintf("%d B: N/A (%v)", size, err))
				continue
			}
			name = a.Name()
			buf := make([]byte, size)
			k := rate(func() error { return a.OffloadSectors(buf, buf, 0, true) }, size)
			c := a.Cipher()
			in := rate(func() error { return c.EncryptSectors(buf, buf, 0) }, size)
			cells = append(cells, fmt.Sprintf("%d B %.1f vs %.1f MiB/s", size, k, in))
			a.Close()
		}
		fmt.Fprintf(w, "# engine: AF_ALG %s (%s), kernel vs in-process: %s\n", r.spec, name, strings.Join(cells, "; "))
		for _, ss := range []int{512, 4096} {
			a, err := sector.NewAFALGCipher(r.spec, key, sector.Options{SectorSize: ss}, sector.AFALGOptions{})
			if err != nil {
				continue
			}
			desc := "never: in-process is always faster"
			if th, _ := a.Measure(); th > 0 {
				desc = fmt.Sprintf("%d bytes", th)
			}
			fmt.Fprintf(w, "# engine: AF_ALG %s break-even (%d-byte sectors, %d sockets): %s\n", r.spec, ss, a.Sockets(), desc)
			a.Close()
		}
	}
}

// rate runs f (one request of size bytes) for about 100 ms; MiB/s.
func rate(f func() error, size int) float64 {
	if f() != nil {
		return 0
	}
	n := 0
	start := time.Now()
	for time.Since(start) < 100*time.Millisecond {
		if f() != nil {
			return 0
		}
		n++
	}
	return float64(n*size) / (1 << 20) / time.Since(start).Seconds()
}
