package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// terminal is a real blkcrypt process on a tmux pane: typed at with
// send-keys, read with capture-pane, everything it printed logged raw.
type terminal struct {
	t         *testing.T
	tmux, dir string
	sock, log string
}

func newTerminal(t *testing.T, dir, script string) *terminal {
	tm := &terminal{t: t, tmux: testenv.Need(t, "tmux", "tmux"), dir: dir, sock: filepath.Join(dir, "tmux.sock"), log: filepath.Join(dir, "pane.log")}
	sh := writeFile(t, dir, "run.sh", []byte(script+"\necho \"EXIT=$?\" > "+filepath.Join(dir, "exit")+"\nsleep 600\n"))
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "160", "-y", "40", "sh "+sh)
	t.Cleanup(func() { exec.Command(tm.tmux, "-S", tm.sock, "kill-server").Run() })
	tm.run("pipe-pane", "-t", "t", "-o", "cat >> "+tm.log)
	return tm
}

func (tm *terminal) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command(tm.tmux, append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// screen is what the pane shows, without the blank rows below the cursor
// (capture-pane drops each row's trailing spaces).
func (tm *terminal) screen() string {
	return strings.TrimRight(tm.run("capture-pane", "-t", "t", "-p"), " \n")
}

// waitFor polls the screen until re matches it.
func (tm *terminal) waitFor(re *regexp.Regexp) string {
	tm.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		s := tm.screen()
		if m := re.FindString(s); m != "" {
			return m
		}
		time.Sleep(50 * time.Millisecond)
	}
	tm.t.Fatalf("the terminal never showed %q; it shows:\n%s", re, tm.screen())
	return ""
}

func (tm *terminal) typeLine(s string) {
	tm.run("send-keys", "-t", "t", "-l", s)
	tm.run("send-keys", "-t", "t", "Enter")
}

// exitCode waits for the script's command to end.
func (tm *terminal) exitCode() string {
	tm.t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(tm.dir, "exit")); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(strings.TrimPrefix(string(b), "EXIT="))
		}
		time.Sleep(50 * time.Millisecond)
	}
	tm.t.Fatalf("the command did not end; the terminal shows:\n%s", tm.screen())
	return ""
}

func buildBlkcrypt(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = testenv.ModuleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestTerminalFormat: on a real terminal, `blkcrypt format IMG` over an
// existing file asks cryptsetup's question, takes YES and the passphrase
// twice (not echoed), and cryptsetup opens the result with it.
func TestTerminalFormat(t *testing.T) {
	dir := openTempDir(t)
	bin := buildBlkcrypt(t, dir)
	img := filepath.Join(dir, "tty.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 20<<20); err != nil {
		t.Fatal(err)
	}
	tm := newTerminal(t, dir, bin+" format "+img+" --pbkdf pbkdf2 --pbkdf-force-iterations 1000")
	tm.waitFor(regexp.MustCompile(`(?s)WARNING!\n========\nThis will overwrite data on ` + regexp.QuoteMeta(img) + ` irrevocably\.\n\nAre you sure\? \(Type 'yes' in capital letters\):$`))
	tm.typeLine("YES")
	tm.waitFor(regexp.MustCompile(`Enter new passphrase:$`))
	const pass = "tmux typed this"
	tm.typeLine(pass)
	tm.waitFor(regexp.MustCompile(`Verify passphrase:$`))
	tm.typeLine(pass)
	if code := tm.exitCode(); code != "0" {
		t.Fatalf("format exited %s; the terminal shows:\n%s", code, tm.screen())
	}
	if s := tm.screen(); strings.Contains(s, pass) {
		t.Errorf("the passphrase was echoed:\n%s", s)
	}
	kf := writeFile(t, dir, "pass", []byte(pass))
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", kf, img); err != nil {
		t.Fatalf("cryptsetup does not open the volume with the typed passphrase: %v\n%s", err, out)
	}
}

// TestTerminalFormatRefused: any answer but YES leaves the file as it was,
// with cryptsetup's exit code for a refused luksFormat (1).
func TestTerminalFormatRefused(t *testing.T) {
	dir := openTempDir(t)
	bin := buildBlkcrypt(t, dir)
	img := writeFile(t, dir, "keep.img", randBytes(1<<20))
	before := fileSum(t, img)
	tm := newTerminal(t, dir, bin+" format "+img)
	tm.waitFor(regexp.MustCompile(`Are you sure\? \(Type 'yes' in capital letters\):$`))
	tm.typeLine("yes")
	if code := tm.exitCode(); code != "1" {
		t.Fatalf("a refused format exited %s; the terminal shows:\n%s", code, tm.screen())
	}
	tm.waitFor(regexp.MustCompile(`blkcrypt: operation aborted`))
	if fileSum(t, img) != before {
		t.Error("a refused format changed the file")
	}
}

// TestTerminalProgress: a 96 MiB write shows cryptsetup's progress line on
// the terminal while it runs (the input pauses so that the line is up for
// seconds, whatever the speed), then the Finished line.
func TestTerminalProgress(t *testing.T) {
	dir := openTempDir(t)
	bin := buildBlkcrypt(t, dir)
	img := filepath.Join(dir, "big.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 100<<20); err != nil {
		t.Fatal(err)
	}
	vk := writeFile(t, dir, "vk", randBytes(32))
	tm := newTerminal(t, dir, "(head -c 48M /dev/zero; sleep 1; head -c 1M /dev/zero; sleep 4; head -c 47M /dev/zero) | "+
		bin+" write "+img+" --type plain --volume-key-file "+vk+" --length 96M")
	line := tm.waitFor(regexp.MustCompile(`Progress: +\d+\.\d%, ETA \d\dm\d\ds, +\d+ MiB written, speed +\d+\.\d (Ki|Mi|Gi)?B/s`))
	t.Logf("on the terminal: %s", line)
	if code := tm.exitCode(); code != "0" {
		t.Fatalf("write exited %s; the terminal shows:\n%s", code, tm.screen())
	}
	tm.waitFor(regexp.MustCompile(`(?m)^Finished, time \d\dm\d\ds, +96 MiB written, speed +\d+\.\d (Ki|Mi|Gi)?B/s$`))
	raw, err := os.ReadFile(tm.log)
	if err != nil {
		t.Fatal(err)
	}
	// One line, rewritten in place: each report clears the line first.
	if !regexp.MustCompile(`\x1b\[2K\rProgress: `).Match(raw) || !regexp.MustCompile(`\x1b\[2K\rFinished, time `).Match(raw) {
		t.Errorf("the progress output does not rewrite one line: %q", raw)
	}
}
