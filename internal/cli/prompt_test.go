package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runTTY runs blkcrypt in-process as if stdin were a terminal that types
// answer.
func runTTY(t *testing.T, answer string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(answer), Stdout: &out, Stderr: &errb, StdinIsTerminal: true}
	code := Main(context.Background(), args, env)
	return code, out.String(), errb.String()
}

// TestConfirmDestructive: on a terminal, each destructive verb asks as
// cryptsetup 2.6.1 asks, changes nothing unless the answer is YES, and
// exits with cryptsetup's code for the refusal; -q and a stdin that is
// no terminal do not ask.
func TestConfirmDestructive(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", []byte("confirm me"))
	pass2 := writeFile(t, dir, "pass2", []byte("second one"))
	img := filepath.Join(dir, "c.img")
	mk := func() {
		os.Remove(img)
		if code, _, e := run(t, nil, append([]string{"format", img, "--size", "17M", "--key-file", pass}, fastKDF...)...); code != 0 {
			t.Fatalf("format: %s", e)
		}
	}
	mk()
	bak := filepath.Join(dir, "c.bak")
	cases := []struct {
		name    string
		args    []string
		warning string
		code    int
		aborted string
	}{
		{"format", append([]string{"format", img, "--key-file", pass}, fastKDF...), "This will overwrite data on " + img + " irrevocably.", 1, "operation aborted"},
		{"kill-slot", []string{"kill-slot", img, "0"}, lastKeyslotWarning, 2, "operation aborted, the keyslot was not wiped"},
		{"remove-key", []string{"remove-key", img, "--key-file", pass}, lastKeyslotWarning, 2, "operation aborted, the keyslot was not wiped"},
		{"header-restore", []string{"header-restore", img, "--header-backup-file", bak},
			"Device " + img + " already contains LUKS2 header. Replacing header will destroy existing keyslots.", 1, "operation aborted"},
	}
	for _, c := range cases {
		if c.name == "header-restore" {
			os.Remove(bak)
			if code, _, e := run(t, nil, "header-backup", img, "--header-backup-file", bak); code != 0 {
				t.Fatalf("header-backup: %s", e)
			}
		}
		want := "\nWARNING!\n========\n" + c.warning + "\n\nAre you sure? (Type 'yes' in capital letters): "
		for _, answer := range []string{"no\n", "yes\n", "YES \n", ""} {
			before := fileSum(t, img)
			code, out, errs := runTTY(t, answer, c.args...)
			aborted := c.aborted
			if answer == "" {
				aborted = "error reading response from terminal"
			}
			if code != c.code || out != want || !strings.Contains(errs, aborted) {
				t.Errorf("%s answering %q: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.name, answer, code, out, errs, c.code, want, c.aborted)
			}
			if fileSum(t, img) != before {
				t.Errorf("%s answering %q changed the image", c.name, answer)
			}
		}
		code, out, errs := runTTY(t, "YES\n", c.args...)
		if code != 0 || out != want {
			t.Errorf("%s answering YES: exit %d, stdout %q, stderr %q", c.name, code, out, errs)
		}
		mk()
		if c.name == "header-restore" {
			continue
		}
		// Not asked: -q, or stdin not a terminal.
		if code, out, errs := runTTY(t, "", append(c.args, "-q")...); code != 0 || out != "" {
			t.Errorf("%s -q: exit %d, stdout %q, stderr %q", c.name, code, out, errs)
		}
		mk()
		if code, out, errs := run(t, nil, c.args...); code != 0 || out != "" {
			t.Errorf("%s with stdin no terminal: exit %d, stdout %q, stderr %q", c.name, code, out, errs)
		}
		mk()
	}
	// Not the last keyslot, or a new image: nothing to ask.
	if code, _, e := run(t, nil, append([]string{"add-key", img, pass2, "--key-file", pass}, fastKDF...)...); code != 0 {
		t.Fatalf("add-key: %s", e)
	}
	if code, out, errs := runTTY(t, "", "kill-slot", img, "1"); code != 0 || out != "" {
		t.Errorf("kill-slot of one of two slots: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// A backup of another volume: the warning says the UUIDs differ.
	code, out, _ := runTTY(t, "no\n", "header-restore", img, "--header-backup-file", bak)
	if code != 1 || !strings.Contains(out, "\nWARNING: real device header has different UUID than backup!\n") {
		t.Errorf("header-restore of another volume's backup: exit %d, stdout %q", code, out)
	}
	fresh := filepath.Join(dir, "fresh.img")
	if code, out, errs := runTTY(t, "", append([]string{"format", fresh, "--size", "17M", "--key-file", pass}, fastKDF...)...); code != 0 || out != "" {
		t.Errorf("format of a new image: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
