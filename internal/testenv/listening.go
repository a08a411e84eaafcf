package testenv

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// UnixListening reports whether a socket bound to path accepts
// connections. A server's socket file appears at bind, before listen, so a
// test that waits for the file alone can connect in between and be refused
// (it happens on a loaded machine); connecting to check would be a client
// the server sees and logs. Linux's /proc/net/unix says which sockets
// listen (the __SO_ACCEPTCON flag) without touching them.
func UnixListening(path string) bool {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode Path
		if len(f) == 8 && f[7] == path && f[3] == "00010000" {
			return true
		}
	}
	return false
}

// Serve runs run, a server that listens on the Unix socket sock, on a
// goroutine until it listens, and returns a function that cancels run's
// context and returns its exit code (0 if it was stopped before); the
// test's cleanup stops it too. output is the server's output so far, for
// the failure messages. The poll is short: a server that starts work as it
// listens (serve --reencrypt) must not run far ahead of a test that means
// to catch it mid-way.
func Serve(t testing.TB, sock string, run func(ctx context.Context) int, output func() string) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx) }()
	for deadline := time.Now().Add(time.Minute); !UnixListening(sock); {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("serve exited early with %d: %s", code, output())
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve did not listen within a minute: %s", output())
		}
	}
	stopped := false
	stop := func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(time.Minute):
			t.Fatal("serve did not stop within a minute of its cancellation")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	return stop
}
