package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd"
)

// exportOptions are what one export line sets: serve DEVICE's flags of
// the same names, and cinder-key-file (see nbd.CinderPassphrase), which
// serve has no flag for.
type exportOptions struct {
	serveOptions
	cinderKeyFile string
}

// exportSyntax is what an export line (--export, a --exports line) may
// carry: serve DEVICE's unlock flags, as the library names them.
var exportSyntax = nbd.VolumeExportSyntax

// exportOptionsOf maps an export's options onto serve DEVICE's flags. The
// library's option names are the flags' names (TestExportOptionsAreFlags),
// so they fill the options struct as a command line does; the library's
// typed form (nbd.VolumeExportOptions) checks the rules and adds what a
// line implies (token-only when it names no key).
func exportOptionsOf(e nbd.ExportSpec) (exportOptions, error) {
	v, err := nbd.VolumeExportOptionsOf(e)
	if err != nil {
		return exportOptions{}, err
	}
	o := exportOptions{cinderKeyFile: v.CinderKeyFile}
	set := maps.Clone(e.Options)
	delete(set, "cinder-key-file")
	if err := fillOptions(&o.serveOptions, &commandLine{set: set}); err != nil {
		return exportOptions{}, err
	}
	o.TokenOnly = v.TokenOnly
	return o, nil
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
// options as its flags (--read-only and --allow-discards of the gateway
// apply to all). An export unlocked by tokens waits on them no longer
// than their own bounds (a tang exchange: token.DefaultTangTimeout) and
// never past ctx.
func openExport(g *serveOptions, env *Env) nbd.OpenExportFunc {
	return func(ctx context.Context, e nbd.ExportSpec) (nbd.Export, io.Closer, error) {
		o, err := exportOptionsOf(e)
		if err != nil {
			return nbd.Export{}, nil, err
		}
		readOnly := g.ReadOnly || o.ReadOnly
		// Never stdin: every key comes from a file (exportSyntax), and a
		// prompt must not steal the terminal from a running gateway.
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: env.Stderr}
		if o.cinderKeyFile != "" {
			pass, err := nbd.CinderPassphrase(o.cinderKeyFile)
			if err != nil {
				return nbd.Export{}, nil, usageErr("%v", err)
			}
			defer clear(pass)
			// As os-brick gives it to cryptsetup: --key-file=- on stdin.
			o.KeyFile, env.Stdin = "-", bytes.NewReader(pass)
		}
		t, err := openTarget(ctx, env, &o.openFlags, o.stackFlags, e.Device, readOnly)
		if err != nil {
			return nbd.Export{}, nil, err
		}
		v := nbd.VolumeExportOptions{AllowDiscards: o.AllowDiscards}
		return v.VolumeExport(describe(t), t, t.ReadOnly(), g.AllowDiscards), t, nil
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
	return table.Run(ctx, l, 30*time.Second, hup, func() ([]nbd.ExportSpec, error) {
		if o.exports() == "" {
			return nil, errors.New("no --exports file to re-read")
		}
		return gatewaySpecs(o)
	})
}
