package cli

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
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

// luksDevice opens the header device (the --header file or DEVICE itself)
// and reads the header.
func luksDevice(ctx context.Context, p *parsed, path string, readOnly bool) (deviceFile, luksutil.Device, luksutil.Header, error) {
	hpath := path
	if h := p.str("header"); h != "" {
		hpath = h
	}
	// --type, when given, must name LUKS (and the version the device
	// holds), as cryptsetup requires for its LUKS actions.
	typ := p.str("type")
	if typ != "" && typ != "luks" && typ != "luks1" && typ != "luks2" {
		return nil, nil, nil, usageErr("--type %q is not a LUKS type", typ)
	}
	var f deviceFile
	var dev luksutil.Device
	if blkcrypt.IsURI(hpath) {
		var err error
		if f, dev, err = uriDevice(ctx, hpath, readOnly); err != nil {
			return nil, nil, nil, err
		}
	} else {
		if f, err := openDevice(hpath, true); err != nil {
			return nil, nil, nil, err
		} else {
			f.Close()
		}
		// Locked as the library locks it: a header change waits for no one
		// and is refused (busy) while a volume on it is open anywhere.
		lf, err := blkcrypt.OpenFileLocked(hpath, readOnly)
		if err != nil {
			return nil, nil, nil, err
		}
		f, dev = lf, luksutil.File{File: lf.File}
	}
	bh, err := blkcrypt.ReadHeaderContext(ctx, dev)
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	h := bh.(luksutil.Header) // the verbs below add keys too
	if typ != "" && typ != "luks" && typ != fmt.Sprintf("luks%d", h.Version()) {
		f.Close()
		return nil, nil, nil, usageErr("device holds LUKS%d, not %s", h.Version(), typ)
	}
	return f, dev, h, nil
}

func slotOpt(p *parsed) int {
	if p.has("key-slot") {
		return int(p.int("key-slot", -1))
	}
	return anySlot
}

// unlock returns the volume key from --volume-key-file or a passphrase.
func unlock(ctx context.Context, env *Env, p *parsed, h luksutil.Header, dev luksutil.Device) ([]byte, int, error) {
	if vk := p.str("volume-key-file"); vk != "" {
		key, err := readVolumeKeyFile(vk, h.KeySize())
		if err != nil {
			return nil, -1, err
		}
		if !h.VolumeKeyDigestOK(key) {
			clear(key)
			return nil, -1, luksutil.ErrWrongKey
		}
		return key, -1, nil
	}
	// An erased header: cryptsetup says so before asking (exit 1).
	if len(h.ActiveKeyslots()) == 0 {
		return nil, -1, usageErr("no usable keyslot is available")
	}
	pass, _, err := readSecret(env, p, "Enter passphrase: ")
	if err != nil {
		return nil, -1, err
	}
	defer clear(pass)
	key, slot, err := h.UnlockContext(ctx, dev, pass, slotOpt(p))
	if err != nil {
		return nil, -1, err
	}
	return key, slot, nil
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
	f, hdev, h, err := luksDevice(ctx, p, dev, true)
	if err != nil {
		return err
	}
	defer f.Close()
	key, slot, err := unlock(ctx, env, p, h, hdev)
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
	f, hdev, h, err := luksDevice(ctx, p, p.args[0], false)
	if err != nil {
		return err
	}
	defer f.Close()
	// The existing key: --volume-key-file, or a passphrase that unlocks any
	// slot (--key-slot names the new slot here, as in cryptsetup).
	var key []byte
	if vk := p.str("volume-key-file"); vk != "" {
		if key, err = readVolumeKeyFile(vk, h.KeySize()); err != nil {
			return err
		}
		if !h.VolumeKeyDigestOK(key) {
			clear(key)
			return luksutil.ErrWrongKey
		}
	} else {
		pass, _, err := readSecret(env, p, "Enter any existing passphrase: ")
		if err != nil {
			return err
		}
		key, _, err = h.UnlockContext(ctx, hdev, pass, anySlot)
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
	slot, err := h.AddKey(hdev, key, np, luksutil.KeyslotOptions{Slot: slotOpt(p), PBKDF: kdf.Options(pk)})
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
	f, hdev, h, err := luksDevice(ctx, p, p.args[0], false)
	if err != nil {
		return err
	}
	defer f.Close()
	old, _, err := readSecret(env, p, "Enter passphrase to be changed: ")
	if err != nil {
		return err
	}
	defer clear(old)
	// The old passphrase is checked (the only KDF run on it) before a new
	// one is asked for. The new keyslot is written before the old one is
	// removed, so a crash leaves one of the two passphrases working.
	key, oldSlot, err := h.UnlockContext(ctx, hdev, old, slotOpt(p))
	if err != nil {
		return err
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
	slot, err := h.AddKey(hdev, key, np, luksutil.KeyslotOptions{Slot: anySlot, PBKDF: kdf.Options(pk)})
	if err != nil {
		return err
	}
	if err := h.RemoveKey(hdev, oldSlot); err != nil {
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
	f, hdev, h, err := luksDevice(ctx, p, dev, false)
	if err != nil {
		return err
	}
	defer f.Close()
	pass, _, err := readSecret(env, p, "Enter passphrase to be deleted: ")
	if err != nil {
		return err
	}
	key, slot, err := h.UnlockContext(ctx, hdev, pass, slotOpt(p))
	clear(pass)
	if err != nil {
		return err
	}
	clear(key)
	if act := h.ActiveKeyslots(); len(act) == 1 && act[0] == slot {
		if err := confirm(env, p, lastKeyslotWarning, ExitPermission, abortedKeyslotMsg); err != nil {
			return err
		}
	}
	if err := h.RemoveKey(hdev, slot); err != nil {
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
	f, hdev, h, err := luksDevice(ctx, p, p.args[0], false)
	if err != nil {
		return err
	}
	defer f.Close()
	if act := h.ActiveKeyslots(); len(act) == 1 && act[0] == slot {
		if err := confirm(env, p, lastKeyslotWarning, ExitPermission, abortedKeyslotMsg); err != nil {
			return err
		}
	}
	// With a key file, cryptsetup first checks that the passphrase opens a
	// keyslot other than the one to be removed.
	if p.has("key-file") && slices.Contains(h.ActiveKeyslots(), slot) {
		pass, _, err := readSecret(env, p, "Enter any remaining passphrase: ")
		if err != nil {
			return err
		}
		opened := false
		for _, s := range h.ActiveKeyslots() {
			if s == slot {
				continue
			}
			key, _, err := h.UnlockContext(ctx, hdev, pass, s)
			clear(key)
			if opened = err == nil; opened {
				break
			}
		}
		clear(pass)
		if !opened {
			return luksutil.ErrWrongPassphrase
		}
	}
	if err := h.RemoveKey(hdev, slot); err != nil {
		if errors.Is(err, luksutil.ErrInvalidSlot) || errors.Is(err, luksutil.ErrSlotInactive) {
			return usageErr("%v", err)
		}
		return err
	}
	fmt.Fprintf(env.Stderr, "Key slot %d removed.\n", slot)
	return nil
}

// headerSize is how many bytes header-backup saves, as cryptsetup does: the
// binary header(s) and the keyslot areas, not the gap before the data.
func headerSize(h blkcrypt.Header) int64 {
	switch hh := h.(type) {
	case *luks1.Header:
		return (hh.HeaderSize() + 4095) / 4096 * 4096
	case *luks2.Header:
		return int64(hh.HeaderSize())
	}
	return h.DataOffset()
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
	if _, err := os.Stat(out); err == nil {
		return &exitError{ExitBusy, fmt.Errorf("backup file %s already exists", out)}
	}
	delete(p.set, "type") // cryptsetup ignores --type for luksHeaderBackup
	f, _, h, err := luksDevice(ctx, p, dev, true)
	if err != nil {
		return err
	}
	defer f.Close()
	n := headerSize(h)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return deviceErr(fmt.Errorf("reading header: %w", err))
	}
	return os.WriteFile(out, buf, 0o400)
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
	bh, err := blkcrypt.ReadHeader(luksutil.NewMemDevice(len(backup), backup))
	if err != nil {
		return usageErr("backup file does not hold a valid LUKS header: %v", err)
	}
	if int64(len(backup)) != headerSize(bh) {
		return usageErr("backup file is %d bytes, its header needs %d", len(backup), headerSize(bh))
	}
	var d luksutil.Device
	if blkcrypt.IsURI(dev) {
		f, ud, err := uriDevice(ctx, dev, false)
		if err != nil {
			return err
		}
		defer f.Close()
		d = ud
	} else {
		if f, err := openDevice(dev, true); err != nil {
			return err
		} else {
			f.Close()
		}
		f, err := blkcrypt.OpenFileLocked(dev, false)
		if err != nil {
			return err
		}
		defer f.Close()
		d = luksutil.File{File: f.File}
	}
	// If the device has a header, the data offset must agree, or the data
	// would be lost.
	cur, err := blkcrypt.ReadHeader(d)
	if err == nil && cur.DataOffset() != bh.DataOffset() {
		return usageErr("data offset differs between the backup (%d) and the device (%d)", bh.DataOffset(), cur.DataOffset())
	}
	if n, serr := d.Size(); serr == nil && n < int64(len(backup)) {
		return usageErr("device is smaller than the header backup") // cryptsetup's code for a device too small
	}
	if err == nil {
		if err := confirm(env, p, restoreWarning(dev, cur.Version(), cur.UUID() == bh.UUID()), ExitUsage, abortedMsg); err != nil {
			return err
		}
	}
	restore := luks1.RestoreHeader
	if bh.Version() == 2 {
		restore = luks2.RestoreHeader
	}
	return restore(d, backup)
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
	f, hdev, h, err := luksDevice(ctx, p, dev, true)
	if err != nil {
		return err
	}
	defer f.Close()
	w := env.Stdout
	if p.bool("dump-volume-key") {
		key, _, err := unlock(ctx, env, p, h, hdev)
		if err != nil {
			return err
		}
		defer clear(key)
		fmt.Fprintf(w, "LUKS header information for %s\nCipher name:   \t%s\nCipher mode:   \t%s\nPayload offset:\t%d\nUUID:          \t%s\nMK bits:       \t%d\n",
			dev, cipherName(h.Cipher()), cipherMode(h.Cipher()), h.DataOffset()/512, h.UUID(), h.KeySize()*8)
		fmt.Fprint(w, "MK dump:\t")
		hexDump(w, key, "\t\t")
		return nil
	}
	switch hh := h.(type) {
	case *luks1.Header:
		if p.bool("dump-json-metadata") {
			return usageErr("dump operation is not supported for this device type")
		}
		if p.bool("json") {
			return dumpLUKS1JSON(w, hh)
		}
		dumpLUKS1(w, dev, hh)
		return nil
	}
	return doDumpLUKS2(w, p, dev, h)
}

func cipherName(spec string) string { n, _, _ := strings.Cut(spec, "-"); return n }
func cipherMode(spec string) string { _, m, _ := strings.Cut(spec, "-"); return m }

// hexDump prints bytes as cryptsetup does: 16 per line, space separated.
func hexDump(w io.Writer, b []byte, indent string) {
	for i := 0; i < len(b); i += 16 {
		if i > 0 {
			fmt.Fprint(w, indent)
		}
		end := min(i+16, len(b))
		for j := i; j < end; j++ {
			fmt.Fprintf(w, "%02x ", b[j])
		}
		fmt.Fprintln(w)
	}
}

func dumpLUKS1(w io.Writer, dev string, h *luks1.Header) {
	ph := h.Phdr()
	fmt.Fprintf(w, "LUKS header information for %s\n\n", dev)
	fmt.Fprintf(w, "Version:       \t%d\nCipher name:   \t%s\nCipher mode:   \t%s\nHash spec:     \t%s\n", ph.Version, ph.CipherName(), ph.CipherMode(), ph.HashSpec())
	fmt.Fprintf(w, "Payload offset:\t%d\nMK bits:       \t%d\n", ph.PayloadOffset, ph.KeyBytes*8)
	fmt.Fprint(w, "MK digest:     \t")
	hexDump(w, ph.MKDigest[:], "               \t")
	fmt.Fprint(w, "MK salt:       \t")
	hexDump(w, ph.MKDigestSalt[:], "               \t")
	fmt.Fprintf(w, "MK iterations: \t%d\nUUID:          \t%s\n\n", ph.MKDigestIterations, ph.UUID())
	for i, ks := range ph.Keyslots {
		if !ks.Enabled() {
			fmt.Fprintf(w, "Key Slot %d: DISABLED\n", i)
			continue
		}
		fmt.Fprintf(w, "Key Slot %d: ENABLED\n\tIterations:         \t%d\n\tSalt:               \t", i, ks.Iterations)
		hexDump(w, ks.Salt[:], "\t                      \t")
		fmt.Fprintf(w, "\tKey material offset:\t%d\n\tAF stripes:            \t%d\n", ks.KeyMaterialOffset, ks.Stripes)
	}
}

func dumpLUKS1JSON(w io.Writer, h *luks1.Header) error {
	ph := h.Phdr()
	fmt.Fprintf(w, "{\"version\":1,\"uuid\":%q,\"cipher\":%q,\"hash\":%q,\"payload_offset\":%d,\"key_size\":%d,\"mk_iterations\":%d,\"keyslots\":{",
		ph.UUID(), h.Cipher(), ph.HashSpec(), ph.PayloadOffset, ph.KeyBytes, ph.MKDigestIterations)
	first := true
	for i, ks := range ph.Keyslots {
		if !ks.Enabled() {
			continue
		}
		if !first {
			fmt.Fprint(w, ",")
		}
		first = false
		fmt.Fprintf(w, "\"%d\":{\"iterations\":%d,\"key_material_offset\":%d,\"stripes\":%d}", i, ks.Iterations, ks.KeyMaterialOffset, ks.Stripes)
	}
	fmt.Fprintln(w, "}}")
	return nil
}
