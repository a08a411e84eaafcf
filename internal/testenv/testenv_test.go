package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHelperMissing is run as a child by TestMissingRule: it reports a
// missing prerequisite and nothing else.
func TestHelperMissing(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") != "1" {
		t.Skip("helper process of TestMissingRule (runs only as its child)")
	}
	switch os.Getenv("TESTENV_WHAT") {
	case "tool":
		Need(t, "blkcrypt-no-such-tool", "no-such-package")
	case "fixtures":
		FixturesDir(t)
	}
	t.Fatal("Missing returned")
}

// TestMissingRule runs the test binary again with CI set and unset: a
// missing tool or fixtures folder must fail under CI and skip outside it.
func TestMissingRule(t *testing.T) {
	for _, what := range []string{"tool", "fixtures"} {
		for _, ci := range []string{"true", "1", "", "false"} {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperMissing$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "TESTENV_WHAT="+what, "CI="+ci,
				EnvFixtures+"=/nonexistent/blkcrypt-fixtures")
			out, err := cmd.CombinedOutput()
			failed := err != nil
			wantFail := ci == "true" || ci == "1"
			if failed != wantFail {
				t.Errorf("%s, CI=%q: failed=%v, want %v\n%s", what, ci, failed, wantFail, out)
			}
			want := "--- SKIP"
			if wantFail {
				want = "CI is set"
			}
			if !strings.Contains(string(out), want) || strings.Contains(string(out), "Missing returned") {
				t.Errorf("%s, CI=%q: output lacks %q\n%s", what, ci, want, out)
			}
		}
	}
}

func TestLookPath(t *testing.T) {
	if _, err := LookPath("blkcrypt-no-such-tool"); err == nil {
		t.Fatal("found a tool that does not exist")
	}
	if p, err := LookPath("sh"); err != nil || p == "" {
		t.Fatalf("sh: %q %v", p, err)
	}
}

// TestUnixListening: a bound socket that does not listen yet is not
// listening; after listen it is, and after close it is not.
func TestUnixListening(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	open := true
	defer func() {
		if open {
			syscall.Close(fd)
		}
	}()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if UnixListening(path) {
		t.Fatal("a socket only bound is reported listening")
	}
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	if !UnixListening(path) {
		t.Fatal("a listening socket is not reported")
	}
	open = false
	syscall.Close(fd)
	if UnixListening(path) {
		t.Fatal("a closed socket is reported listening")
	}
}
