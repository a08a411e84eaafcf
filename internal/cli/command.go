package cli

// The typed verb framework. A verb is one function over one options
// struct:
//
//	type fooOptions struct {
//		Cipher  string  `flag:"cipher" short:"c" help:"cipher specification" def:"aes-xts-plain64"`
//		KeySlot *int64  `flag:"key-slot" short:"S" help:"key slot number" def:"every slot"`
//		Size    *byteSize `flag:"device-size" help:"data size in bytes"`
//		keyFileFlags       // a shared group: --key-file, --keyfile-offset, --keyfile-size
//		batchFlag          // -q, when the verb asks for confirmation
//	}
//
//	func runFoo(ctx context.Context, env *Env, o *fooOptions, args []string) error
//
// and one line in the verb table (verbTable in cli.go, a function so that
// a verb may call Main without an initialization cycle):
//
//	typed("foo", []string{"luksFoo"}, "DEVICE — what it does", runFoo),
//
// Main parses the command line once into a new fooOptions, before runFoo
// runs; help, the man page and the shell completions are made from the
// struct. The tags: flag is the long name, short the one-letter name,
// help the text, def the default help shows ("" when none is worth
// showing). The value kind follows the field's type: bool, string, int64,
// float64, []string (repeatable), byteSize (a byte count with
// cryptsetup's units); a pointer (*int64, *string, *byteSize) is nil when
// the flag was not given. A field without a flag tag whose type is a
// struct is a group: its flags are the verb's, and its def tag may change
// the defaults help shows for this verb ("key-file=not asked|keyfile-size=all").
// TestOptionsUsed checks that every flag a verb's struct declares is read
// somewhere in the package. Flags a verb does not declare are accepted and
// ignored, as cryptsetup ignores most options an action does not use.

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// byteSize is a flag value counted in bytes, given with cryptsetup's units
// (parseSize): 64M, 1GiB, 2048S.
type byteSize int64

// batchFlag is -q: no confirmation questions, no progress lines.
type batchFlag struct {
	Batch bool `flag:"batch-mode" short:"q" help:"do not ask for confirmation"`
}

// verboseFlag is cryptsetup's -v for the verbs that print a success line.
type verboseFlag struct {
	Verbose bool `flag:"verbose" short:"v" help:"print cryptsetup's success messages"`
}

// globalSpecs are the flags every verb takes, whether its struct declares
// them or not (batch-mode is read by the structs that embed batchFlag).
var globalSpecs = []flagSpec{
	{name: "batch-mode", short: 'q', kind: kindBool, help: "do not ask for confirmation"},
	{name: "help", kind: kindBool, help: "show help"},
}

// flagSpec is one flag as a verb declares it.
type flagSpec struct {
	name  string
	short byte
	kind  flagKind
	help  string
	def   string
	index []int // the field in the options struct
}

// command is one verb of the table: its options struct and its run.
type command struct {
	name    string
	aliases []string
	help    string // "ARGS — description"
	options reflect.Type
	run     func(ctx context.Context, env *Env, opts any, args []string) error
}

// typed makes a verb of run over its options struct T.
func typed[T any](name string, aliases []string, help string, run func(context.Context, *Env, *T, []string) error) command {
	return command{name: name, aliases: aliases, help: help, options: reflect.TypeFor[T](),
		run: func(ctx context.Context, env *Env, o any, args []string) error { return run(ctx, env, o.(*T), args) }}
}

// specsOf lists the flags of an options struct type, groups included.
func specsOf(t reflect.Type) []flagSpec {
	var out []flagSpec
	var walk func(t reflect.Type, index []int, defs map[string]string)
	walk = func(t reflect.Type, index []int, defs map[string]string) {
		for i := range t.NumField() {
			f := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			name := f.Tag.Get("flag")
			if name == "" {
				if f.Type.Kind() == reflect.Struct {
					sub := map[string]string{}
					for k, v := range defs {
						sub[k] = v
					}
					for _, kv := range strings.Split(f.Tag.Get("def"), "|") {
						if k, v, ok := strings.Cut(kv, "="); ok {
							if _, outer := defs[k]; !outer {
								sub[k] = v
							}
						}
					}
					walk(f.Type, idx, sub)
				}
				continue
			}
			s := flagSpec{name: name, kind: flagKindOf(f.Type), help: f.Tag.Get("help"), def: f.Tag.Get("def"), index: idx}
			if d, ok := defs[name]; ok {
				s.def = d
			}
			if sh := f.Tag.Get("short"); sh != "" {
				s.short = sh[0]
			}
			out = append(out, s)
		}
	}
	walk(t, nil, nil)
	return out
}

// flagKindOf is the flag kind a field type stands for.
func flagKindOf(t reflect.Type) flagKind {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[byteSize]():
		return kindBytes
	case t.Kind() == reflect.Bool:
		return kindBool
	case t.Kind() == reflect.String:
		return kindString
	case t.Kind() == reflect.Int64 || t.Kind() == reflect.Int:
		return kindInt
	case t.Kind() == reflect.Float64:
		return kindFloat
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return kindList
	}
	panic(fmt.Sprintf("cli: options field of type %s is no flag kind", t)) // a programming error TestOptionsTable finds
}

// fillOptions sets the fields of *opts (an options struct or a group)
// from a parsed command line: the flags given, checked by parseArgs.
func fillOptions(opts any, p *commandLine) error {
	v := reflect.ValueOf(opts).Elem()
	for _, s := range specsOf(v.Type()) {
		raw, given := p.set[s.name]
		if !given {
			continue
		}
		f := v.FieldByIndex(s.index)
		if f.Kind() == reflect.Pointer {
			f.Set(reflect.New(f.Type().Elem()))
			f = f.Elem()
		}
		switch s.kind {
		case kindBool:
			f.SetBool(raw == "true")
		case kindString:
			f.SetString(raw)
		case kindInt, kindBytes:
			n, err := strconv.ParseInt(raw, 0, 64)
			if err != nil {
				return fmt.Errorf("option --%s: %q is not a whole number", s.name, raw)
			}
			f.SetInt(n)
		case kindFloat:
			x, err := strconv.ParseFloat(raw, 64)
			if err != nil {
				return fmt.Errorf("option --%s: %q is not a number", s.name, raw)
			}
			f.SetFloat(x)
		case kindList:
			f.Set(reflect.ValueOf(append([]string(nil), p.lists[s.name]...)))
		}
	}
	return nil
}

// specs is every flag c takes: its own, then the global ones it does not
// declare itself.
func (c command) specs() []flagSpec {
	out := specsOf(c.options)
	for _, g := range globalSpecs {
		if !hasSpec(out, g.name) {
			out = append(out, g)
		}
	}
	return out
}

func hasSpec(specs []flagSpec, name string) bool {
	for _, s := range specs {
		if s.name == name {
			return true
		}
	}
	return false
}

// lookupCommand finds a verb by its name or an alias (any case).
func lookupCommand(name string) (command, bool) {
	for _, c := range allCommands() {
		if c.name == name {
			return c, true
		}
		for _, a := range c.aliases {
			if strings.EqualFold(a, name) {
				return c, true
			}
		}
	}
	return command{}, false
}

// allCommands is the verb table.
func allCommands() []command { return verbTable() }

// call runs the verb on its command line with its options struct, filled
// here once.
func (c command) call(ctx context.Context, env *Env, p *commandLine) error {
	opts := reflect.New(c.options).Interface()
	if err := fillOptions(opts, p); err != nil {
		return &exitError{ExitUsage, err}
	}
	return c.run(ctx, env, opts, p.args)
}
