package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var tokenLine = regexp.MustCompile(`^  (\d+): (\S+)$`)

// tokenSection returns the "  N: type" lines under "Tokens:" in a dump.
func tokenSection(dump string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(dump, "\n") {
		switch {
		case l == "Tokens:":
			in = true
		case in && tokenLine.MatchString(l):
			out = append(out, l)
		case in && l != "" && !strings.HasPrefix(l, "\t"):
			in = false
		}
	}
	return out
}

// TestDumpTokensSortedLikeCryptsetup: tokens imported out of order are
// listed by id, as cryptsetup's luksDump lists them, on every run (Go's
// map order would differ between runs).
func TestDumpTokensSortedLikeCryptsetup(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	pass := writeFile(t, dir, "pass", []byte("tokens"))
	if out, err := cryptsetup(t, "luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v\n%s", err, out)
	}
	for _, id := range []string{"17", "3", "31", "0", "9", "12", "1"} {
		tok := writeFile(t, dir, "tok"+id, []byte(`{"type":"t`+id+`","keyslots":[]}`))
		if out, err := cryptsetup(t, "token", "import", "--token-id", id, "--json-file", tok, img); err != nil {
			t.Fatalf("cryptsetup token import %s: %v\n%s", id, err, out)
		}
	}
	out, err := cryptsetup(t, "luksDump", img)
	if err != nil {
		t.Fatalf("cryptsetup luksDump: %v\n%s", err, out)
	}
	want := tokenSection(out)
	if len(want) != 7 {
		t.Fatalf("cryptsetup lists %d tokens, want 7:\n%s", len(want), out)
	}
	for i := 0; i < 5; i++ {
		code, ours, e := run(t, nil, "dump", img)
		if code != 0 {
			t.Fatalf("dump: exit %d: %s", code, e)
		}
		if got := tokenSection(ours); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("run %d: tokens listed as\n%s\nwant (cryptsetup)\n%s", i, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
