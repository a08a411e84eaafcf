//go:build linux

package sector

import (
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteAFALGReport writes, as "# engine:" comment lines (blkcrypt
// benchmark's), whether the kernel offers the AF_ALG offload engine and,
// when it does, the kernel driver of aes-xts-plain64 and
// aes-cbc-essiv:sha256, its throughput against the in-process drivers at
// 512, 4096 and 65536 bytes, and the measured break-even below which the
// engine keeps requests in-process. It takes a few seconds.
func WriteAFALGReport(w io.Writer) {
	if err := AFALGAvailable(); err != nil {
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
			a, err := NewAFALGCipher(r.spec, key, Options{SectorSize: min(size, 4096)}, AFALGOptions{Threshold: -1})
			if err != nil {
				cells = append(cells, fmt.Sprintf("%d B: N/A (%v)", size, err))
				continue
			}
			name = a.Name()
			buf := make([]byte, size)
			k := RequestRate(func() error { return a.OffloadSectors(buf, buf, 0, true) }, size, 100*time.Millisecond)
			c := a.Cipher()
			in := RequestRate(func() error { return c.EncryptSectors(buf, buf, 0) }, size, 100*time.Millisecond)
			cells = append(cells, fmt.Sprintf("%d B %.1f vs %.1f MiB/s", size, k, in))
			a.Close()
		}
		fmt.Fprintf(w, "# engine: AF_ALG %s (%s), kernel vs in-process: %s\n", r.spec, name, strings.Join(cells, "; "))
		for _, ss := range []int{512, 4096} {
			a, err := NewAFALGCipher(r.spec, key, Options{SectorSize: ss}, AFALGOptions{})
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
