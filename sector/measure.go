package sector

import "time"

// MeasureSectors encrypts (or decrypts) a 1 MiB buffer in 64 KiB requests
// of whole sectors, as dm-crypt would see them, for about d, and returns
// the rate in MiB/s (cryptsetup benchmark's cipher columns). The first
// calls warm up: one may measure the engine's break-even.
func MeasureSectors(c *Cipher, d time.Duration, decrypt bool) float64 {
	buf := make([]byte, 1<<20)
	const req = 64 << 10
	f := c.EncryptSectors
	if decrypt {
		f = c.DecryptSectors
	}
	f(buf[:req], buf[:req], 0) //nolint:errcheck
	f(buf, buf, 0)             //nolint:errcheck
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		for off := 0; off < len(buf); off += req {
			f(buf[off:off+req], buf[off:off+req], uint64(off/512)) //nolint:errcheck
		}
		n += int64(len(buf))
	}
	return float64(n) / (1 << 20) / time.Since(start).Seconds()
}

// RequestRate runs f, one request of size bytes, for about d and returns
// the rate in MiB/s; 0 when f fails.
func RequestRate(f func() error, size int, d time.Duration) float64 {
	if f() != nil {
		return 0
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if f() != nil {
			return 0
		}
		n++
	}
	return float64(n*size) / (1 << 20) / time.Since(start).Seconds()
}
