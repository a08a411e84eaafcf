package blkcrypt_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestNoInternalTypeInPublicAPI: an outside program can only name what is
// exported from a public package, so no exported signature, field or alias
// of a public package may mention a type of an internal one (go doc shows
// them as "luksutil.X", "volspec.X", ...).
func TestNoInternalTypeInPublicAPI(t *testing.T) {
	goTool := testenv.Need(t, "go", "golang")
	root := testenv.ModuleRoot(t)
	list := exec.Command(goTool, "list", "./...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var internalNames []string
	var public []string
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "/internal/") {
			internalNames = append(internalNames, p[strings.LastIndex(p, "/")+1:])
		} else if !strings.Contains(p, "/cmd/") && !strings.Contains(p, "/test/") && !strings.Contains(p, "/bench/") {
			public = append(public, p)
		}
	}
	// A declaration line that names pkg.Type for an internal pkg.
	use := regexp.MustCompile(`\b(` + strings.Join(internalNames, "|") + `)\.[A-Z]`)
	decl := regexp.MustCompile(`^(func |type |\t[A-Z]\w*[ ,]|    func )`)
	for _, p := range public {
		doc := exec.Command(goTool, "doc", "-all", p)
		doc.Dir = root
		b, err := doc.Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", p, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			// "ErrX = volspec.Sub(...)" is a value, which an outside
			// program uses without naming its package.
			value := !strings.HasPrefix(line, "type ") && strings.Contains(line, " = ")
			if decl.MatchString(line) && !value && use.MatchString(line) {
				t.Errorf("%s: exported declaration names an internal type: %s", p, strings.TrimSpace(line))
			}
		}
	}
}

// TestLayering: data flows down the stack, so no package below the root
// (the formats, sector, capi, nbd, the internal helpers) imports the root
// package, directly or through another; only the CLI, the commands, the
// benchmarks and the test harnesses sit above it.
func TestLayering(t *testing.T) {
	goTool := testenv.Need(t, "go", "golang")
	root := testenv.ModuleRoot(t)
	const mod = "github.com/blkcrypt/blkcrypt"
	list := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	above := regexp.MustCompile(`^` + regexp.QuoteMeta(mod) + `(/cmd/|/internal/cli$|/internal/cli/|/bench/|/test/|$)`)
	// Device packages register their URI schemes with the root when
	// imported (as database/sql drivers do), so they may import it; the
	// root imports none of them.
	drivers := regexp.MustCompile(`^` + regexp.QuoteMeta(mod) + `/(nbd/nbdclient|rbd|token)$`) // token unlocks a *LUKS handle with a TPM (issue #28)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], mod) || above.MatchString(f[0]) {
			if len(f) > 0 && f[0] == mod {
				// The core compiles no network code: an NBD or RBD
				// device is a blank import away (issue #25).
				for _, d := range f[1:] {
					if d == "net" || d == "crypto/tls" || drivers.MatchString(d) {
						t.Errorf("the root package depends on %s", d)
					}
				}
			}
			continue
		}
		if drivers.MatchString(f[0]) {
			checked++
			continue
		}
		checked++
		for _, d := range f[1:] {
			if d == mod {
				t.Errorf("%s imports the root package %s, a layer above it", f[0], mod)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d packages checked: the go list output was not understood", checked)
	}
}

// TestCLIThroughTheLibrary: the CLI maps flags onto library calls, so it
// neither imports internal/luksutil nor asserts a concrete LUKS header type
// (*luks1.Header, *luks2.Header): what it needs of a header the library's
// handle offers (issue #25). Every file is on the handle now: the pending
// list is empty and may not grow; it fails when a file on it no longer
// needs to be there.
func TestCLIThroughTheLibrary(t *testing.T) {
	pending := map[string]bool{}
	dir := filepath.Join(testenv.ModuleRoot(t), "internal", "cli")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	concrete := regexp.MustCompile(`\*luks[12]\.Header\b`)
	checked := 0
	for _, path := range files {
		name := filepath.Base(path)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		checked++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		var why []string
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) == "github.com/blkcrypt/blkcrypt/internal/luksutil" {
				why = append(why, "imports internal/luksutil")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var typ ast.Expr
			switch x := n.(type) {
			case *ast.TypeAssertExpr:
				typ = x.Type
			case *ast.CaseClause:
				for _, e := range x.List {
					if concrete.MatchString(types.ExprString(e)) {
						why = append(why, "switches on "+types.ExprString(e))
					}
				}
			}
			if typ != nil && concrete.MatchString(types.ExprString(typ)) {
				why = append(why, "asserts "+types.ExprString(typ))
			}
			return true
		})
		switch {
		case len(why) > 0 && !pending[name]:
			t.Errorf("internal/cli/%s %s: use the library's LUKS handle", name, strings.Join(why, ", "))
		case len(why) == 0 && pending[name]:
			t.Errorf("internal/cli/%s no longer needs luksutil or a concrete header: take it off the pending list", name)
		}
	}
	if checked < 30 {
		t.Fatalf("only %d files checked in %s", checked, dir)
	}
}
