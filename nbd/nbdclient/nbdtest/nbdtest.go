// Package nbdtest starts real NBD servers (nbdkit, qemu-nbd) for tests and
// makes TLS certificates for them. Missing tools follow internal/testenv:
// a failure under CI, a skip otherwise.
package nbdtest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// Server is an NBD server process started by a test.
type Server struct {
	Cmd  *exec.Cmd
	URI  string // nbd://127.0.0.1:PORT/ or nbd+unix:///?socket=PATH
	Sock string // the Unix socket, or ""
	Port int    // the TCP port, or 0
	Host string // the TCP address when not 127.0.0.1

	exited chan struct{}
}

// Kill stops the server at once (SIGKILL), as a crash would, and waits
// for it to exit.
func (s *Server) Kill() {
	if s.Cmd != nil && s.Cmd.Process != nil {
		s.Cmd.Process.Kill()
		<-s.exited
	}
}

// Exited is closed when the server process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Listen chooses where a server listens: a Unix socket in a fresh temporary
// folder, or a free loopback TCP port.
func Listen(t testing.TB, tcp bool) *Server {
	t.Helper()
	s := &Server{}
	if tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.Port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		s.URI = fmt.Sprintf("nbd://127.0.0.1:%d/", s.Port)
	} else {
		s.Sock = filepath.Join(t.TempDir(), "nbd.sock")
		s.URI = "nbd+unix:///?socket=" + s.Sock
	}
	return s
}

// Nbdkit runs nbdkit in the foreground with args (options, plugin, plugin
// parameters) and returns once it accepts connections.
func Nbdkit(t testing.TB, tcp bool, args ...string) *Server {
	t.Helper()
	return NbdkitOn(t, Listen(t, tcp), args...)
}

// NbdkitOn runs nbdkit on the socket or port s names (a fresh Server from
// Listen, or one whose process has exited: a restart on the same address).
func NbdkitOn(t testing.TB, s *Server, args ...string) *Server {
	t.Helper()
	bin := testenv.Need(t, "nbdkit", "nbdkit")
	if s.Cmd != nil && s.Sock != "" {
		// A killed server leaves its socket behind.
		os.Remove(s.Sock)
	}
	listen := []string{"-U", s.Sock}
	if s.Port != 0 {
		listen = []string{"-i", "127.0.0.1", "-p", strconv.Itoa(s.Port)}
	}
	s.Start(t, bin, append(append([]string{"-f", "--exit-with-parent"}, listen...), args...)...)
	return s
}

// QemuNBD runs qemu-nbd over image (format fmt) on a Unix socket, persistent
// (-t) so that it outlives its clients, with export name name.
func QemuNBD(t testing.TB, image, format, name string, extra ...string) *Server {
	t.Helper()
	bin := testenv.Need(t, "qemu-nbd", "qemu-utils")
	s := Listen(t, false)
	s.URI = "nbd+unix:///" + name + "?socket=" + s.Sock
	args := append([]string{"-t", "-k", s.Sock, "-f", format, "-x", name, "--cache=writeback"}, extra...)
	s.Start(t, bin, append(args, image)...)
	return s
}

// Start runs bin with args as the server and waits until it listens.
func (s *Server) Start(t testing.TB, bin string, args ...string) {
	t.Helper()
	s.Cmd = exec.Command(bin, args...)
	// The server's messages (it logs every probe and killed connection)
	// are shown only when the test fails.
	var logs lockedBuffer
	s.Cmd.Stderr = &logs
	t.Cleanup(func() {
		if t.Failed() && logs.Len() > 0 {
			t.Logf("%s said:\n%s", filepath.Base(bin), logs.String())
		}
	})
	if err := s.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	s.exited = make(chan struct{})
	go func() {
		s.Cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.Kill)
	network, addr := "unix", s.Sock
	if s.Sock == "" {
		host := "127.0.0.1"
		if s.Host != "" {
			host = s.Host
		}
		network, addr = "tcp", net.JoinHostPort(host, strconv.Itoa(s.Port))
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial(network, addr); err == nil {
			c.Close()
			return
		}
		select {
		case <-s.exited:
			t.Fatalf("%s exited before listening on %s", bin, addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not listen on %s %s within 20 s", bin, network, addr)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Certs is a CA with a server and a client certificate, written in the
// layout nbdkit's --tls-certificates and libnbd's tls-certificates use.
type Certs struct {
	ServerDir string // ca-cert.pem, server-cert.pem, server-key.pem
	ClientDir string // ca-cert.pem, client-cert.pem, client-key.pem
	// OtherCA is a folder with another CA's ca-cert.pem only: a client
	// trusting it must refuse the server.
	OtherCA string
}

// MakeCerts creates the certificates with crypto/x509: the server's for
// localhost and 127.0.0.1.
func MakeCerts(t testing.TB) *Certs {
	t.Helper()
	root := t.TempDir()
	c := &Certs{ServerDir: filepath.Join(root, "server"), ClientDir: filepath.Join(root, "client"), OtherCA: filepath.Join(root, "other")}
	for _, d := range []string{c.ServerDir, c.ClientDir, c.OtherCA} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	caKey, caCert, caDER := newCA(t, "blkcrypt test CA")
	_, _, otherDER := newCA(t, "another CA")
	leaf := func(cn string, usage x509.ExtKeyUsage, dir, prefix string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, filepath.Join(dir, prefix+"-cert.pem"), "CERTIFICATE", der)
		writePEM(t, filepath.Join(dir, prefix+"-key.pem"), "PRIVATE KEY", kder)
	}
	leaf("localhost", x509.ExtKeyUsageServerAuth, c.ServerDir, "server")
	leaf("blkcrypt client", x509.ExtKeyUsageClientAuth, c.ClientDir, "client")
	writePEM(t, filepath.Join(c.ServerDir, "ca-cert.pem"), "CERTIFICATE", caDER)
	writePEM(t, filepath.Join(c.ClientDir, "ca-cert.pem"), "CERTIFICATE", caDER)
	writePEM(t, filepath.Join(c.OtherCA, "ca-cert.pem"), "CERTIFICATE", otherDER)
	return c
}

func newCA(t testing.TB, cn string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// NeedTool returns the path of a program (see testenv.Need).
func NeedTool(t testing.TB, name, pkg string) string {
	t.Helper()
	return testenv.Need(t, name, pkg)
}

// Run runs a program and fails the test, with its output, if it fails.
func Run(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
	}
	return string(out)
}
