package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// flagKind is the value type of a command-line flag.
type flagKind int

const (
	kindBool flagKind = iota
	kindString
	kindInt
	kindFloat
	kindList // a string that may be given many times ([]string)
	// kindBytes is a byte size with cryptsetup's unit suffixes (parseSize);
	// the parser stores it as a plain number of bytes.
	kindBytes
)

// commandLine is one command line as parseArgs reads it: the flags given
// (each value checked against its kind), before Main fills the verb's
// options struct from them, and the positional arguments.
type commandLine struct {
	set   map[string]string
	lists map[string][]string // every value of a kindList flag, in order
	args  []string
}

// knownFlags is every flag some verb takes: the first declaration of each
// name in the verb table, then the global ones.
func knownFlags() []flagSpec {
	var out []flagSpec
	seen := map[string]bool{}
	for _, c := range allCommands() {
		for _, s := range c.specs() {
			if !seen[s.name] {
				seen[s.name] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// findFlag is the flag a verb's command line names: the verb's own
// declaration, else any other flag blkcrypt knows (accepted and ignored,
// as cryptsetup accepts most options for any action).
func findFlag(specs []flagSpec, long string, short byte) (flagSpec, bool) {
	for _, list := range [][]flagSpec{specs, knownFlags()} {
		for _, s := range list {
			if long != "" && s.name == long || short != 0 && s.short == short {
				return s, true
			}
		}
	}
	return flagSpec{}, false
}

// parseArgs parses flags anywhere among the positional arguments, as
// cryptsetup does: --name=value, --name value, -x value, and -- to stop.
// Each value is checked against the kind verb declares for it.
func parseArgs(verb string, argv []string) (*commandLine, error) {
	var specs []flagSpec
	if c, ok := lookupCommand(verb); ok {
		specs = c.specs()
	}
	p := &commandLine{set: map[string]string{}}
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			p.args = append(p.args, argv[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			p.args = append(p.args, a)
			continue
		}
		var d flagSpec
		var ok bool
		var val string
		hasVal := false
		if strings.HasPrefix(a, "--") {
			name := a[2:]
			if n, v, found := strings.Cut(name, "="); found {
				name, val, hasVal = n, v, true
			}
			if d, ok = findFlag(specs, name, 0); !ok {
				return nil, fmt.Errorf("unknown option --%s", name)
			}
		} else {
			if len(a) > 2 {
				val, hasVal = a[2:], true
			}
			if d, ok = findFlag(specs, "", a[1]); !ok {
				return nil, fmt.Errorf("unknown option %s", a[:2])
			}
		}
		if d.kind == kindBool {
			if hasVal {
				return nil, fmt.Errorf("option --%s takes no value", d.name)
			}
			p.set[d.name] = "true"
			continue
		}
		if !hasVal {
			if i+1 >= len(argv) {
				return nil, fmt.Errorf("option --%s needs a value", d.name)
			}
			i++
			val = argv[i]
		}
		switch d.kind {
		case kindBytes:
			n, err := parseSize(val)
			if err != nil {
				return nil, fmt.Errorf("option --%s: %w", d.name, err)
			}
			val = strconv.FormatUint(n, 10)
		case kindInt:
			if _, err := strconv.ParseInt(val, 0, 64); err != nil {
				return nil, fmt.Errorf("option --%s: %q is not a whole number", d.name, val)
			}
		case kindFloat:
			if f, err := strconv.ParseFloat(val, 64); err != nil || f < 0 {
				return nil, fmt.Errorf("option --%s: %q is not a non-negative number", d.name, val)
			}
		case kindList:
			if p.lists == nil {
				p.lists = map[string][]string{}
			}
			p.lists[d.name] = append(p.lists[d.name], val)
		}
		p.set[d.name] = val
	}
	if err := checkStackFlags(verb, specs, p); err != nil {
		return nil, err
	}
	// As cryptsetup, whatever the action.
	if _, a := p.set["pbkdf-force-iterations"]; a {
		if _, b := p.set["iter-time"]; b {
			return nil, fmt.Errorf("PBKDF forced iterations cannot be combined with iteration time option")
		}
	}
	return p, nil
}
