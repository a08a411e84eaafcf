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
	kindList // a string that may be given many times; see parsed.list
	// kindBytes is a byte size with cryptsetup's unit suffixes (parseSize);
	// the parser stores it as a plain number of bytes.
	kindBytes
)

type flagDef struct {
	name  string
	short byte
	kind  flagKind
	help  string
}

// flagDefs are the flags of the verbs that still read them by name
// (*parsed; see command.go for converting one). Typed verbs declare their
// flags in their options structs instead.
var flagDefs = []flagDef{
	{"type", 0, kindString, "volume type: luks2, luks1, luks, plain"},
	{"cipher", 'c', kindString, "cipher specification, e.g. aes-xts-plain64"},
	{"key-size", 's', kindInt, "key size in bits"},
	{"hash", 'h', kindString, "hash for plain-mode passphrases / LUKS"},
	{"sector-size", 0, kindInt, "encryption sector size in bytes"},
	{"offset", 0, kindInt, "data start in 512-byte sectors (plain, loopaes)"},
	{"skip", 'p', kindInt, "plain mode: IV offset in 512-byte sectors"},
	{"size", 'b', kindInt, "data size in 512-byte sectors (as cryptsetup's --size)"},
	{"iv-large-sectors", 0, kindBool, "IV sector numbers count sector-size units"},
	{"key-file", 'd', kindString, "read the key from a file (- for stdin)"},
	{"keyfile-offset", 0, kindInt, "skip this many bytes of the key file"},
	{"keyfile-size", 'l', kindInt, "read at most this many bytes of the key file"},
	{"volume-key-file", 0, kindString, "use a raw volume key from a file"},
	{"key-slot", 'S', kindInt, "key slot number"},
	{"header", 0, kindString, "detached header file"},
	{"offset-bytes", 0, kindBytes, "read/write: byte offset into the decrypted volume"},
	{"length", 0, kindBytes, "read/write: number of bytes (write: exactly that many of the input)"},
	{"output", 'o', kindString, "read: output file"},
	{"input", 'i', kindString, "write: input file"},
	{"resilience", 0, kindString, "reencrypt: checksum (default), journal or none; datashift with --reduce-device-size"},
	{"hotzone-size", 0, kindString, "reencrypt: bytes per step (units k, m, g; default 32m, 2m with --resilience none)"},
	{"resume-only", 0, kindBool, "reencrypt: only resume a reencryption in progress"},
	{"pbkdf", 0, kindString, "pbkdf2, argon2i or argon2id"},
	{"iter-time", 'i', kindInt, "PBKDF unlock time in ms"},
	{"pbkdf-force-iterations", 0, kindInt, "fixed PBKDF iterations / argon2 time cost"},
	{"pbkdf-memory", 0, kindInt, "argon2 memory in KiB"},
	{"pbkdf-parallel", 0, kindInt, "argon2 threads"},
	{"json", 0, kindBool, "dump: JSON metadata"},
	{"dump-volume-key", 0, kindBool, "dump: print the volume key"},
	{"reencrypt", 0, kindBool, "serve: reencrypt the LUKS2 volume while serving it (cryptsetup reencrypt on an active device; resumes one in progress)"},
	{"listen", 0, kindString, "serve: address (host:port or unix:/path)"},
	{"export-name", 0, kindString, "serve: NBD export name"},
	{"export", 0, kindList, "serve: NAME=DEVICE,key-file=F[,type=T][,read-only][,header=H]... one export of many (repeatable)"},
	{"exports", 0, kindString, "serve: file of exports, one NAME=DEVICE,key-file=F,... a line (# comments); re-read on SIGHUP"},
	{"read-only", 'r', kindBool, "serve: refuse writes"},
	{"allow-discards", 0, kindBool, "serve: pass TRIM through as hole punching"},
	{"tls-cert", 0, kindString, "serve: TLS certificate"},
	{"tls-key", 0, kindString, "serve: TLS key"},
	{"tls-ca", 0, kindString, "serve: CA for client certificates"},
	{"insecure", 0, kindBool, "serve: allow a non-loopback address without TLS"},
	{"max-connections", 0, kindInt, "serve: connections served at once"},
	{"idle-timeout", 0, kindString, "serve: close connections idle this long (90s, 5m; a plain number counts seconds)"},
	{"test-passphrase", 0, kindBool, "open: only check the passphrase"},
	{"progress-frequency", 0, kindInt, "print a progress line every N seconds, also when stderr is no terminal"},
	{"progress-json", 0, kindBool, "print progress as JSON lines, as cryptsetup 2.6 does"},
	{"dump-json-metadata", 0, kindBool, "dump: the LUKS2 JSON metadata as cryptsetup prints it"},
	// The token step of the verbs that open a volume (tokenFlags, verbs_token.go).
	{"token-only", 0, kindBool, "unlock with a LUKS2 token only, never ask for a passphrase"},
	{"token-id", 0, kindInt, "try only this token (0-31)"},
	{"token-type", 0, kindString, "try only tokens of this type (systemd-tpm2, clevis)"},
	{"tpm2-device", 0, kindString, "TPM2 in systemd's spelling (device:/dev/tpmrm0, swtpm:host=H,port=P, swtpm:path=S)"},
	{"tpm2-pin-file", 0, kindString, "read the TPM2 PIN from this file (one trailing newline dropped)"},
}

// parsed holds the flags and positional arguments of one command line:
// what parseArgs read, before it fills a typed verb's options struct, and
// what the verbs not converted yet read by name.
type parsed struct {
	verb  string
	set   map[string]string
	lists map[string][]string // every value of a kindList flag, in order
	args  []string
}

// list returns every value given for a kindList flag.
func (p *parsed) list(name string) []string { return p.lists[name] }

func (p *parsed) has(name string) bool   { _, ok := p.set[name]; return ok }
func (p *parsed) str(name string) string { return p.set[name] }
func (p *parsed) bool(name string) bool  { return p.set[name] == "true" }

func (p *parsed) int(name string, def int64) int64 {
	v, ok := p.set[name]
	if !ok {
		return def
	}
	n, _ := strconv.ParseInt(v, 0, 64) // validated in parse
	return n
}

func (p *parsed) float(name string, def float64) float64 {
	v, ok := p.set[name]
	if !ok {
		return def
	}
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// lookupFlag finds a flag of flagDefs by its long or short name.
func lookupFlag(long string, short byte, verb string) (flagDef, bool) {
	for _, d := range flagDefs {
		if long != "" && d.name == long {
			return d, true
		}
		if short != 0 && d.short == short {
			// -i is --input for write but --iter-time elsewhere, as -o is
			// --output for read.
			if short == 'i' && (verb == "write") != (d.name == "input") {
				continue
			}
			return d, true
		}
	}
	return flagDef{}, false
}

// knownFlags is every flag some verb takes: flagDefs, then the typed
// verbs' flags not in it (the first declaration of each name).
func knownFlags() []flagDef {
	out := append([]flagDef(nil), flagDefs...)
	seen := map[string]bool{}
	for _, d := range flagDefs {
		seen[d.name] = true
	}
	for _, c := range allCommands() {
		for _, s := range c.specs() {
			if !seen[s.name] {
				seen[s.name] = true
				out = append(out, flagDef{s.name, s.short, s.kind, s.help})
			}
		}
	}
	return out
}

// findFlag is the flag a verb's command line names: the verb's own
// declaration, else any other flag blkcrypt knows (accepted and ignored,
// as cryptsetup accepts most options for any action).
func findFlag(verb string, specs []flagSpec, long string, short byte) (flagSpec, bool) {
	for _, s := range specs {
		if long != "" && s.name == long || short != 0 && s.short == short {
			return s, true
		}
	}
	if d, ok := lookupFlag(long, short, verb); ok {
		return flagSpec{name: d.name, short: d.short, kind: d.kind, help: d.help}, true
	}
	for _, d := range knownFlags() {
		if long != "" && d.name == long || short != 0 && d.short == short {
			return flagSpec{name: d.name, short: d.short, kind: d.kind, help: d.help}, true
		}
	}
	return flagSpec{}, false
}

// parseArgs parses flags anywhere among the positional arguments, as
// cryptsetup does: --name=value, --name value, -x value, and -- to stop.
// Each value is checked against the kind verb declares for it.
func parseArgs(verb string, argv []string) (*parsed, error) {
	var specs []flagSpec
	if c, ok := lookupCommand(verb); ok {
		specs = c.specs()
	}
	p := &parsed{verb: verb, set: map[string]string{}}
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
			if d, ok = findFlag(verb, specs, name, 0); !ok {
				return nil, fmt.Errorf("unknown option --%s", name)
			}
		} else {
			if len(a) > 2 {
				val, hasVal = a[2:], true
			}
			if d, ok = findFlag(verb, specs, "", a[1]); !ok {
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
	if err := checkStackFlags(verb, p); err != nil {
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
