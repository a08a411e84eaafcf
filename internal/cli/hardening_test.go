package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The bad-input matrix: every CLI verb against every kind of bad input.
// Each cell either names the exit code cryptsetup uses for it (1 wrong
// parameters, 2 bad passphrase, 4 wrong device, 5 busy), with exactly one
// "blkcrypt: ..." line on stderr and the device unchanged byte for byte,
// or says why the input does not apply to the verb.

// badInput is one kind of bad input (a column of the matrix).
type badInput int

const (
	biMissingDevice badInput = iota
	biDirectory
	biNoPermission
	biTruncated
	biUnknownType
	biWrongPassphrase
	biEmptyKeyFile
	biShortKeyFile
	biConflictingFlags
	numBadInputs
)

var badInputNames = [...]string{"missing-device", "directory", "no-permission", "truncated-image", "unknown-type",
	"wrong-passphrase", "empty-key-file", "short-key-file", "conflicting-flags"}

func (b badInput) String() string { return badInputNames[b] }

// badInputSays is what the one-line message must mention for each kind,
// so that it names the actual problem.
var badInputSays = [...]*regexp.Regexp{
	regexp.MustCompile(`does not exist`),
	regexp.MustCompile(`is a directory`),
	regexp.MustCompile(`permission denied|access denied`),
	regexp.MustCompile(`too small|smaller than`),
	regexp.MustCompile(`luks3`),
	regexp.MustCompile(`no key available`),
	regexp.MustCompile(`empty`),
	regexp.MustCompile(`shorter than`),
	regexp.MustCompile(`cannot be combined`),
}

// cell is the expectation for one verb and bad input: an exit code, or
// na, the reason the input does not apply.
type cell struct {
	code int
	na   string
}

// matrixFixture holds the files every row starts from. The directory is
// world-readable so a row can run as an unprivileged user.
type matrixFixture struct {
	dir       string
	good      string // LUKS2, slot 0 = pass, slot 1 = pass2, fast PBKDF2
	truncated string // good, cut inside its keyslot area
	pass      string // key file opening slot 0
	pass2     string
	wrong     string
	empty     string
	newKey    string
	data      string // input for write
	backup    string // header backup of good
}

func newMatrixFixture(t *testing.T) *matrixFixture {
	t.Helper()
	dir := openTempDir(t)
	f := &matrixFixture{dir: dir}
	wf := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f.pass = wf("pass", []byte("matrix passphrase"))
	f.pass2 = wf("pass2", []byte("second passphrase"))
	f.wrong = wf("wrong", []byte("not the passphrase"))
	f.empty = wf("empty", nil)
	f.newKey = wf("newkey", []byte("a new passphrase"))
	f.data = wf("data", randBytes(8192))
	f.good = filepath.Join(dir, "good.img")
	if code, _, e := run(t, nil, append([]string{"format", f.good, "--size", "17825792", "--key-file", f.pass, "-q"}, fastKDF...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	if code, _, e := run(t, nil, append([]string{"add-key", f.good, f.pass2, "--key-file", f.pass}, fastKDF...)...); code != 0 {
		t.Fatalf("add-key: %s", e)
	}
	os.Chmod(f.good, 0o644)
	f.backup = filepath.Join(dir, "good.bak")
	if code, _, e := run(t, nil, "header-backup", f.good, "--header-backup-file", f.backup); code != 0 {
		t.Fatalf("header-backup: %s", e)
	}
	os.Chmod(f.backup, 0o644)
	img, err := os.ReadFile(f.good)
	if err != nil {
		t.Fatal(err)
	}
	f.truncated = wf("truncated.img", img[:20000])
	return f
}

var fastKDF = []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}

// verbRow is one verb: how to call it correctly on dev with the key file
// key, and what each bad input must give.
type verbRow struct {
	verb  string
	args  func(f *matrixFixture, dev, key string) []string
	cells [numBadInputs]cell
}

func ok(code int) cell   { return cell{code: code} }
func na(why string) cell { return cell{na: why} }
func devCells(c ...cell) [numBadInputs]cell {
	var out [numBadInputs]cell
	copy(out[:], c)
	return out
}

// The conflict every verb shares: cryptsetup refuses forced PBKDF
// iterations together with an iteration time, whatever the action.
var conflicting = []string{"--pbkdf-force-iterations", "1000", "--iter-time", "100"}

func matrixRows() []verbRow {
	noKey := na("the verb reads no passphrase (as cryptsetup's)")
	noDev := na("the verb takes no device")
	// dev: 4 for missing, directory and no permission; 1 for a truncated
	// image (cryptsetup 2.6.1: "Device X is too small.", EINVAL, exit 1,
	// TestExitCodesMatchCryptsetup) and for an unknown --type; key rows
	// as given; 1 for conflicting flags.
	std := func(wrong, empty, short cell) [numBadInputs]cell {
		return devCells(ok(4), ok(4), ok(4), ok(1), ok(1), wrong, empty, short, ok(1))
	}
	// An empty key file is the empty passphrase, which opens no keyslot:
	// exit 2, as cryptsetup 2.6.1.
	keyed := std(ok(2), ok(2), ok(1))
	return []verbRow{
		{"format", func(f *matrixFixture, dev, key string) []string {
			return append([]string{"format", dev, "--key-file", key, "-q"}, fastKDF...)
		}, std(na("format sets a new passphrase; there is nothing to check it against"), ok(1), ok(1))},
		{"dump", func(f *matrixFixture, dev, key string) []string {
			return []string{"dump", dev, "--dump-volume-key", "--key-file", key}
		}, keyed},
		{"test-passphrase", func(f *matrixFixture, dev, key string) []string {
			return []string{"test-passphrase", dev, "--key-file", key}
		}, keyed},
		{"add-key", func(f *matrixFixture, dev, key string) []string {
			return append([]string{"add-key", dev, f.newKey, "--key-file", key}, fastKDF...)
		}, keyed},
		{"change-key", func(f *matrixFixture, dev, key string) []string {
			return append([]string{"change-key", dev, f.newKey, "--key-file", key}, fastKDF...)
		}, keyed},
		{"remove-key", func(f *matrixFixture, dev, key string) []string {
			return []string{"remove-key", dev, "--key-file", key}
		}, keyed},
		{"kill-slot", func(f *matrixFixture, dev, key string) []string {
			// With --key-file, cryptsetup checks that the passphrase
			// opens a keyslot other than the one killed.
			return []string{"kill-slot", dev, "1", "--key-file", key}
		}, keyed},
		{"header-backup", func(f *matrixFixture, dev, key string) []string {
			return []string{"header-backup", dev, "--header-backup-file", filepath.Join(f.dir, "new.bak")}
		}, devCells(ok(4), ok(4), ok(4), ok(1), ok(0), noKey, noKey, noKey, ok(1))},
		{"header-restore", func(f *matrixFixture, dev, key string) []string {
			return []string{"header-restore", dev, "--header-backup-file", f.backup}
		}, devCells(ok(4), ok(4), ok(4), ok(1), ok(0), noKey, noKey, noKey, ok(1))},
		{"read", func(f *matrixFixture, dev, key string) []string {
			return []string{"read", dev, "--key-file", key, "--length", "4096"}
		}, keyed},
		{"write", func(f *matrixFixture, dev, key string) []string {
			return []string{"write", dev, "-i", f.data, "--key-file", key}
		}, keyed},
		{"serve", func(f *matrixFixture, dev, key string) []string {
			return []string{"serve", dev, "--listen", "unix:" + filepath.Join(f.dir, "nbd.sock"), "--key-file", key}
		}, keyed},
		{"speed", func(f *matrixFixture, dev, key string) []string {
			return []string{"speed", "cbc(aes)", "--sec", "0.001"}
		}, devCells(noDev, noDev, noDev, noDev, na("speed takes an algorithm, not a --type (unknown algorithms: TestSpeedCommand)"), noKey, noKey, noKey, ok(1))},
		{"benchmark", func(f *matrixFixture, dev, key string) []string {
			return []string{"benchmark", "--cipher", "aes-xts-plain64", "--sec", "0.001"}
		}, devCells(noDev, noDev, noDev, noDev, na("cryptsetup benchmark takes no --type"), noKey, noKey, noKey, ok(1))},
	}
}

// notes on cells where cryptsetup 2.6.1 does something else, and why.
var matrixNotes = map[string]string{
	"format/empty-key-file":          "cryptsetup 2.6.1 luksFormat sets the empty passphrase from an empty key file and exits 0; blkcrypt refuses (1): an empty key file is almost always a mistake, and the volume would open for anyone",
	"format/truncated-image":         "cryptsetup luksFormat grows a too-small image file to the LUKS2 data offset and exits 0; blkcrypt refuses (1, cryptsetup's code for a device too small) and leaves it as it is",
	"header-restore/truncated-image": "cryptsetup luksHeaderRestore writes the backup over a too-small image file, growing it, and exits 0; blkcrypt refuses (1) and leaves it as it is",
	"header-backup/unknown-type":     "cryptsetup ignores --type for luksHeaderBackup; so do we (the backup is written)",
	"header-restore/unknown-type":    "cryptsetup ignores --type for luksHeaderRestore; so do we (restoring the image's own backup changes no byte)",
}

// runCtx is run with a deadline (a serve that wrongly starts is stopped).
func runCtx(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, args, &Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

// fileBytes returns a file's contents, nil for a missing file or a
// directory.
func fileBytes(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.EISDIR) {
		t.Fatal(err)
	}
	return b
}

// openTempDir is a temporary directory that every user may enter (the
// t.TempDir parent is private to root), removed when the test ends.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "blkcrypt-matrix")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBadInputMatrix runs every verb against every bad input.
func TestBadInputMatrix(t *testing.T) {
	f := newMatrixFixture(t)
	asUser := unprivilegedRunner(t)
	for _, row := range matrixRows() {
		for bi := badInput(0); bi < numBadInputs; bi++ {
			c := row.cells[bi]
			name := row.verb + "/" + bi.String()
			t.Run(name, func(t *testing.T) {
				if c.na != "" {
					// Legitimate: the table names the reason this verb has no such row.
					t.Skipf("not applicable: %s", c.na)
				}
				// A fresh device for every row.
				dev := filepath.Join(f.dir, "dev.img")
				if err := os.WriteFile(dev, fileBytes(t, f.good), 0o644); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(dev)
				os.Remove(filepath.Join(f.dir, "new.bak"))
				key := f.pass
				var extra []string
				runAs := func(args ...string) (int, string, string) { return runCtx(t, 20*time.Second, args...) }
				switch bi {
				case biMissingDevice:
					dev = filepath.Join(f.dir, "no-such-device")
				case biDirectory:
					dev = f.dir
				case biNoPermission:
					if err := os.Chmod(dev, 0); err != nil {
						t.Fatal(err)
					}
					if os.Geteuid() == 0 {
						// root ignores file modes: run the command as nobody.
						if asUser == nil {
							t.Skip("running as root and cannot re-run the command as an unprivileged user")
						}
						runAs = func(args ...string) (int, string, string) { return asUser(t, args...) }
					}
				case biTruncated:
					if err := os.WriteFile(dev, fileBytes(t, f.truncated), 0o644); err != nil {
						t.Fatal(err)
					}
				case biUnknownType:
					extra = []string{"--type", "luks3"}
				case biWrongPassphrase:
					key = f.wrong
				case biEmptyKeyFile:
					key = f.empty
				case biShortKeyFile:
					extra = []string{"--keyfile-size", "100"}
				case biConflictingFlags:
					extra = conflicting
				}
				before := fileBytes(t, dev)
				args := append(row.args(f, dev, key), extra...)
				code, stdout, stderr := runAs(args...)
				t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
				if note, ok := matrixNotes[name]; ok {
					t.Logf("note: %s", note)
				}
				if code != c.code {
					t.Errorf("%v: exit %d, want %d; stderr %q", args, code, c.code, stderr)
				}
				if c.code != 0 {
					if !strings.HasPrefix(stderr, "blkcrypt: ") || strings.Count(stderr, "\n") != 1 || len(stderr) < len("blkcrypt: x\n") {
						t.Errorf("stderr %q is not one \"blkcrypt: ...\" line", stderr)
					} else if !badInputSays[bi].MatchString(stderr) {
						t.Errorf("stderr %q does not name the problem (want %q)", stderr, badInputSays[bi])
					}
					if stdout != "" {
						t.Errorf("a refused command printed %d bytes: %q", len(stdout), stdout[:min(len(stdout), 80)])
					}
					if _, err := os.Stat(filepath.Join(f.dir, "new.bak")); err == nil {
						t.Error("a refused header-backup wrote a backup file")
					}
				}
				if !bytes.Equal(fileBytes(t, dev), before) {
					t.Errorf("%v changed the device", args)
				}
			})
		}
	}
}

// unprivilegedRunner returns a function that runs blkcrypt's Main in a
// child process (this test binary, copied where everyone may execute it)
// as user and group 65534, or nil when that is impossible.
func unprivilegedRunner(t *testing.T) func(t *testing.T, args ...string) (int, string, string) {
	if os.Geteuid() != 0 {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	bin := filepath.Join(openTempDir(t), "cli.test")
	in, err := os.Open(self)
	if err != nil {
		return nil
	}
	defer in.Close()
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return nil
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return nil
	}
	out.Close()
	return func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		enc, _ := json.Marshal(args)
		cmd := exec.Command(bin, "-test.run=^TestCLIChildProcess$")
		cmd.Env = append(os.Environ(), "BLKCRYPT_CLI_CHILD="+string(enc))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, o.String(), e.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), o.String(), e.String()
		}
		// Root without CAP_SETUID (a restricted container): the row cannot
		// be run, which is not a failure of blkcrypt.
		t.Skipf("cannot run the command as user 65534: %v", err)
		return -1, "", ""
	}
}

// TestCLIChildProcess is the child side of unprivilegedRunner: with
// BLKCRYPT_CLI_CHILD set it runs Main on the JSON argument list and exits
// with its code; otherwise it does nothing.
func TestCLIChildProcess(t *testing.T) {
	enc := os.Getenv("BLKCRYPT_CLI_CHILD")
	if enc == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(99)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	os.Exit(Main(ctx, args, &Env{Stdin: bytes.NewReader(nil), Stdout: os.Stdout, Stderr: os.Stderr}))
}
