package cli

import (
	"context"
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
	typeOpeners["bitlk"] = openBitlkVolume
	typeDumpers["bitlk"] = dumpBitlk
	typeDetectors = append(typeDetectors, func(head []byte) string {
		if bitlk.Detect(head) {
			return "bitlk"
		}
		return ""
	})
	bitlkAddFlag(flagDef{"bitlk-read-write", 0, kindBool, "bitlk: allow writes (read-only by default)"})
	bitlkWrapTestPassphrase("bitlk", testBitlkPassphrase)
}

// bitlkAddFlag appends a flag unless another file defined it already.
func bitlkAddFlag(d flagDef) {
	for _, f := range flagDefs {
		if f.name == d.name {
			return
		}
	}
	flagDefs = append(flagDefs, d)
}

// bitlkWrapTestPassphrase routes `test-passphrase` (and `open
// --test-passphrase`) for a volume of type typ to fn; other types go to
// the verb's own function.
func bitlkWrapTestPassphrase(typ string, fn func(env *Env, p *parsed, path string) error) {
	for i := range extraVerbs {
		if extraVerbs[i].name != "test-passphrase" {
			continue
		}
		prev := extraVerbs[i].run
		extraVerbs[i].run = func(ctx context.Context, env *Env, p *parsed) error {
			if len(p.args) == 1 {
				t := p.str("type")
				if t == "" {
					t = detectType(p.args[0])
				}
				if t == typ {
					return fn(env, p, p.args[0])
				}
			}
			return prev(ctx, env, p)
		}
	}
}

// bitlkErr maps the package's errors to cryptsetup's exit codes.
func bitlkErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bitlk.ErrWrongPassphrase):
		return &exitError{ExitPermission, err}
	case errors.Is(err, bitlk.ErrNotBitLocker), errors.Is(err, bitlk.ErrCorrupt):
		return deviceErr(err)
	}
	return err
}

// bitlkMetadata opens DEVICE and reads its BitLocker metadata.
func bitlkMetadata(path string, readOnly bool) (*os.File, *bitlk.Metadata, error) {
	f, err := openDevice(path, readOnly)
	if err != nil {
		return nil, nil, err
	}
	m, err := bitlk.Read(f)
	if err != nil {
		f.Close()
		if errors.Is(err, bitlk.ErrNotBitLocker) {
			return nil, nil, deviceErr(fmt.Errorf("device %s is not a valid BITLK device", path))
		}
		return nil, nil, bitlkErr(err)
	}
	return f, m, nil
}

// bitlkKey returns the volume key: from --volume-key-file, from a clear
// key (tried first, as cryptsetup does, unless a key file is given), or
// from the secret read per the flags.
func bitlkKey(env *Env, p *parsed, path string, m *bitlk.Metadata, useVKFile bool) ([]byte, error) {
	if vk := p.str("volume-key-file"); vk != "" && useVKFile {
		return readVolumeKeyFile(vk, m.KeyBits/8)
	}
	if m.HasClearKey() && p.str("key-file") == "" {
		if key, _, err := m.VolumeKey(nil); err == nil {
			return key, nil
		}
	}
	secret, _, err := readSecret(env, p, fmt.Sprintf("Enter passphrase for %s: ", path))
	if err != nil {
		return nil, err
	}
	defer clear(secret)
	key, _, err := m.VolumeKey(secret)
	if err != nil {
		return nil, bitlkErr(err)
	}
	return key, nil
}

func openBitlkVolume(env *Env, p *parsed, path string, readOnly bool) (*blkcrypt.Volume, error) {
	if !readOnly && !p.bool("bitlk-read-write") {
		fmt.Fprintln(env.Stderr, "BITLK volume opened read-only (add --bitlk-read-write to allow writes).")
		readOnly = true
	}
	f, m, err := bitlkMetadata(path, readOnly)
	if err != nil {
		return nil, err
	}
	if err := m.Activatable(); err != nil {
		f.Close()
		return nil, err
	}
	key, err := bitlkKey(env, p, path, m, true)
	if err != nil {
		f.Close()
		return nil, err
	}
	defer clear(key)
	size, err := bitlk.DeviceSize(f)
	if err != nil {
		f.Close()
		return nil, deviceErr(err)
	}
	if uint64(size) != m.VolumeSize {
		fmt.Fprintf(env.Stderr, "WARNING: BitLocker volume size %d does not match the underlying device size %d\n", m.VolumeSize, size)
	}
	v, err := bitlk.Open(f, size, m, key, readOnly)
	if err != nil {
		f.Close()
		return nil, bitlkErr(err)
	}
	return v, nil
}

func testBitlkPassphrase(env *Env, p *parsed, path string) error {
	if p.str("volume-key-file") != "" {
		return usageErr("a volume key cannot be checked for BITLK devices (--test-passphrase with --volume-key-file)")
	}
	f, m, err := bitlkMetadata(path, true)
	if err != nil {
		return err
	}
	defer f.Close()
	key, err := bitlkKey(env, p, path, m, false)
	if err != nil {
		return err
	}
	clear(key)
	return nil
}

func dumpBitlk(env *Env, p *parsed, path string) error {
	f, m, err := bitlkMetadata(path, true)
	if err != nil {
		return err
	}
	defer f.Close()
	if !p.bool("dump-volume-key") {
		return bitlk.Dump(env.Stdout, m, path)
	}
	key, err := bitlkKey(env, p, path, m, false)
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
