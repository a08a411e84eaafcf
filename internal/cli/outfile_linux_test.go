package cli

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadOutputSameBlockDevice: two device nodes for one block device
// (different inodes, same device number) count as the same file.
func TestReadOutputSameBlockDevice(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	dev := 7<<8 | 200 // loop200: nothing is ever opened, only compared
	for _, p := range []string{a, b} {
		if err := syscall.Mknod(p, syscall.S_IFBLK|0o600, dev); err != nil {
			t.Skipf("cannot make a block device node here (needs CAP_MKNOD): %v", err)
		}
	}
	code, _, stderr := run(t, nil, "read", a, "--type", "plain", "--key-file", "/dev/null", "-o", b)
	if code != 1 || !strings.Contains(stderr, "same file") {
		t.Fatalf("exit %d, %q; want 1: the output is the device", code, stderr)
	}
}
