package nbd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// An exports list names the devices a gateway serves, one per line (or
// one per command-line flag):
//
//	NAME=DEVICE,option[=value],...
//
// A blank line or one whose first non-blank character is # is skipped.
// DEVICE may not contain a comma; a value that does is written in double
// quotes (tpm2-device="swtpm:host=H,port=P": systemd's TCTI spelling),
// and a quoted value may not contain a double quote. Which options a line
// may carry, and what they mean, is the caller's (ExportSyntax): the
// blkcrypt command takes its unlock flags (key-file=, type=, read-only,
// partition=, lv=, …). ExportTable keeps a gateway's exports in step with
// such a list, reloaded while it serves.

// OptionKind is the kind of value an export option takes.
type OptionKind int

const (
	OptionString OptionKind = iota // option=text, not empty
	OptionInt                      // option=N (decimal, 0x hex, 0 octal)
	OptionFlag                     // option alone; its value reads "true"
)

// ExportSyntax says what an export line may carry.
type ExportSyntax struct {
	// Options are the option names allowed, with their kinds.
	Options map[string]OptionKind
	// Check, when set, is called with each parsed spec and may refuse it
	// (a required option missing, a value not allowed).
	Check func(ExportSpec) error
}

// ExportSpec is one parsed export line.
type ExportSpec struct {
	Name, Device string
	// Options holds each option given, a flag's as "true".
	Options map[string]string
}

// String is the spec with its options sorted: two specs serve the same
// thing when their Strings are equal.
func (e ExportSpec) String() string {
	keys := make([]string, 0, len(e.Options))
	for k := range e.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(e.Name + "=" + e.Device)
	for _, k := range keys {
		v := e.Options[k]
		if strings.Contains(v, ",") {
			v = `"` + v + `"` // as it was written, and unlike any other options
		}
		b.WriteString("," + k + "=" + v)
	}
	return b.String()
}

// maxExportsSize bounds an exports list: a gateway's list is small, and a
// mistaken path (a disk image) must not be read whole.
const maxExportsSize = 1 << 20

// ParseExport parses one NAME=DEVICE,option[=value],... line.
func ParseExport(s string, syn ExportSyntax) (ExportSpec, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return ExportSpec{}, fmt.Errorf("export %q is not NAME=DEVICE[,option...]", s)
	}
	if name == "" || len(name) > maxStringLen || strings.ContainsAny(name, " \t\r\n,") || !printable(name) {
		return ExportSpec{}, fmt.Errorf("export name %q must be 1 to 4096 printable characters without spaces or commas", name)
	}
	device, opts, hasOpts := strings.Cut(rest, ",")
	e := ExportSpec{Name: name, Device: device, Options: map[string]string{}}
	if e.Device == "" {
		return ExportSpec{}, fmt.Errorf("export %s: no DEVICE", name)
	}
	var fields []optionField
	if hasOpts {
		var err error
		if fields, err = optionFields(opts); err != nil {
			return ExportSpec{}, fmt.Errorf("export %s: %w", name, err)
		}
	}
	for _, f := range fields {
		k, v, hasVal := f.key, f.value, f.hasValue
		kind, known := syn.Options[k]
		switch {
		case !known:
			return ExportSpec{}, fmt.Errorf("export %s: unknown option %q", name, k)
		case kind == OptionFlag && hasVal:
			return ExportSpec{}, fmt.Errorf("export %s: option %s takes no value", name, k)
		case kind != OptionFlag && (!hasVal || v == ""):
			return ExportSpec{}, fmt.Errorf("export %s: option %s needs a value", name, k)
		case kind == OptionInt:
			if _, err := strconv.ParseInt(v, 0, 64); err != nil {
				return ExportSpec{}, fmt.Errorf("export %s: option %s: %q is not a whole number", name, k, v)
			}
		}
		if _, dup := e.Options[k]; dup {
			return ExportSpec{}, fmt.Errorf("export %s: option %s given twice", name, k)
		}
		if kind == OptionFlag {
			v = "true"
		}
		e.Options[k] = v
	}
	if syn.Check != nil {
		if err := syn.Check(e); err != nil {
			return ExportSpec{}, err
		}
	}
	return e, nil
}

// optionField is one option of an export line: key, or key=value.
type optionField struct {
	key, value string
	hasValue   bool
}

// optionFields splits the options of an export line at the commas outside
// double quotes: a value written "…" may hold commas, but no double quote.
func optionFields(s string) ([]optionField, error) {
	var out []optionField
	for {
		var f optionField
		end := strings.IndexAny(s, "=,")
		if end < 0 || s[end] == ',' { // a flag
			if end < 0 {
				return append(out, optionField{key: s}), nil
			}
			out, s = append(out, optionField{key: s[:end]}), s[end+1:]
			continue
		}
		f.key, f.hasValue, s = s[:end], true, s[end+1:]
		if v, ok := strings.CutPrefix(s, `"`); ok {
			q := strings.IndexByte(v, '"')
			if q < 0 {
				return nil, fmt.Errorf("option %s: the value's opening \" is not closed", shownValue(f.key))
			}
			f.value, s = v[:q], v[q+1:]
			if s != "" && s[0] != ',' {
				return nil, fmt.Errorf("option %s: text after the value's closing \"", shownValue(f.key))
			}
		} else if c := strings.IndexByte(s, ','); c >= 0 {
			f.value, s = s[:c], s[c:]
		} else {
			f.value, s = s, ""
		}
		out = append(out, f)
		if s == "" {
			return out, nil
		}
		s = s[1:] // the comma
	}
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// ParseExports reads an exports list (at most 1 MiB) from r; name is how
// errors call it ("exports.conf:3: …").
func ParseExports(r io.Reader, name string, syn ExportSyntax) ([]ExportSpec, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxExportsSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > maxExportsSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxExportsSize)
	}
	var specs []ExportSpec
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxExportsSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := ParseExport(line, syn)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		specs = append(specs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return specs, CheckExportNames(specs)
}

// ReadExportsFile is ParseExports of the file at path.
func ReadExportsFile(path string, syn ExportSyntax) ([]ExportSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseExports(f, path, syn)
}

// CheckExportNames refuses a name defined twice.
func CheckExportNames(specs []ExportSpec) error {
	seen := map[string]bool{}
	for _, e := range specs {
		if seen[e.Name] {
			return fmt.Errorf("export %s is defined twice", e.Name)
		}
		seen[e.Name] = true
	}
	return nil
}

// OpenExportFunc opens the device of one export: the Export to serve
// (Name is set from the spec) and what closes its backend once it is no
// longer served.
type OpenExportFunc func(ctx context.Context, e ExportSpec) (Export, io.Closer, error)

// ExportTable keeps the exports of a gateway (NewGateway) in step with an
// exports list: Apply opens what is new, removes what is gone, and
// reopens what changed, leaving the connections of unchanged exports
// alone. It is not safe for concurrent use.
type ExportTable struct {
	srv    *Server
	open   OpenExportFunc
	logf   func(format string, args ...any)
	served map[string]*tableEntry
}

type tableEntry struct {
	spec   ExportSpec
	closer io.Closer
}

// NewExportTable makes an empty table serving through srv. logf, when
// not nil, is told each export served, removed or refused, one line each.
func NewExportTable(srv *Server, open OpenExportFunc, logf func(format string, args ...any)) *ExportTable {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &ExportTable{srv: srv, open: open, logf: logf, served: map[string]*tableEntry{}}
}

// Apply makes specs the exports served: names gone or changed are removed
// (their clients' in-flight requests answered and flushed first, then
// their devices closed), new or changed ones opened, and ones that failed
// before tried again. A spec that cannot be opened is reported and left
// out; the others are served. It returns the first such error. The specs'
// names must be unique (ParseExports checks that).
func (t *ExportTable) Apply(ctx context.Context, specs []ExportSpec) error {
	if err := CheckExportNames(specs); err != nil {
		return err
	}
	want := map[string]string{}
	for _, e := range specs {
		want[e.Name] = e.String()
	}
	for _, n := range t.Names() {
		if s, ok := want[n]; !ok || s != t.served[n].spec.String() {
			t.remove(n)
		}
	}
	var first error
	for _, e := range specs {
		if _, ok := t.served[e.Name]; ok {
			continue
		}
		if err := t.add(ctx, e); err != nil {
			t.logf("export %s: not served: %v", e.Name, err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

func (t *ExportTable) add(ctx context.Context, e ExportSpec) error {
	x, c, err := t.open(ctx, e)
	if err != nil {
		return err
	}
	x.Name = e.Name
	if err := t.srv.AddExport(x); err != nil {
		c.Close()
		return err
	}
	t.served[e.Name] = &tableEntry{spec: e, closer: c}
	t.logf("export %s: serving %s (%d bytes)", e.Name, e.Device, x.Backend.Size())
	return nil
}

// remove stops serving one export and closes its device.
func (t *ExportTable) remove(name string) {
	te := t.served[name]
	delete(t.served, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.srv.RemoveExport(ctx, name); err != nil {
		t.logf("export %s: %v", name, err)
	}
	if err := te.closer.Close(); err != nil {
		t.logf("export %s: closing: %v", name, err)
	}
	t.logf("export %s: removed", name)
}

// Names are the exports served, sorted.
func (t *ExportTable) Names() []string {
	names := make([]string, 0, len(t.served))
	for n := range t.served {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close closes every export's device, after the server was shut down (a
// served export's device must not be closed under it). It returns the
// first error.
func (t *ExportTable) Close() error {
	var first error
	for _, n := range t.Names() {
		if err := t.served[n].closer.Close(); err != nil {
			t.logf("export %s: closing: %v", n, err)
			if first == nil {
				first = err
			}
		}
	}
	t.served = map[string]*tableEntry{}
	return first
}
