package nbdclient

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ErrBadURI is returned (wrapped) for a string that is not an NBD URI this
// client can use.
var ErrBadURI = errors.New("bad NBD URI")

// defaultPort is the IANA port of NBD.
const defaultPort = "10809"

// Target is a parsed NBD URI: where to connect and which export to ask for.
type Target struct {
	Network string // "tcp" or "unix"
	Addr    string // host:port, or the socket path
	Export  string
	TLS     bool
	// CertDir holds ca-cert.pem and, for a client certificate,
	// client-cert.pem and client-key.pem (the layout libnbd and nbdkit use).
	CertDir string
	// ServerName is the name the server certificate must carry (the host
	// of a TCP URI); NoVerify (tls-verify-peer=false) skips the check.
	ServerName string
	NoVerify   bool
}

// Schemes are the URI schemes ParseURI accepts.
var Schemes = []string{"nbd", "nbds", "nbd+unix", "nbds+unix"}

// IsURI reports whether s starts with one of Schemes and "://".
func IsURI(s string) bool {
	for _, sc := range Schemes {
		if strings.HasPrefix(strings.ToLower(s), sc+"://") {
			return true
		}
	}
	return false
}

// ParseURI parses an NBD URI as libnbd writes them (the NBD project's
// doc/uri.md): nbd://HOST[:PORT][/EXPORT], nbd+unix:///EXPORT?socket=PATH,
// and the nbds forms with TLS. IPv6 literals go in brackets. The query may
// carry tls-certificates=DIR and tls-verify-peer=false; other parameters
// are refused rather than silently ignored.
func ParseURI(s string) (*Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		// Not url.Error's text: it quotes the whole string, which might
		// carry a password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %v", ErrBadURI, err)
	}
	if _, ok := u.User.Password(); ok {
		return nil, fmt.Errorf("%w: a password in an NBD URI is not supported (it would end up in process listings and logs)", ErrBadURI)
	}
	t := &Target{}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "nbd", "nbds":
		t.Network = "tcp"
	case "nbd+unix", "nbds+unix":
		t.Network = "unix"
	case "nbd+vsock", "nbds+vsock":
		return nil, fmt.Errorf("%w: %s: vsock is not supported", ErrBadURI, s)
	default:
		return nil, fmt.Errorf("%w: %q: the scheme must be nbd, nbds, nbd+unix or nbds+unix", ErrBadURI, s)
	}
	t.TLS = strings.HasPrefix(scheme, "nbds")
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: %s: expected %s://", ErrBadURI, s, scheme)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: %s: a fragment is not allowed", ErrBadURI, s)
	}
	// The export is the path without its leading slash; "nbd://h/" and
	// "nbd://h" both name the default export "".
	t.Export = strings.TrimPrefix(u.Path, "/")
	if len(t.Export) > 4096 {
		return nil, fmt.Errorf("%w: export name longer than 4096 bytes", ErrBadURI)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: bad query: %v", ErrBadURI, s, err)
	}
	for k, v := range q {
		if len(v) != 1 {
			return nil, fmt.Errorf("%w: %s: query parameter %q given %d times", ErrBadURI, s, k, len(v))
		}
		switch k {
		case "socket":
			if t.Network != "unix" {
				return nil, fmt.Errorf("%w: %s: socket= needs nbd+unix:// or nbds+unix://", ErrBadURI, s)
			}
			t.Addr = v[0]
		case "tls-certificates":
			t.CertDir = v[0]
		case "tls-verify-peer":
			b, err := strconv.ParseBool(v[0])
			if err != nil {
				return nil, fmt.Errorf("%w: %s: tls-verify-peer=%q is not a boolean", ErrBadURI, s, v[0])
			}
			t.NoVerify = !b
		default:
			return nil, fmt.Errorf("%w: %s: unsupported query parameter %q", ErrBadURI, s, k)
		}
	}
	if (t.CertDir != "" || t.NoVerify) && !t.TLS {
		return nil, fmt.Errorf("%w: %s: TLS parameters need nbds:// or nbds+unix://", ErrBadURI, s)
	}
	switch t.Network {
	case "unix":
		if u.Host != "" {
			return nil, fmt.Errorf("%w: %s: a Unix socket URI has no host (nbd+unix:///EXPORT?socket=PATH)", ErrBadURI, s)
		}
		if t.Addr == "" {
			return nil, fmt.Errorf("%w: %s: socket=PATH is required", ErrBadURI, s)
		}
		t.ServerName = "localhost"
	case "tcp":
		host, port := u.Hostname(), u.Port()
		if host == "" {
			return nil, fmt.Errorf("%w: %s: no host", ErrBadURI, s)
		}
		if strings.HasSuffix(u.Host, ":") {
			return nil, fmt.Errorf("%w: %s: empty port", ErrBadURI, s)
		}
		if port == "" {
			port = defaultPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: %s: bad port %q", ErrBadURI, s, port)
		}
		t.Addr = net.JoinHostPort(host, port)
		t.ServerName = host
	}
	return t, nil
}

// String gives the URI back in a canonical form for messages: no user
// part, and the query unescaped so that paths read as they were given
// (certificates are named by folder; nothing secret is in it).
func (t *Target) String() string {
	scheme := "nbd"
	if t.TLS {
		scheme = "nbds"
	}
	var q []string
	host := t.Addr
	if t.Network == "unix" {
		scheme += "+unix"
		host = ""
		q = append(q, "socket="+t.Addr)
	}
	if t.CertDir != "" {
		q = append(q, "tls-certificates="+t.CertDir)
	}
	if t.NoVerify {
		q = append(q, "tls-verify-peer=false")
	}
	s := scheme + "://" + host + "/" + (&url.URL{Path: t.Export}).EscapedPath()
	if len(q) > 0 {
		s += "?" + strings.Join(q, "&")
	}
	return s
}
