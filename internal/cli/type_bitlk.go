package cli

import (
	"os"

	"github.com/blkcrypt/blkcrypt/bitlk"
)

// --type bitlk: BitLocker volumes, as cryptsetup's bitlkOpen / bitlkDump,
// through the format registry (typeBindings: secretOptions; typeDumpers:
// dumpType). The secret (password, recovery password or the contents of
// a startup key .BEK file) comes from the passphrase prompt, stdin or
// --key-file, and is tried against every key protector; a clear-key
// volume opens without one. --volume-key-file gives the volume key
// instead (for dump --dump-volume-key it is where the key is written).
// Volumes open read-only unless --bitlk-read-write is given.

// --type fvault2: FileVault 2 (Core Storage) volumes, as cryptsetup's
// fvault2Open / fvault2Dump, through the format registry (typeBindings:
// secretOptions; typeDumpers: dumpType). The passphrase comes from the
// prompt, stdin or --key-file; --volume-key-file gives the volume key
// instead (for dump --dump-volume-key it is where the key is written).
// Volumes open read-only unless --fvault2-read-write is given.

// bitlkClearKey reports whether the BitLocker volume at path opens with a
// clear key, so that no secret need be asked for.
func bitlkClearKey(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	m, err := bitlk.Read(f)
	return err == nil && m.HasClearKey()
}
