package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/bitlk"
)

// --type bitlk: BitLocker volumes, as cryptsetup's bitlkOpen / bitlkDump.
// The secret (password, recovery password or the contents of a startup
// key .BEK file) comes from the passphrase prompt, stdin or --key-file,
// and is tried against every key protector; a clear-key volume opens
// without one. --volume-key-file gives the volume key instead (for dump
// --dump-volume-key it is where the key is written). Volumes open
// read-only unless --bitlk-read-write is given.

func init() {
	typeDumpers["bitlk"] = dumpBitlk
	addFlags(flagDef{"bitlk-read-write", 0, kindBool, "bitlk: allow writes (read-only by default)"})
}

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

// bitlkMetadata opens DEVICE and reads its BitLocker metadata.
func bitlkMetadata(path string) (*blkcrypt.LockedFile, *bitlk.Metadata, error) {
	f, err := openShared(path)
	if err != nil {
		return nil, nil, err
	}
	m, err := bitlk.Read(f)
	if err != nil {
		f.Close()
		if errors.Is(err, bitlk.ErrNotBitLocker) {
			return nil, nil, deviceErr(fmt.Errorf("device %s is not a valid BITLK device", path))
		}
		return nil, nil, err
	}
	return f, m, nil
}

func dumpBitlk(env *Env, p *parsed, path string) error {
	f, m, err := bitlkMetadata(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if !p.bool("dump-volume-key") {
		return bitlk.Dump(env.Stdout, m, path)
	}
	var key []byte
	if m.HasClearKey() && p.str("key-file") == "" {
		key, _, err = m.VolumeKey(nil)
	}
	if key == nil {
		secret, _, serr := readSecret(env, p, fmt.Sprintf("Enter passphrase for %s: ", path))
		if serr != nil {
			return serr
		}
		key, _, err = m.VolumeKey(secret)
		clear(secret)
	}
	if err != nil {
		return err
	}
	defer clear(key)
	vkf := p.str("volume-key-file")
	if vkf != "" {
		if err := os.WriteFile(vkf, key, 0o600); err != nil {
			return usageErr("cannot write volume key file: %v", err)
		}
	}
	return bitlk.DumpVolumeKey(env.Stdout, m, path, key, vkf)
}
