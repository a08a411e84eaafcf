package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/nbd"
)

func init() {
	extraVerbs = append(extraVerbs, verb{"serve", nil, runServe,
		"DEVICE|--export NAME=DEVICE,key-file=F...|--exports FILE --listen 127.0.0.1:10809|unix:/path — serve decrypted volumes over NBD"})
}

// listen opens the listener for --listen: host:port or unix:/path.
func listen(addr string) (net.Listener, bool, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		l, err := listenUnix(path)
		return l, true, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, err
	}
	loop := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loop = true
	}
	l, err := net.Listen("tcp", addr)
	return l, loop, err
}

func tlsConfig(p *parsed) (*tls.Config, error) {
	cert, key := p.str("tls-cert"), p.str("tls-key")
	if cert == "" && key == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, usageErr("--tls-cert and --tls-key go together")
	}
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, usageErr("loading TLS certificate: %v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
	if ca := p.str("tls-ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usageErr("reading --tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErr("--tls-ca holds no PEM certificate")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// serveListen opens --listen; a non-loopback address needs TLS or
// --insecure (then with a warning).
func serveListen(env *Env, p *parsed, addr string, tcfg *tls.Config) (net.Listener, error) {
	l, loopback, err := listen(addr)
	if err != nil {
		return nil, listenErr(addr, err)
	}
	if !loopback && tcfg == nil {
		l.Close()
		if !p.bool("insecure") {
			return nil, usageErr("listening on %s, which is not a loopback address, needs TLS (--tls-cert/--tls-key) or --insecure", addr)
		}
		fmt.Fprintf(env.Stderr, "blkcrypt: warning: serving decrypted data on %s without TLS\n", addr)
		if l, _, err = listen(addr); err != nil {
			return nil, usageErr("cannot listen on %s: %v", addr, err)
		}
	}
	return l, nil
}

// runServe unlocks DEVICE and serves it until SIGINT/SIGTERM, then
// finishes in-flight requests, flushes and closes. With --export or
// --exports it is a gateway for many volumes instead (serve_exports.go).
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
	ro, err := serveReencryptOptions(p, dev)
	if err != nil {
		return err
	}
	hardenProcess()
	if ro != nil && p.str("lv") != "" {
		return usageErr("--reencrypt reencrypts the volume, not an LV in it: serve without --lv")
	}
	// b is the volume, or with --lv the LV inside it (v is then nil).
	var b serveBackend
	var v *blkcrypt.Volume
	if p.str("lv") != "" {
		b, err = openStack(ctx, env, p, dev, p.bool("read-only"), true)
	} else if v, err = openVolumeWith(ctx, env, p, dev, p.bool("read-only"), func(o *blkcrypt.OpenOptions) { o.Reencrypt = ro }); err == nil {
		b = v
	}
	if err != nil {
		return err
	}
	defer b.Close()
	l, err := serveListen(env, p, addr, tcfg)
	if err != nil {
		return err
	}
	srv := nbd.NewServer(b, nbd.Options{
		ExportName:    p.str("export-name"),
		Description:   backendDescription(b),
		ReadOnly:      b.ReadOnly(),
		AllowDiscards: p.bool("allow-discards"),
		MultiConn:     true, // Volume.Flush syncs the device for every connection
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
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, l) }()
	serving := true
	select {
	case err = <-errc:
		serving = false
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serr := srv.Shutdown(sctx)
	l.Close()
	if serving {
		// Serve flushes the volume after a cancel too: it must be done
		// before the volume is closed.
		err = <-errc
	}
	// The reencryption has seen ctx end (or failed and ended it).
	if rerr := reencWait(); rerr != nil {
		return rerr
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, net.ErrClosed) {
		return err
	}
	if serr != nil && !errors.Is(serr, context.Canceled) {
		return serr
	}
	return b.Flush()
}
