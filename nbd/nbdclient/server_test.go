package nbdclient

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

// TestTLSNbdkit: nbdkit --tls=require with certificates made by
// crypto/x509, verifying the client's certificate too. nbds works over a
// Unix socket and TCP; plain nbd, a wrong CA, or no client certificate
// fail with ErrTLS.
func TestTLSNbdkit(t *testing.T) {
	certs := nbdtest.MakeCerts(t)
	args := []string{"--tls=require", "--tls-certificates=" + certs.ServerDir, "--tls-verify-peer", "memory", "16M"}
	for _, tcp := range []bool{false, true} {
		s := nbdtest.Nbdkit(t, tcp, args...)
		uri := strings.Replace(s.URI, "nbd", "nbds", 1)
		sep := "?"
		if strings.Contains(uri, "?") {
			sep = "&"
		}
		c := dialT(t, uri+sep+"tls-certificates="+certs.ClientDir, Options{})
		data := make([]byte, 1<<20)
		rand.Read(data)
		if _, err := c.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if _, err := c.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("TLS round trip: %v", err)
		}
		for _, bad := range []string{
			s.URI, // no TLS
			uri + sep + "tls-certificates=" + certs.OtherCA, // a CA that did not sign the server
		} {
			if _, err := dialErr(bad, Options{}); !errors.Is(err, ErrTLS) {
				t.Errorf("Dial(%s): %v; want ErrTLS", bad, err)
			}
		}
		// The right CA but no client certificate: the server refuses it.
		noClient := filepath.Join(t.TempDir(), "ca-only")
		os.Mkdir(noClient, 0o700)
		ca, _ := os.ReadFile(filepath.Join(certs.ClientDir, "ca-cert.pem"))
		os.WriteFile(filepath.Join(noClient, "ca-cert.pem"), ca, 0o600)
		if _, err := dialErr(uri+sep+"tls-certificates="+noClient, Options{}); err == nil {
			t.Error("a client without a certificate was let in by --tls-verify-peer")
		}
	}
}

// TestServerKilled: nbdkit is killed while a read is in flight. The read
// fails with ErrConnectionLost (no data), the next request reconnects to a
// restarted server, and the write that was acknowledged but not flushed
// when the connection died is reported by the next Sync.
func TestServerKilled(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	s := nbdtest.Nbdkit(t, false, "--filter=delay", "file", img, "rdelay=5")
	c := dialT(t, s.URI, Options{NoProbe: true})
	want := bytes.Repeat([]byte("k"), 4096)
	if _, err := c.WriteAt(want, 8192); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var n int
	var rerr error
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, rerr = c.ReadAt(make([]byte, 65536), 0)
	}()
	time.Sleep(300 * time.Millisecond)
	s.Kill()
	wg.Wait()
	if n != 0 || !errors.Is(rerr, ErrConnectionLost) {
		t.Fatalf("read in flight when the server died: %d bytes, %v", n, rerr)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("the lost connection was noticed after %v (the delayed reply was due at 5 s)", d)
	}
	// While the server is down, a request fails after the bounded retries.
	start = time.Now()
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("read with the server down: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("reconnecting took %v, beyond the bounded backoff", d)
	}
	nbdtest.NbdkitOn(t, s, "file", img)
	got := make([]byte, 4096)
	if _, err := c.ReadAt(got, 8192); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the restart: %v", err)
	}
	if err := c.Sync(); !errors.Is(err, ErrUnflushedLost) {
		t.Fatalf("Sync after losing a connection with unflushed writes: %v", err)
	}
	if err := c.Sync(); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
}

// TestQemuNBD: qemu-nbd over a qcow2 file: the named export works, another
// name is ErrUnknownExport, and what was written is in the qcow2 file
// (qemu-img convert reads it back).
func TestQemuNBD(t *testing.T) {
	qimg := nbdtest.NeedTool(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	q := filepath.Join(dir, "disk.qcow2")
	nbdtest.Run(t, qimg, "create", "-q", "-f", "qcow2", q, "8M")
	s := nbdtest.QemuNBD(t, q, "qcow2", "vol")
	if _, err := dialErr("nbd+unix:///other?socket="+s.Sock, Options{}); !errors.Is(err, ErrUnknownExport) || !strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("unknown export: %v", err)
	}
	c := dialT(t, s.URI, Options{})
	data := make([]byte, 3<<20)
	rand.Read(data)
	if _, err := c.WriteAt(data, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	raw := filepath.Join(dir, "raw")
	nbdtest.Run(t, qimg, "convert", "-f", "qcow2", "-O", "raw", q, raw)
	b, err := os.ReadFile(raw)
	if err != nil || !bytes.Equal(b[1<<20:4<<20], data) {
		t.Fatalf("the qcow2 file does not hold what was written (%v)", err)
	}
}

// TestMultiConn: nbdkit's memory plugin offers multi-conn, so concurrent
// requests spread over several connections and Sync flushes them all.
func TestMultiConn(t *testing.T) {
	s := nbdtest.Nbdkit(t, false, "memory", "32M")
	c := dialT(t, s.URI, Options{Conns: 3})
	if c.Flags()&FlagCanMultiConn == 0 {
		t.Fatal("nbdkit memory did not offer multi-conn")
	}
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c.WriteAt(bytes.Repeat([]byte{byte(i)}, 65536), int64(i)<<20)
		}(i)
	}
	wg.Wait()
	if n := len(c.live()); n != 3 {
		t.Fatalf("%d connections open, want 3", n)
	}
	for _, cn := range c.live() {
		if !cn.dirty.Load() {
			t.Fatal("a connection that wrote is not marked for flushing")
		}
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, cn := range c.live() {
		if cn.dirty.Load() {
			t.Fatal("Sync did not flush every connection")
		}
	}
	for i := 0; i < 12; i++ {
		b := make([]byte, 65536)
		if _, err := c.ReadAt(b, int64(i)<<20); err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, 65536)) {
			t.Fatalf("block %d: %v", i, err)
		}
	}
}

// TestReadOnlyAndTrim: a read-only export refuses writes before sending
// them; TRIM goes out only where the server offers it.
func TestReadOnlyAndTrim(t *testing.T) {
	s := nbdtest.Nbdkit(t, false, "-r", "memory", "1M")
	c := dialT(t, s.URI, Options{})
	if _, err := c.WriteAt(make([]byte, 512), 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("write to a read-only export: %v", err)
	}
	if err := c.Sync(); err != nil {
		t.Fatalf("Sync of a read-only export: %v", err)
	}
	s2 := nbdtest.Nbdkit(t, false, "memory", "1M")
	c2 := dialT(t, s2.URI, Options{})
	c2.WriteAt(bytes.Repeat([]byte{1}, 65536), 0)
	if err := c2.Discard(0, 65536); err != nil {
		t.Fatalf("trim: %v", err)
	}
	b := make([]byte, 65536)
	c2.ReadAt(b, 0)
	if !bytes.Equal(b, make([]byte, 65536)) {
		t.Fatal("nbdkit memory did not zero trimmed data")
	}
}

// TestIPv6Literal: nbd://[::1]:PORT/ reaches nbdkit listening on ::1.
func TestIPv6Literal(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		testenv.Missing(t, "no IPv6 loopback here: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &nbdtest.Server{Port: port, Host: "::1"}
	s.Start(t, nbdtest.NeedTool(t, "nbdkit", "nbdkit"), "-f", "--exit-with-parent", "-i", "::1", "-p", strconv.Itoa(port), "memory", "1M")
	c := dialT(t, fmt.Sprintf("nbd://[::1]:%d/", port), Options{})
	if _, err := c.WriteAt([]byte("six"), 0); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	if _, err := c.ReadAt(b, 0); err != nil || string(b) != "six" {
		t.Fatalf("read over IPv6: %q %v", b, err)
	}
}
