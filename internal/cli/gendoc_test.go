package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestGeneratedDocsInStep: the committed man page and completions are what
// the generator makes from today's options table.
func TestGeneratedDocsInStep(t *testing.T) {
	root := testenv.ModuleRoot(t)
	for p, want := range GeneratedDocs() {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./internal/cli)", p, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output: run go generate ./internal/cli and commit it", p)
		}
	}
}

// TestGeneratedDocsComplete: the man page names every verb, alias and
// option; groff reads it without a warning.
func TestGeneratedDocsComplete(t *testing.T) {
	man := string(manPage())
	for _, v := range allCommands() {
		for _, n := range verbNames(v) {
			if !strings.Contains(man, roff(n)) {
				t.Errorf("man page lacks %s", n)
			}
		}
		for _, l := range optLines(v.name) {
			if !strings.Contains(man, `\fB\-\-`+roff(l.long)+`\fR`) {
				t.Errorf("man page lacks --%s", l.long)
			}
		}
	}
	groff := testenv.Need(t, "groff", "groff-base")
	dir := t.TempDir()
	page := writeFile(t, dir, "blkcrypt.8", manPage())
	out, err := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z", page).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("groff -ww: %v\n%s", err, out)
	}
}

// TestCompletions: each shell reads its script, and bash and fish complete
// an action's options from it as --help lists them.
func TestCompletions(t *testing.T) {
	dir := t.TempDir()
	bashFile := writeFile(t, dir, "blkcrypt.bash", bashCompletion())
	zshFile := writeFile(t, dir, "_blkcrypt", zshCompletion())
	fishFile := writeFile(t, dir, "blkcrypt.fish", fishCompletion())
	bash := testenv.Need(t, "bash", "bash")
	complete := func(words ...string) []string {
		script := "source " + bashFile + "; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
			string(rune('0'+len(words)-1)) + "; _blkcrypt; printf '%s\\n' \"${COMPREPLY[@]}\""
		out, err := exec.Command(bash, "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %v: %v\n%s", words, err, out)
		}
		return strings.Fields(string(out))
	}
	if got := complete("blkcrypt", "luksF"); len(got) != 1 || got[0] != "luksFormat" {
		t.Errorf("bash: blkcrypt luksF<TAB> = %q", got)
	}
	if got := complete("blkcrypt", "format", "--ci"); len(got) != 1 || got[0] != "--cipher" {
		t.Errorf("bash: blkcrypt format --ci<TAB> = %q", got)
	}
	for _, v := range allCommands() {
		got := strings.Join(complete("blkcrypt", v.name, "-"), " ")
		for _, l := range optLines(v.name) {
			if !strings.Contains(" "+got+" ", " --"+l.long+" ") {
				t.Errorf("bash: blkcrypt %s -<TAB> lacks --%s", v.name, l.long)
			}
		}
	}
	zsh := testenv.Need(t, "zsh", "zsh")
	if out, err := exec.Command(zsh, "-n", zshFile).CombinedOutput(); err != nil {
		t.Errorf("zsh -n: %v\n%s", err, out)
	}
	fish := testenv.Need(t, "fish", "fish")
	if out, err := exec.Command(fish, "--no-execute", fishFile).CombinedOutput(); err != nil {
		t.Errorf("fish --no-execute: %v\n%s", err, out)
	}
	out, err := exec.Command(fish, "--no-config", "-c", "source "+fishFile+"; complete -C 'blkcrypt format --ci'").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "--cipher") {
		t.Errorf("fish: blkcrypt format --ci<TAB> = %q (%v)", out, err)
	}
}
