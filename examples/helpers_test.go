package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// need returns the path of tool. A missing tool fails the test when CI is
// set (CI must never pass by skipping) and skips it otherwise.
func need(t *testing.T, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		missing(t, "%s not found (apt-get install %s)", tool, pkg)
	}
	return p
}

func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf("skipped outside CI (CI would fail): "+format, args...)
}

// fixture unpacks one of cryptsetup's test archives into a temporary
// directory and returns that directory.
func fixture(t *testing.T, archive string) string {
	t.Helper()
	dir := os.Getenv("BLKCRYPT_FIXTURES")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "fixtures", "cryptsetup")
	}
	src := filepath.Join(dir, archive)
	if _, err := os.Stat(src); err != nil {
		missing(t, "fixture %s: %v (set BLKCRYPT_FIXTURES)", archive, err)
	}
	need(t, "xz", "xz-utils")
	out := t.TempDir()
	var cmd *exec.Cmd
	if filepath.Ext(filepath.Base(src[:len(src)-3])) == ".tar" {
		cmd = exec.Command("tar", "-xJf", src, "-C", out)
	} else {
		dst := filepath.Join(out, filepath.Base(src[:len(src)-3]))
		cmd = exec.Command("sh", "-c", `xz -dc "$1" > "$2"`, "sh", src, dst)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", archive, err, b)
	}
	return out
}
