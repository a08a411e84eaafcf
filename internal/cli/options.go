package cli

// opt is one option a legacy verb (one that reads *parsed) takes: the flag
// (flagDefs names it), the default this verb uses when the option is
// absent ("" when there is none to show), and, when the verb reads the
// option differently from the flag's general meaning, its own help and
// value kind (kind -1: the flag's). Typed verbs declare theirs in their
// options structs (command.go).
type opt struct {
	name string
	def  string
	help string
	kind flagKind
}

func o(name, def string) opt { return opt{name: name, def: def, kind: -1} }

// Option groups the legacy verbs share.
var (
	unlockKeyOpts = []opt{
		o("key-file", "the terminal, or stdin"), o("keyfile-offset", "0"), o("keyfile-size", "all of it"),
		o("key-slot", "every slot"), o("volume-key-file", ""), o("header", "DEVICE itself"),
		o("token-only", ""), o("token-id", "every token"), o("token-type", "every type"), o("tpm2-device", "/dev/tpmrm0"), o("tpm2-pin-file", "asked on a terminal"),
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
	dumpOpts     = cat([]opt{openTypeOpt, o("json", ""), o("dump-volume-key", "")}, unlockKeyOpts, formatOpenOpts)
	// typedDumpOpts: tcrypt-dump and the like are dump with --type given;
	// --partition as verbs_image.go gives dump.
	typedDumpOpts = cat(dumpOpts, []opt{o("partition", "DEVICE as a whole")})
)

func cat(groups ...[]opt) []opt {
	var out []opt
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// verbOptions is what each legacy verb declares it takes, keyed by the
// verb's name; help, the man page and the completions show it. It shrinks
// as verbs move to options structs.
var verbOptions = map[string][]opt{
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
	"dump":            cat(dumpOpts, []opt{o("dump-json-metadata", "")}),
	"tcrypt-dump":     typedDumpOpts,
	"bitlk-dump":      cat(typedDumpOpts),
	"fvault2-dump":    cat(typedDumpOpts),
}

// optFor is verb's declaration of flag name, if it has one: from its
// options struct, or from verbOptions for a legacy verb.
func optFor(verb, name string) (opt, bool) {
	c, ok := lookupCommand(verb)
	if !ok {
		return opt{}, false
	}
	for _, s := range c.specs() {
		if s.name == name {
			return opt{name: s.name, def: s.def, help: s.help, kind: s.kind}, true
		}
	}
	return opt{}, false
}
