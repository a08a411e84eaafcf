package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/bitlk"
	"github.com/blkcrypt/blkcrypt/fsys"
	"github.com/blkcrypt/blkcrypt/fsys/probe"
	"github.com/blkcrypt/blkcrypt/lvm"
	"github.com/blkcrypt/blkcrypt/partition"
)

// Disk images as they are (issue #26): DEVICE → --partition → the unlock
// → --lv → the verb, opened by blkcrypt.OpenStack; probe, ls, cat and cp
// read the whole stack, read-only, through fsys and fsys/probe.

func init() {
	addFlags(
		flagDef{"partition", 0, kindString, "a partition of DEVICE: N (as /dev/sdaN), PARTUUID=… or PARTLABEL=…"},
		flagDef{"lv", 0, kindString, "an LVM2 logical volume VG/LV inside the decrypted volume (or on the partition or DEVICE when it is not encrypted)"},
	)
	partOpt := o("partition", "DEVICE as a whole")
	lvOpt := o("lv", "the volume itself")
	// The LUKS header verbs act on the header inside the partition; an
	// LV is above the header, so they take no --lv.
	for _, v := range []string{"test-passphrase", "dump", "add-key", "change-key", "remove-key", "kill-slot"} {
		verbOptions[v] = append(verbOptions[v], partOpt)
	}
	for _, v := range []string{"read", "write", "serve", "mount"} {
		verbOptions[v] = append(verbOptions[v], partOpt, lvOpt)
	}
	fileOpts := cat([]opt{partOpt, lvOpt, openTypeOpt}, unlockKeyOpts, formatOpenOpts)
	verbOptions["ls"] = fileOpts
	verbOptions["cat"] = fileOpts
	verbOptions["cp"] = fileOpts
	verbOptions["probe"] = cat([]opt{opt{name: "json", help: `probe: print {"blockdevices": [DISK]} in lsblk -J -f's shape; each device has name, kind (disk, part, crypt, lvm), size and start (bytes), pttype, ptuuid, partn, parttype, parttypename, partlabel, partuuid, fstype, fsver, label, uuid (blkid's), note (why probe did not descend) and children; empty fields are left out`, kind: -1},
		opt{name: "key-file", def: "none: encrypted volumes are not opened", help: "the key of the encrypted volumes to descend into", kind: -1},
		o("keyfile-offset", "0"), o("keyfile-size", "all of it"), o("volume-key-file", "")})
	extraVerbs = append(extraVerbs,
		verb{"probe", nil, runProbe, "DEVICE — the tree of a disk image as lsblk -f shows it: partitions, encryption, LVM, filesystems"},
		verb{"ls", nil, runLs, "DEVICE PATH — list a directory of the filesystem in DEVICE (read-only; ext4, FAT, NTFS)"},
		verb{"cat", nil, runCat, "DEVICE PATH — write a file of the filesystem in DEVICE to stdout (read-only; ext4, FAT, NTFS)"},
		verb{"cp", nil, runCp, "DEVICE PATH DEST — copy a file or directory out of the filesystem in DEVICE, keeping mode and mtime"},
	)
}

// checkStackFlags refuses --partition and --lv on a verb that does not
// take them: verbs ignore flags they do not read, and `format IMAGE
// --partition 3` silently formatting the whole disk would be a disaster.
func checkStackFlags(verb string, p *parsed) error {
	for _, f := range []string{"partition", "lv"} {
		if _, given := p.set[f]; !given {
			continue
		}
		if _, ok := optFor(verb, f); !ok {
			return fmt.Errorf("%s does not take --%s", verb, f)
		}
	}
	return nil
}

// diskPartition is the partition --partition names, on its locked disk:
// closing it closes (and unlocks) the disk.
type diskPartition struct{ *blkcrypt.Stack }

// volumeType is the type the flags name, or what the partition holds.
func (d *diskPartition) volumeType(p *parsed) string {
	if t := p.str("type"); t != "" {
		return t
	}
	return blkcrypt.Detect(d.Stack)
}

// openPartitionFlag opens the partition --partition names, or returns
// nil without the flag.
func openPartitionFlag(ctx context.Context, p *parsed, path string, readOnly bool) (*diskPartition, error) {
	sel := p.str("partition")
	if sel == "" {
		return nil, nil
	}
	s, err := blkcrypt.OpenStack(ctx, path, blkcrypt.StackOptions{Partition: sel, Unlock: blkcrypt.UnlockNever, ReadOnly: readOnly})
	if err != nil {
		return nil, stackErr(err)
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

// openTarget opens DEVICE as read and write need it: the unlocked volume
// (of --partition when given), or the --lv inside it.
func openTarget(ctx context.Context, env *Env, p *parsed, path string, readOnly bool) (target, error) {
	if p.str("lv") == "" {
		v, err := openVolume(ctx, env, p, path, readOnly)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
	s, err := openStack(ctx, env, p, path, readOnly, true)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openStack opens DEVICE, --partition, the volume (unlocked when a
// signature or --type says it is encrypted; needEncrypted refuses a
// device that is not, except under --lv) and --lv.
func openStack(ctx context.Context, env *Env, p *parsed, path string, readOnly, needEncrypted bool) (*blkcrypt.Stack, error) {
	if !blkcrypt.IsURI(path) {
		f, err := openDevice(path, true) // its one-line errors for a missing device
		if err != nil {
			return nil, err
		}
		f.Close()
	}
	unlock := blkcrypt.UnlockDetected
	if needEncrypted && p.str("lv") == "" {
		unlock = blkcrypt.UnlockRequired
	}
	var wipe [][]byte
	defer func() {
		for _, b := range wipe {
			clear(b)
		}
	}()
	typ := p.str("type")
	if err := checkType(typ); err != nil {
		return nil, err
	}
	o := blkcrypt.OpenOptions{Type: typ, ReadOnly: readOnly, Header: p.str("header")}
	if p.has("key-slot") {
		o.Keyslot = blkcrypt.Slot(int(p.int("key-slot", -1)))
	}
	if vt, ok := blkcrypt.LookupVolumeType(typ); ok && vt.ReadOnlyByDefault && !readOnly && p.bool(typ+"-read-write") {
		o.ReadWrite = true // before the open: a writable volume takes the exclusive lock
	}
	// The format's flags and secret, once the library knows the type.
	o.Prepare = func(t string, q *blkcrypt.OpenOptions) error {
		bind, ok := typeBindings[t]
		if !ok {
			return usageErr("unknown or unsupported --type %q", t)
		}
		readWriteFlag(env, p, t, readOnly, q)
		return bind(env, p, path, t, q, &wipe, false)
	}
	s, err := blkcrypt.OpenStack(ctx, path, blkcrypt.StackOptions{
		Partition: p.str("partition"), Unlock: unlock, Open: o, LV: p.str("lv"), ReadOnly: readOnly})
	if err != nil {
		return nil, stackErr(err)
	}
	if v := s.Volume(); v != nil && v.Note() != "" {
		fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", v.Note())
	}
	return s, nil
}

// stackErr gives a layer's error its exit code: a partition or LV that is
// not there names the wrong device (4), an LV of a kind not read is a
// wrong parameter (1).
func stackErr(err error) error {
	for _, e := range []error{partition.ErrNotFound, partition.ErrNoTable, partition.ErrAmbiguous, partition.ErrCorrupt,
		lvm.ErrNoPV, lvm.ErrNotFound, lvm.ErrNoMetadata, lvm.ErrMissingPV} {
		if errors.Is(err, e) {
			return deviceErr(err)
		}
	}
	if errors.Is(err, lvm.ErrUnsupported) {
		return &exitError{ExitUsage, err}
	}
	return err
}

// ---- files: ls, cat, cp ----

// openFS opens the filesystem the stack ends in, read-only (fsys.Open
// picks the reader), and the io/fs name of PATH.
func openFS(ctx context.Context, env *Env, p *parsed, nargs int) (fsys.FS, string, *blkcrypt.Stack, error) {
	if len(p.args) != nargs {
		what := "DEVICE PATH"
		if nargs == 3 {
			what += " DEST"
		}
		return nil, "", nil, usageErr("expected %s, got %d arguments", what, len(p.args))
	}
	name, err := fsys.Name(p.args[1])
	if err != nil {
		return nil, "", nil, usageErr("%v", err)
	}
	s, err := openStack(ctx, env, p, p.args[0], true, false)
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

func runLs(ctx context.Context, env *Env, p *parsed) error {
	f, name, s, err := openFS(ctx, env, p, 2)
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

func runCat(ctx context.Context, env *Env, p *parsed) error {
	f, name, s, err := openFS(ctx, env, p, 2)
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
		return deviceErr(fmt.Errorf("%s is a directory (use ls)", p.args[1]))
	}
	_, err = fsys.Copy(ctx, env.Stdout, file)
	return err
}

// runCp copies PATH out to DEST (into DEST when it is a directory),
// keeping modes and times; a failed cp leaves nothing (fsys.CopyOut).
func runCp(ctx context.Context, env *Env, p *parsed) error {
	f, name, s, err := openFS(ctx, env, p, 3)
	if err != nil {
		return err
	}
	defer s.Close()
	return fsys.CopyOut(ctx, f, name, p.args[2])
}

// ---- probe ----

// runProbe prints the tree fsys/probe.Tree makes of DEVICE, descending
// into encrypted volumes only with --key-file or --volume-key-file (it
// never prompts).
func runProbe(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	s, err := blkcrypt.OpenStack(ctx, dev, blkcrypt.StackOptions{Unlock: blkcrypt.UnlockNever, ReadOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	var o probe.TreeOptions
	if p.str("volume-key-file") != "" || p.str("key-file") != "" {
		var key []byte
		var keyErr error
		defer func() { clear(key) }()
		o.Unlock = func(ctx context.Context, d io.ReaderAt, size int64, _ probe.Info) (probe.Volume, error) {
			// The key is read once, at the first encrypted volume.
			vk := p.str("volume-key-file")
			if key == nil && keyErr == nil {
				if vk != "" {
					key, keyErr = readVolumeKeyFile(vk, -1)
				} else {
					key, _, keyErr = readSecret(env, p, "")
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
	if p.bool("json") {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			BlockDevices []*probe.Node `json:"blockdevices"`
		}{[]*probe.Node{root}})
	}
	return probe.WriteTree(env.Stdout, root)
}

// ---- helpers of the other verbs ----

// partitionType is what the partition --partition names holds ("" when
// it cannot be read: the verb's open reports why).
func partitionType(ctx context.Context, p *parsed, path string) string {
	part, err := openPartitionFlag(ctx, p, path, true)
	if err != nil || part == nil {
		return ""
	}
	defer part.Close()
	return blkcrypt.Detect(part)
}

// openLUKSOn opens the LUKS handle on hpath, or with --partition on the
// header at the start of that partition of DEVICE (the disk's lock is
// then the one each method takes).
func openLUKSOn(ctx context.Context, p *parsed, hpath string, readOnly bool) (*blkcrypt.LUKS, error) {
	o := blkcrypt.LUKSOptions{ReadOnly: readOnly}
	// Read from the map, not p.str: checkStackFlags refused --partition
	// on every verb that does not declare it.
	sel, ok := p.set["partition"]
	if !ok {
		return blkcrypt.OpenLUKS(ctx, hpath, o)
	}
	if p.str("header") != "" {
		return nil, usageErr("--partition and --header: a detached header is not in a partition")
	}
	if blkcrypt.IsURI(hpath) {
		return nil, usageErr("--partition of a URI device is not supported by the LUKS header verbs")
	}
	h, err := blkcrypt.OpenLUKSPartition(ctx, hpath, sel, o)
	return h, stackErr(err)
}

// bitlkClearKeyIn is bitlkClearKey for the volume the flags name: DEVICE,
// or its --partition.
func bitlkClearKeyIn(p *parsed, path string) bool {
	if _, ok := p.set["partition"]; !ok { // see volumeTypeContext
		return bitlkClearKey(path)
	}
	// Not through openPartitionFlag: the verb holds the disk's lock
	// already (exclusive for a write), and this only peeks.
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	size, err := blkcrypt.DeviceSize(f)
	if err != nil {
		return false
	}
	part, err := blkcrypt.OpenPartition(f, size, p.str("partition"))
	if err != nil {
		return false
	}
	defer part.Close()
	m, err := bitlk.Read(part)
	return err == nil && m.HasClearKey()
}
