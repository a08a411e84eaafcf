package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/nbd"
)

// exportSpec is one export of a gateway: NAME=DEVICE,opt[=value],...
type exportSpec struct {
	name   string
	device string
	opts   map[string]string // unlock options, as the flags of the same names
	canon  string            // the spec with its options sorted: equal specs serve the same thing
}

// exportOptions are the options an export may carry, with their kinds.
// They are the unlock flags of the single-volume form; secrets still come
// only from files.
var exportOptions = map[string]flagKind{
	"key-file": kindString, "keyfile-offset": kindInt, "keyfile-size": kindInt,
	"volume-key-file": kindString, "key-slot": kindInt, "type": kindString,
	"header": kindString, "read-only": kindBool, "allow-discards": kindBool,
	"cipher": kindString, "key-size": kindInt, "hash": kindString,
	"sector-size": kindInt, "offset": kindInt, "skip": kindInt, "size": kindInt,
	"iv-large-sectors": kindBool,
}

// maxExportsFile bounds --exports: a gateway's list is small, and a
// mistaken path (a disk image) must not be read whole.
const maxExportsFile = 1 << 20

// parseExportSpec parses NAME=DEVICE,key-file=F[,type=T][,read-only]...
// Neither DEVICE nor a value may contain a comma.
func parseExportSpec(s string) (exportSpec, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return exportSpec{}, fmt.Errorf("export %q is not NAME=DEVICE,key-file=FILE[,...]", s)
	}
	if name == "" || len(name) > 4096 || strings.ContainsAny(name, " \t\r\n,") || !isPrintable(name) {
		return exportSpec{}, fmt.Errorf("export name %q must be 1 to 4096 printable characters without spaces or commas", name)
	}
	parts := strings.Split(rest, ",")
	e := exportSpec{name: name, device: parts[0], opts: map[string]string{}}
	if e.device == "" {
		return exportSpec{}, fmt.Errorf("export %s: no DEVICE", name)
	}
	for _, kv := range parts[1:] {
		k, v, hasVal := strings.Cut(kv, "=")
		kind, known := exportOptions[k]
		switch {
		case !known:
			return exportSpec{}, fmt.Errorf("export %s: unknown option %q", name, k)
		case kind == kindBool && hasVal:
			return exportSpec{}, fmt.Errorf("export %s: option %s takes no value", name, k)
		case kind != kindBool && (!hasVal || v == ""):
			return exportSpec{}, fmt.Errorf("export %s: option %s needs a value", name, k)
		case kind == kindInt:
			if _, err := strconv.ParseInt(v, 0, 64); err != nil {
				return exportSpec{}, fmt.Errorf("export %s: option %s: %q is not a whole number", name, k, v)
			}
		}
		if _, dup := e.opts[k]; dup {
			return exportSpec{}, fmt.Errorf("export %s: option %s given twice", name, k)
		}
		if kind == kindBool {
			v = "true"
		}
		e.opts[k] = v
	}
	// A gateway has no terminal for many prompts, and one stdin.
	kf, vk := e.opts["key-file"], e.opts["volume-key-file"]
	if kf == "-" || vk == "-" {
		return exportSpec{}, fmt.Errorf("export %s: a key cannot come from stdin; name a file", name)
	}
	if kf == "" && vk == "" {
		return exportSpec{}, fmt.Errorf("export %s: needs key-file=FILE or volume-key-file=FILE", name)
	}
	keys := make([]string, 0, len(e.opts))
	for k := range e.opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name + "=" + e.device)
	for _, k := range keys {
		b.WriteString("," + k + "=" + e.opts[k])
	}
	e.canon = b.String()
	return e, nil
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// readExportsFile reads one export per line; blank lines and lines whose
// first non-blank character is # are skipped.
func readExportsFile(path string) ([]exportSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading --exports: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxExportsFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading --exports %s: %w", path, err)
	}
	if len(data) > maxExportsFile {
		return nil, fmt.Errorf("--exports %s is larger than %d bytes", path, maxExportsFile)
	}
	var specs []exportSpec
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxExportsFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parseExportSpec(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		specs = append(specs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading --exports %s: %w", path, err)
	}
	return specs, nil
}

// gatewaySpecs gathers the --export flags and the --exports file; names
// must be unique across both.
func gatewaySpecs(p *parsed) ([]exportSpec, error) {
	var specs []exportSpec
	for _, s := range p.list("export") {
		e, err := parseExportSpec(s)
		if err != nil {
			return nil, err
		}
		specs = append(specs, e)
	}
	if path := p.str("exports"); path != "" {
		fs, err := readExportsFile(path)
		if err != nil {
			return nil, err
		}
		specs = append(specs, fs...)
	}
	seen := map[string]bool{}
	for _, e := range specs {
		if seen[e.name] {
			return nil, fmt.Errorf("export %s is defined twice", e.name)
		}
		seen[e.name] = true
	}
	return specs, nil
}

// servedExport is an export being served and the volume behind it.
type servedExport struct {
	spec exportSpec
	v    *blkcrypt.Volume
}

// gateway is `blkcrypt serve` with --export/--exports: one NBD server,
// many volumes, each opened (and locked) through blkcrypt.Open.
type gateway struct {
	env    *Env
	p      *parsed
	srv    *nbd.Server
	served map[string]*servedExport
}

// open unlocks one export and adds it to the server. A failure is
// reported on stderr in one line and leaves the other exports alone.
func (g *gateway) open(ctx context.Context, e exportSpec) error {
	ep := &parsed{set: map[string]string{}}
	for k, v := range e.opts {
		ep.set[k] = v
	}
	if g.p.bool("read-only") {
		ep.set["read-only"] = "true"
	}
	// Never stdin: every key comes from a file (parseExportSpec), and a
	// prompt must not steal the terminal from a running gateway.
	env := &Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: g.env.Stderr}
	v, err := openVolume(ctx, env, ep, e.device, ep.bool("read-only"))
	if err != nil {
		fmt.Fprintf(g.env.Stderr, "blkcrypt: export %s: not served: %v\n", e.name, err)
		return err
	}
	err = g.srv.AddExport(nbd.Export{
		Name:          e.name,
		Description:   "blkcrypt " + v.CipherSpec(),
		Backend:       v,
		ReadOnly:      v.ReadOnly(),
		AllowDiscards: ep.bool("allow-discards") || g.p.bool("allow-discards"),
		MultiConn:     true, // Volume.Flush syncs the device for every connection
	})
	if err != nil {
		v.Close()
		fmt.Fprintf(g.env.Stderr, "blkcrypt: export %s: not served: %v\n", e.name, err)
		return err
	}
	g.served[e.name] = &servedExport{spec: e, v: v}
	fmt.Fprintf(g.env.Stderr, "blkcrypt: export %s: serving %s (%d bytes)\n", e.name, e.device, v.Size())
	return nil
}

// remove stops serving one export (its clients' in-flight requests are
// answered and flushed first) and closes its volume, releasing its lock.
func (g *gateway) remove(name string) {
	se := g.served[name]
	delete(g.served, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.srv.RemoveExport(ctx, name); err != nil {
		fmt.Fprintf(g.env.Stderr, "blkcrypt: export %s: %v\n", name, err)
	}
	if err := se.v.Close(); err != nil {
		fmt.Fprintf(g.env.Stderr, "blkcrypt: export %s: closing: %v\n", name, err)
	}
	fmt.Fprintf(g.env.Stderr, "blkcrypt: export %s: removed\n", name)
}

// reload re-reads the exports: names gone or changed are removed, new or
// changed ones opened, and exports that failed before are tried again.
// Exports whose spec is unchanged keep their connections. A file that
// does not parse changes nothing.
func (g *gateway) reload(ctx context.Context) {
	specs, err := gatewaySpecs(g.p)
	if err != nil {
		fmt.Fprintf(g.env.Stderr, "blkcrypt: reload: %v; keeping the current exports\n", err)
		return
	}
	want := map[string]exportSpec{}
	for _, e := range specs {
		want[e.name] = e
	}
	names := make([]string, 0, len(g.served))
	for n := range g.served {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if e, ok := want[n]; !ok || e.canon != g.served[n].spec.canon {
			g.remove(n)
		}
	}
	for _, e := range specs {
		if _, ok := g.served[e.name]; !ok {
			g.open(ctx, e)
		}
	}
	fmt.Fprintf(g.env.Stderr, "blkcrypt: reloaded: %d exports served\n", len(g.served))
}

// closeAll closes every volume, after the server was shut down.
func (g *gateway) closeAll() error {
	var first error
	served := g.served
	g.served = map[string]*servedExport{}
	for n, se := range served {
		if err := se.v.Close(); err != nil {
			fmt.Fprintf(g.env.Stderr, "blkcrypt: export %s: closing: %v\n", n, err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// runGateway serves every --export and --exports volume until
// SIGINT/SIGTERM; SIGHUP reloads them.
func runGateway(ctx context.Context, env *Env, p *parsed) error {
	if len(p.args) > 0 {
		return usageErr("serve takes either DEVICE or --export/--exports, not both")
	}
	if p.has("export-name") {
		return usageErr("--export-name names the single DEVICE; with --export the name is NAME in NAME=DEVICE")
	}
	specs, err := gatewaySpecs(p)
	if err != nil {
		return usageErr("%v", err)
	}
	if len(specs) == 0 && !p.has("exports") {
		return usageErr("no export given")
	}
	addr := p.str("listen")
	if addr == "" {
		addr = "127.0.0.1:10809"
	}
	tcfg, err := tlsConfig(p)
	if err != nil {
		return err
	}
	maxConns, idle, err := connPolicy(p)
	if err != nil {
		return err
	}
	hardenProcess()
	// Registered before anything is served, so a SIGHUP sent once the
	// socket exists reloads instead of killing the gateway.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	g := &gateway{env: env, p: p, served: map[string]*servedExport{}, srv: nbd.NewGateway(nbd.Options{
		TLSConfig:   tcfg,
		MaxConns:    maxConns,
		IdleTimeout: idle,
		Logf:        func(format string, args ...any) { fmt.Fprintf(env.Stderr, "blkcrypt: "+format+"\n", args...) },
	})}
	var firstErr error
	for _, e := range specs {
		if err := g.open(ctx, e); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	defer g.closeAll()
	if len(g.served) == 0 && firstErr != nil {
		// Nothing to serve: fail with the first export's error (and its
		// exit code, e.g. 2 for a wrong passphrase).
		return fmt.Errorf("no export could be served: %w", firstErr)
	}
	l, err := serveListen(env, p, addr, tcfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "blkcrypt: gateway serving %d exports on %s\n", len(g.served), l.Addr())
	errc := make(chan error, 1)
	go func() { errc <- g.srv.Serve(ctx, l) }()
	serving := true
loop:
	for {
		select {
		case err = <-errc:
			serving = false
			break loop
		case <-ctx.Done():
			break loop
		case <-hup:
			if p.str("exports") == "" {
				fmt.Fprintf(env.Stderr, "blkcrypt: SIGHUP: no --exports file to re-read\n")
				continue
			}
			g.reload(ctx)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serr := g.srv.Shutdown(sctx)
	l.Close()
	if serving {
		// Serve flushes the exports after a cancel too: no volume is
		// closed under it.
		err = <-errc
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, nbd.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return err
	}
	if serr != nil && !errors.Is(serr, context.Canceled) {
		return serr
	}
	return g.closeAll()
}
