package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/fsys"
	"github.com/blkcrypt/blkcrypt/fsys/probe"
)

// Disk images as they are (issue #26): DEVICE → --partition → the unlock
// → --lv → the verb, opened by blkcrypt.OpenStack; probe, ls, cat and cp
// read the whole stack, read-only, through fsys and fsys/probe.

// openFlags unlock a volume of any format (serve, mount, ls, cat, cp): the
// type, the key, the tokens and each format's own options.
type openFlags struct {
	Type string `flag:"type" help:"luks, luks1, luks2, plain, loopaes, tcrypt, bitlk, fvault2" def:"detected: LUKS, BitLocker, FileVault 2"`
	keyFileFlags
	KeySlot       *int64 `flag:"key-slot" short:"S" help:"key slot number" def:"every slot"`
	VolumeKeyFile string `flag:"volume-key-file" help:"use a raw volume key from a file"`
	headerFlag
	tokenFlags
	Cipher            string `flag:"cipher" short:"c" help:"cipher specification, e.g. aes-xts-plain64" def:"plain: aes-xts-plain64; loopaes: aes"`
	KeySize           *int64 `flag:"key-size" short:"s" help:"key size in bits" def:"plain: 256; loopaes: 128"`
	Hash              string `flag:"hash" short:"h" help:"hash for plain-mode passphrases / LUKS" def:"plain: sha256"`
	Offset            *int64 `flag:"offset" help:"data start in 512-byte sectors (plain, loopaes)" def:"0"`
	Skip              *int64 `flag:"skip" short:"p" help:"plain mode: IV offset in 512-byte sectors" def:"plain: 0; loopaes: --offset"`
	Size              *int64 `flag:"size" short:"b" help:"plain, loopaes: data size in 512-byte sectors" def:"to the end of the device"`
	SectorSize        *int64 `flag:"sector-size" help:"encryption sector size in bytes" def:"512"`
	IVLargeSectors    bool   `flag:"iv-large-sectors" help:"IV sector numbers count sector-size units"`
	VeraCryptPIM      *int64 `flag:"veracrypt-pim" help:"tcrypt: VeraCrypt personal iterations multiplier"`
	VeraCryptQueryPIM bool   `flag:"veracrypt-query-pim" help:"tcrypt: ask for the VeraCrypt PIM"`
	VeraCrypt         bool   `flag:"veracrypt" help:"tcrypt: scan for VeraCrypt too (the default)"`
	DisableVeraCrypt  bool   `flag:"disable-veracrypt" help:"tcrypt: TrueCrypt only"`
	TCryptHidden      bool   `flag:"tcrypt-hidden" help:"tcrypt: use the hidden volume header"`
	TCryptSystem      bool   `flag:"tcrypt-system" help:"tcrypt: system encryption header (sector 62)"`
	TCryptBackup      bool   `flag:"tcrypt-backup" help:"tcrypt: use the backup header"`
	TCryptKeyfiles    string `flag:"tcrypt-keyfiles" help:"tcrypt: comma-separated key files (besides --key-file)"`
	TCryptReadWrite   bool   `flag:"tcrypt-read-write" help:"tcrypt: allow writes (read-only by default)"`
	BitlkReadWrite    bool   `flag:"bitlk-read-write" help:"bitlk: allow writes (read-only by default)"`
	FVault2ReadWrite  bool   `flag:"fvault2-read-write" help:"fvault2: allow writes (read-only by default)"`
	integrityFlags           // --type integrity (type_integrity.go)
}

// readWrite reports whether --TYPE-read-write asks for writes to a format
// that opens read-only by default.
func (f openFlags) readWrite(typ string) bool {
	switch typ {
	case "tcrypt":
		return f.TCryptReadWrite
	case "bitlk":
		return f.BitlkReadWrite
	case "fvault2":
		return f.FVault2ReadWrite
	}
	return false
}

// stackFlags name the layers around the volume: the partition it is in,
// the LV inside it.
type stackFlags struct {
	partitionFlag
	LV string `flag:"lv" help:"an LVM2 logical volume VG/LV inside the decrypted volume (or on the partition or DEVICE when it is not encrypted)" def:"the volume itself"`
}

// checkStackFlags refuses --partition and --lv on a verb that does not
// take them: verbs ignore flags they do not read, and `format IMAGE
// --partition 3` silently formatting the whole disk would be a disaster.
func checkStackFlags(verb string, specs []flagSpec, p *commandLine) error {
	for _, f := range []string{"partition", "lv"} {
		if _, given := p.set[f]; given && !hasSpec(specs, f) {
			return fmt.Errorf("%s does not take --%s", verb, f)
		}
	}
	return nil
}

// diskPartition is the partition --partition names, on its locked disk:
// closing it closes (and unlocks) the disk.
type diskPartition struct{ *blkcrypt.Stack }

// openPartition opens the partition --partition names, or nil without the
// flag.
func (f partitionFlag) openPartition(ctx context.Context, path string, readOnly bool) (*diskPartition, error) {
	if f.Partition == nil || *f.Partition == "" {
		return nil, nil
	}
	s, err := blkcrypt.OpenStack(ctx, path, blkcrypt.StackOptions{Partition: *f.Partition, Unlock: blkcrypt.UnlockNever, ReadOnly: readOnly})
	if err != nil {
		return nil, err
	}
	return &diskPartition{s}, nil
}

// target is what read, write, mount and serve work on: a Volume, or the
// Stack of --lv.
type target interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	BlockSize() int
	ReadOnly() bool
	Flush() error
	Close() error
}

// openTarget opens DEVICE as read, write, serve and mount need it: the
// unlocked volume (of --partition when given), or the --lv inside it.
func openTarget(ctx context.Context, env *Env, f *openFlags, st stackFlags, path string, readOnly bool) (target, error) {
	if st.LV == "" {
		v, err := openVolume(ctx, env, f, st.Partition, path, readOnly, nil)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
	s, err := openStack(ctx, env, f, st, path, readOnly, true)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openStack opens DEVICE, --partition, the volume (unlocked when a
// signature or --type says it is encrypted; needEncrypted refuses a
// device that is not, except under --lv) and --lv.
func openStack(ctx context.Context, env *Env, f *openFlags, st stackFlags, path string, readOnly, needEncrypted bool) (*blkcrypt.Stack, error) {
	if err := checkDevice(path, true); err != nil {
		return nil, err
	}
	unlock := blkcrypt.UnlockDetected
	if needEncrypted && st.LV == "" {
		unlock = blkcrypt.UnlockRequired
	}
	if err := checkType(f.Type); err != nil {
		return nil, err
	}
	var wipe [][]byte
	defer func() { wipeAll(wipe) }()
	s, err := blkcrypt.OpenStack(ctx, path, blkcrypt.StackOptions{
		Partition: orEmpty(st.Partition), Unlock: unlock, Open: f.openOptions(env, path, readOnly, nil, &wipe, nil), LV: st.LV, ReadOnly: readOnly})
	if err != nil {
		return nil, err
	}
	if v := s.Volume(); v != nil && v.Note() != "" {
		fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", v.Note())
	}
	return s, nil
}

// orEmpty is an optional string flag, "" when not given.
func orEmpty(sel *string) string {
	if sel == nil {
		return ""
	}
	return *sel
}

// orZero is an optional number flag, 0 when not given.
func orZero(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

// ---- files: ls, cat, cp ----

// fileOptions are the options of ls, cat and cp: the stack down to the
// filesystem.
type fileOptions struct {
	stackFlags
	openFlags
}

// openFS opens the filesystem the stack ends in, read-only (fsys.Open
// picks the reader), and the io/fs name of PATH.
func openFS(ctx context.Context, env *Env, o *fileOptions, args []string, nargs int) (fsys.FS, string, *blkcrypt.Stack, error) {
	if len(args) != nargs {
		what := "DEVICE PATH"
		if nargs == 3 {
			what += " DEST"
		}
		return nil, "", nil, usageErr("expected %s, got %d arguments", what, len(args))
	}
	name, err := fsys.Name(args[1])
	if err != nil {
		return nil, "", nil, usageErr("%v", err)
	}
	s, err := openStack(ctx, env, &o.openFlags, o.stackFlags, args[0], true, false)
	if err != nil {
		return nil, "", nil, err
	}
	f, _, err := fsys.Open(s, s.Size())
	if err != nil {
		s.Close()
		if errors.Is(err, fsys.ErrUnsupported) {
			return nil, "", nil, usageErr("%s: %v", s, err)
		}
		return nil, "", nil, deviceErr(fmt.Errorf("%s: %w", s, err))
	}
	return f, name, s, nil
}

func runLs(ctx context.Context, env *Env, o *fileOptions, args []string) error {
	f, name, s, err := openFS(ctx, env, o, args, 2)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := f.Stat(name)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		_, err = fmt.Fprintln(env.Stdout, st.Name())
		return err
	}
	ents, err := f.ReadDir(name)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range ents {
		b.WriteString(e.Name())
		if e.IsDir() {
			b.WriteByte('/')
		}
		b.WriteByte('\n')
	}
	_, err = io.WriteString(env.Stdout, b.String())
	return err
}

func runCat(ctx context.Context, env *Env, o *fileOptions, args []string) error {
	f, name, s, err := openFS(ctx, env, o, args, 2)
	if err != nil {
		return err
	}
	defer s.Close()
	file, err := f.Open(name)
	if err != nil {
		return err
	}
	defer file.Close()
	if st, err := file.Stat(); err != nil {
		return err
	} else if st.IsDir() {
		return deviceErr(fmt.Errorf("%s is a directory (use ls)", args[1]))
	}
	_, err = fsys.Copy(ctx, env.Stdout, file)
	return err
}

// runCp copies PATH out to DEST (into DEST when it is a directory),
// keeping modes and times; a failed cp leaves nothing (fsys.CopyOut).
func runCp(ctx context.Context, env *Env, o *fileOptions, args []string) error {
	f, name, s, err := openFS(ctx, env, o, args, 3)
	if err != nil {
		return err
	}
	defer s.Close()
	return fsys.CopyOut(ctx, f, name, args[2])
}

// ---- probe ----

// probeOptions: probe opens no volume unless given a key, and never
// prompts.
type probeOptions struct {
	JSON          bool   `flag:"json" help:"probe: print {\"blockdevices\": [DISK]} in lsblk -J -f's shape; each device has name, kind (disk, part, crypt, lvm), size and start (bytes), pttype, ptuuid, partn, parttype, parttypename, partlabel, partuuid, fstype, fsver, label, uuid (blkid's), note (why probe did not descend) and children; empty fields are left out"`
	KeyFile       string `flag:"key-file" short:"d" help:"the key of the encrypted volumes to descend into" def:"none: encrypted volumes are not opened"`
	KeyfileOffset int64  `flag:"keyfile-offset" help:"skip this many bytes of the key file" def:"0"`
	KeyfileSize   *int64 `flag:"keyfile-size" short:"l" help:"read at most this many bytes of the key file" def:"all of it"`
	VolumeKeyFile string `flag:"volume-key-file" help:"use a raw volume key from a file"`
}

// runProbe prints the tree fsys/probe.Tree makes of DEVICE, descending
// into encrypted volumes only with --key-file or --volume-key-file (it
// never prompts).
func runProbe(ctx context.Context, env *Env, po *probeOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	s, err := blkcrypt.OpenStack(ctx, dev, blkcrypt.StackOptions{Unlock: blkcrypt.UnlockNever, ReadOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	var o probe.TreeOptions
	if po.VolumeKeyFile != "" || po.KeyFile != "" {
		var key []byte
		var keyErr error
		defer func() { clear(key) }()
		o.Unlock = func(ctx context.Context, d io.ReaderAt, size int64, _ probe.Info) (probe.Volume, error) {
			// The key is read once, at the first encrypted volume.
			vk := po.VolumeKeyFile
			if key == nil && keyErr == nil {
				if vk != "" {
					key, keyErr = readVolumeKeyFile(vk, -1)
				} else {
					key, _, keyErr = keyFileFlags{KeyFile: po.KeyFile, KeyfileOffset: po.KeyfileOffset, KeyfileSize: po.KeyfileSize}.read(env, false, "")
				}
			}
			if keyErr != nil {
				return nil, fmt.Errorf("locked: %w", keyErr)
			}
			oo := blkcrypt.OpenOptions{ReadOnly: true, Passphrase: key}
			if vk != "" {
				oo = blkcrypt.OpenOptions{ReadOnly: true, VolumeKey: key}
			}
			v, err := blkcrypt.OpenDevice(ctx, d, oo)
			if err != nil {
				return nil, err
			}
			return v, nil
		}
	}
	root, err := probe.Tree(ctx, s, s.Size(), filepath.Base(dev), o)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return deviceErr(err)
	}
	for _, w := range root.Warnings {
		fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", w)
	}
	if po.JSON {
		return probe.WriteJSON(env.Stdout, root)
	}
	return probe.WriteTree(env.Stdout, root)
}

// ---- helpers of the other verbs ----

// partitionType is what the partition sel of DEVICE holds ("" when it
// cannot be read: the verb's open reports why).
func partitionType(ctx context.Context, sel *string, path string) string {
	part, err := partitionFlag{sel}.openPartition(ctx, path, true)
	if err != nil || part == nil {
		return ""
	}
	defer part.Close()
	return blkcrypt.Detect(part)
}
