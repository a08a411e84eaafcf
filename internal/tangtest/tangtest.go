//go:build linux

package tangtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// tangd and tangdKeygen are where Debian's tang package puts them.
const (
	tangd       = "/usr/libexec/tangd"
	tangdKeygen = "/usr/libexec/tangd-keygen"
)

// Server is a running (or stopped) tang server. Stop and Start may be
// called in turn: it comes back on the same port with the same keys, so
// bindings made before still unlock.
type Server struct {
	// URL is http://127.0.0.1:PORT.
	URL string
	// Dir holds its keys.
	Dir string

	socat  string
	port   int
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start runs a tang server with fresh keys on a free loopback port until
// the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{socat: testenv.Need(t, "socat", "socat"), Dir: t.TempDir()}
	testenv.Need(t, "jose", "jose") // tangd-keygen runs it
	if _, err := os.Stat(tangd); err != nil {
		testenv.Missing(t, "%s (apt package tang): %v", tangd, err)
	}
	if out, err := exec.Command(tangdKeygen, s.Dir).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v %s", tangdKeygen, err, out)
	}
	t.Cleanup(s.Stop)
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		s.URL = "http://127.0.0.1:" + strconv.Itoa(s.port)
		if err := s.start(); err == nil {
			return s
		} else if attempt == 4 {
			t.Fatal(err)
		}
		// Another process took the port between Close and socat.
	}
	return nil
}

// Restart starts the stopped server again, on its port with its keys.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// start runs socat on s.port and waits (30 s at most) until tang answers
// GET /adv.
func (s *Server) start() error {
	var out bytes.Buffer
	cmd := exec.Command(s.socat, fmt.Sprintf("TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork", s.port), "EXEC:"+tangd+" "+s.Dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that Stop ends the tangd it forked for a
	// connection still open too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case <-exited:
			return fmt.Errorf("socat on port %d exited: %s", s.port, out.String())
		default:
		}
		if rsp, err := client.Get(s.URL + "/adv"); err == nil {
			rsp.Body.Close()
			if rsp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("tang did not answer on %s within 30 s: %s", s.URL, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills socat's process group (socat and any tangd it forked); the
// port then refuses connections. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Config is clevis's tang pin configuration for the server.
func (s *Server) Config() string { return `{"url":"` + s.URL + `"}` }

// Bind runs clevis luks bind on the LUKS2 image file, authorised by the
// passphrase in keyFile, trusting the server's advertisement (-y). The
// image must not be in use.
func (s *Server) Bind(t testing.TB, image, keyFile string) {
	t.Helper()
	clevis := testenv.Need(t, "clevis", "clevis")
	testenv.Need(t, "clevis-luks-bind", "clevis-luks")
	testenv.Need(t, "jose", "jose")
	testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, clevis, "luks", "bind", "-y", "-k", keyFile, "-d", image, "tang", s.Config())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clevis luks bind -d %s tang %s: %v %s", image, s.Config(), err, out)
	}
}
