package nbd

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// shortSocketPath returns a Unix socket path short enough for sun_path.
func shortSocketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

func newBufReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
