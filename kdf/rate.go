package kdf

import "time"

// PBKDF2PerSecond measures how many PBKDF2 iterations per second hash
// makes for a 256-bit key, doubling the count from 1000 until one run
// takes over 200 ms (cryptsetup benchmark's PBKDF2 lines). It is a
// measurement of this machine now, for display; Resolve does the
// benchmark that sets a keyslot's cost.
func PBKDF2PerSecond(hash string) (float64, error) {
	hf, err := HashFunc(hash)
	if err != nil {
		return 0, err
	}
	pw, salt := []byte("foo"), make([]byte, 32)
	for it := 1000; ; it *= 2 {
		t0 := time.Now()
		if _, err := PBKDF2Key(hf, pw, salt, it, 32); err != nil {
			return 0, err
		}
		if el := time.Since(t0); el > 200*time.Millisecond || it >= 1<<26 {
			return float64(it) / el.Seconds(), nil
		}
	}
}
