package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt/fvault2"
)

// --type fvault2: FileVault 2 (Core Storage) volumes, as cryptsetup's
// fvault2Open / fvault2Dump. The passphrase comes from the prompt, stdin
// or --key-file; --volume-key-file gives the volume key instead (for dump
// --dump-volume-key it is where the key is written). Volumes open
// read-only unless --fvault2-read-write is given.

func init() {
	typeDumpers["fvault2"] = dumpFvault2
	addFlags(flagDef{"fvault2-read-write", 0, kindBool, "fvault2: allow writes (read-only by default)"})
}

func dumpFvault2(env *Env, p *parsed, path string) error {
	f, err := openShared(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := fvault2.Read(f)
	if err != nil {
		if errors.Is(err, fvault2.ErrNotFileVault) {
			return deviceErr(fmt.Errorf("device %s is not a valid FVAULT2 device", path))
		}
		return err
	}
	if !p.bool("dump-volume-key") {
		return fvault2.Dump(env.Stdout, m, path, nil)
	}
	secret, _, err := readSecret(env, p, fmt.Sprintf("Enter passphrase for %s: ", path))
	if err != nil {
		return err
	}
	key, err := m.VolumeKey(secret)
	clear(secret)
	if err != nil {
		return err
	}
	defer clear(key)
	if vkf := p.str("volume-key-file"); vkf != "" {
		if err := os.WriteFile(vkf, key, 0o600); err != nil {
			return usageErr("cannot write volume key file: %v", err)
		}
	}
	return fvault2.Dump(env.Stdout, m, path, key)
}
