package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/blkcrypt/blkcrypt/nbd"
)

// serveListen opens --listen (nbd.Listen: host:port, or unix:PATH whose
// stale socket it replaces); a non-loopback address needs TLS or
// --insecure (then with a warning).
func serveListen(env *Env, p *parsed, tcfg *tls.Config) (net.Listener, error) {
	addr := p.str("listen")
	if addr == "" {
		addr = "127.0.0.1:10809"
	}
	l, loopback, err := nbd.Listen(addr)
	if errors.Is(err, nbd.ErrSocketBusy) {
		return nil, &exitError{ExitBusy, fmt.Errorf("cannot listen on %s: %w", addr, err)}
	}
	if err != nil {
		return nil, usageErr("cannot listen on %s: %v", addr, err)
	}
	if !loopback && tcfg == nil {
		if !p.bool("insecure") {
			l.Close()
			return nil, usageErr("listening on %s, which is not a loopback address, needs TLS (--tls-cert/--tls-key) or --insecure", addr)
		}
		fmt.Fprintf(env.Stderr, "blkcrypt: warning: serving decrypted data on %s without TLS\n", addr)
	}
	return l, nil
}

// tlsConfig is --tls-cert, --tls-key and --tls-ca, or nil without them.
func tlsConfig(p *parsed) (*tls.Config, error) {
	cert, key := p.str("tls-cert"), p.str("tls-key")
	if cert == "" && key == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, usageErr("--tls-cert and --tls-key go together")
	}
	cfg, err := nbd.LoadTLSConfig(cert, key, p.str("tls-ca"))
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return cfg, nil
}
