package cli

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
)

func init() {
	extraVerbs = append(extraVerbs,
		verb{"format", []string{"luksFormat"}, runFormat, "DEVICE — create a LUKS2 (or --type luks1) volume"},
		verb{"dump", []string{"luksDump"}, runDump, "DEVICE — show the header (--json, --dump-volume-key)"},
		verb{"test-passphrase", nil, runTestPassphrase, "DEVICE — check a passphrase without opening"},
		verb{"add-key", []string{"luksAddKey"}, runAddKey, "DEVICE [NEW_KEY_FILE] — add a keyslot"},
		verb{"change-key", []string{"luksChangeKey"}, runChangeKey, "DEVICE [NEW_KEY_FILE] — change a passphrase"},
		verb{"remove-key", []string{"luksRemoveKey"}, runRemoveKey, "DEVICE — remove the keyslot a passphrase opens"},
		verb{"kill-slot", []string{"luksKillSlot"}, runKillSlot, "DEVICE N — remove keyslot N"},
		verb{"header-backup", []string{"luksHeaderBackup"}, runHeaderBackup, "DEVICE --header-backup-file F — save the LUKS header and keyslot areas to a file"},
		verb{"header-restore", []string{"luksHeaderRestore"}, runHeaderRestore, "DEVICE --header-backup-file F — write a saved LUKS header back"},
	)
}

const anySlot = -1

// luksPath is the header device of a LUKS verb: the --header file or
// DEVICE itself, refused before anything is opened when --type names no
// LUKS version (cryptsetup requires a LUKS type for its LUKS actions) or
// when the file is missing or a directory (exit 4).
func luksPath(p *parsed, path string) (string, error) {
	hpath := path
	if h := p.str("header"); h != "" {
		hpath = h
	}
	typ := p.str("type")
	if typ != "" && typ != "luks" && typ != "luks1" && typ != "luks2" {
		return "", usageErr("--type %q is not a LUKS type", typ)
	}
	if !blkcrypt.IsURI(hpath) {
		f, err := openDevice(hpath, true)
		if err != nil {
			return "", err
		}
		f.Close()
	}
	return hpath, nil
}

// openLUKS opens the LUKS handle on the header device (see luksPath); a
// --type that names the other version is refused. Each method of the
// handle takes the lock the library takes (busy while a volume on it is
// open anywhere) and reads the header afresh.
func openLUKS(ctx context.Context, p *parsed, path string, readOnly bool) (*blkcrypt.LUKS, error) {
	hpath, err := luksPath(p, path)
	if err != nil {
		return nil, err
	}
	h, err := openLUKSOn(ctx, p, hpath, readOnly) // the header in --partition, when given
	if err != nil {
		return nil, err
	}
	if typ := p.str("type"); typ != "" && typ != "luks" {
		hd, err := h.Header(ctx)
		if err != nil {
			h.Close()
			return nil, err
		}
		if typ != fmt.Sprintf("luks%d", hd.Version()) {
			h.Close()
			return nil, usageErr("device holds LUKS%d, not %s", hd.Version(), typ)
		}
	}
	return h, nil
}

func slotOpt(p *parsed) int {
	if p.has("key-slot") {
		return int(p.int("key-slot", -1))
	}
	return anySlot
}

// keyslotOpt is --key-slot for the handle: nil when absent.
func keyslotOpt(p *parsed) *int {
	if p.has("key-slot") {
		return blkcrypt.Slot(int(p.int("key-slot", -1)))
	}
	return nil
}

// unlock returns the volume key from --volume-key-file or a passphrase,
// and the keyslot that opened (-1 for a volume key file).
func unlock(ctx context.Context, env *Env, p *parsed, h *blkcrypt.LUKS) ([]byte, int, error) {
	hd, err := h.Header(ctx)
	if err != nil {
		return nil, -1, err
	}
	if vk := p.str("volume-key-file"); vk != "" {
		key, err := readVolumeKeyFile(vk, hd.KeySize())
		if err != nil {
			return nil, -1, err
		}
		defer clear(key)
		return h.VolumeKey(ctx, nil, blkcrypt.KeyOptions{VolumeKey: key})
	}
	// An erased header: cryptsetup says so before asking (exit 1).
	if len(hd.ActiveKeyslots()) == 0 {
		return nil, -1, usageErr("no usable keyslot is available")
	}
	pass, _, err := readSecret(env, p, "Enter passphrase: ")
	if err != nil {
		return nil, -1, err
	}
	defer clear(pass)
	return h.VolumeKey(ctx, pass, blkcrypt.KeyOptions{Keyslot: keyslotOpt(p)})
}

// pbkdfOptions maps the cryptsetup PBKDF flags. Each numeric flag is a
// 32-bit unsigned value in cryptsetup, which refuses anything outside.
func pbkdfOptions(p *parsed) (blkcrypt.PBKDFOptions, error) {
	o := blkcrypt.PBKDFOptions{Type: p.str("pbkdf"), Hash: p.str("hash")}
	var v [4]uint64
	for i, name := range []string{"iter-time", "pbkdf-force-iterations", "pbkdf-memory", "pbkdf-parallel"} {
		n, err := uintFlag(p, name, 1<<32-1)
		if err != nil {
			return o, err
		}
		v[i] = n
	}
	if p.has("iter-time") {
		o.IterTime = time.Duration(v[0]) * time.Millisecond
	}
	o.Iterations, o.MemoryKiB, o.Parallel = uint32(v[1]), uint32(v[2]), uint32(v[3])
	if p.has("pbkdf-force-iterations") && o.Iterations == 0 {
		return o, usageErr("invalid numeric value for --pbkdf-force-iterations: 0")
	}
	return o, nil
}

// newPassphrase reads the passphrase for a new keyslot: from the file named
// by the positional argument, from --key-file when no existing key is
// needed, or from a prompt with confirmation.
func newPassphrase(env *Env, p *parsed, newFile string, useKeyFile bool) ([]byte, error) {
	if newFile != "" {
		f, err := os.Open(newFile)
		if err != nil {
			return nil, usageErr("cannot open new key file: %v", err)
		}
		defer f.Close()
		b, err := keyinput.ReadKeyFile(f, keyinput.Options{Offset: p.int("new-keyfile-offset", 0), Size: p.int("new-keyfile-size", 0), Exact: p.has("new-keyfile-size")})
		if err != nil {
			return nil, usageErr("%v", err)
		}
		if len(b) == 0 {
			return nil, usageErr("new key file is empty")
		}
		return b, nil
	}
	if useKeyFile {
		b, _, err := readSecret(env, p, "Enter passphrase for the new volume: ")
		if err != nil {
			return nil, newSecretErr(err)
		}
		if len(b) == 0 {
			return nil, usageErr("empty passphrase")
		}
		return b, nil
	}
	if env.Prompt != nil && env.StdinIsTerminal {
		a, err := env.Prompt("Enter new passphrase: ")
		if err != nil {
			return nil, usageErr("reading passphrase: %v", err)
		}
		b, err := env.Prompt("Verify passphrase: ")
		if err != nil {
			clear(a)
			return nil, usageErr("reading passphrase: %v", err)
		}
		defer clear(b)
		if subtle.ConstantTimeCompare(a, b) != 1 {
			clear(a)
			return nil, usageErr("passphrases do not match")
		}
		return a, nil
	}
	b, err := keyinput.ReadPassphrase(env.Stdin, keyinput.Options{})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if len(b) == 0 {
		return nil, usageErr("empty passphrase")
	}
	return b, nil
}

func runTestPassphrase(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	// Other formats (tcrypt, loopaes, …): unlocking is opening; nothing is
	// written because the volume is opened read-only.
	t := volumeType(p, dev)
	if t == "bitlk" && p.str("volume-key-file") != "" {
		return usageErr("a volume key cannot be checked for BITLK devices (--test-passphrase with --volume-key-file)")
	}
	if t != "" && t != "luks" && t != "luks1" && t != "luks2" {
		v, err := openVolume(ctx, env, p, dev, true)
		if err != nil {
			return err
		}
		return v.Close()
	}
	h, err := openLUKS(ctx, p, dev, true)
	if err != nil {
		return err
	}
	defer h.Close()
	key, slot, err := unlock(ctx, env, p, h)
	if err != nil {
		return err
	}
	clear(key)
	if slot >= 0 {
		fmt.Fprintf(env.Stderr, "Key slot %d unlocked.\n", slot)
	}
	return nil
}

func runAddKey(ctx context.Context, env *Env, p *parsed) error {
	if len(p.args) < 1 || len(p.args) > 2 {
		return usageErr("usage: add-key DEVICE [NEW_KEY_FILE]")
	}
	newFile := ""
	if len(p.args) == 2 {
		newFile = p.args[1]
	}
	h, err := openLUKS(ctx, p, p.args[0], false)
	if err != nil {
		return err
	}
	defer h.Close()
	hd, err := h.Header(ctx)
	if err != nil {
		return err
	}
	// The existing key: --volume-key-file, or a passphrase that unlocks any
	// slot (--key-slot names the new slot here, as in cryptsetup). It is
	// checked before the new passphrase is asked for, and the key it gives
	// authorises the new keyslot (no second derivation).
	var key []byte
	if vk := p.str("volume-key-file"); vk != "" {
		vkey, err := readVolumeKeyFile(vk, hd.KeySize())
		if err != nil {
			return err
		}
		key, _, err = h.VolumeKey(ctx, nil, blkcrypt.KeyOptions{VolumeKey: vkey})
		clear(vkey)
		if err != nil {
			return err
		}
	} else {
		pass, _, err := readSecret(env, p, "Enter any existing passphrase: ")
		if err != nil {
			return err
		}
		key, _, err = h.VolumeKey(ctx, pass, blkcrypt.KeyOptions{})
		clear(pass)
		if err != nil {
			return err
		}
	}
	defer clear(key)
	np, err := newPassphrase(env, p, newFile, false)
	if err != nil {
		return err
	}
	defer clear(np)
	pk, err := pbkdfOptions(p)
	if err != nil {
		return err
	}
	slot, err := h.AddKey(ctx, nil, np, blkcrypt.KeyOptions{PBKDF: pk, NewKeyslot: keyslotOpt(p), VolumeKey: key})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "Key slot %d created.\n", slot)
	return nil
}

func runChangeKey(ctx context.Context, env *Env, p *parsed) error {
	if len(p.args) < 1 || len(p.args) > 2 {
		return usageErr("usage: change-key DEVICE [NEW_KEY_FILE]")
	}
	newFile := ""
	if len(p.args) == 2 {
		newFile = p.args[1]
	}
	h, err := openLUKS(ctx, p, p.args[0], false)
	if err != nil {
		return err
	}
	defer h.Close()
	old, _, err := readSecret(env, p, "Enter passphrase to be changed: ")
	if err != nil {
		return err
	}
	defer clear(old)
	// The old passphrase is checked before a new one is asked for, as
	// cryptsetup does. ChangeKey writes the new keyslot before it removes
	// the old one, so a crash leaves one of the two passphrases working.
	oldSlot, err := h.TestPassphrase(ctx, old, blkcrypt.KeyOptions{Keyslot: keyslotOpt(p)})
	if err != nil {
		return err
	}
	np, err := newPassphrase(env, p, newFile, false)
	if err != nil {
		return err
	}
	defer clear(np)
	pk, err := pbkdfOptions(p)
	if err != nil {
		return err
	}
	slot, err := h.ChangeKey(ctx, old, np, blkcrypt.KeyOptions{PBKDF: pk, Keyslot: blkcrypt.Slot(oldSlot)})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "Key slot %d created.\n", slot)
	return nil
}

func runRemoveKey(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	h, err := openLUKS(ctx, p, dev, false)
	if err != nil {
		return err
	}
	defer h.Close()
	pass, _, err := readSecret(env, p, "Enter passphrase to be deleted: ")
	if err != nil {
		return err
	}
	slot, err := h.RemoveKey(ctx, pass, blkcrypt.KeyOptions{Keyslot: keyslotOpt(p)})
	clear(pass)
	if errors.Is(err, blkcrypt.ErrWouldDestroy) {
		// The last keyslot: the passphrase opened it (slot); cryptsetup
		// asks only now.
		if err := confirm(env, p, lastKeyslotWarning, ExitPermission, abortedKeyslotMsg); err != nil {
			return err
		}
		err = h.KillSlot(ctx, slot, blkcrypt.KeyOptions{Force: true})
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "Key slot %d removed.\n", slot)
	return nil
}

func runKillSlot(ctx context.Context, env *Env, p *parsed) error {
	if len(p.args) != 2 {
		return usageErr("usage: kill-slot DEVICE N")
	}
	var slot int
	if _, err := fmt.Sscan(p.args[1], &slot); err != nil {
		return usageErr("keyslot %q is not a number", p.args[1])
	}
	h, err := openLUKS(ctx, p, p.args[0], false)
	if err != nil {
		return err
	}
	defer h.Close()
	hd, err := h.Header(ctx)
	if err != nil {
		return err
	}
	act := hd.ActiveKeyslots()
	if len(act) == 1 && act[0] == slot {
		if err := confirm(env, p, lastKeyslotWarning, ExitPermission, abortedKeyslotMsg); err != nil {
			return err
		}
	}
	// With a key file, cryptsetup first checks that the passphrase opens a
	// keyslot other than the one to be removed.
	if p.has("key-file") && slices.Contains(act, slot) {
		pass, _, err := readSecret(env, p, "Enter any remaining passphrase: ")
		if err != nil {
			return err
		}
		opened := false
		for _, s := range act {
			if s == slot {
				continue
			}
			_, err := h.TestPassphrase(ctx, pass, blkcrypt.KeyOptions{Keyslot: blkcrypt.Slot(s)})
			if opened = err == nil; opened || ctx.Err() != nil {
				break
			}
		}
		clear(pass)
		if err := ctx.Err(); err != nil {
			return err
		}
		if !opened {
			return blkcrypt.ErrWrongPassphrase
		}
	}
	// Confirmed above (or batch mode): the last keyslot may go.
	if err := h.KillSlot(ctx, slot, blkcrypt.KeyOptions{Force: true}); err != nil {
		if errors.Is(err, blkcrypt.ErrInvalidOptions) { // a keyslot out of range or inactive
			return usageErr("%v", err)
		}
		return err
	}
	fmt.Fprintf(env.Stderr, "Key slot %d removed.\n", slot)
	return nil
}

func runHeaderBackup(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	out := p.str("header-backup-file")
	if out == "" {
		return usageErr("--header-backup-file is required")
	}
	exists := &exitError{ExitBusy, fmt.Errorf("backup file %s already exists", out)}
	if _, err := os.Stat(out); err == nil {
		return exists
	}
	delete(p.set, "type") // cryptsetup ignores --type for luksHeaderBackup
	h, err := openLUKS(ctx, p, dev, true)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.BackupHeaderFile(ctx, out); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return exists
		}
		return err
	}
	return nil
}

func runHeaderRestore(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	in := p.str("header-backup-file")
	if in == "" {
		return usageErr("--header-backup-file is required")
	}
	backup, err := os.ReadFile(in)
	if err != nil {
		return usageErr("cannot read backup: %v", err)
	}
	bh, err := blkcrypt.ReadHeaderBackup(ctx, backup)
	if err != nil {
		return usageErr("%v", err)
	}
	if !blkcrypt.IsURI(dev) {
		f, err := openDevice(dev, true)
		if err != nil {
			return err
		}
		f.Close()
	}
	// The library refuses a backup that does not fit the device, then a
	// device that holds a header (ErrWouldDestroy): cryptsetup asks there,
	// naming the header it replaces.
	err = blkcrypt.RestoreLUKSHeader(ctx, dev, backup, blkcrypt.RestoreOptions{})
	if errors.Is(err, blkcrypt.ErrWouldDestroy) {
		h, herr := blkcrypt.OpenLUKS(ctx, dev, blkcrypt.LUKSOptions{ReadOnly: true})
		if herr != nil {
			return herr
		}
		cur, herr := h.Header(ctx)
		h.Close()
		if herr != nil {
			return herr
		}
		if err := confirm(env, p, restoreWarning(dev, cur.Version(), cur.UUID() == bh.UUID()), ExitUsage, abortedMsg); err != nil {
			return err
		}
		err = blkcrypt.RestoreLUKSHeader(ctx, dev, backup, blkcrypt.RestoreOptions{Force: true})
	}
	if errors.Is(err, blkcrypt.ErrInvalidOptions) || errors.Is(err, blkcrypt.ErrDeviceTooSmall) {
		return usageErr("%v", err) // cryptsetup's code for a backup that does not fit
	}
	return err
}

// runFormat creates a LUKS volume: the flags become
// blkcrypt.FormatOptions.
func runFormat(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	o := blkcrypt.FormatOptions{
		Type: p.str("type"), Cipher: p.str("cipher"), Hash: p.str("hash"),
		UUID: p.str("uuid"), Label: p.str("label"), Subsystem: p.str("subsystem"),
		Header: p.str("header"),
	}
	if o.Type != "" && o.Type != "luks" && o.Type != "luks1" && o.Type != "luks2" {
		return usageErr("unknown --type %q for format", o.Type)
	}
	bits := p.int("key-size", 512)
	if bits <= 0 || bits%8 != 0 || bits > 4096 {
		return usageErr("--key-size %d is not a positive multiple of 8", bits)
	}
	o.KeySize = int(bits / 8)
	if p.has("sector-size") {
		o.SectorSize = int(p.int("sector-size", 0))
	}
	if o.Offset, err = uintFlag(p, "offset", 1<<63-1); err != nil {
		return err
	}
	if o.Align, err = uintFlag(p, "align-payload", 1<<32-1); err != nil {
		return err
	}
	if p.has("key-slot") {
		o.Keyslot = blkcrypt.Slot(int(p.int("key-slot", 0)))
	}
	if o.PBKDF, err = pbkdfOptions(p); err != nil {
		return err
	}
	if p.has("size") {
		if o.Size = p.int("size", 0); o.Size <= 0 {
			return usageErr("--size must be positive")
		}
	}
	if blkcrypt.IsURI(dev) {
		// A remote device exists or not at connection time; Format says.
	} else if st, err := os.Stat(dev); err != nil {
		if !p.has("size") {
			return deviceErr(fmt.Errorf("device %s does not exist (give --size to create an image)", dev))
		}
	} else if st.IsDir() {
		return deviceErr(fmt.Errorf("device %s is a directory", dev))
	}
	// As cryptsetup, on a terminal: the header goes over whatever the
	// target holds. An image file that does not exist yet loses nothing.
	target := dev
	if o.Header != "" {
		target = o.Header
	}
	if _, err := os.Stat(target); err == nil {
		if err := confirm(env, p, overwriteWarning(target), ExitUsage, abortedMsg); err != nil {
			return err
		}
	}
	if vk := p.str("volume-key-file"); vk != "" {
		if o.VolumeKey, err = readVolumeKeyFile(vk, o.KeySize); err != nil {
			return err
		}
		defer clear(o.VolumeKey)
	}
	pass, err := newPassphrase(env, p, "", p.has("key-file"))
	if err != nil {
		return err
	}
	defer clear(pass)
	// The header write is not interrupted: a signal after the KDF lets
	// Format finish (ctx only stops it before anything is written). The
	// overwrite was confirmed above, as cryptsetup confirms it (or the
	// user chose batch mode), so Format may replace a header.
	o.Force = true
	return blkcrypt.Format(ctx, dev, pass, o)
}

// uintFlag returns a non-negative numeric flag no larger than max; a value
// outside is refused as cryptsetup refuses it ("invalid numeric value").
func uintFlag(p *parsed, name string, max uint64) (uint64, error) {
	if !p.has(name) {
		return 0, nil
	}
	n := p.int(name, 0)
	if n < 0 || uint64(n) > max {
		return 0, usageErr("invalid numeric value for --%s: %s", name, p.str(name))
	}
	return uint64(n), nil
}

// runDump prints the header like cryptsetup luksDump.
func runDump(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	typ := volumeType(p, dev)
	if d, ok := typeDumpers[typ]; ok {
		return d(env, p, dev)
	}
	h, err := openLUKS(ctx, p, dev, true)
	if err != nil {
		return err
	}
	defer h.Close()
	o := blkcrypt.DumpOptions{Device: dev}
	if p.bool("dump-volume-key") {
		key, _, err := unlock(ctx, env, p, h)
		if err != nil {
			return err
		}
		defer clear(key)
		o.VolumeKey = key
		return h.Dump(ctx, env.Stdout, o)
	}
	switch {
	case p.bool("dump-json-metadata"):
		o.Format = blkcrypt.DumpJSONMetadata
	case p.bool("json"):
		o.Format = blkcrypt.DumpJSON
	}
	err = h.Dump(ctx, env.Stdout, o)
	if o.Format == blkcrypt.DumpJSONMetadata && errors.Is(err, blkcrypt.ErrUnsupported) {
		return usageErr("dump operation is not supported for this device type")
	}
	return err
}
