package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd"
)

// exportSyntax is what an export line (--export, a --exports line) may
// carry: the unlock flags of the single-volume form, --partition and
// --lv; secrets still come only from files.
var exportSyntax = nbd.ExportSyntax{
	Options: map[string]nbd.OptionKind{
		"key-file": nbd.OptionString, "keyfile-offset": nbd.OptionInt, "keyfile-size": nbd.OptionInt,
		"volume-key-file": nbd.OptionString, "key-slot": nbd.OptionInt, "type": nbd.OptionString,
		"header": nbd.OptionString, "read-only": nbd.OptionFlag, "allow-discards": nbd.OptionFlag,
		"cipher": nbd.OptionString, "key-size": nbd.OptionInt, "hash": nbd.OptionString,
		"sector-size": nbd.OptionInt, "offset": nbd.OptionInt, "skip": nbd.OptionInt, "size": nbd.OptionInt,
		"iv-large-sectors": nbd.OptionFlag, "partition": nbd.OptionString, "lv": nbd.OptionString,
	},
	Check: func(e nbd.ExportSpec) error {
		// A gateway has no terminal for many prompts, and one stdin.
		kf, vk := e.Options["key-file"], e.Options["volume-key-file"]
		if kf == "-" || vk == "-" {
			return fmt.Errorf("export %s: a key cannot come from stdin; name a file", e.Name)
		}
		if kf == "" && vk == "" {
			return fmt.Errorf("export %s: needs key-file=FILE or volume-key-file=FILE", e.Name)
		}
		return nil
	},
}

// gatewaySpecs gathers the --export flags and the --exports file; names
// must be unique across both.
func gatewaySpecs(o *serveOptions) ([]nbd.ExportSpec, error) {
	var specs []nbd.ExportSpec
	for _, s := range o.Export {
		e, err := nbd.ParseExport(s, exportSyntax)
		if err != nil {
			return nil, err
		}
		specs = append(specs, e)
	}
	if path := o.exports(); path != "" {
		fs, err := nbd.ReadExportsFile(path, exportSyntax)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			err = fmt.Errorf("reading --exports: %w", err)
		}
		if err != nil {
			return nil, err
		}
		specs = append(specs, fs...)
	}
	return specs, nbd.CheckExportNames(specs)
}

// openExport unlocks one export as serve DEVICE would with the export's
// options as flags (--read-only and --allow-discards of the gateway
// apply to all). The export's options are flag names (exportSyntax), so
// they are the command line rw.go's unlock helpers read.
func openExport(g *serveOptions, env *Env) nbd.OpenExportFunc {
	return func(ctx context.Context, e nbd.ExportSpec) (nbd.Export, io.Closer, error) {
		ep := &parsed{set: map[string]string{}}
		for k, v := range e.Options {
			ep.set[k] = v
		}
		readOnly := g.ReadOnly || ep.set["read-only"] == "true"
		// Never stdin: every key comes from a file (exportSyntax), and a
		// prompt must not steal the terminal from a running gateway.
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: env.Stderr}
		t, err := openTarget(ctx, env, ep, e.Device, readOnly)
		if err != nil {
			return nbd.Export{}, nil, err
		}
		return nbd.Export{
			Description:   describe(t),
			Backend:       t,
			ReadOnly:      t.ReadOnly(),
			AllowDiscards: ep.set["allow-discards"] == "true" || g.AllowDiscards,
			MultiConn:     true, // Flush syncs the device for every connection
		}, t, nil
	}
}

// runGateway serves every --export and --exports volume until
// SIGINT/SIGTERM; SIGHUP re-reads them (nbd.ExportTable).
func runGateway(ctx context.Context, env *Env, o *serveOptions, args []string) error {
	if len(args) > 0 {
		return usageErr("serve takes either DEVICE or --export/--exports, not both")
	}
	if o.ExportName != nil {
		return usageErr("--export-name names the single DEVICE; with --export the name is NAME in NAME=DEVICE")
	}
	specs, err := gatewaySpecs(o)
	if err != nil {
		return usageErr("%v", err)
	}
	if len(specs) == 0 && o.Exports == nil {
		return usageErr("no export given")
	}
	tcfg, err := o.tlsConfig()
	if err != nil {
		return err
	}
	maxConns, idle, err := o.connPolicy()
	if err != nil {
		return err
	}
	hardenProcess()
	// Registered before anything is served, so a SIGHUP sent once the
	// socket exists reloads instead of killing the gateway.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	logf := func(format string, args ...any) { fmt.Fprintf(env.Stderr, "blkcrypt: "+format+"\n", args...) }
	srv := nbd.NewGateway(nbd.Options{TLSConfig: tcfg, MaxConns: maxConns, IdleTimeout: idle, Logf: logf})
	table := nbd.NewExportTable(srv, openExport(o, env), logf)
	defer table.Close()
	if err := table.Apply(ctx, specs); err != nil && len(table.Names()) == 0 {
		// Nothing to serve: fail with the first export's error (and its
		// exit code, e.g. 2 for a wrong passphrase).
		return fmt.Errorf("no export could be served: %w", err)
	}
	l, err := o.listen(env, tcfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "blkcrypt: gateway serving %d exports on %s\n", len(table.Names()), l.Addr())
	// The table is reloaded here while serving, and closed only after
	// Run (and this goroutine) ended.
	reloads := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(reloads)
		for {
			select {
			case <-sctx.Done():
				return
			case <-hup:
				if o.exports() == "" {
					logf("SIGHUP: no --exports file to re-read")
					continue
				}
				if specs, err := gatewaySpecs(o); err != nil {
					logf("reload: %v; keeping the current exports", err)
				} else {
					table.Apply(sctx, specs)
					logf("reloaded: %d exports served", len(table.Names()))
				}
			}
		}
	}()
	err = srv.Run(ctx, l, 30*time.Second)
	stop()
	<-reloads
	if err != nil {
		return err
	}
	return table.Close()
}
