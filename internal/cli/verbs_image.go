package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/bitlk"
	"github.com/blkcrypt/blkcrypt/fsys/ext4"
	"github.com/blkcrypt/blkcrypt/fsys/fat"
	"github.com/blkcrypt/blkcrypt/fsys/ntfs"
	"github.com/blkcrypt/blkcrypt/fsys/probe"
	"github.com/blkcrypt/blkcrypt/lvm"
	"github.com/blkcrypt/blkcrypt/nbd"
	"github.com/blkcrypt/blkcrypt/partition"
)

// Disk images as they are (issue #26): DEVICE → --partition → the unlock
// → --lv → the verb. Partitions and LVs are devices above and below the
// Volume (package partition, package lvm); nothing here reaches into a
// format. probe, ls, cat and cp read the whole stack, read-only.

func init() {
	addFlags(
		flagDef{"partition", 0, kindString, "a partition of DEVICE: N (as /dev/sdaN), PARTUUID=… or PARTLABEL=…"},
		flagDef{"lv", 0, kindString, "an LVM2 logical volume VG/LV inside the decrypted volume (or on the partition or DEVICE when it is not encrypted)"},
	)
	partOpt := o("partition", "DEVICE as a whole")
	lvOpt := o("lv", "the volume itself")
	// The LUKS header verbs act on the header inside the partition; an
	// LV is above the header, so they take no --lv.
	for _, v := range []string{"test-passphrase", "dump", "add-key", "change-key", "remove-key", "kill-slot", "mount"} {
		verbOptions[v] = append(verbOptions[v], partOpt)
	}
	for _, v := range []string{"read", "write", "serve"} {
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

// diskPartition is one partition of DEVICE, with the disk it was read
// from: closing it closes (and unlocks) the disk.
type diskPartition struct {
	*partition.Device
	disk io.Closer
	name string
}

func (d *diskPartition) String() string { return d.name }

func (d *diskPartition) Close() error {
	err := d.Device.Close()
	if cerr := d.disk.Close(); err == nil {
		err = cerr
	}
	return err
}

// volumeType is the type the flags name, or what the partition holds.
func (d *diskPartition) volumeType(p *parsed) string {
	if t := p.str("type"); t != "" {
		return t
	}
	return blkcrypt.Detect(d.Device)
}

// openDisk opens DEVICE itself, locked as Open locks it (a URI device is
// not locked), with its size.
func openDisk(ctx context.Context, path string, readOnly bool) (blkcrypt.URIDevice, int64, error) {
	var d blkcrypt.URIDevice
	if blkcrypt.IsURI(path) {
		u, err := blkcrypt.OpenURI(ctx, path, readOnly)
		if err != nil {
			return nil, 0, err
		}
		d = u
	} else {
		f, err := openDevice(path, true)
		if err != nil {
			return nil, 0, err
		}
		f.Close()
		lf, err := blkcrypt.OpenFileLocked(path, readOnly)
		if err != nil {
			return nil, 0, err
		}
		d = lockedDisk{lf}
	}
	size, err := d.Size()
	if err != nil {
		d.Close()
		return nil, 0, err
	}
	return d, size, nil
}

// lockedDisk gives a LockedFile the URIDevice method set.
type lockedDisk struct{ *blkcrypt.LockedFile }

func (l lockedDisk) Size() (int64, error) { return blkcrypt.DeviceSize(l.LockedFile.File) }

// openPartitionFlag opens the partition --partition names, or returns
// nil without the flag.
func openPartitionFlag(ctx context.Context, p *parsed, path string, readOnly bool) (*diskPartition, error) {
	sel := p.str("partition")
	if sel == "" {
		return nil, nil
	}
	disk, size, err := openDisk(ctx, path, readOnly)
	if err != nil {
		return nil, err
	}
	d, err := blkcrypt.OpenPartition(disk, size, sel)
	if err != nil {
		disk.Close()
		if errors.Is(err, partition.ErrNotFound) || errors.Is(err, partition.ErrNoTable) || errors.Is(err, partition.ErrAmbiguous) || errors.Is(err, partition.ErrCorrupt) {
			return nil, deviceErr(fmt.Errorf("%s: %w", path, err))
		}
		return nil, err
	}
	return &diskPartition{Device: d, disk: disk, name: fmt.Sprintf("partition %d of %s", d.Partition().Number, path)}, nil
}

// stackDev is what a verb works on once the stack is open: an LV, or a
// volume, partition or disk. Closing it closes every layer, top first.
// It is an nbd.Backend.
type stackDev struct {
	top interface {
		io.ReaderAt
		io.WriterAt
	}
	size     int64
	bs       int
	readOnly bool
	desc     string
	flush    func() error
	closers  []io.Closer
}

func (s *stackDev) ReadAt(b []byte, off int64) (int, error)  { return s.top.ReadAt(b, off) }
func (s *stackDev) WriteAt(b []byte, off int64) (int, error) { return s.top.WriteAt(b, off) }
func (s *stackDev) Size() int64                              { return s.size }
func (s *stackDev) BlockSize() int                           { return s.bs }
func (s *stackDev) ReadOnly() bool                           { return s.readOnly }

// Flush syncs every layer down to the disk.
func (s *stackDev) Flush() error {
	if s.flush == nil {
		return nil
	}
	return s.flush()
}

func (s *stackDev) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// target is what read and write work on: a Volume, or a stackDev.
type target interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
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
func openStack(ctx context.Context, env *Env, p *parsed, path string, readOnly, needEncrypted bool) (*stackDev, error) {
	part, err := openPartitionFlag(ctx, p, path, readOnly)
	if err != nil {
		return nil, err
	}
	var s *stackDev
	var typ string
	if part != nil {
		typ = part.volumeType(p)
	} else {
		typ = volumeTypeContext(ctx, p, path)
	}
	lvName := p.str("lv")
	switch {
	case typ != "":
		var v *blkcrypt.Volume
		if part != nil {
			v, err = unlockOn(ctx, env, p, path, part, readOnly, nil)
			if err != nil {
				part.Close()
			}
		} else {
			v, err = openVolume(ctx, env, p, path, readOnly)
		}
		if err != nil {
			return nil, err
		}
		s = &stackDev{top: v, size: v.Size(), bs: v.SectorSize(), readOnly: v.ReadOnly(), desc: "blkcrypt " + v.CipherSpec(),
			flush: v.Flush, closers: []io.Closer{v}}
	case needEncrypted && lvName == "":
		if part != nil {
			part.Close()
			return nil, deviceErr(fmt.Errorf("%s is not a valid LUKS, BitLocker or FileVault device (use --type plain for plain dm-crypt)", part))
		}
		return nil, deviceErr(fmt.Errorf("device %s is not a valid LUKS device (use --type plain for plain dm-crypt)", path))
	case part != nil:
		size, _ := part.Size()
		s = &stackDev{top: part, size: size, bs: 512, readOnly: readOnly || part.ReadOnly(), desc: "blkcrypt " + part.String(),
			flush: part.Sync, closers: []io.Closer{part}}
	default:
		disk, size, err := openDisk(ctx, path, readOnly)
		if err != nil {
			return nil, err
		}
		s = &stackDev{top: disk, size: size, bs: 512, readOnly: readOnly, desc: "blkcrypt " + path,
			flush: disk.Sync, closers: []io.Closer{disk}}
	}
	if lvName == "" {
		return s, nil
	}
	lv, err := blkcrypt.OpenLV(s.top, s.size, lvName)
	if err != nil {
		s.Close()
		if errors.Is(err, lvm.ErrNoPV) && typ == "" {
			return nil, deviceErr(fmt.Errorf("--lv %s: %s holds no LUKS, BitLocker or FileVault volume and no LVM2 physical volume", lvName, stackName(path, part)))
		}
		if errors.Is(err, lvm.ErrNoPV) || errors.Is(err, lvm.ErrNotFound) || errors.Is(err, lvm.ErrNoMetadata) || errors.Is(err, lvm.ErrMissingPV) {
			return nil, deviceErr(fmt.Errorf("--lv %s: %w", lvName, err))
		}
		if errors.Is(err, lvm.ErrUnsupported) {
			return nil, usageErr("--lv %s: %v", lvName, err)
		}
		return nil, fmt.Errorf("--lv %s: %w", lvName, err)
	}
	lvSize, _ := lv.Size()
	under := s.flush
	s.top, s.size, s.desc = lv, lvSize, s.desc+" lv "+lvName
	s.readOnly = s.readOnly || lv.ReadOnly()
	s.flush = func() error {
		if err := lv.Sync(); err != nil {
			return err
		}
		return under()
	}
	s.closers = append([]io.Closer{lv}, s.closers...)
	return s, nil
}

func stackName(path string, part *diskPartition) string {
	if part != nil {
		return part.String()
	}
	return "device " + path
}

// ---- files: ls, cat, cp ----

// openFS opens the filesystem the stack ends in, read-only, by what it
// holds: FAT (fsys/fat), ext2/3/4 (fsys/ext4), NTFS (fsys/ntfs).
func openFS(ctx context.Context, env *Env, p *parsed, path string) (fs.FS, *stackDev, error) {
	s, err := openStack(ctx, env, p, path, true, false)
	if err != nil {
		return nil, nil, err
	}
	info := identify(s.top, s.size)
	var fsys fs.FS
	switch info.Type {
	case "vfat":
		fsys, err = fat.Open(s.top, s.size)
	case "ext2", "ext3", "ext4":
		fsys, err = ext4.Open(s.top, s.size)
	case "ntfs":
		fsys, err = ntfs.Open(s.top, s.size)
	case "":
		err = deviceErr(fmt.Errorf("%s holds no filesystem blkcrypt can read", s.desc[len("blkcrypt "):]))
	case "crypto_LUKS", "BitLocker", "fvault2", "LVM2_member":
		err = deviceErr(fmt.Errorf("%s holds %s, not a filesystem (give --partition, the key or --lv to reach one)", s.desc[len("blkcrypt "):], info.Type))
	default:
		err = usageErr("reading %s filesystems is not supported (FAT, ext2/3/4 and NTFS are)", info.Type)
	}
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return fsys, s, nil
}

// fsPath turns a user's PATH ("/etc/fstab", "EFI/", "/") into an io/fs
// name.
func fsPath(name string) (string, error) {
	n := path.Clean("/" + name)
	n = strings.TrimPrefix(n, "/")
	if n == "" {
		n = "."
	}
	if !fs.ValidPath(n) {
		return "", usageErr("invalid path %q", name)
	}
	return n, nil
}

func runLs(ctx context.Context, env *Env, p *parsed) error {
	if len(p.args) != 2 {
		return usageErr("expected DEVICE PATH, got %d arguments", len(p.args))
	}
	name, err := fsPath(p.args[1])
	if err != nil {
		return err
	}
	fsys, s, err := openFS(ctx, env, p, p.args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		_, err = fmt.Fprintln(env.Stdout, st.Name())
		return err
	}
	ents, err := fs.ReadDir(fsys, name)
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
	if len(p.args) != 2 {
		return usageErr("expected DEVICE PATH, got %d arguments", len(p.args))
	}
	name, err := fsPath(p.args[1])
	if err != nil {
		return err
	}
	fsys, s, err := openFS(ctx, env, p, p.args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	f, err := fsys.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return deviceErr(fmt.Errorf("%s is a directory (use ls)", p.args[1]))
	}
	_, err = copyFile(ctx, env.Stdout, f)
	return err
}

// copyFile copies in 4 MiB reads: each read of a file becomes reads of
// its extents through the LV and the volume, which decrypts a large
// request across the cores and a small one on one. io.Copy would let
// the writer's ReadFrom pick the size (8 KiB for io.Discard, 32 KiB for
// a pipe), which made cat a third of read's speed.
func copyFile(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 4<<20)
	return io.CopyBuffer(struct{ io.Writer }{w}, ctxReader{ctx, r}, buf)
}

// runCp copies PATH out to DEST (into DEST when it is a directory). The
// copy is made under a temporary name beside its destination and renamed
// into place at the end, so that a failed cp leaves nothing behind.
func runCp(ctx context.Context, env *Env, p *parsed) error {
	if len(p.args) != 3 {
		return usageErr("expected DEVICE PATH DEST, got %d arguments", len(p.args))
	}
	name, err := fsPath(p.args[1])
	if err != nil {
		return err
	}
	dest := p.args[2]
	if st, err := os.Stat(dest); err == nil && st.IsDir() {
		base := path.Base(name)
		if base == "." {
			return usageErr("DEST %s exists: copy the root directory to a new name", dest)
		}
		dest = filepath.Join(dest, base)
	}
	if _, err := os.Lstat(dest); err == nil {
		if st, _ := os.Stat(dest); st == nil || st.IsDir() {
			return usageErr("%s exists and is a directory", dest)
		}
	}
	fsys, s, err := openFS(ctx, env, p, p.args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".blkcrypt-cp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	staged := filepath.Join(tmp, "x")
	if err := copyOutFS(ctx, fsys, name, st, staged); err != nil {
		return err
	}
	return os.Rename(staged, dest)
}

// copyOutFS copies name (described by st) to dst: a file with its mode and
// mtime, a directory recursively (its own times set after its contents).
func copyOutFS(ctx context.Context, fsys fs.FS, name string, st fs.FileInfo, dst string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mode := st.Mode()
	switch {
	case mode.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		ents, err := fs.ReadDir(fsys, name)
		if err != nil {
			return err
		}
		for _, e := range ents {
			est, err := e.Info()
			if err != nil {
				return err
			}
			if err := copyOutFS(ctx, fsys, path.Join(name, e.Name()), est, filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	case mode&fs.ModeSymlink != 0:
		target, err := fs.ReadLink(fsys, name)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst) // a symlink's own times are not kept
	case mode.IsRegular():
		in, err := fsys.Open(name)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := copyFile(ctx, out, in); err != nil {
			out.Close()
			return fmt.Errorf("copying %s: %w", name, err)
		}
		if err := out.Close(); err != nil {
			return err
		}
	default:
		return usageErr("%s is a %v, not a file, directory or symbolic link", name, mode.Type())
	}
	if err := os.Chmod(dst, mode.Perm()); err != nil {
		return err
	}
	return os.Chtimes(dst, time.Time{}, st.ModTime())
}

// ---- probe ----

// probeNode is one device of the tree `probe --json` prints, in the shape
// of `lsblk -J -f`: {"blockdevices": [disk]}, each node with "children".
// Field names are lsblk's where lsblk has one; a field it lacks is left
// out. "kind" is disk, part, crypt, or lvm; sizes and starts are bytes
// (start: from the start of the parent device); "note" says why probe did
// not descend (no key given, an error).
type probeNode struct {
	Name      string       `json:"name"`
	Kind      string       `json:"kind"`
	Size      int64        `json:"size"`
	Start     *int64       `json:"start,omitempty"`
	PTType    string       `json:"pttype,omitempty"`
	PTUUID    string       `json:"ptuuid,omitempty"`
	PartN     int          `json:"partn,omitempty"`
	PartType  string       `json:"parttype,omitempty"`
	PartTName string       `json:"parttypename,omitempty"`
	PartLabel string       `json:"partlabel,omitempty"`
	PartUUID  string       `json:"partuuid,omitempty"`
	FSType    string       `json:"fstype,omitempty"`
	FSVer     string       `json:"fsver,omitempty"`
	Label     string       `json:"label,omitempty"`
	UUID      string       `json:"uuid,omitempty"`
	Note      string       `json:"note,omitempty"`
	Children  []*probeNode `json:"children,omitempty"`
}

func runProbe(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	disk, size, err := openDisk(ctx, dev, true)
	if err != nil {
		return err
	}
	defer disk.Close()
	root := &probeNode{Name: filepath.Base(dev), Kind: "disk", Size: size}
	pr := &prober{ctx: ctx, env: env, p: p}
	defer pr.wipe()
	t, err := partition.Read(disk, size, partition.Options{})
	switch {
	case err == nil:
		root.PTType = map[partition.Scheme]string{partition.GPT: "gpt", partition.MBR: "dos"}[t.Scheme]
		if t.Scheme == partition.GPT {
			root.PTUUID = t.DiskGUID.String()
		} else {
			root.PTUUID = fmt.Sprintf("%08x", t.DiskID)
		}
		for _, w := range t.Warnings {
			fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", w)
		}
		for _, pt := range t.Partitions {
			start := pt.Start
			n := &probeNode{Name: fmt.Sprintf("%s%d", root.Name, pt.Number), Kind: "part", Size: pt.Size, Start: &start,
				PartN: pt.Number, PartTName: pt.TypeName(), PartLabel: pt.Name, PartUUID: pt.PartUUID}
			if t.Scheme == partition.GPT {
				n.PartType = pt.Type.String()
			} else {
				n.PartType = fmt.Sprintf("0x%x", pt.MBRType)
			}
			root.Children = append(root.Children, n)
			if pt.Extended {
				continue
			}
			d, err := partition.Open(disk, pt, partition.DeviceOptions{ReadOnly: true})
			if err != nil {
				n.Note = err.Error()
				continue
			}
			if err := pr.fill(n, d, pt.Size); err != nil {
				d.Close()
				return err
			}
			d.Close()
		}
	case errors.Is(err, partition.ErrNoTable):
		if err := pr.fill(root, disk, size); err != nil {
			return err
		}
	default:
		return deviceErr(fmt.Errorf("%s: %w", dev, err))
	}
	if p.bool("json") {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			BlockDevices []*probeNode `json:"blockdevices"`
		}{[]*probeNode{root}})
	}
	return printProbe(env.Stdout, root)
}

// prober descends into what each device holds. The key is read once, at
// the first encrypted volume, and tried on each.
type prober struct {
	ctx   context.Context
	env   *Env
	p     *parsed
	key   []byte
	vk    bool // key is a volume key
	asked bool
	noKey bool
	depth int
}

func (pr *prober) wipe() { clear(pr.key) }

// secret reads the key: --volume-key-file, --key-file, or nothing (probe
// never prompts: without a key it does not descend).
func (pr *prober) secret() bool {
	if !pr.asked {
		pr.asked = true
		switch {
		case pr.p.str("volume-key-file") != "":
			k, err := readVolumeKeyFile(pr.p.str("volume-key-file"), -1)
			if err == nil {
				pr.key, pr.vk = k, true
			}
		case pr.p.str("key-file") != "":
			k, _, err := readSecret(pr.env, pr.p, "")
			if err == nil {
				pr.key = k
			}
		}
		pr.noKey = pr.key == nil
	}
	return !pr.noKey
}

// fill identifies what dev holds and, for an encrypted volume (with a
// key) or a PV, adds what is inside as children. Errors below the top
// become notes; only an ended context stops the probe.
func (pr *prober) fill(n *probeNode, dev io.ReaderAt, size int64) error {
	if err := pr.ctx.Err(); err != nil {
		return err
	}
	info := identify(dev, size)
	n.FSType, n.FSVer, n.Label, n.UUID = info.Type, info.Version, info.Label, info.UUID
	if pr.depth > 4 { // LUKS in LVM in LUKS…: enough
		return nil
	}
	pr.depth++
	defer func() { pr.depth-- }()
	switch info.Type {
	case "crypto_LUKS", "BitLocker", "fvault2":
		if !pr.secret() {
			n.Note = "locked (give --key-file to look inside)"
			return nil
		}
		o := blkcrypt.OpenOptions{ReadOnly: true}
		if pr.vk {
			o.VolumeKey = pr.key
		} else {
			o.Passphrase = pr.key
		}
		v, err := blkcrypt.OpenDevice(pr.ctx, readOnlyDev{dev, size}, o)
		if err != nil {
			if pr.ctx.Err() != nil {
				return pr.ctx.Err()
			}
			n.Note = err.Error()
			return nil
		}
		defer v.Close()
		c := &probeNode{Name: n.Name + "_crypt", Kind: "crypt", Size: v.Size()}
		n.Children = append(n.Children, c)
		return pr.fill(c, v, v.Size())
	case "LVM2_member":
		vg, err := lvm.Open(lvm.PVDevice{Name: n.Name, Dev: dev, Size: size, ReadOnly: true})
		if err != nil {
			n.Note = err.Error()
			return nil
		}
		for _, lv := range vg.LVs() {
			if !lv.Visible {
				continue
			}
			c := &probeNode{Name: vg.Name + "-" + lv.Name, Kind: "lvm", Size: lv.Size}
			n.Children = append(n.Children, c)
			d, err := vg.OpenLV(lv.Name)
			if err != nil {
				c.Note = err.Error()
				continue
			}
			err = pr.fill(c, d, lv.Size)
			d.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// readOnlyDev hides a device's WriteAt so that OpenDevice opens it
// read-only, and gives it a size.
type readOnlyDev struct {
	r    io.ReaderAt
	size int64
}

func (d readOnlyDev) ReadAt(b []byte, off int64) (int, error) { return d.r.ReadAt(b, off) }
func (d readOnlyDev) Size() (int64, error)                    { return d.size, nil }

// printProbe prints the tree as `lsblk -f` does, with the partition
// columns of `lsblk -o +PARTTYPENAME,PARTLABEL,SIZE`.
func printProbe(w io.Writer, root *probeNode) error {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "NAME\tFSTYPE\tFSVER\tLABEL\tUUID\tPARTTYPENAME\tPARTLABEL\tSIZE\tNOTE")
	var walk func(n *probeNode, prefix, branch string)
	walk = func(n *probeNode, prefix, branch string) {
		fsType := n.FSType
		if fsType == "" && n.PTType != "" {
			fsType = n.PTType
		}
		uuid := n.UUID
		if uuid == "" && n.Kind == "disk" {
			uuid = n.PTUUID
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", prefix+branch, n.Name, fsType, n.FSVer, n.Label, uuid,
			n.PartTName, n.PartLabel, humanSize(n.Size), n.Note)
		next := prefix
		switch branch {
		case "├─":
			next += "│ "
		case "└─":
			next += "  "
		}
		for i, c := range n.Children {
			b := "├─"
			if i == len(n.Children)-1 {
				b = "└─"
			}
			walk(c, next, b)
		}
	}
	walk(root, "", "")
	return tw.Flush()
}

// humanSize is lsblk's SIZE: binary units, one decimal when needed.
func humanSize(n int64) string {
	units := "BKMGTPE"
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%dB", n)
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d%c", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f%c", f, units[i])
}

// ---- identify ----

// fsInfo is what identify found, with blkid's names.
type fsInfo struct{ Type, Version, UUID, Label string }

// identify says what dev holds at its start as blkid -p does
// (fsys/probe). FileVault 2, which blkid does not know, is "fvault2".
func identify(dev io.ReaderAt, size int64) fsInfo {
	i, err := probe.Identify(dev, size)
	if err != nil {
		if blkcrypt.Detect(dev) == blkcrypt.TypeFVAULT2 {
			return fsInfo{Type: "fvault2"}
		}
		return fsInfo{}
	}
	return fsInfo{Type: i.Type, Version: i.Version, UUID: i.UUID, Label: i.Label}
}

// partitionType is what the partition --partition names holds ("" when
// it cannot be read: the verb's open reports why).
func partitionType(ctx context.Context, p *parsed, path string) string {
	part, err := openPartitionFlag(ctx, p, path, true)
	if err != nil || part == nil {
		return ""
	}
	defer part.Close()
	return blkcrypt.Detect(part.Device)
}

// serveBackend is what serve exports: a Volume, or the stackDev of --lv.
type serveBackend interface {
	nbd.Backend
	ReadOnly() bool
	Close() error
}

// backendDescription is the NBD export's description.
func backendDescription(b serveBackend) string {
	if s, ok := b.(*stackDev); ok {
		return s.desc
	}
	return "blkcrypt " + b.(*blkcrypt.Volume).CipherSpec()
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
	if errors.Is(err, partition.ErrNotFound) || errors.Is(err, partition.ErrNoTable) || errors.Is(err, partition.ErrAmbiguous) || errors.Is(err, partition.ErrCorrupt) {
		return nil, deviceErr(fmt.Errorf("%s: %w", hpath, err))
	}
	return h, err
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
