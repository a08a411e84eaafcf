package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyInputAgainstCryptsetup runs the installed cryptsetup and blkcrypt
// on the same bad key input and --header arguments and compares exit
// codes: an empty key file is a passphrase that opens nothing (2), empty
// stdin or an empty stream is "Nothing to read on input" (1), a header
// that is a directory or missing is the wrong device (4). blkcrypt's one
// line must also name the problem.
func TestKeyInputAgainstCryptsetup(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	if err := os.WriteFile(img, make([]byte, 20<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	key := writeFile(t, dir, "key", []byte("pass"))
	if out, err := cryptsetup(t, "luksFormat", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "-q", img, key); err != nil {
		t.Fatalf("luksFormat: %v %s", err, out)
	}
	empty := writeFile(t, dir, "empty", nil)
	hdrDir := filepath.Join(dir, "hdrdir")
	if err := os.Mkdir(hdrDir, 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-header")
	tp := func(a ...string) []string { return append([]string{"open", "--test-passphrase", img}, a...) }
	for _, c := range []struct {
		name  string
		args  []string
		stdin []byte
		code  int    // cryptsetup 2.6.1's, which blkcrypt must match
		says  string // in blkcrypt's message
	}{
		{"good key file", tp("--key-file", key), nil, 0, ""},
		{"good passphrase on stdin", tp(), []byte("pass\n"), 0, ""},
		{"empty key file", tp("--key-file", empty), nil, 2, "key file " + empty + " is empty"},
		{"empty stdin", tp(), nil, 1, "nothing to read on input"},
		{"empty stdin as --key-file -", tp("--key-file", "-"), nil, 1, "nothing to read on input"},
		{"--key-file /dev/null", tp("--key-file", "/dev/null"), nil, 1, "nothing to read on input"},
		{"newline on stdin (empty passphrase)", tp(), []byte("\n"), 2, "no key available"},
		{"key file offset at its end", tp("--key-file", key, "--keyfile-offset", "4"), nil, 2, "is empty"},
		{"key file offset past its end", tp("--key-file", key, "--keyfile-offset", "5"), nil, 1, "cannot seek to offset 5"},
		{"stdin offset past its end", tp("--keyfile-offset", "2"), []byte("xx"), 1, "nothing to read on input"},
		{"empty key file, --keyfile-size", tp("--key-file", empty, "--keyfile-size", "1"), nil, 1, "shorter than"},
		{"wrong key file", tp("--key-file", empty+"x"), nil, 1, "cannot open key file"},
		{"--header DIR", tp("--header", hdrDir, "--key-file", key), nil, 4, "header " + hdrDir + " is a directory"},
		{"--header missing", tp("--header", missing, "--key-file", key), nil, 4, "header " + missing + " does not exist"},
		{"luksDump --header DIR", []string{"luksDump", img, "--header", hdrDir}, nil, 4, "header " + hdrDir + " is a directory"},
		{"luksDump --header missing", []string{"luksDump", img, "--header", missing}, nil, 4, "header " + missing + " does not exist"},
	} {
		cmd := exec.Command("cryptsetup", c.args...)
		cmd.Stdin = bytes.NewReader(c.stdin)
		csOut, err := cmd.CombinedOutput()
		csCode := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			csCode = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: running cryptsetup: %v", c.name, err)
		}
		if csCode != c.code {
			t.Errorf("%s: cryptsetup exits %d (%s), the table says %d: update the table", c.name, csCode, strings.TrimSpace(string(csOut)), c.code)
		}
		code, _, stderr := run(t, c.stdin, c.args...)
		if code != csCode {
			t.Errorf("%s: blkcrypt exits %d (%s), cryptsetup %d (%s)", c.name, code, strings.TrimSpace(stderr), csCode, strings.TrimSpace(string(csOut)))
		}
		if code != 0 && (!strings.Contains(stderr, c.says) || strings.Count(stderr, "\n") != 1) {
			t.Errorf("%s: stderr %q, want one line with %q", c.name, stderr, c.says)
		}
	}
}

// TestHeaderArgumentNamed: read, write and serve (which detect the type
// from the header) name --header, not DEVICE, when the header is a
// directory or missing, and exit 4 as cryptsetup does for open.
func TestHeaderArgumentNamed(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "data.img", make([]byte, 1<<20))
	key := writeFile(t, dir, "key", []byte("pass"))
	in := writeFile(t, dir, "in", randBytes(512))
	hdrDir := filepath.Join(dir, "hdrdir")
	if err := os.Mkdir(hdrDir, 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-header")
	before := fileBytes(t, img)
	for _, h := range []struct{ path, says string }{{hdrDir, " is a directory"}, {missing, " does not exist"}} {
		for _, args := range [][]string{
			{"read", img, "--key-file", key},
			{"write", img, "-i", in, "--key-file", key},
			{"serve", img, "--key-file", key, "--listen", "unix:" + filepath.Join(dir, "s.sock")},
			{"add-key", img, in, "--key-file", key},
		} {
			code, _, stderr := run(t, nil, append(args, "--header", h.path)...)
			if code != ExitDevice || !strings.Contains(stderr, "header "+h.path+h.says) {
				t.Errorf("%s --header %s: exit %d, %q; want 4 naming the header", args[0], h.path, code, stderr)
			}
		}
	}
	if !bytes.Equal(fileBytes(t, img), before) {
		t.Fatal("the device changed")
	}
	// format creates a missing header, but not over a directory.
	if code, _, stderr := run(t, nil, append([]string{"format", img, "--header", hdrDir, "--key-file", key, "-q"}, fastKDF...)...); code != ExitDevice || !strings.Contains(stderr, "header "+hdrDir+" is a directory") {
		t.Errorf("format --header DIR: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, nil, append([]string{"format", img, "--header", missing, "--key-file", key, "-q"}, fastKDF...)...); code != 0 {
		t.Errorf("format with a new detached header: exit %d, %q", code, stderr)
	}
}

// TestEmptyKeyFileForNewPassphrase: format refuses an empty key file
// (exit 1) rather than set the empty passphrase, where cryptsetup 2.6.1
// formats with it; see docs/security.md.
func TestEmptyKeyFileForNewPassphrase(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	empty := writeFile(t, dir, "empty", nil)
	code, _, stderr := run(t, nil, append([]string{"format", img, "--size", "17825792", "--key-file", empty, "-q"}, fastKDF...)...)
	if code != 1 || !strings.Contains(stderr, "empty passphrase") {
		t.Errorf("format with an empty key file: exit %d, %q; want 1", code, stderr)
	}
}
