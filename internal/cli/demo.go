package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/blkcrypt/blkcrypt/capi"
)

// runDemo is the README's first command. It grows with the project: for now
// it self-tests the crypto API and shows the fused ESSIV driver against the
// template instance, as in seed 000's tcrypt table.
func runDemo(ctx context.Context, env *Env, p *parsed) error {
	if demoLUKS != nil {
		return demoLUKS(ctx, env, p)
	}
	w := env.Stdout
	fmt.Fprintln(w, "blkcrypt demo: crypto API self-test and speed summary")
	for _, n := range commonAlgs {
		a, err := capi.Lookup(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %-26s %-52s %s\n", n, a.Driver, a.SelfTestState())
	}
	fmt.Fprintln(w)
	ds, err := capi.Drivers("essiv(cbc(aes),sha256)")
	if err != nil {
		return err
	}
	for _, d := range ds {
		if d.SelfTest() != nil {
			continue
		}
		t, err := d.Skcipher(make([]byte, 32))
		if err != nil {
			return err
		}
		for _, bs := range []int{16, 4096} {
			r, err := capi.SpeedOne(t, bs, 100*time.Millisecond, false)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "  %-56s %5d-byte blocks: %10d ops/s %8.0f MB/s\n", d.Driver, bs, r.OpsPerSec(), float64(r.OpsPerSec()*int64(bs))/1e6)
		}
	}
	fmt.Fprintln(w, "\nnext: go run ./cmd/blkcrypt speed 'xts(aes)' --sec 0.2")
	return nil
}

// demoLUKS replaces the demo once LUKS and serve exist.
var demoLUKS func(ctx context.Context, env *Env, p *parsed) error
