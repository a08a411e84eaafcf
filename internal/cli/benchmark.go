package cli

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/sector"
)

// benchRow is one cipher row: the spec measured and how cryptsetup labels it.
type benchRow struct {
	label, spec string
	bits        int
}

var defaultBenchRows = []benchRow{
	{"aes-cbc", "aes-cbc-essiv:sha256", 128}, {"serpent-cbc", "serpent-cbc-essiv:sha256", 128}, {"twofish-cbc", "twofish-cbc-essiv:sha256", 128},
	{"aes-cbc", "aes-cbc-essiv:sha256", 256}, {"serpent-cbc", "serpent-cbc-essiv:sha256", 256}, {"twofish-cbc", "twofish-cbc-essiv:sha256", 256},
	{"aes-xts", "aes-xts-plain64", 256}, {"serpent-xts", "serpent-xts-plain64", 256}, {"twofish-xts", "twofish-xts-plain64", 256},
	{"aes-xts", "aes-xts-plain64", 512}, {"serpent-xts", "serpent-xts-plain64", 512}, {"twofish-xts", "twofish-xts-plain64", 512},
}

type benchmarkOptions struct {
	Cipher     string  `flag:"cipher" short:"c" help:"measure this cipher specification only" def:"the cryptsetup table"`
	KeySize    *int64  `flag:"key-size" short:"s" help:"key size in bits" def:"256 (512 for xts)"`
	SectorSize int64   `flag:"sector-size" help:"encryption sector size in bytes" def:"512"`
	Sec        float64 `flag:"sec" help:"seconds per measurement" def:"0.5"`
	Threshold  *int64  `flag:"threshold" help:"engine inline/parallel break-even in bytes" def:"measured"`
	IterTime   *int64  `flag:"iter-time" short:"i" help:"argon2 unlock time in ms" def:"2000"`
	MemoryKiB  int64   `flag:"pbkdf-memory" help:"argon2 memory in KiB" def:"1048576"`
	Parallel   int64   `flag:"pbkdf-parallel" help:"argon2 threads" def:"4"`
}

func runBenchmark(ctx context.Context, env *Env, o *benchmarkOptions, args []string) error {
	w := env.Stdout
	ss := 512
	if o.SectorSize != 0 {
		ss = int(o.SectorSize)
	}
	rows := defaultBenchRows
	if spec := o.Cipher; spec != "" {
		bits := 256
		if strings.Contains(spec, "xts") {
			bits = 512
		}
		if o.KeySize != nil {
			bits = int(*o.KeySize)
		}
		label := spec
		if s, err := sector.ParseSpec(spec); err == nil && s.Cipher != "" {
			label = s.Cipher + "-" + s.Chain
		}
		rows = []benchRow{{label, spec, bits}}
	}
	if o.Threshold != nil {
		sector.DefaultEngine().SetThreshold(*o.Threshold)
	}
	sec := 0.5
	if o.Sec != 0 {
		sec = o.Sec
	}
	dur := time.Duration(sec * float64(time.Second))
	fmt.Fprintf(w, "# Tests are approximate using memory only (no storage IO).\n")
	if o.Cipher == "" {
		for _, h := range []string{"sha1", "sha256", "sha512", "ripemd160", "whirlpool"} {
			if err := ctx.Err(); err != nil {
				return err
			}
			r, err := kdf.PBKDF2PerSecond(h)
			if err != nil {
				fmt.Fprintf(w, "PBKDF2-%-9s N/A\n", h)
				continue
			}
			fmt.Fprintf(w, "PBKDF2-%-9s %7.0f iterations per second for 256-bit key\n", h, r)
		}
		it := 2000 * time.Millisecond
		if o.IterTime != nil {
			it = time.Duration(*o.IterTime) * time.Millisecond
		}
		for _, typ := range []string{"argon2i", "argon2id"} {
			if err := ctx.Err(); err != nil {
				return err
			}
			par, err := kdf.Resolve(kdf.Options{Type: typ, IterTime: it, MemoryKiB: uint32(o.MemoryKiB), Parallel: uint32(o.Parallel)}, typ, 32)
			if err != nil {
				fmt.Fprintf(w, "%-9s N/A (%v)\n", typ, err)
				continue
			}
			fmt.Fprintf(w, "%-9s %2d iterations, %7d memory, %d parallel threads (CPUs) for 256-bit key (requested %d ms time)\n",
				typ, par.Iterations, par.MemoryKiB, par.Parallel, it.Milliseconds())
		}
	}
	fmt.Fprintf(w, "#     Algorithm |       Key |      Encryption |      Decryption\n")
	for _, r := range rows {
		if err := ctx.Err(); err != nil {
			return err
		}
		c, err := sector.New(r.spec, make([]byte, r.bits/8), sector.Options{SectorSize: ss})
		if err != nil {
			if o.Cipher != "" {
				return usageErr("%v", err)
			}
			fmt.Fprintf(w, "%15s %9s %16s %16s\n", r.label, fmt.Sprintf("%db", r.bits), "N/A", "N/A")
			continue
		}
		enc := sector.MeasureSectors(c, dur, false)
		dec := sector.MeasureSectors(c, dur, true)
		fmt.Fprintf(w, "%15s %9s %11.1f MiB/s %11.1f MiB/s\n", r.label, fmt.Sprintf("%db", r.bits), enc, dec)
		c.Wipe()
	}
	// The engine's break-even, measured now for the first row's cipher.
	c, err := sector.New(rows[0].spec, make([]byte, rows[0].bits/8), sector.Options{SectorSize: ss})
	if err == nil {
		e := sector.DefaultEngine()
		th := e.Measure(c)
		desc := "never: inline is always faster"
		if th > 0 {
			desc = fmt.Sprintf("%d bytes", th)
		}
		fmt.Fprintf(w, "# engine: %d workers (GOMAXPROCS %d); inline/parallel break-even for %s (%s): %s\n",
			e.Workers(), runtime.GOMAXPROCS(0), rows[0].spec, c.Driver(), desc)
		sector.WriteAFALGReport(w)
	}
	return nil
}
