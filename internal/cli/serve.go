package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/nbd"
)

func init() {
	extraVerbs = append(extraVerbs, verb{"serve", nil, runServe,
		"DEVICE|--export NAME=DEVICE,key-file=F...|--exports FILE --listen 127.0.0.1:10809|unix:/path — serve decrypted volumes over NBD"})
}

// runServe unlocks DEVICE (its --partition, its --lv) and serves it until
// SIGINT/SIGTERM, then finishes in-flight requests, flushes and closes.
// With --export or --exports it is a gateway for many volumes instead
// (serve_exports.go).
func runServe(ctx context.Context, env *Env, p *parsed) error {
	if p.has("export") || p.has("exports") {
		if p.bool("reencrypt") {
			return usageErr("--reencrypt serves one DEVICE, not --export/--exports")
		}
		return runGateway(ctx, env, p)
	}
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	tcfg, err := tlsConfig(p)
	if err != nil {
		return err
	}
	maxConns, idle, err := connPolicy(p)
	if err != nil {
		return err
	}
	ro, err := serveReencryptOptions(p, dev)
	if err != nil {
		return err
	}
	hardenProcess()
	if ro != nil && p.str("lv") != "" {
		return usageErr("--reencrypt reencrypts the volume, not an LV in it: serve without --lv")
	}
	// b is the volume (v, which --reencrypt runs on), or the --lv stack.
	var b target
	var v *blkcrypt.Volume
	if ro == nil {
		b, err = openTarget(ctx, env, p, dev, p.bool("read-only"))
	} else if v, err = openVolumeWith(ctx, env, p, dev, p.bool("read-only"), func(o *blkcrypt.OpenOptions) { o.Reencrypt = ro }); err == nil {
		b = v
	}
	if err != nil {
		return err
	}
	defer b.Close()
	l, err := serveListen(env, p, tcfg)
	if err != nil {
		return err
	}
	srv := nbd.NewServer(b, nbd.Options{
		ExportName:    p.str("export-name"),
		Description:   describe(b),
		ReadOnly:      b.ReadOnly(),
		AllowDiscards: p.bool("allow-discards"),
		MultiConn:     true, // Flush syncs the device for every connection
		TLSConfig:     tcfg,
		MaxConns:      maxConns,
		IdleTimeout:   idle,
	})
	fmt.Fprintf(env.Stderr, "blkcrypt: serving %s (%d bytes) on %s\n", dev, b.Size(), l.Addr())
	reencWait := func() error { return nil }
	if ro != nil {
		var stopServing context.CancelFunc
		ctx, stopServing = context.WithCancel(ctx)
		defer stopServing()
		reencWait = startServeReencrypt(ctx, env, p, dev, v, stopServing)
	}
	err = srv.Run(ctx, l, 30*time.Second)
	// The reencryption has seen ctx end (or failed and ended it).
	if rerr := reencWait(); rerr != nil {
		return rerr
	}
	if err != nil {
		return err
	}
	return b.Flush()
}

// describe is an export's NBD description: the cipher, and the layers of
// a --partition/--lv stack.
func describe(t target) string {
	if s, ok := t.(*blkcrypt.Stack); ok {
		return "blkcrypt " + s.String()
	}
	return "blkcrypt " + t.(*blkcrypt.Volume).CipherSpec()
}
