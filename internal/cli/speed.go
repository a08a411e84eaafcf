package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/blkcrypt/blkcrypt/capi"
)

// runSpeed prints a tcrypt-style table for each ALG: every driver of it
// (or only --driver), every key size and the tcrypt block sizes.
type speedOptions struct {
	Driver      string   `flag:"driver" help:"measure this driver only" def:"every driver of ALG"`
	Sec         *float64 `flag:"sec" help:"seconds per test" def:"1"`
	Decrypt     bool     `flag:"decrypt" help:"measure decryption"`
	ListDrivers bool     `flag:"list-drivers" help:"list drivers, highest priority first"`
}

func runSpeed(ctx context.Context, env *Env, o *speedOptions, algs []string) error {
	if len(algs) == 0 {
		algs = []string{"essiv(cbc(aes),sha256)"}
	}
	sec := 1.0
	if o.Sec != nil {
		sec = *o.Sec
	}
	if sec <= 0 || sec > 60 {
		return usageErr("--sec must be more than 0 and at most 60")
	}
	for _, name := range algs {
		ds, err := capi.Drivers(name)
		if err != nil {
			return usageErr("%v", err)
		}
		if o.ListDrivers {
			for _, d := range ds {
				fmt.Fprintln(env.Stdout, d.Driver)
			}
			continue
		}
		ran := false
		for _, d := range ds {
			if drv := o.Driver; drv != "" && d.Driver != drv {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := d.SelfTest(); err != nil {
				fmt.Fprintf(env.Stderr, "blkcrypt: skipping %s: %v\n", d.Driver, err)
				continue
			}
			if _, err := capi.Speed(env.Stdout, d, time.Duration(sec*float64(time.Second)), o.Decrypt); err != nil {
				return usageErr("%v", err)
			}
			ran = true
		}
		if !ran && !o.ListDrivers {
			return usageErr("%s has no usable driver %q", name, o.Driver)
		}
	}
	return nil
}

// runCrypto lists every driver known so far, after instantiating the
// common names, in the layout of /proc/crypto.
type cryptoOptions struct{}

func runCrypto(ctx context.Context, env *Env, _ *cryptoOptions, names []string) error {
	if err := capi.WriteProc(env.Stdout, names); err != nil {
		return usageErr("%v", err)
	}
	return nil
}
