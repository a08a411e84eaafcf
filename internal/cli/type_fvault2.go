package cli

// --type fvault2: FileVault 2 (Core Storage) volumes, as cryptsetup's
// fvault2Open / fvault2Dump, through the format registry (typeBindings:
// secretOptions; typeDumpers: dumpType). The passphrase comes from the
// prompt, stdin or --key-file; --volume-key-file gives the volume key
// instead (for dump --dump-volume-key it is where the key is written).
// Volumes open read-only unless --fvault2-read-write is given.

func init() {
	addFlags(flagDef{"fvault2-read-write", 0, kindBool, "fvault2: allow writes (read-only by default)"})
}
