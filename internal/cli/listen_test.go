package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// plainServeArgs is a plain volume over img that needs no KDF.
func plainServeArgs(t *testing.T, dir, img string) []string {
	vkf := writeFile(t, dir, "vk", randBytes(64))
	return []string{img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512"}
}

// TestServeListenBusyPaths: `serve --listen unix:PATH` where PATH is a
// regular file, the image being served, an empty directory, a symlink to
// a stale socket or another live server's socket exits 5 with one line
// naming PATH, and PATH is left exactly as it was (the live server is
// still reachable).
func TestServeListenBusyPaths(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(1<<20))
	vol := plainServeArgs(t, dir, img)

	file := writeFile(t, dir, "file", []byte("precious"))
	empty := filepath.Join(dir, "emptydir")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := staleSocket(t, filepath.Join(dir, "stale.sock"))
	slink := filepath.Join(dir, "stale-link")
	if err := os.Symlink(stale, slink); err != nil {
		t.Fatal(err)
	}
	live, stopServer := serveInBackground(t, vol...)
	// The refused starts serve another image: the live server holds its
	// image's lock, which would refuse them (busy) before the listener
	// is even looked at.
	other := plainServeArgs(t, dir, writeFile(t, dir, "other.img", randBytes(1<<20)))
	stopped, code := false, 0
	stop := func() int {
		if !stopped {
			stopped, code = true, stopServer()
		}
		return code
	}
	defer stop()

	for _, c := range []struct{ name, path, says string }{
		{"regular file", file, "not a socket"},
		{"served image", img, "not a socket"},
		{"empty directory", empty, "a directory"},
		{"symlink to a stale socket", slink, "a symlink"},
		{"live socket", live, "another server"},
	} {
		st0, err := os.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		content := regularBytes(t, c.path)
		code, _, stderr := runCtx(t, 20*time.Second, append([]string{"serve", "--listen", "unix:" + c.path}, other...)...)
		if code != ExitBusy || !strings.Contains(stderr, c.path) || !strings.Contains(stderr, c.says) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want 5 and one line naming the path and %q", c.name, code, stderr, c.says)
		}
		st1, err := os.Lstat(c.path)
		if err != nil {
			t.Fatalf("%s: %s was removed", c.name, c.path)
		}
		if !os.SameFile(st0, st1) || st0.Mode() != st1.Mode() || !bytes.Equal(regularBytes(t, c.path), content) {
			t.Errorf("%s: %s was replaced or changed", c.name, c.path)
		}
	}
	if _, err := os.Lstat(stale); err != nil {
		t.Error("the stale socket behind the symlink was removed")
	}
	c, err := net.Dial("unix", live)
	if err != nil {
		t.Fatalf("the live server is unreachable after the refused start: %v", err)
	}
	c.Close()
	if code := stop(); code != 0 {
		t.Errorf("the live server exited %d", code)
	}
}

// TestServeListenStaleSocket: a socket left by a dead server (it refuses
// connections) is replaced, and the new server answers on it.
func TestServeListenStaleSocket(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(1<<20))
	vol := plainServeArgs(t, dir, img)
	sock := staleSocket(t, filepath.Join(dir, "nbd.sock"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: &errb}
		done <- Main(ctx, append([]string{"serve", "--listen", "unix:" + sock}, vol...), env)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve on a stale socket exited %d: %s", code, errb.String())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve never answered on the stale socket's path")
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d: %s", code, errb.String())
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("serve left its socket behind after a clean stop")
	}
}

// staleSocket leaves a socket file at path that nobody listens on, as a
// killed server does.
func staleSocket(t *testing.T, path string) string {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		t.Fatal("the stale socket still accepts")
	}
	return path
}

// regularBytes is a regular file's content, nil for anything else.
func regularBytes(t *testing.T, path string) []byte {
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	return fileBytes(t, path)
}
