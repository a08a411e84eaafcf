package nbd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrSocketBusy is ListenUnix on a path that is not a stale socket: a
// live server's socket, a file, a directory, a symlink. Only a socket
// nobody accepts on is replaced.
var ErrSocketBusy = errors.New("path busy")

// Listen opens the listener a server address names: "unix:/path" (a Unix
// socket, see ListenUnix) or "host:port" (TCP). loopback reports whether
// only this machine can connect (a Unix socket, localhost, a loopback IP),
// which a caller uses to insist on TLS elsewhere.
func Listen(addr string) (l net.Listener, loopback bool, err error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		l, err := ListenUnix(path)
		return l, true, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, err
	}
	loopback = host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	l, err = net.Listen("tcp", addr)
	return l, loopback, err
}

// ListenUnix listens on a Unix socket at path. A socket left by a server
// that died (connect is refused) is removed first; anything else at path
// is left alone and reported busy (ErrSocketBusy). The check, the removal
// and the bind run under an exclusive flock on the socket's directory, so
// two servers starting together cannot both take the same stale path, nor
// one remove the socket the other has just bound.
func ListenUnix(path string) (net.Listener, error) {
	unlock, err := lockDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%w: %s appeared while starting", ErrSocketBusy, path)
	}
	return l, err
}

// removeStaleSocket removes path only if it is a socket that refuses
// connections. Lstat, so a symlink is never followed to its target.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if st.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%w: %s is %s, not a socket; it is left as it is", ErrSocketBusy, path, kindOf(st))
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: another server is listening on %s", ErrSocketBusy, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		// EACCES, a timeout (a live server with a full backlog): not
		// known to be stale, so not ours to remove.
		var se *os.SyscallError
		if errors.As(err, &se) {
			err = se.Err // not "dial unix PATH:", which repeats the path
		}
		return fmt.Errorf("%w: cannot tell whether %s is in use (%v); it is left as it is", ErrSocketBusy, path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

func kindOf(st fs.FileInfo) string {
	m := st.Mode()
	switch {
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "something else"
}

// LoadTLSConfig is a server's TLS configuration from PEM files: its
// certificate chain and key, and, when caFile is not "", the CAs a
// client certificate must chain to (then required). TLS 1.2 at least.
func LoadTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
