package nbdclient

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// server is an NBD server process started by a test.
type server struct {
	cmd  *exec.Cmd
	URI  string
	Sock string
	Port int
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *server) Kill() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// startNbdkit runs nbdkit in the foreground on a Unix socket (tcp false)
// or on a free loopback port, with args (plugin and filters), and returns
// once it accepts connections.
func startNbdkit(t testing.TB, tcp bool, args ...string) *server {
	t.Helper()
	bin := testenv.Need(t, "nbdkit", "nbdkit")
	s := &server{}
	var listen []string
	if tcp {
		s.Port = freePort(t)
		listen = []string{"-i", "127.0.0.1", "-p", strconv.Itoa(s.Port)}
		s.URI = fmt.Sprintf("nbd://127.0.0.1:%d/", s.Port)
	} else {
		s.Sock = filepath.Join(t.TempDir(), "nbd.sock")
		listen = []string{"-U", s.Sock}
		s.URI = "nbd+unix:///?socket=" + s.Sock
	}
	s.cmd = exec.Command(bin, append(append([]string{"-f", "--exit-with-parent"}, listen...), args...)...)
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting nbdkit: %v", err)
	}
	t.Cleanup(s.Kill)
	waitListening(t, s)
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening waits until the server's socket accepts a connection.
func waitListening(t testing.TB, s *server) {
	t.Helper()
	network, addr := "unix", s.Sock
	if s.Sock == "" {
		network, addr = "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial(network, addr); err == nil {
			c.Close()
			return
		}
		if s.cmd.ProcessState != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("server on %s %s did not start", network, addr)
}

func dialT(t testing.TB, uri string, o Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, uri, o)
	if err != nil {
		t.Fatalf("Dial(%s): %v", uri, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
