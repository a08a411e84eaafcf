package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/blkcrypt/blkcrypt/nbd"
)

// listen opens --listen (nbd.Listen: host:port, or unix:PATH whose
// stale socket it replaces); a non-loopback address needs TLS or
// --insecure (then with a warning).
func (o *serveOptions) listen(env *Env, tcfg *tls.Config) (net.Listener, error) {
	addr := o.Listen
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
		if !o.Insecure {
			l.Close()
			return nil, usageErr("listening on %s, which is not a loopback address, needs TLS (--tls-cert/--tls-key) or --insecure", addr)
		}
		fmt.Fprintf(env.Stderr, "blkcrypt: warning: serving decrypted data on %s without TLS\n", addr)
	}
	return l, nil
}

// tlsConfig is --tls-cert, --tls-key and --tls-ca, or nil without them.
func (o *serveOptions) tlsConfig() (*tls.Config, error) {
	cert, key := o.TLSCert, o.TLSKey
	if cert == "" && key == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, usageErr("--tls-cert and --tls-key go together")
	}
	cfg, err := nbd.LoadTLSConfig(cert, key, o.TLSCA)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return cfg, nil
}
