package cli

import (
	"sort"
	"sync"
)

// opt is one option a verb takes: the flag (flagDefs names it), the default
// this verb uses when the option is absent ("" when there is none to show),
// and, when the verb reads the option differently from the flag's general
// meaning, its own help and value kind (kind -1: the flag's).
type opt struct {
	name string
	def  string
	help string
	kind flagKind
}

func o(name, def string) opt { return opt{name: name, def: def, kind: -1} }

// globalOptions every verb takes.
var globalOptions = []opt{o("batch-mode", ""), o("help", "")}

// Option groups several verbs share.
var (
	unlockKeyOpts = []opt{
		o("key-file", "the terminal, or stdin"), o("keyfile-offset", "0"), o("keyfile-size", "all of it"),
		o("key-slot", "every slot"), o("volume-key-file", ""), o("header", "DEVICE itself"),
	}
	// The options of the other formats: plain and loop-AES geometry and
	// cipher, TrueCrypt/VeraCrypt search, BitLocker/FileVault 2 writes.
	formatOpenOpts = []opt{
		o("cipher", "plain: aes-xts-plain64; loopaes: aes"), o("key-size", "plain: 256; loopaes: 128"),
		o("hash", "plain: sha256"), o("offset", "0"), o("skip", "plain: 0; loopaes: --offset"),
		opt{name: "size", def: "to the end of the device", help: "plain, loopaes: data size in 512-byte sectors", kind: -1},
		o("sector-size", "512"), o("iv-large-sectors", ""),
		o("veracrypt-pim", ""), o("veracrypt-query-pim", ""), o("veracrypt", ""), o("disable-veracrypt", ""),
		o("tcrypt-hidden", ""), o("tcrypt-system", ""), o("tcrypt-backup", ""), o("tcrypt-keyfiles", ""),
		o("tcrypt-read-write", ""), o("bitlk-read-write", ""), o("fvault2-read-write", ""),
	}
	pbkdfOpts = []opt{
		o("pbkdf", "argon2id (LUKS2), pbkdf2 (LUKS1)"), o("iter-time", "2000"), o("pbkdf-force-iterations", "benchmarked"),
		o("pbkdf-memory", "1048576"), o("pbkdf-parallel", "4"),
	}
	luksTypeOpt  = opt{name: "type", def: "what the header holds", help: "luks, luks1 or luks2; must match the header", kind: -1}
	openTypeOpt  = opt{name: "type", def: "detected: LUKS, BitLocker, FileVault 2", help: "luks, luks1, luks2, plain, loopaes, tcrypt, bitlk, fvault2", kind: -1}
	progressOpts = []opt{o("progress-frequency", "0 (a refreshed line, on a terminal only)"), o("progress-json", "")}
)

func cat(groups ...[]opt) []opt {
	var out []opt
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// verbOptions is what each verb declares it takes, keyed by the verb's
// name. Help, the man page and the shell completions are generated from it
// (and flagDefs), and the tests check that a verb reads no option it does
// not declare here. A verb not listed takes only the global options.
var verbOptions = map[string][]opt{
	"demo": {o("dir", "a new temporary directory"),
		opt{name: "sec", def: "0 (until Enter on a terminal; else stop at once)", help: "serve the demo volume this many seconds", kind: -1}},
	"speed":  {o("driver", "every driver of ALG"), o("sec", "1"), o("decrypt", ""), o("list-drivers", "")},
	"crypto": {},
	"benchmark": {
		o("cipher", "the cryptsetup table"), opt{name: "key-size", def: "256 (512 for xts)", kind: -1},
		o("sector-size", "512"), o("sec", "0.5"), o("threshold", "measured"),
		o("iter-time", "2000"), o("pbkdf-memory", "1048576"), o("pbkdf-parallel", "4"),
	},
	"read": cat([]opt{openTypeOpt}, unlockKeyOpts, formatOpenOpts,
		[]opt{o("offset-bytes", "0"), o("length", "to the end of the volume"), o("output", "stdout")}, progressOpts),
	"write": cat([]opt{openTypeOpt}, unlockKeyOpts, formatOpenOpts,
		[]opt{o("offset-bytes", "0"), o("length", "all of the input"), o("input", "stdin")}, progressOpts),
	"serve": cat([]opt{openTypeOpt}, unlockKeyOpts, formatOpenOpts, []opt{
		o("listen", ""), o("export-name", "\"\" (the default export)"), o("read-only", ""), o("allow-discards", ""),
		o("tls-cert", ""), o("tls-key", ""), o("tls-ca", ""), o("insecure", ""), o("max-connections", "64"), o("idle-timeout", "0 (never)"),
		o("export", "none (serve DEVICE alone)"), o("exports", ""),
		o("reencrypt", ""), o("resilience", "checksum"),
		opt{name: "hotzone-size", def: "4M", help: "serve --reencrypt: bytes per step; requests in a step's hotzone wait for it", kind: -1},
		o("resume-only", ""),
	}, pbkdfOpts, progressOpts),
	"mount": cat([]opt{openTypeOpt}, unlockKeyOpts, formatOpenOpts,
		[]opt{opt{name: "read-only", help: "mount: the file refuses writes", kind: -1}}),
	"test-passphrase": cat([]opt{openTypeOpt}, unlockKeyOpts, formatOpenOpts),
	"dump":            cat([]opt{openTypeOpt, o("json", ""), o("dump-volume-key", "")}, unlockKeyOpts, formatOpenOpts),
	"format": cat([]opt{
		opt{name: "type", def: "luks2", help: "luks2 or luks1 (luks is luks2)", kind: -1},
		o("cipher", "aes-xts-plain64"), o("key-size", "512"), o("hash", "sha256"),
		o("sector-size", "4096 where the data area allows it, else 512 (LUKS2)"),
		o("offset", "16 MiB (LUKS2), aligned (LUKS1)"), o("align-payload", "2048"),
		o("key-slot", "0"), o("uuid", "random"), o("label", ""), o("subsystem", ""),
		o("header", "DEVICE itself"), o("key-file", "the terminal (asked twice), or stdin"),
		o("keyfile-offset", "0"), o("keyfile-size", "all of it"), o("volume-key-file", "random"),
		opt{name: "size", def: "the file's size", help: "create or grow an image file to this many bytes (blkcrypt only; takes K/M/G/T/P/E units)", kind: kindBytes},
	}, pbkdfOpts),
	"reencrypt": cat([]opt{luksTypeOpt, o("header", "DEVICE itself"), o("key-file", "the terminal, or stdin"),
		o("keyfile-offset", "0"), o("keyfile-size", "all of it"),
		opt{name: "key-slot", def: "the only keyslot", help: "the keyslot to keep; the others are removed at the end", kind: -1},
		o("cipher", "the current cipher"), o("key-size", "the current key size"), o("sector-size", "the current sector size"),
		opt{name: "hash", def: "sha256", help: "the checksum hash of --resilience checksum", kind: -1},
		o("resilience", "checksum"), o("hotzone-size", "32M (2M with --resilience none)"), o("init-only", ""), o("resume-only", ""),
		o("encrypt", ""), o("decrypt", ""), o("force-offline-reencrypt", ""),
		opt{name: "reduce-device-size", def: "0 (needs --header)", help: "--encrypt: room for the header at the start of the device (twice the data shift); the plaintext must have been shrunk by it", kind: -1},
		opt{name: "offset", def: "half of --reduce-device-size; 0 with --header", help: "--encrypt: the data offset in 512-byte sectors", kind: -1},
		opt{name: "uuid", def: "random", help: "--encrypt: the new volume's UUID", kind: -1},
		opt{name: "label", def: "", help: "--encrypt: the new volume's label", kind: -1}}, pbkdfOpts, progressOpts),
	"add-key": cat([]opt{luksTypeOpt, o("header", "DEVICE itself"), o("key-file", "the terminal, or stdin"),
		o("keyfile-offset", "0"), o("keyfile-size", "all of it"), o("new-keyfile-offset", "0"), o("new-keyfile-size", "all of it"),
		o("volume-key-file", ""), opt{name: "key-slot", def: "the first free slot", help: "the new keyslot's number", kind: -1},
		o("hash", "sha256")}, pbkdfOpts),
	"change-key": cat([]opt{luksTypeOpt, o("header", "DEVICE itself"), o("key-file", "the terminal, or stdin"),
		o("keyfile-offset", "0"), o("keyfile-size", "all of it"), o("new-keyfile-offset", "0"), o("new-keyfile-size", "all of it"),
		o("key-slot", "every slot"), o("hash", "sha256")}, pbkdfOpts),
	"remove-key": {luksTypeOpt, o("header", "DEVICE itself"), o("key-file", "the terminal, or stdin"),
		o("keyfile-offset", "0"), o("keyfile-size", "all of it"), o("key-slot", "every slot")},
	"kill-slot": {luksTypeOpt, o("header", "DEVICE itself"), o("key-file", "not asked"),
		o("keyfile-offset", "0"), o("keyfile-size", "all of it")},
	"header-backup":  {o("header-backup-file", ""), o("header", "DEVICE itself"), opt{name: "type", help: "ignored, as cryptsetup ignores it", kind: -1}},
	"header-restore": {o("header-backup-file", ""), o("header", "DEVICE itself")},
}

// verbOpts returns the options v takes, its own first, then the global
// ones, each with its flag.
func verbOpts(v string) []opt {
	return append(append([]opt(nil), verbOptions[v]...), globalOptions...)
}

// optFor is verb's declaration of flag name, if it has one.
func optFor(verb, name string) (opt, bool) {
	for _, op := range verbOpts(verb) {
		if op.name == name {
			return op, true
		}
	}
	return opt{}, false
}

// kindFor is the value kind of flag d for verb.
func kindFor(verb string, d flagDef) flagKind {
	if op, ok := optFor(verb, d.name); ok && op.kind >= 0 {
		return op.kind
	}
	return d.kind
}

// flagUse records which verb read which option, for the test that every
// option a verb reads is declared (nil outside tests).
var flagUse struct {
	sync.Mutex
	seen map[[2]string]bool
}

func noteFlag(verb, name string) {
	if verb == "" {
		return
	}
	flagUse.Lock()
	if flagUse.seen != nil {
		flagUse.seen[[2]string{verb, name}] = true
	}
	flagUse.Unlock()
}

// undeclaredFlags lists "verb --flag" for every recorded read of an option
// the verb does not declare.
func undeclaredFlags() []string {
	flagUse.Lock()
	defer flagUse.Unlock()
	var out []string
	for k := range flagUse.seen {
		if _, ok := optFor(k[0], k[1]); !ok {
			out = append(out, k[0]+" --"+k[1])
		}
	}
	sort.Strings(out)
	return out
}
