package nbd

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// makeCerts creates, with openssl, a CA (ca-cert.pem, the name libnbd looks
// for in its tls-certificates directory) and a server certificate for
// 127.0.0.1 signed by it. It returns the directory and the server config.
func makeCerts(t testing.TB) (string, *tls.Config, *x509.CertPool) {
	t.Helper()
	openssl := requireTool(t, "openssl", "openssl")
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	ec := []string{"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"}
	mustRun(t, time.Minute, openssl, append([]string{"req", "-x509"}, append(ec,
		"-keyout", p("ca-key.pem"), "-out", p("ca-cert.pem"), "-subj", "/CN=blkcrypt test CA",
		"-addext", "basicConstraints=critical,CA:TRUE",
		"-addext", "keyUsage=critical,keyCertSign,cRLSign")...)...)
	mustRun(t, time.Minute, openssl, append([]string{"req", "-x509"}, append(ec,
		"-CA", p("ca-cert.pem"), "-CAkey", p("ca-key.pem"),
		"-keyout", p("server-key.pem"), "-out", p("server-cert.pem"), "-subj", "/CN=127.0.0.1",
		"-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
		"-addext", "basicConstraints=critical,CA:FALSE",
		"-addext", "keyUsage=critical,digitalSignature",
		"-addext", "extendedKeyUsage=serverAuth")...)...)
	cert, err := tls.LoadX509KeyPair(p("server-cert.pem"), p("server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p("ca-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	// Keep only what libnbd needs in the directory it is given.
	os.Remove(p("ca-key.pem"))
	return dir, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, pool
}

func TestTLS(t *testing.T) {
	nbdcopy := requireTool(t, "nbdcopy", "libnbd-bin")
	dir, cfg, pool := makeCerts(t)
	m := newMem(8<<20, 512)
	ts := startServer(t, m, Options{ExportName: "vol", TLSConfig: cfg, MultiConn: true})
	uri := "nbds://" + ts.addr + "/vol?tls-certificates=" + dir

	t.Run("nbdinfo", func(t *testing.T) {
		checkFields(t, nbdinfoJSON(t, uri), map[string]any{"TLS": true, "export-size": int64(8 << 20), "can_multi_conn": true})
		// Without TLS the server refuses to serve.
		if out, err := run(t, time.Minute, "nbdinfo", "nbd://"+ts.addr+"/vol"); err == nil {
			t.Errorf("plain nbdinfo succeeded: %s", out)
		}
		// A client that trusts another CA fails the handshake.
		other, _, _ := makeCerts(t)
		if out, err := run(t, time.Minute, "nbdinfo", "nbds://"+ts.addr+"/vol?tls-certificates="+other); err == nil {
			t.Errorf("nbdinfo with an untrusted CA succeeded: %s", out)
		}
	})

	t.Run("nbdcopy", func(t *testing.T) {
		tmp := t.TempDir()
		src := filepath.Join(tmp, "src.img")
		data := writeRandomFile(t, src, 8<<20)
		mustRun(t, 2*time.Minute, nbdcopy, src, uri)
		if !bytes.Equal(m.snapshot(), data) {
			t.Fatalf("backend differs")
		}
		out := filepath.Join(tmp, "out.img")
		os.WriteFile(out, nil, 0o600)
		mustRun(t, 2*time.Minute, nbdcopy, uri, out)
		sameFile(t, out, data)
	})

	t.Run("protocol", func(t *testing.T) {
		c := ts.conn(t)
		o := newOptClient(t, c, flagCFixedNewstyle|flagCNoZeroes)
		for _, opt := range []uint32{optList, optInfo, optGo, optStructuredReply, 42} {
			o.expect(t, opt, goData("vol"), repErrTLSReqd)
		}
		o.expect(t, optStartTLS, []byte{1}, repErrInvalid)
		o.expect(t, optStructuredReply, nil, repErrTLSReqd)
		o.expect(t, optStartTLS, nil, repAck)
		tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		o = &optClient{c: tc, br: newBufReader(tc)}
		o.expect(t, optStartTLS, nil, repErrInvalid)
		o.expect(t, optStructuredReply, nil, repAck)
		e := parseInfos(t, o.expect(t, optGo, goData("vol", infoBlockSize), repAck))
		if e.size != 8<<20 {
			t.Errorf("size %d", e.size)
		}
		cl := &client{t: t, c: tc, br: o.br, pending: map[uint64]*call{}, closed: make(chan struct{}), structured: true}
		go cl.readLoop()
		secret := bytes.Repeat([]byte("secret data....."), 32)
		cl.mustOK(reqArgs{typ: cmdWrite, off: 4096, payload: secret})
		if got := cl.mustOK(reqArgs{typ: cmdRead, off: 4096, length: 512}); !bytes.Equal(got, secret) {
			t.Errorf("read back differs")
		}
		cl.disconnect()

		// NBD_OPT_EXPORT_NAME before TLS must end the session.
		c = ts.conn(t)
		o = newOptClient(t, c, flagCFixedNewstyle)
		o.send(optExportName, []byte("vol"))
		expectClosed(t, c, o.br)
		// So does a client without fixed newstyle.
		c = ts.conn(t)
		o = newOptClient(t, c, 0)
		expectClosed(t, c, o.br)
		// A failed TLS handshake closes the connection.
		c = ts.conn(t)
		o = newOptClient(t, c, flagCFixedNewstyle)
		o.expect(t, optStartTLS, nil, repAck)
		c.Write([]byte("this is not a TLS client hello\r\n\r\n"))
		expectClosed(t, c, o.br)
	})
}
