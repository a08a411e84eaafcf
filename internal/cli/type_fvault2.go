package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/fvault2"
)

// --type fvault2: FileVault 2 (Core Storage) volumes, as cryptsetup's
// fvault2Open / fvault2Dump. The passphrase comes from the prompt, stdin
// or --key-file; --volume-key-file gives the volume key instead (for dump
// --dump-volume-key it is where the key is written). Volumes open
// read-only unless --fvault2-read-write is given.

func init() {
	typeOpeners["fvault2"] = openFvault2Volume
	typeDumpers["fvault2"] = dumpFvault2
	typeDetectors = append(typeDetectors, func(head []byte) string {
		if fvault2.Detect(head) {
			return "fvault2"
		}
		return ""
	})
	bitlkAddFlag(flagDef{"fvault2-read-write", 0, kindBool, "fvault2: allow writes (read-only by default)"})
	bitlkWrapTestPassphrase("fvault2", testFvault2Passphrase)
}

func fvault2Err(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fvault2.ErrWrongPassphrase):
		return &exitError{ExitPermission, err}
	case errors.Is(err, fvault2.ErrNotFileVault), errors.Is(err, fvault2.ErrCorrupt):
		return deviceErr(err)
	}
	return err
}

func fvault2Metadata(path string, readOnly bool) (*os.File, *fvault2.Metadata, error) {
	f, err := openDevice(path, readOnly)
	if err != nil {
		return nil, nil, err
	}
	m, err := fvault2.Read(f)
	if err != nil {
		f.Close()
		if errors.Is(err, fvault2.ErrNotFileVault) {
			return nil, nil, deviceErr(fmt.Errorf("device %s is not a valid FVAULT2 device", path))
		}
		return nil, nil, fvault2Err(err)
	}
	return f, m, nil
}

func fvault2Key(env *Env, p *parsed, path string, m *fvault2.Metadata, useVKFile bool) ([]byte, error) {
	if vk := p.str("volume-key-file"); vk != "" && useVKFile {
		return readVolumeKeyFile(vk, m.KeySize)
	}
	secret, _, err := readSecret(env, p, fmt.Sprintf("Enter passphrase for %s: ", path))
	if err != nil {
		return nil, err
	}
	defer clear(secret)
	key, err := m.VolumeKey(secret)
	if err != nil {
		return nil, fvault2Err(err)
	}
	return key, nil
}

func openFvault2Volume(env *Env, p *parsed, path string, readOnly bool) (*blkcrypt.Volume, error) {
	if !readOnly && !p.bool("fvault2-read-write") {
		fmt.Fprintln(env.Stderr, "FVAULT2 volume opened read-only (add --fvault2-read-write to allow writes).")
		readOnly = true
	}
	f, m, err := fvault2Metadata(path, readOnly)
	if err != nil {
		return nil, err
	}
	key, err := fvault2Key(env, p, path, m, true)
	if err != nil {
		f.Close()
		return nil, err
	}
	defer clear(key)
	size, err := fvault2.DeviceSize(f)
	if err != nil {
		f.Close()
		return nil, deviceErr(err)
	}
	v, err := fvault2.Open(f, size, m, key, readOnly)
	if err != nil {
		f.Close()
		return nil, fvault2Err(err)
	}
	return v, nil
}

func testFvault2Passphrase(env *Env, p *parsed, path string) error {
	f, m, err := fvault2Metadata(path, true)
	if err != nil {
		return err
	}
	defer f.Close()
	key, err := fvault2Key(env, p, path, m, true)
	if err != nil {
		return err
	}
	clear(key)
	return nil
}

func dumpFvault2(env *Env, p *parsed, path string) error {
	f, m, err := fvault2Metadata(path, true)
	if err != nil {
		return err
	}
	defer f.Close()
	if !p.bool("dump-volume-key") {
		return fvault2.Dump(env.Stdout, m, path, nil)
	}
	key, err := fvault2Key(env, p, path, m, false)
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
