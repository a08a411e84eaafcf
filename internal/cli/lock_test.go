package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// childRun runs Main in a separate process (the test binary, through
// TestCLIChildProcess), so that locks are taken by another process as they
// are between two blkcrypt commands.
func childRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	enc, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIChildProcess$")
	cmd.Env = append(os.Environ(), "BLKCRYPT_CLI_CHILD="+string(enc))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

func luksImage(t *testing.T) (img, pass string) {
	t.Helper()
	dir := t.TempDir()
	pass = writeFile(t, dir, "pass", []byte("lock test"))
	img = filepath.Join(dir, "v.img")
	if code, _, e := run(t, nil, "format", img, "--size", "20971520", "--key-file", pass, "-q", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"); code != 0 {
		t.Fatal(e)
	}
	return img, pass
}

// TestServeLocksTheImage: while one server runs on an image, a second
// server (in another process, or in this one) is refused with exit 5 — so
// two servers can never revert each other's sub-sector writes — and so are
// write, add-key and kill-slot; the refusal names the holder. After the
// server stops, everything works again.
func TestServeLocksTheImage(t *testing.T) {
	img, pass := luksImage(t)
	newPass := writeFile(t, t.TempDir(), "new", []byte("another"))
	in := writeFile(t, t.TempDir(), "in", []byte("hello"))
	before := fileSum(t, img)
	_, stop := serveInBackground(t, img, "--key-file", pass)

	sock2 := filepath.Join(t.TempDir(), "second.sock")
	code, out := childRun(t, "serve", img, "--key-file", pass, "--listen", "unix:"+sock2)
	if code != ExitBusy || !strings.Contains(out, "locked by process") {
		t.Errorf("second server in another process: exit %d, %q; want 5 naming the holder", code, out)
	}
	if _, err := os.Stat(sock2); err == nil {
		t.Error("the refused server listened")
	}
	for _, args := range [][]string{
		{"serve", img, "--key-file", pass, "--listen", "unix:" + filepath.Join(t.TempDir(), "s")},
		{"write", img, "--key-file", pass, "-i", in},
		{"add-key", img, newPass, "--key-file", pass, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"},
		{"kill-slot", img, "0", "-q"},
		{"read", img, "--key-file", pass, "--length", "16"},
	} {
		if code, _, e := run(t, nil, args...); code != ExitBusy || strings.Count(e, "\n") != 1 || !strings.Contains(e, "locked") {
			t.Errorf("%s while a server runs: exit %d, %q; want 5", args[0], code, e)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}
	if fileSum(t, img) != before {
		t.Error("the image changed although every writer was refused")
	}
	if code, _, e := run(t, nil, "add-key", img, newPass, "--key-file", pass, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"); code != 0 {
		t.Fatalf("add-key after the server stopped: %s", e)
	}
	// Two servers one after the other are fine, and a read-only server
	// shares the image with readers.
	_, stop = serveInBackground(t, img, "--key-file", pass, "--read-only")
	if code, _, e := run(t, nil, "read", img, "--key-file", pass, "--length", "16"); code != 0 {
		t.Errorf("read beside a read-only server: %d %s", code, e)
	}
	if code, _, _ := run(t, nil, "write", img, "--key-file", pass, "-i", in); code != ExitBusy {
		t.Errorf("write beside a read-only server: exit %d, want 5", code)
	}
	stop()
}
