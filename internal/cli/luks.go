package cli

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/partition"
)

// The LUKS key and header verbs: each maps its options onto one method
// of the library's LUKS handle (blkcrypt.OpenLUKS), which owns the lock,
// the crash ordering and the checks.

// headerFlag is a detached LUKS header.
type headerFlag struct {
	Header string `flag:"header" help:"detached header file" def:"DEVICE itself"`
}

// luksFlags name the LUKS header a verb works on and the version it must
// hold.
type luksFlags struct {
	Type string `flag:"type" help:"luks, luks1 or luks2; must match the header" def:"what the header holds"`
	headerFlag
}

// partitionFlag puts the header inside a partition of DEVICE.
type partitionFlag struct {
	Partition *string `flag:"partition" help:"a partition of DEVICE: N (as /dev/sdaN), PARTUUID=… or PARTLABEL=…" def:"DEVICE as a whole"`
}

// newKeyFlags read the new passphrase from the NEW_KEY_FILE argument.
type newKeyFlags struct {
	NewKeyfileOffset int64  `flag:"new-keyfile-offset" help:"skip bytes of the new key file" def:"0"`
	NewKeyfileSize   *int64 `flag:"new-keyfile-size" help:"read at most this many bytes of the new key file" def:"all of it"`
}

// pbkdfFlags are the new keyslot's KDF, as cryptsetup's flags.
type pbkdfFlags struct {
	PBKDF      string `flag:"pbkdf" help:"pbkdf2, argon2i or argon2id" def:"argon2id (LUKS2), pbkdf2 (LUKS1)"`
	IterTime   *int64 `flag:"iter-time" short:"i" help:"PBKDF unlock time in ms" def:"2000"`
	Iterations *int64 `flag:"pbkdf-force-iterations" help:"fixed PBKDF iterations / argon2 time cost" def:"benchmarked"`
	MemoryKiB  *int64 `flag:"pbkdf-memory" help:"argon2 memory in KiB" def:"1048576"`
	Parallel   *int64 `flag:"pbkdf-parallel" help:"argon2 threads" def:"4"`
}

// path is the header device: the --header file or DEVICE itself, refused
// before anything is opened when --type names no LUKS version (cryptsetup
// requires a LUKS type for its LUKS actions) or when the file is missing
// or a directory (exit 4).
func (f luksFlags) path(dev string) (string, error) {
	hpath := dev
	if f.Header != "" {
		hpath = f.Header
	}
	if f.Type != "" && f.Type != "luks" && f.Type != "luks1" && f.Type != "luks2" {
		return "", usageErr("--type %q is not a LUKS type", f.Type)
	}
	return hpath, checkDevice(hpath, true)
}

// open opens the LUKS handle on the header device (see path), inside
// partition part when given; a --type that names the other version is
// refused. Each method of the handle takes the lock the library takes
// (busy while a volume on it is open anywhere) and reads the header afresh.
func (f luksFlags) open(ctx context.Context, dev string, part *string, readOnly bool) (*blkcrypt.LUKS, error) {
	hpath, err := f.path(dev)
	if err != nil {
		return nil, err
	}
	o := blkcrypt.LUKSOptions{ReadOnly: readOnly}
	var h *blkcrypt.LUKS
	switch {
	case part == nil:
		h, err = blkcrypt.OpenLUKS(ctx, hpath, o)
	case f.Header != "":
		return nil, usageErr("--partition and --header: a detached header is not in a partition")
	case blkcrypt.IsURI(hpath):
		return nil, usageErr("--partition of a URI device is not supported by the LUKS header verbs")
	default:
		h, err = blkcrypt.OpenLUKSPartition(ctx, hpath, *part, o)
		if errors.Is(err, partition.ErrNotFound) || errors.Is(err, partition.ErrNoTable) || errors.Is(err, partition.ErrAmbiguous) || errors.Is(err, partition.ErrCorrupt) {
			return nil, deviceErr(fmt.Errorf("%s: %w", hpath, err))
		}
	}
	if err != nil {
		return nil, err
	}
	if f.Type != "" && f.Type != "luks" {
		hd, err := h.Header(ctx)
		if err != nil {
			h.Close()
			return nil, err
		}
		if f.Type != fmt.Sprintf("luks%d", hd.Version()) {
			h.Close()
			return nil, usageErr("device holds LUKS%d, not %s", hd.Version(), f.Type)
		}
	}
	return h, nil
}

// slotPtr is an optional --key-slot for the handle: nil when absent.
func slotPtr(n *int64) *int {
	if n == nil {
		return nil
	}
	return blkcrypt.Slot(int(*n))
}

// unlock returns the volume key from --volume-key-file or a passphrase,
// and the keyslot that opened (-1 for a volume key file).
func unlock(ctx context.Context, env *Env, f *openFlags, h *blkcrypt.LUKS) ([]byte, int, error) {
	hd, err := h.Header(ctx)
	if err != nil {
		return nil, -1, err
	}
	if vk := f.VolumeKeyFile; vk != "" {
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
	pass, err := f.existing(ctx, env, h, f.keyFileFlags, "Enter passphrase: ") // verbs_token.go: a token first
	if err != nil {
		return nil, -1, err
	}
	defer clear(pass)
	return h.VolumeKey(ctx, pass, blkcrypt.KeyOptions{Keyslot: slotPtr(f.KeySlot)})
}

// options maps the cryptsetup PBKDF flags. Each numeric flag is a 32-bit
// unsigned value in cryptsetup, which refuses anything outside.
func (f pbkdfFlags) options(hash string) (blkcrypt.PBKDFOptions, error) {
	o := blkcrypt.PBKDFOptions{Type: f.PBKDF, Hash: hash}
	var v [4]uint64
	for i, n := range []struct {
		name string
		v    *int64
	}{{"iter-time", f.IterTime}, {"pbkdf-force-iterations", f.Iterations}, {"pbkdf-memory", f.MemoryKiB}, {"pbkdf-parallel", f.Parallel}} {
		x, err := uintFlag(n.name, n.v, 1<<32-1)
		if err != nil {
			return o, err
		}
		v[i] = x
	}
	if f.IterTime != nil {
		o.IterTime = time.Duration(v[0]) * time.Millisecond
	}
	o.Iterations, o.MemoryKiB, o.Parallel = uint32(v[1]), uint32(v[2]), uint32(v[3])
	if f.Iterations != nil && o.Iterations == 0 {
		return o, usageErr("invalid numeric value for --pbkdf-force-iterations: 0")
	}
	return o, nil
}

// uintFlag returns an optional non-negative numeric flag no larger than
// max (0 when absent); a value outside is refused as cryptsetup refuses it
// ("invalid numeric value").
func uintFlag(name string, v *int64, max uint64) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 0 || uint64(*v) > max {
		return 0, usageErr("invalid numeric value for --%s: %d", name, *v)
	}
	return uint64(*v), nil
}

// newSecret reads the passphrase for a new keyslot: from the file named
// by the positional argument, from --key-file when no existing key is
// needed, or from a prompt with confirmation.
func newSecret(env *Env, k keyFileFlags, nk newKeyFlags, newFile string, useKeyFile bool) ([]byte, error) {
	if newFile != "" {
		f, err := os.Open(newFile)
		if err != nil {
			return nil, usageErr("cannot open new key file: %v", err)
		}
		defer f.Close()
		o := keyinput.Options{Offset: nk.NewKeyfileOffset, Exact: nk.NewKeyfileSize != nil}
		if nk.NewKeyfileSize != nil {
			o.Size = *nk.NewKeyfileSize
		}
		b, err := keyinput.ReadKeyFile(f, o)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		if len(b) == 0 {
			return nil, usageErr("new key file is empty")
		}
		return b, nil
	}
	if useKeyFile {
		b, _, err := k.read(env, false, "Enter passphrase for the new volume: ")
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

// testPassphraseOptions: the volume as any verb opens it, in --partition.
type testPassphraseOptions struct {
	openFlags
	partitionFlag
}

func runTestPassphrase(ctx context.Context, env *Env, o *testPassphraseOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	// Other formats (tcrypt, loopaes, …): unlocking is opening; nothing is
	// written because the volume is opened read-only.
	t := o.volumeType(ctx, o.Partition, dev)
	if t == "bitlk" && o.VolumeKeyFile != "" {
		return usageErr("a volume key cannot be checked for BITLK devices (--test-passphrase with --volume-key-file)")
	}
	if t != "" && t != "luks" && t != "luks1" && t != "luks2" {
		v, err := openVolume(ctx, env, &o.openFlags, o.Partition, dev, true, nil)
		if err != nil {
			return err
		}
		return v.Close()
	}
	h, err := luksFlags{Type: o.Type, headerFlag: o.headerFlag}.open(ctx, dev, o.Partition, true)
	if err != nil {
		return err
	}
	defer h.Close()
	key, slot, err := unlock(ctx, env, &o.openFlags, h)
	if err != nil {
		return err
	}
	clear(key)
	if slot >= 0 {
		fmt.Fprintf(env.Stderr, "Key slot %d unlocked.\n", slot)
	}
	return nil
}

type addKeyOptions struct {
	luksFlags
	keyFileFlags
	newKeyFlags
	VolumeKeyFile string `flag:"volume-key-file" help:"authorise the new keyslot with a raw volume key from a file"`
	KeySlot       *int64 `flag:"key-slot" short:"S" help:"the new keyslot's number" def:"the first free slot"`
	Hash          string `flag:"hash" short:"h" help:"hash of the new keyslot's PBKDF" def:"sha256"`
	pbkdfFlags
	partitionFlag
	tokenFlags // the existing passphrase from a token (verbs_token.go)
}

func runAddKey(ctx context.Context, env *Env, o *addKeyOptions, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return usageErr("usage: add-key DEVICE [NEW_KEY_FILE]")
	}
	newFile := ""
	if len(args) == 2 {
		newFile = args[1]
	}
	h, err := o.open(ctx, args[0], o.Partition, false)
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
	if o.VolumeKeyFile != "" {
		vkey, err := readVolumeKeyFile(o.VolumeKeyFile, hd.KeySize())
		if err != nil {
			return err
		}
		key, _, err = h.VolumeKey(ctx, nil, blkcrypt.KeyOptions{VolumeKey: vkey})
		clear(vkey)
		if err != nil {
			return err
		}
	} else {
		pass, err := o.tokenFlags.existing(ctx, env, h, o.keyFileFlags, "Enter any existing passphrase: ")
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
	np, err := newSecret(env, o.keyFileFlags, o.newKeyFlags, newFile, false)
	if err != nil {
		return err
	}
	defer clear(np)
	pk, err := o.pbkdfFlags.options(o.Hash)
	if err != nil {
		return err
	}
	slot, err := h.AddKey(ctx, nil, np, blkcrypt.KeyOptions{PBKDF: pk, NewKeyslot: slotPtr(o.KeySlot), VolumeKey: key})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "Key slot %d created.\n", slot)
	return nil
}

type changeKeyOptions struct {
	luksFlags
	keyFileFlags
	newKeyFlags
	KeySlot *int64 `flag:"key-slot" short:"S" help:"the keyslot to change" def:"every slot"`
	Hash    string `flag:"hash" short:"h" help:"hash of the new keyslot's PBKDF" def:"sha256"`
	pbkdfFlags
	partitionFlag
}

func runChangeKey(ctx context.Context, env *Env, o *changeKeyOptions, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return usageErr("usage: change-key DEVICE [NEW_KEY_FILE]")
	}
	newFile := ""
	if len(args) == 2 {
		newFile = args[1]
	}
	h, err := o.open(ctx, args[0], o.Partition, false)
	if err != nil {
		return err
	}
	defer h.Close()
	old, _, err := o.keyFileFlags.read(env, false, "Enter passphrase to be changed: ")
	if err != nil {
		return err
	}
	defer clear(old)
	// The old passphrase is checked before a new one is asked for, as
	// cryptsetup does. ChangeKey writes the new keyslot before it removes
	// the old one, so a crash leaves one of the two passphrases working.
	oldSlot, err := h.TestPassphrase(ctx, old, blkcrypt.KeyOptions{Keyslot: slotPtr(o.KeySlot)})
	if err != nil {
		return err
	}
	np, err := newSecret(env, o.keyFileFlags, o.newKeyFlags, newFile, false)
	if err != nil {
		return err
	}
	defer clear(np)
	pk, err := o.pbkdfFlags.options(o.Hash)
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

type removeKeyOptions struct {
	luksFlags
	keyFileFlags
	KeySlot *int64 `flag:"key-slot" short:"S" help:"the keyslot the passphrase must open" def:"every slot"`
	partitionFlag
	batchFlag
}

func runRemoveKey(ctx context.Context, env *Env, o *removeKeyOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	h, err := o.open(ctx, dev, o.Partition, false)
	if err != nil {
		return err
	}
	defer h.Close()
	pass, _, err := o.keyFileFlags.read(env, false, "Enter passphrase to be deleted: ")
	if err != nil {
		return err
	}
	slot, err := h.RemoveKey(ctx, pass, blkcrypt.KeyOptions{Keyslot: slotPtr(o.KeySlot)})
	clear(pass)
	if errors.Is(err, blkcrypt.ErrWouldDestroy) {
		// The last keyslot: the passphrase opened it (slot); cryptsetup
		// asks only now.
		if err := o.confirm(env, lastKeyslotWarning, ExitPermission, abortedKeyslotMsg); err != nil {
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

type killSlotOptions struct {
	luksFlags
	keyFileFlags `def:"key-file=not asked"`
	partitionFlag
	batchFlag
}

func runKillSlot(ctx context.Context, env *Env, o *killSlotOptions, args []string) error {
	if len(args) != 2 {
		return usageErr("usage: kill-slot DEVICE N")
	}
	var slot int
	if _, err := fmt.Sscan(args[1], &slot); err != nil {
		return usageErr("keyslot %q is not a number", args[1])
	}
	h, err := o.open(ctx, args[0], o.Partition, false)
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
		if err := o.confirm(env, lastKeyslotWarning, ExitPermission, abortedKeyslotMsg); err != nil {
			return err
		}
	}
	// With a key file, cryptsetup first checks that the passphrase opens a
	// keyslot other than the one to be removed (KillSlotWith). Confirmed
	// above (or batch mode): the last keyslot may go.
	ko := blkcrypt.KeyOptions{Force: true}
	if o.KeyFile != "" && slices.Contains(act, slot) {
		var pass []byte
		if pass, _, err = o.keyFileFlags.read(env, false, "Enter any remaining passphrase: "); err != nil {
			return err
		}
		err = h.KillSlotWith(ctx, slot, pass, ko)
		clear(pass)
		if errors.Is(err, blkcrypt.ErrWrongPassphrase) {
			err = blkcrypt.ErrWrongPassphrase // cryptsetup's words alone
		}
	} else {
		err = h.KillSlot(ctx, slot, ko)
	}
	if errors.Is(err, blkcrypt.ErrInvalidOptions) { // a keyslot out of range or inactive
		return usageErr("%v", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "Key slot %d removed.\n", slot)
	return nil
}

type headerBackupOptions struct {
	File string `flag:"header-backup-file" help:"the file to write the header backup to"`
	headerFlag
	Type string `flag:"type" help:"ignored, as cryptsetup ignores it"`
}

func runHeaderBackup(ctx context.Context, env *Env, o *headerBackupOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	if o.File == "" {
		return usageErr("--header-backup-file is required")
	}
	exists := &exitError{ExitBusy, fmt.Errorf("backup file %s already exists", o.File)}
	if _, err := os.Stat(o.File); err == nil {
		return exists
	}
	// Any LUKS version: cryptsetup ignores --type for luksHeaderBackup.
	h, err := luksFlags{headerFlag: o.headerFlag}.open(ctx, dev, nil, true)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.BackupHeaderFile(ctx, o.File); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return exists
		}
		return err
	}
	return nil
}

type headerRestoreOptions struct {
	File string `flag:"header-backup-file" help:"the header backup to restore"`
	headerFlag
	batchFlag
}

func runHeaderRestore(ctx context.Context, env *Env, o *headerRestoreOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	if o.File == "" {
		return usageErr("--header-backup-file is required")
	}
	backup, err := os.ReadFile(o.File)
	if err != nil {
		return usageErr("cannot read backup: %v", err)
	}
	bh, err := blkcrypt.ReadHeaderBackup(ctx, backup)
	if err != nil {
		return usageErr("%v", err)
	}
	if o.Header != "" { // the header goes where it lives, as in cryptsetup
		dev = o.Header
	}
	if err := checkDevice(dev, true); err != nil {
		return err
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
		if err := o.confirm(env, restoreWarning(dev, cur.Version(), cur.UUID() == bh.UUID()), ExitUsage, abortedMsg); err != nil {
			return err
		}
		err = blkcrypt.RestoreLUKSHeader(ctx, dev, backup, blkcrypt.RestoreOptions{Force: true})
	}
	if errors.Is(err, blkcrypt.ErrInvalidOptions) || errors.Is(err, blkcrypt.ErrDeviceTooSmall) {
		return usageErr("%v", err) // cryptsetup's code for a backup that does not fit
	}
	return err
}

type formatOptions struct {
	Type         string `flag:"type" help:"luks2 or luks1 (luks is luks2), or integrity (integritysetup format)" def:"luks2"`
	Cipher       string `flag:"cipher" short:"c" help:"cipher specification, e.g. aes-xts-plain64" def:"aes-xts-plain64"`
	KeySize      *int64 `flag:"key-size" short:"s" help:"key size in bits" def:"512"`
	Hash         string `flag:"hash" short:"h" help:"hash of the keyslot's PBKDF and the LUKS digest" def:"sha256"`
	SectorSize   *int64 `flag:"sector-size" help:"encryption sector size in bytes" def:"4096 where the data area allows it, else 512 (LUKS2)"`
	Offset       *int64 `flag:"offset" help:"data start in 512-byte sectors" def:"16 MiB (LUKS2), aligned (LUKS1)"`
	AlignPayload *int64 `flag:"align-payload" help:"align the data offset to this many 512-byte sectors" def:"2048"`
	KeySlot      *int64 `flag:"key-slot" short:"S" help:"key slot number" def:"0"`
	UUID         string `flag:"uuid" help:"volume UUID" def:"random"`
	Label        string `flag:"label" help:"LUKS2 label"`
	Subsystem    string `flag:"subsystem" help:"LUKS2 subsystem"`
	Integrity    string `flag:"integrity" help:"LUKS2 authenticated sectors, as cryptsetup's: aead (--cipher aes-gcm-random or aegis128-random), poly1305 (chacha20-random), hmac-sha256, hmac-sha512 or hmac-sha1 (with a cipher such as aes-xts-plain64; its key is added to --key-size); with --type integrity, integritysetup's tag algorithm (crc32c, sha256, hmac-sha256, …)" def:"none (LUKS2), crc32c (--type integrity)"`
	headerFlag
	keyFileFlags  `def:"key-file=the terminal (asked twice), or stdin"`
	VolumeKeyFile string    `flag:"volume-key-file" help:"use a raw volume key from a file" def:"random"`
	Size          *byteSize `flag:"size" short:"b" help:"create or grow an image file to this many bytes (blkcrypt only; takes K/M/G/T/P/E units)" def:"the file's size"`
	pbkdfFlags
	batchFlag
	integrityFormatFlags // --type integrity: integritysetup format's (type_integrity.go)
}

// runFormat creates a LUKS volume: the options become
// blkcrypt.FormatOptions.
func runFormat(ctx context.Context, env *Env, opts *formatOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	o := blkcrypt.FormatOptions{
		Type: opts.Type, Cipher: opts.Cipher, Hash: opts.Hash,
		UUID: opts.UUID, Label: opts.Label, Subsystem: opts.Subsystem,
		Header: opts.Header, Keyslot: slotPtr(opts.KeySlot),
	}
	if o.Type == blkcrypt.TypeIntegrity {
		return formatIntegrity(ctx, env, opts.Integrity, opts.SectorSize, &opts.integrityFormatFlags, opts.batchFlag, args)
	}
	if o.Type != "" && o.Type != "luks" && o.Type != "luks1" && o.Type != "luks2" {
		return usageErr("unknown --type %q for format", o.Type)
	}
	bits := int64(512)
	if opts.Integrity != "" && opts.Cipher != "" && !strings.Contains(opts.Cipher, "xts") {
		bits = 256 // cryptsetup's default: 256 bits, twice that for XTS
	}
	if o.KeySize, err = keyBits(opts.KeySize, bits, 4096); err != nil {
		return err
	}
	if opts.Integrity != "" {
		// As cryptsetup, --key-size is the cipher's key: an HMAC's key
		// (its digest size) follows it in the volume key.
		o.Integrity = opts.Integrity
		o.KeySize += luks2.IntegrityKeySize(opts.Integrity)
	}
	if opts.SectorSize != nil {
		o.SectorSize = int(*opts.SectorSize)
	}
	if o.Offset, err = uintFlag("offset", opts.Offset, 1<<63-1); err != nil {
		return err
	}
	if o.Align, err = uintFlag("align-payload", opts.AlignPayload, 1<<32-1); err != nil {
		return err
	}
	if o.PBKDF, err = opts.pbkdfFlags.options(opts.Hash); err != nil {
		return err
	}
	if opts.Size != nil {
		if o.Size = int64(*opts.Size); o.Size <= 0 {
			return usageErr("--size must be positive")
		}
	}
	if blkcrypt.IsURI(dev) {
		// A remote device exists or not at connection time; Format says.
	} else if st, err := os.Stat(dev); err != nil {
		if opts.Size == nil {
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
		if err := opts.confirm(env, overwriteWarning(target), ExitUsage, abortedMsg); err != nil {
			return err
		}
	}
	if opts.VolumeKeyFile != "" {
		if o.VolumeKey, err = readVolumeKeyFile(opts.VolumeKeyFile, o.KeySize); err != nil {
			return err
		}
		defer clear(o.VolumeKey)
	}
	pass, err := newSecret(env, opts.keyFileFlags, newKeyFlags{}, "", opts.KeyFile != "")
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

// typedDumpOptions are the options of tcrypt-dump and its kind: dump
// with the type named.
type typedDumpOptions struct {
	openFlags
	partitionFlag
	DumpVolumeKey bool `flag:"dump-volume-key" help:"dump: print the volume key"`
}

// dumpOptions: dump's, the LUKS header as JSON too.
type dumpOptions struct {
	typedDumpOptions
	JSON             bool `flag:"json" help:"dump: JSON metadata"`
	DumpJSONMetadata bool `flag:"dump-json-metadata" help:"dump: the LUKS2 JSON metadata as cryptsetup prints it"`
}

// typedDump is `dump --type typ`, as cryptsetup's tcryptDump and the like.
func typedDump(typ string) func(context.Context, *Env, *typedDumpOptions, []string) error {
	return func(ctx context.Context, env *Env, o *typedDumpOptions, args []string) error {
		o.Type = typ
		return runDump(ctx, env, &dumpOptions{typedDumpOptions: *o}, args)
	}
}

// runDump prints the header like cryptsetup luksDump.
func runDump(ctx context.Context, env *Env, d *dumpOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	typ := d.volumeType(ctx, d.Partition, dev)
	if dump, ok := typeDumpers[typ]; ok {
		return dump(env, &d.typedDumpOptions, dev)
	}
	h, err := luksFlags{Type: d.Type, headerFlag: d.headerFlag}.open(ctx, dev, d.Partition, true)
	if err != nil {
		return err
	}
	defer h.Close()
	o := blkcrypt.DumpOptions{Device: dev}
	if d.DumpVolumeKey {
		key, _, err := unlock(ctx, env, &d.openFlags, h)
		if err != nil {
			return err
		}
		defer clear(key)
		o.VolumeKey = key
		return h.Dump(ctx, env.Stdout, o)
	}
	switch {
	case d.DumpJSONMetadata:
		o.Format = blkcrypt.DumpJSONMetadata
	case d.JSON:
		o.Format = blkcrypt.DumpJSON
	}
	err = h.Dump(ctx, env.Stdout, o)
	if o.Format == blkcrypt.DumpJSONMetadata && errors.Is(err, blkcrypt.ErrUnsupported) {
		return usageErr("dump operation is not supported for this device type")
	}
	return err
}
