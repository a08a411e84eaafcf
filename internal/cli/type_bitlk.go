package cli

// --type bitlk: BitLocker volumes, as cryptsetup's bitlkOpen / bitlkDump,
// through the format registry (typeBindings: secretOptions; typeDumpers:
// dumpType). The secret (password, recovery password or the contents of
// a startup key .BEK file) comes from the passphrase prompt, stdin or
// --key-file, and is tried against every key protector; a clear-key
// volume opens without one (OpenOptions.SecretOptional says so).
// --volume-key-file gives the volume key instead (for dump
// --dump-volume-key it is where the key is written).
// Volumes open read-only unless --bitlk-read-write is given.

// --type fvault2: FileVault 2 (Core Storage) volumes, as cryptsetup's
// fvault2Open / fvault2Dump, through the format registry (typeBindings:
// secretOptions; typeDumpers: dumpType). The passphrase comes from the
// prompt, stdin or --key-file; --volume-key-file gives the volume key
// instead (for dump --dump-volume-key it is where the key is written).
// Volumes open read-only unless --fvault2-read-write is given.
