package cli

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"path"
	"reflect"
	"strings"
	"testing"
)

// TestOptionsTable: every verb's flags are well formed: a kind for every
// options field, no flag or short letter twice in a verb, help for each.
func TestOptionsTable(t *testing.T) {
	cmds := map[string]command{}
	for _, c := range allCommands() {
		if _, dup := cmds[c.name]; dup {
			t.Errorf("verb %s is listed twice", c.name)
		}
		cmds[c.name] = c
		names, shorts := map[string]bool{}, map[byte]string{}
		for _, s := range c.specs() {
			if names[s.name] {
				t.Errorf("verb %s declares --%s twice", c.name, s.name)
			}
			names[s.name] = true
			if s.short != 0 {
				if other, ok := shorts[s.short]; ok {
					t.Errorf("verb %s: -%c is both --%s and --%s", c.name, s.short, other, s.name)
				}
				shorts[s.short] = s.name
			}
			if s.help == "" {
				t.Errorf("verb %s: --%s has no help", c.name, s.name)
			}
		}
	}
}

// TestOptionsUsed: every flag a typed verb's options struct declares is
// read: the verb selects the field, or selects the group that holds it
// (or calls a method of that group) and the field is read somewhere. A
// flag whose help says it is accepted or ignored for cryptsetup's sake is
// exempt. The package is type-checked from its source alone (imports are
// left empty: only its own types matter here).
func TestOptionsUsed(t *testing.T) {
	bp, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check("cli", fset, files, info)
	used := map[types.Object]bool{}
	for _, obj := range info.Uses {
		used[obj] = true
	}
	for _, c := range allCommands() {
		if c.options == nil {
			continue
		}
		obj := pkg.Scope().Lookup(c.options.Name())
		if obj == nil {
			t.Errorf("verb %s: options type %s not found in the source", c.name, c.options.Name())
			continue
		}
		named := obj.Type()
		for _, s := range specsOf(c.options) {
			if strings.HasPrefix(s.help, "accepted") || strings.HasPrefix(s.help, "ignored") {
				continue
			}
			if !flagRead(named, s.index, info, used) {
				t.Errorf("verb %s declares --%s (%s) but never reads it", c.name, s.name, fieldPath(c.options, s.index))
			}
		}
	}
}

// flagRead reports whether the field at index in struct type named is
// read (see TestOptionsUsed).
func flagRead(named types.Type, index []int, info *types.Info, used map[types.Object]bool) bool {
	field := fieldAt(named, index)
	for _, sel := range info.Selections {
		recv := sel.Recv()
		if p, ok := recv.(*types.Pointer); ok {
			recv = p.Elem()
		}
		if !types.Identical(recv, named) {
			continue
		}
		idx := sel.Index()
		if sel.Kind() == types.MethodVal {
			idx = idx[:len(idx)-1] // the embedded group whose method it is
			if len(idx) == 0 {
				continue
			}
		}
		switch {
		case reflect.DeepEqual(idx, index):
			return true
		case len(idx) < len(index) && reflect.DeepEqual(idx, index[:len(idx)]) && used[field]:
			return true
		}
	}
	return false
}

func fieldAt(t types.Type, index []int) *types.Var {
	var v *types.Var
	for _, i := range index {
		v = t.Underlying().(*types.Struct).Field(i)
		t = v.Type()
	}
	return v
}

func fieldPath(t reflect.Type, index []int) string {
	var names []string
	for _, i := range index {
		f := t.Field(i)
		names = append(names, f.Name)
		t = f.Type
	}
	return strings.Join(names, ".")
}

// emptyImporter gives every import as an empty package.
type emptyImporter struct{}

func (emptyImporter) Import(p string) (*types.Package, error) {
	name := path.Base(p)
	if strings.HasPrefix(name, "v") && strings.Count(p, "/") > 2 { // .../v2
		name = path.Base(path.Dir(p))
	}
	pkg := types.NewPackage(p, name)
	pkg.MarkComplete()
	return pkg, nil
}

// TestVerbHelp: `blkcrypt VERB --help` exits 0 and lists every option of
// the verb, with the verb's default where it has one; the aliases too.
func TestVerbHelp(t *testing.T) {
	for _, v := range allCommands() {
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
		for _, op := range v.specs() {
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
	for _, v := range allCommands() {
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

// TestTypedFlags: a typed verb gets its flags parsed once into its struct,
// before or after the positional arguments, short and long, with byte
// units and repeated values; an undeclared flag is accepted and ignored.
func TestTypedFlags(t *testing.T) {
	p, err := parseArgs("format", []string{"-c", "aes-cbc-essiv:sha256", "img", "--size", "2M", "-S", "3", "--key-file=k", "-q", "--label", "x", "--driver", "d"})
	if err != nil {
		t.Fatal(err)
	}
	var o formatOptions
	if err := fillOptions(&o, p); err != nil {
		t.Fatal(err)
	}
	if o.Cipher != "aes-cbc-essiv:sha256" || o.Size == nil || *o.Size != 2<<20 || o.KeySlot == nil || *o.KeySlot != 3 ||
		o.KeyFile != "k" || !o.Batch || o.Label != "x" || o.Subsystem != "" || o.KeySize != nil || len(p.args) != 1 || p.args[0] != "img" {
		t.Errorf("format options %+v, args %q", o, p.args)
	}
	if _, err := parseArgs("format", []string{"img", "--key-slot", "x"}); err == nil {
		t.Error("--key-slot x accepted")
	}
	if _, err := parseArgs("format", []string{"img", "--no-such-flag"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
	// -i is --iter-time for a typed verb that declares it.
	if p, err = parseArgs("add-key", []string{"img", "-i", "100"}); err != nil || p.set["iter-time"] != "100" {
		t.Errorf("add-key -i 100: %v %v", p, err)
	}
}
