package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMain records which options each verb reads while the package's
// tests run, and fails the run if a verb read one it does not declare in
// verbOptions: help, the man page and the completions would not show it.
func TestMain(m *testing.M) {
	flagUse.Lock()
	flagUse.seen = map[[2]string]bool{}
	flagUse.Unlock()
	code := m.Run()
	if bad := undeclaredFlags(); len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: verbs read options they do not declare in verbOptions (internal/cli/options.go):\n  %s\n", strings.Join(bad, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// TestOptionsTable: every verb declares its options, every declared option
// is a flag, and no declaration names a verb that does not exist.
func TestOptionsTable(t *testing.T) {
	verbs := map[string]bool{}
	for _, v := range allVerbs() {
		verbs[v.name] = true
		if _, ok := verbOptions[v.name]; !ok {
			t.Errorf("verb %s declares no options in verbOptions", v.name)
		}
		seen := map[string]bool{}
		for _, op := range verbOpts(v.name) {
			if _, ok := flagByName(op.name); !ok {
				t.Errorf("verb %s declares --%s, which is no flag", v.name, op.name)
			}
			if seen[op.name] {
				t.Errorf("verb %s declares --%s twice", v.name, op.name)
			}
			seen[op.name] = true
		}
	}
	for name := range verbOptions {
		if !verbs[name] {
			t.Errorf("verbOptions has %s, which is no verb", name)
		}
	}
}

// TestVerbHelp: `blkcrypt VERB --help` exits 0 and lists every option of
// the verb, with the verb's default where it has one; the aliases too.
func TestVerbHelp(t *testing.T) {
	for _, v := range allVerbs() {
		code, out, errs := run(t, nil, v.name, "--help")
		if code != 0 || errs != "" {
			t.Errorf("%s --help: exit %d, stderr %q", v.name, code, errs)
			continue
		}
		if !strings.HasPrefix(out, "Usage: blkcrypt "+v.name+" ") {
			t.Errorf("%s --help starts %q", v.name, out[:min(len(out), 60)])
		}
		_, optsPart, _ := strings.Cut(out, "\nOptions:\n")
		optsPart, _, _ = strings.Cut(optsPart, "\n\n")
		lines := strings.Split(optsPart, "\n")
		for _, op := range verbOpts(v.name) {
			found := false
			for _, l := range lines {
				f := strings.Fields(l)
				if len(f) > 0 && (f[0] == "--"+op.name || len(f) > 1 && f[1] == "--"+op.name) {
					found = true
					if op.def != "" && !strings.Contains(l, "(default: "+op.def+")") {
						t.Errorf("%s --help: --%s line %q lacks its default %q", v.name, op.name, l, op.def)
					}
				}
			}
			if !found {
				t.Errorf("%s --help does not list --%s", v.name, op.name)
			}
		}
		for _, a := range v.aliases {
			if !strings.Contains(out, a) {
				t.Errorf("%s --help does not name its alias %s", v.name, a)
			}
			// The alias gives the same help.
			if _, aout, _ := run(t, nil, a, "--help"); aout != out {
				t.Errorf("%s --help differs from %s --help", a, v.name)
			}
		}
	}
}

// TestTopHelp: `blkcrypt --help` lists every verb and every alias.
func TestTopHelp(t *testing.T) {
	code, out, _ := run(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, v := range allVerbs() {
		if !strings.Contains(out, "\n  "+v.name+" ") {
			t.Errorf("--help does not list %s", v.name)
		}
		for _, a := range v.aliases {
			if !strings.Contains(out, a) {
				t.Errorf("--help does not list the alias %s", a)
			}
		}
	}
	if code, _, _ := run(t, nil); code != ExitUsage {
		t.Errorf("no arguments: exit %d, want %d", code, ExitUsage)
	}
}
