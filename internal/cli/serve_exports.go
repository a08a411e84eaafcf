package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd"
)

// exportOptions are what one export line sets: the unlock flags of the
// single-volume form (typed, as serve DEVICE has them), --partition and
// --lv, and the export's own read-only and allow-discards.
type exportOptions struct {
	open          openFlags
	stack         stackFlags
	readOnly      bool
	allowDiscards bool
	// cinderKeyFile holds a raw key whose lowercase hex is the
	// passphrase (OpenStack os-brick's LUKS encryptor convention).
	cinderKeyFile string
}

// exportOption is one option an export line may carry: its kind and the
// typed field it sets (the value already checked by nbd.ParseExport).
type exportOption struct {
	kind nbd.OptionKind
	set  func(o *exportOptions, v string)
}

func strOpt(field func(*exportOptions) *string) exportOption {
	return exportOption{nbd.OptionString, func(o *exportOptions, v string) { *field(o) = v }}
}

func intOpt(field func(*exportOptions) **int64) exportOption {
	return exportOption{nbd.OptionInt, func(o *exportOptions, v string) {
		n, _ := strconv.ParseInt(v, 0, 64) // nbd.ParseExport checked it
		*field(o) = &n
	}}
}

func flagOpt(field func(*exportOptions) *bool) exportOption {
	return exportOption{nbd.OptionFlag, func(o *exportOptions, _ string) { *field(o) = true }}
}

// exportOptionTable is every option an export line may carry, named as the
// flags of serve DEVICE. Secrets come only from files: a gateway has no
// terminal for prompts, and one stdin. Without key-file, volume-key-file
// or cinder-key-file the export is unlocked by its LUKS2 tokens alone
// (tang, TPM2), so that no key is on the gateway's disk.
var exportOptionTable = map[string]exportOption{
	"key-file": strOpt(func(o *exportOptions) *string { return &o.open.KeyFile }),
	"keyfile-offset": {nbd.OptionInt, func(o *exportOptions, v string) {
		o.open.KeyfileOffset, _ = strconv.ParseInt(v, 0, 64)
	}},
	"keyfile-size":     intOpt(func(o *exportOptions) **int64 { return &o.open.KeyfileSize }),
	"volume-key-file":  strOpt(func(o *exportOptions) *string { return &o.open.VolumeKeyFile }),
	"key-slot":         intOpt(func(o *exportOptions) **int64 { return &o.open.KeySlot }),
	"type":             strOpt(func(o *exportOptions) *string { return &o.open.Type }),
	"header":           strOpt(func(o *exportOptions) *string { return &o.open.Header }),
	"token-only":       flagOpt(func(o *exportOptions) *bool { return &o.open.TokenOnly }),
	"token-id":         intOpt(func(o *exportOptions) **int64 { return &o.open.TokenID }),
	"token-type":       strOpt(func(o *exportOptions) *string { return &o.open.TokenType }),
	"tpm2-device":      strOpt(func(o *exportOptions) *string { return &o.open.TPM2Device }),
	"tpm2-pin-file":    strOpt(func(o *exportOptions) *string { return &o.open.TPM2PINFile }),
	"cipher":           strOpt(func(o *exportOptions) *string { return &o.open.Cipher }),
	"key-size":         intOpt(func(o *exportOptions) **int64 { return &o.open.KeySize }),
	"hash":             strOpt(func(o *exportOptions) *string { return &o.open.Hash }),
	"sector-size":      intOpt(func(o *exportOptions) **int64 { return &o.open.SectorSize }),
	"offset":           intOpt(func(o *exportOptions) **int64 { return &o.open.Offset }),
	"skip":             intOpt(func(o *exportOptions) **int64 { return &o.open.Skip }),
	"size":             intOpt(func(o *exportOptions) **int64 { return &o.open.Size }),
	"iv-large-sectors": flagOpt(func(o *exportOptions) *bool { return &o.open.IVLargeSectors }),
	"partition": {nbd.OptionString, func(o *exportOptions, v string) {
		o.stack.Partition = &v
	}},
	"lv":              strOpt(func(o *exportOptions) *string { return &o.stack.LV }),
	"cinder-key-file": strOpt(func(o *exportOptions) *string { return &o.cinderKeyFile }),
	"read-only":       flagOpt(func(o *exportOptions) *bool { return &o.readOnly }),
	"allow-discards":  flagOpt(func(o *exportOptions) *bool { return &o.allowDiscards }),
}

// exportSyntax is what an export line (--export, a --exports line) may
// carry: exportOptionTable's options, checked together by exportOptionsOf.
var exportSyntax = nbd.ExportSyntax{
	Options: func() map[string]nbd.OptionKind {
		m := make(map[string]nbd.OptionKind, len(exportOptionTable))
		for k, o := range exportOptionTable {
			m[k] = o.kind
		}
		return m
	}(),
	Check: func(e nbd.ExportSpec) error {
		_, err := exportOptionsOf(e)
		return err
	},
}

// exportOptionsOf is the typed form of an export's options. An export
// with no key file is opened by its tokens only (token-only implied):
// nobody can type a passphrase for it.
func exportOptionsOf(e nbd.ExportSpec) (exportOptions, error) {
	var o exportOptions
	for k, v := range e.Options {
		opt, ok := exportOptionTable[k]
		if !ok {
			return o, fmt.Errorf("export %s: unknown option %q", e.Name, k)
		}
		opt.set(&o, v)
	}
	f := &o.open
	if f.KeyFile == "-" || f.VolumeKeyFile == "-" || f.TPM2PINFile == "-" || o.cinderKeyFile == "-" {
		return o, fmt.Errorf("export %s: a key cannot come from stdin; name a file", e.Name)
	}
	keyGiven := f.KeyFile != "" || f.VolumeKeyFile != "" || o.cinderKeyFile != ""
	switch {
	case o.cinderKeyFile != "" && (f.KeyFile != "" || f.VolumeKeyFile != "" || f.KeyfileOffset != 0 || f.KeyfileSize != nil):
		return o, fmt.Errorf("export %s: cinder-key-file is the whole key; it cannot be used with key-file, volume-key-file, keyfile-offset or keyfile-size", e.Name)
	case keyGiven && f.TokenOnly:
		return o, fmt.Errorf("export %s: token-only cannot be used with key-file, volume-key-file or cinder-key-file", e.Name)
	case keyGiven:
	case f.Type != "" && !strings.HasPrefix(f.Type, "luks"):
		return o, fmt.Errorf("export %s: a type=%s volume has no tokens: needs key-file=FILE or volume-key-file=FILE", e.Name, f.Type)
	default:
		f.TokenOnly = true
	}
	if f.TokenID != nil && (*f.TokenID < 0 || *f.TokenID > 31) {
		return o, fmt.Errorf("export %s: token-id=%d is not in 0..31", e.Name, *f.TokenID)
	}
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
		readOnly := g.ReadOnly || o.readOnly
		// Never stdin: every key comes from a file (exportSyntax), and a
		// prompt must not steal the terminal from a running gateway.
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: env.Stderr}
		if o.cinderKeyFile != "" {
			pass, err := cinderPassphrase(o.cinderKeyFile)
			if err != nil {
				return nbd.Export{}, nil, err
			}
			defer clear(pass)
			// As os-brick gives it to cryptsetup: --key-file=- on stdin.
			o.open.KeyFile, env.Stdin = "-", bytes.NewReader(pass)
		}
		t, err := openTarget(ctx, env, &o.open, o.stack, e.Device, readOnly)
		if err != nil {
			return nbd.Export{}, nil, err
		}
		return nbd.Export{
			Description:   describe(t),
			Backend:       t,
			ReadOnly:      t.ReadOnly(),
			AllowDiscards: o.allowDiscards || g.AllowDiscards,
			MultiConn:     true, // Flush syncs the device for every connection
		}, t, nil
	}
}

// maxCinderKey bounds a cinder-key-file: Barbican's symmetric keys are
// 16 to 64 bytes, and a mistaken path must not be read whole.
const maxCinderKey = 4096

// cinderPassphrase is the LUKS passphrase of a volume OpenStack's os-brick
// formatted with the raw key in path: the key's lowercase hex
// (binascii.hexlify), all of it. The caller wipes it.
func cinderPassphrase(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("cannot open cinder-key-file: %v", err)
	}
	defer f.Close()
	// One buffer, wiped after: no copies left by a growing read.
	buf := make([]byte, maxCinderKey+1)
	defer clear(buf)
	n, err := io.ReadFull(f, buf)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil
	}
	raw := buf[:n]
	switch {
	case err != nil:
		return nil, usageErr("reading cinder-key-file %s: %v", path, err)
	case len(raw) == 0:
		return nil, usageErr("cinder-key-file %s is empty", path)
	case len(raw) > maxCinderKey:
		return nil, usageErr("cinder-key-file %s is larger than %d bytes: not a key", path, maxCinderKey)
	}
	pass := make([]byte, hex.EncodedLen(len(raw)))
	hex.Encode(pass, raw)
	return pass, nil
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
