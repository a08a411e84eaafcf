package nbd

import (
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
