package capi

import (
	"crypto/rand"
	"fmt"
	"io"
	"time"
)

// SpeedBlockSizes are the request sizes tcrypt's skcipher speed test uses.
var SpeedBlockSizes = []int{16, 64, 256, 1024, 1472, 4096, 8192}

// SpeedResult is one row of a speed table.
type SpeedResult struct {
	Test      int
	KeyBits   int
	BlockSize int
	Ops       int64         // operations done
	Elapsed   time.Duration // time they took
}

// OpsPerSec is the measured rate.
func (r SpeedResult) OpsPerSec() int64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return int64(float64(r.Ops) / r.Elapsed.Seconds())
}

// String formats the row as tcrypt does.
func (r SpeedResult) String() string {
	ops := r.OpsPerSec()
	return fmt.Sprintf("test %d (%d bit key, %d byte blocks): %d ops/s (%d bytes)", r.Test, r.KeyBits, r.BlockSize, ops, ops*int64(r.BlockSize))
}

// Speed measures a skcipher driver for every key size it takes and every
// block size in SpeedBlockSizes that it can process, each for d, like
// tcrypt's mode 500 test, and writes the table to w.
func Speed(w io.Writer, a *Alg, d time.Duration, decrypt bool) ([]SpeedResult, error) {
	if a.Type != TypeSkcipher {
		return nil, fmt.Errorf("%w: speed tests skciphers; %s is a %s", ErrInvalidName, a.Name, a.Type)
	}
	if err := a.SelfTest(); err != nil {
		return nil, err
	}
	dir := "encryption"
	if decrypt {
		dir = "decryption"
	}
	fmt.Fprintf(w, "testing speed of %s (%s) %s\n", a.Name, a.Driver, dir)
	var out []SpeedResult
	test := 0
	for _, ks := range a.KeySizes {
		key := make([]byte, ks)
		rand.Read(key)
		t, err := a.Skcipher(key)
		if err != nil {
			return out, err
		}
		for _, bs := range SpeedBlockSizes {
			if !t.ValidLength(bs) {
				continue
			}
			r, err := SpeedOne(t, bs, d, decrypt)
			if err != nil {
				return out, err
			}
			r.Test = test
			test++
			fmt.Fprintln(w, r)
			out = append(out, r)
		}
		t.Wipe()
	}
	return out, nil
}

// SpeedOne times requests of bs bytes on t for about d.
func SpeedOne(t *Tfm, bs int, d time.Duration, decrypt bool) (SpeedResult, error) {
	buf := make([]byte, bs)
	iv := make([]byte, t.IVSize())
	rand.Read(buf)
	rand.Read(iv)
	f := t.Encrypt
	if decrypt {
		f = t.Decrypt
	}
	if err := f(buf, buf, iv); err != nil {
		return SpeedResult{}, err
	}
	var ops int64
	start := time.Now()
	var el time.Duration
	for {
		for i := 0; i < 64; i++ {
			f(buf, buf, iv) //nolint:errcheck // checked above
		}
		ops += 64
		if el = time.Since(start); el >= d {
			break
		}
	}
	return SpeedResult{KeyBits: t.KeySize() * 8, BlockSize: bs, Ops: ops, Elapsed: el}, nil
}
