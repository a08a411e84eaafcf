package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Help, the man page and the completions all read the verbs' options
// structs, so what one says the others say.

// synopsis splits a verb's help into its arguments and its description
// ("DEVICE — create a volume").
func synopsis(c command) (args, desc string) {
	if a, d, ok := strings.Cut(c.help, " — "); ok {
		return a, d
	}
	return "", c.help
}

// metavar is how help names an option's value.
func metavar(k flagKind) string {
	switch k {
	case kindInt:
		return "NUM"
	case kindFloat:
		return "SECONDS"
	case kindBytes:
		return "BYTES"
	case kindString:
		return "STRING"
	}
	return ""
}

// optLine is one option of a verb as help, the man page and completions
// show it.
type optLine struct {
	short      byte
	long, arg  string
	help, def  string
	kind       flagKind
	takesValue bool
}

func (l optLine) spelling() string {
	s := "--" + l.long
	if l.short != 0 {
		s = "-" + string(l.short) + ", " + s
	}
	if l.arg != "" {
		s += " " + l.arg
	}
	return s
}

// optLines is every option verb takes, sorted by name, with the verb's own
// default and help.
func optLines(verb string) []optLine {
	c, _ := lookupCommand(verb)
	var out []optLine
	for _, sp := range c.specs() {
		l := optLine{long: sp.name, help: sp.help, def: sp.def, kind: sp.kind, takesValue: sp.kind != kindBool, arg: metavar(sp.kind)}
		// A short letter another declaration of the verb takes first is
		// not shown (-i: --input for write, --iter-time elsewhere).
		if sp.short != 0 {
			if got, _ := findFlag(c.specs(), "", sp.short); got.name == sp.name {
				l.short = sp.short
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].long < out[j].long })
	return out
}

// verbHelp prints `blkcrypt VERB --help`.
func verbHelp(w io.Writer, v command) {
	args, desc := synopsis(v)
	fmt.Fprintf(w, "Usage: blkcrypt %s %s[options]\n\n%s.\n", v.name, withSpace(args), capitalize(desc))
	if len(v.aliases) > 0 {
		fmt.Fprintf(w, "Also: %s.\n", strings.Join(v.aliases, ", "))
	}
	fmt.Fprintln(w, "\nOptions:")
	lines := optLines(v.name)
	width := 0
	for _, l := range lines {
		width = max(width, len(l.spelling()))
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s", width, l.spelling(), l.help)
		if l.def != "" {
			fmt.Fprintf(w, " (default: %s)", l.def)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nByte sizes take K, M, G, T, P or E (1024-based; KiB, MiB, … too; KB, MB, … are 1000-based); sector counts are plain numbers of 512-byte sectors.\n")
	fmt.Fprintf(w, "Exit codes: %s.\n", exitCodeSummary)
}

const exitCodeSummary = "0 ok, 1 wrong parameters, 2 no permission (bad passphrase), 3 out of memory, 4 wrong device, 5 busy"

func withSpace(s string) string {
	if s == "" {
		return ""
	}
	return s + " "
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// sortedVerbs is every verb by name.
func sortedVerbs() []command {
	vs := allCommands()
	sort.Slice(vs, func(i, j int) bool { return vs[i].name < vs[j].name })
	return vs
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: blkcrypt ACTION [DEVICE] [options]    (blkcrypt ACTION --help lists its options)")
	fmt.Fprintln(w, "\nActions:")
	for _, v := range sortedVerbs() {
		al := ""
		if len(v.aliases) > 0 {
			al = " (also " + strings.Join(v.aliases, ", ") + ")"
		}
		fmt.Fprintf(w, "  %-16s %s%s\n", v.name, v.help, al)
	}
	fmt.Fprintln(w, "  open --test-passphrase  cryptsetup's spelling of test-passphrase")
	fmt.Fprintf(w, "\nExit codes: %s.\n", exitCodeSummary)
}
