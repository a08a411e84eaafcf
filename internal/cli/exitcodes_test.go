package cli

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestExitCodeTable: every exported error of the root package has its row
// in errorExitCodes, and a wrapped error maps as the bare one.
func TestExitCodeTable(t *testing.T) {
	root := testenv.ModuleRoot(t)
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, root, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for _, e := range errorExitCodes {
		inTable[e.name] = true
		if got := exitCode(fmt.Errorf("doing a thing: %w", e.err)); got != e.code {
			t.Errorf("wrapped %s: exit %d, want %d", e.name, got, e.code)
		}
	}
	n := 0
	for _, f := range pkgs["blkcrypt"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, id := range s.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") && id.IsExported() {
						n++
						if !inTable[id.Name] {
							t.Errorf("blkcrypt.%s has no exit code in errorExitCodes (internal/cli/cli.go)", id.Name)
						}
					}
				}
			}
		}
	}
	if n < 8 {
		t.Fatalf("found only %d exported errors in the root package", n)
	}
	if got := exitCode(errors.New("anything else")); got != ExitUsage {
		t.Errorf("an unknown error: exit %d, want 1", got)
	}
	if got := exitCode(&exitError{ExitBusy, fmt.Errorf("x: %w", syscall.ENOENT)}); got != ExitBusy {
		t.Errorf("a verb's own code: exit %d, want 5", got)
	}
}

// cryptsetupArgs is cryptsetup's spelling of a matrix row's command: the
// verb's cryptsetup name, with blkcrypt-only options left out. nil: the
// verb has no cryptsetup twin.
func cryptsetupArgs(args []string) []string {
	names := map[string][]string{
		"format": {"luksFormat"}, "dump": {"luksDump"}, "test-passphrase": {"open", "--test-passphrase"},
		"add-key": {"luksAddKey"}, "change-key": {"luksChangeKey"}, "remove-key": {"luksRemoveKey"},
		"kill-slot": {"luksKillSlot"}, "header-backup": {"luksHeaderBackup"}, "header-restore": {"luksHeaderRestore"},
		"benchmark": {"benchmark"},
	}
	verb, ok := names[args[0]]
	if !ok {
		return nil
	}
	out := append([]string(nil), verb...)
	for i := 1; i < len(args); i++ {
		if args[i] == "--sec" { // blkcrypt's benchmark time
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestExitCodesMatchCryptsetup: for every verb both tools have, cryptsetup
// 2.6.1 and blkcrypt run on the same bad input (the cells of
// TestBadInputMatrix) and exit with the same code, except where
// matrixNotes says why blkcrypt differs.
func TestExitCodesMatchCryptsetup(t *testing.T) {
	testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	f := newMatrixFixture(t)
	asUser := unprivilegedRunner(t)
	compared := 0
	for _, row := range matrixRows() {
		for bi := badInput(0); bi < numBadInputs; bi++ {
			c := row.cells[bi]
			name := row.verb + "/" + bi.String()
			if c.na != "" || cryptsetupArgs(row.args(f, "DEV", "KEY")) == nil {
				continue // not applicable, or no cryptsetup twin (read, write, serve, speed)
			}
			t.Run(name, func(t *testing.T) {
				dev := filepath.Join(f.dir, "dev.img")
				key := f.pass
				var extra []string
				asNobody := false
				switch bi {
				case biMissingDevice:
					dev = filepath.Join(f.dir, "no-such-device")
				case biDirectory:
					dev = f.dir
				case biNoPermission:
					asNobody = os.Geteuid() == 0
					if asNobody && asUser == nil {
						t.Skip("running as root and cannot re-run the command as an unprivileged user")
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
				// A fresh device for each tool, and a fresh backup path.
				fresh := func() {
					os.Remove(filepath.Join(f.dir, "new.bak"))
					if bi == biMissingDevice || bi == biDirectory {
						return
					}
					src := f.good
					if bi == biTruncated {
						src = f.truncated
					}
					if err := os.WriteFile(dev, fileBytes(t, src), 0o644); err != nil {
						t.Fatal(err)
					}
					if bi == biNoPermission {
						os.Chmod(dev, 0)
					}
				}
				defer os.Remove(dev)
				args := append(row.args(f, dev, key), extra...)
				fresh()
				var ours int
				if asNobody {
					ours, _, _ = asUser(t, args...)
				} else {
					ours, _, _ = runCtx(t, 20*time.Second, args...)
				}
				fresh()
				theirs, out := runCryptsetup(t, asNobody, cryptsetupArgs(args))
				compared++
				if ours != theirs {
					if note, ok := matrixNotes[name]; ok {
						t.Logf("blkcrypt %d, cryptsetup %d: %s", ours, theirs, note)
						return
					}
					t.Errorf("%v: blkcrypt exits %d, cryptsetup %d (%s)", args, ours, theirs, strings.TrimSpace(out))
				}
			})
		}
	}
	if compared < 40 {
		t.Errorf("only %d cells compared", compared)
	}
}

// runCryptsetup runs cryptsetup with no terminal (as the matrix runs
// blkcrypt), as user 65534 when asked, and returns its exit code.
func runCryptsetup(t *testing.T, asNobody bool, args []string) (int, string) {
	t.Helper()
	cmd := exec.Command("cryptsetup", args...)
	cmd.Stdin = bytes.NewReader(nil)
	if asNobody {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("cryptsetup %v: %v", args, err)
	return -1, ""
}
