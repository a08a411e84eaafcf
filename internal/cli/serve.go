package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/nbd"
)

// serveOptions: the volume as read opens it, the listener and its policy,
// the gateway's exports, and serve --reencrypt (cryptsetup reencrypt's
// flags: --cipher, --key-size, --sector-size and --hash are the new values
// then).
type serveOptions struct {
	openFlags
	stackFlags
	Listen         string   `flag:"listen" help:"serve: address (host:port or unix:/path)"`
	ExportName     *string  `flag:"export-name" help:"serve: NBD export name" def:"\"\" (the default export)"`
	ReadOnly       bool     `flag:"read-only" short:"r" help:"serve: refuse writes"`
	AllowDiscards  bool     `flag:"allow-discards" help:"serve: pass TRIM through as hole punching"`
	TLSCert        string   `flag:"tls-cert" help:"serve: TLS certificate"`
	TLSKey         string   `flag:"tls-key" help:"serve: TLS key"`
	TLSCA          string   `flag:"tls-ca" help:"serve: CA for client certificates"`
	Insecure       bool     `flag:"insecure" help:"serve: allow a non-loopback address without TLS"`
	MaxConnections *int64   `flag:"max-connections" help:"serve: connections served at once" def:"64"`
	IdleTimeout    string   `flag:"idle-timeout" help:"serve: close connections idle this long (90s, 5m; a plain number counts seconds)" def:"0 (never)"`
	Export         []string `flag:"export" help:"serve: NAME=DEVICE,key-file=F[,type=T][,read-only][,header=H]... one export of many (repeatable)" def:"none (serve DEVICE alone)"`
	Exports        *string  `flag:"exports" help:"serve: file of exports, one NAME=DEVICE,key-file=F,... a line (# comments); re-read on SIGHUP"`
	Reencrypt      bool     `flag:"reencrypt" help:"serve: reencrypt the LUKS2 volume while serving it (cryptsetup reencrypt on an active device; resumes one in progress)"`
	Resilience     *string  `flag:"resilience" help:"reencrypt: checksum (default), journal or none; datashift with --reduce-device-size" def:"checksum"`
	HotzoneSize    *string  `flag:"hotzone-size" help:"serve --reencrypt: bytes per step; requests in a step's hotzone wait for it" def:"4M"`
	ResumeOnly     bool     `flag:"resume-only" help:"reencrypt: only resume a reencryption in progress"`
	pbkdfFlags
	progressFlags
	batchFlag
}

// exports is the --exports file, "" without one.
func (o *serveOptions) exports() string {
	if o.Exports == nil {
		return ""
	}
	return *o.Exports
}

// runServe unlocks DEVICE (its --partition, its --lv) and serves it until
// SIGINT/SIGTERM, then finishes in-flight requests, flushes and closes.
// With --export or --exports it is a gateway for many volumes instead
// (serve_exports.go).
func runServe(ctx context.Context, env *Env, o *serveOptions, args []string) error {
	if len(o.Export) > 0 || o.Exports != nil {
		if o.Reencrypt {
			return usageErr("--reencrypt serves one DEVICE, not --export/--exports")
		}
		return runGateway(ctx, env, o, args)
	}
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	tcfg, err := o.tlsConfig()
	if err != nil {
		return err
	}
	maxConns, idle, err := o.connPolicy()
	if err != nil {
		return err
	}
	ro, err := o.reencryptOptions(dev)
	if err != nil {
		return err
	}
	hardenProcess()
	if ro != nil && o.LV != "" {
		return usageErr("--reencrypt reencrypts the volume, not an LV in it: serve without --lv")
	}
	// b is the volume (v, which --reencrypt runs on), or the --lv stack.
	var b target
	var v *blkcrypt.Volume
	if ro == nil {
		b, err = openTarget(ctx, env, &o.openFlags, o.stackFlags, dev, o.ReadOnly)
	} else if v, err = openVolume(ctx, env, &o.openFlags, o.Partition, dev, o.ReadOnly, func(oo *blkcrypt.OpenOptions) { oo.Reencrypt = ro }); err == nil {
		b = v
	}
	if err != nil {
		return err
	}
	defer b.Close()
	l, err := o.listen(env, tcfg)
	if err != nil {
		return err
	}
	srv := nbd.NewServer(b, nbd.Options{
		ExportName:    orEmpty(o.ExportName),
		Description:   describe(b),
		ReadOnly:      b.ReadOnly(),
		AllowDiscards: o.AllowDiscards,
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
		reencWait = startServeReencrypt(ctx, env, o, dev, v, stopServing)
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
