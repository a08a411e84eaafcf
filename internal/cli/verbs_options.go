package cli

// The options of the maintenance verbs (verbs_meta.go, verbs_layout.go),
// merged into verbOptions so that help, the man page and the completions
// show them.
func init() {
	hdr := o("header", "DEVICE itself")
	verbose := o("verbose", "")
	for name, opts := range map[string][]opt{
		"is-luks": {opt{name: "type", def: "luks1 or luks2", help: "only this LUKS version answers 0", kind: -1}, hdr, verbose},
		"uuid":    {opt{name: "uuid", def: "print the UUID", help: "set this UUID", kind: -1}, luksTypeOpt, hdr, verbose},
		"config": {o("label", "cleared"), o("subsystem", "cleared"), o("priority", "unchanged"),
			opt{name: "key-slot", def: "", help: "the keyslot --priority sets", kind: -1}, luksTypeOpt, hdr, verbose},
		"erase":  {luksTypeOpt, hdr, verbose},
		"repair": {luksTypeOpt, hdr, verbose},
		"token": {o("token-id", "the first free id (add, import)"), o("json-file", "stdin (import), stdout (export)"),
			opt{name: "key-slot", def: "none (import), every keyslot (add)", help: "assign the token to this keyslot", kind: -1},
			o("key-description", ""), o("token-replace", ""), luksTypeOpt, hdr, verbose},
		"convert": {opt{name: "type", def: "", help: "luks1 or luks2: the version to convert to", kind: -1}, hdr, verbose},
		"resize": {opt{name: "size", def: "the whole file", help: "new data size in 512-byte sectors", kind: -1},
			opt{name: "device-size", def: "the whole file", help: "new data size in bytes", kind: -1}, luksTypeOpt, hdr, verbose},
		"tcrypt-dump":  verbOptions["dump"],
		"bitlk-dump":   verbOptions["dump"],
		"fvault2-dump": verbOptions["dump"],
	} {
		verbOptions[name] = opts
	}
	verbOptions["dump"] = append(verbOptions["dump"], o("dump-json-metadata", ""))
}
