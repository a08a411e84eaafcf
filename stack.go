package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/blkcrypt/blkcrypt/lvm"
	"github.com/blkcrypt/blkcrypt/partition"
)

// Disk images as they are: a volume is often a partition of a disk, and
// an LVM2 logical volume often sits inside a decrypted volume (Debian's
// "encrypted LVM"). These helpers are the devices under and over a
// Volume; they live beside Open because a program that opens an image
// wants them in this order:
//
//	part, err := blkcrypt.OpenPartition(disk, diskSize, "3") // or "PARTLABEL=cryptroot"
//	v, err := blkcrypt.OpenDevice(ctx, part, blkcrypt.OpenOptions{Passphrase: pw})
//	root, err := blkcrypt.OpenLV(v, v.Size(), "vg0/root")
//
// OpenStack does the three in one call, with the locks and closing order:
// see StackOptions.
//
// Neither reaches into a format: a partition is bytes of a disk, an LV
// bytes of a volume, and each refuses a request outside its range.

// OpenPartition reads the GPT or MBR partition table of the size-byte
// disk dev and opens the partition sel selects as a device of its own:
// "N" (the N of /dev/sdaN), "PARTUUID=…", "PARTLABEL=…", or a bare PARTUUID
// or label (partition.Table.Find). The device is read-only unless dev is
// an io.WriterAt; it can be given to OpenDevice or OpenLUKSDevice. It
// takes no lock and leaves dev open when closed: the caller owns dev.
// Table warnings (a damaged primary GPT read from its backup) are not
// returned; read the table with partition.Read to see them.
func OpenPartition(dev io.ReaderAt, size int64, sel string) (*partition.Device, error) {
	return openPartition(dev, size, sel, partition.DeviceOptions{})
}

func openPartition(dev io.ReaderAt, size int64, sel string, o partition.DeviceOptions) (*partition.Device, error) {
	t, err := partition.Read(dev, size, partition.Options{})
	if err != nil {
		return nil, fmt.Errorf("reading the partition table: %w", err)
	}
	d, err := t.Open(dev, sel, o)
	if err != nil {
		return nil, fmt.Errorf("partition %s: %w", sel, err)
	}
	return d, nil
}

// OpenLV opens the LVM2 logical volume name ("VG/LV") of the physical
// volume on dev (a partition, a decrypted Volume, an image) as a device:
// reads and writes are bounded to the LV and mapped through its linear or
// striped segments; LVM metadata is never written. The VG must lie wholly
// on this one PV; for a VG spanning several PVs use lvm.Open with all of
// them. The device is read-only unless dev is an io.WriterAt. Closing it
// leaves dev open.
func OpenLV(dev io.ReaderAt, size int64, name string) (*lvm.LVDevice, error) {
	vgName, lvName, ok := strings.Cut(name, "/")
	if !ok || vgName == "" || lvName == "" || strings.Contains(lvName, "/") {
		return nil, fmt.Errorf("%w: logical volume %q is not VG/LV", ErrInvalidOptions, name)
	}
	pv, err := lvm.ReadPV(dev, size)
	if err != nil {
		return nil, err
	}
	if pv.VGName != vgName {
		if pv.VGName == "" {
			return nil, fmt.Errorf("logical volume %s: the physical volume belongs to no volume group: %w", name, lvm.ErrNoMetadata)
		}
		return nil, fmt.Errorf("logical volume %s: the physical volume belongs to volume group %q: %w", name, pv.VGName, lvm.ErrNotFound)
	}
	vg, err := lvm.Open(lvm.PVDevice{Name: "the PV", Dev: dev, Size: size})
	if err != nil {
		return nil, err
	}
	return vg.OpenLV(lvName)
}

// OpenLUKSPartition is OpenLUKS for the LUKS header at the start of
// partition sel (as OpenPartition takes it) of the disk at path, a file or
// a block device. Each method takes the disk's lock as OpenLUKS takes
// the device's, so that no Volume opened on the disk with Open, and no
// cryptsetup, runs while the header changes; Close closes the disk.
func OpenLUKSPartition(ctx context.Context, path, sel string, o LUKSOptions) (*LUKS, error) {
	if o.Header != "" || o.HeaderDevice != nil {
		return nil, fmt.Errorf("%w: a detached header is not in a partition (use OpenLUKS)", ErrInvalidOptions)
	}
	f, err := openPlainFile(path, o.ReadOnly)
	if err != nil {
		return nil, err
	}
	size, err := DeviceSize(f)
	if err == nil {
		var part *partition.Device
		if part, err = OpenPartition(f, size, sel); err == nil {
			var h *LUKS
			if h, err = openLUKSDevice(ctx, part, LUKSOptions{Type: o.Type, ReadOnly: o.ReadOnly}, false); err == nil {
				h.lockOn, h.closers = f, []io.Closer{part, f}
				if err = h.check(ctx); err == nil {
					return h, nil
				}
				h.Close()
				return nil, err
			}
			part.Close()
		}
	}
	f.Close()
	return nil, err
}

// StackUnlock says whether OpenStack unlocks the layer above the
// partition (or the device).
type StackUnlock int

const (
	// UnlockDetected unlocks when StackOptions.Open.Type names a type or
	// the device (or the detached header) carries a LUKS, BitLocker or
	// FileVault 2 signature; otherwise the partition or device is used as
	// it is (an unencrypted PV, a filesystem).
	UnlockDetected StackUnlock = iota
	// UnlockRequired is UnlockDetected that refuses a device with nothing
	// to unlock (ErrNoHeader).
	UnlockRequired
	// UnlockNever uses the partition or device as it is.
	UnlockNever
)

// StackOptions choose the layers OpenStack opens, bottom first: the
// device, a partition of it, the volume on that, an LVM2 logical volume
// inside. The zero value opens the device itself, unlocking it when it
// carries a signature (with no secret, only a BitLocker clear key opens).
type StackOptions struct {
	// Partition selects a partition of the device as OpenPartition does
	// ("3", "PARTUUID=…", "PARTLABEL=cryptroot"); "" uses the whole
	// device.
	Partition string
	// Unlock says whether there is a volume to unlock.
	Unlock StackUnlock
	// Open unlocks the volume, as Open takes them: Type "" detects it,
	// and Open.Prepare may supply the secret once the type is known (so
	// that a program prompts only when there is something to unlock).
	// Open.ReadOnly is implied by ReadOnly. A detached Header is locked
	// and kept with the stack as Open keeps it.
	Open OpenOptions
	// LV names a logical volume "VG/LV" of the LVM2 physical volume on
	// the volume (or on the partition or device when nothing was
	// unlocked), as OpenLV takes it; "" stops below LVM.
	LV string
	// ReadOnly opens every layer read-only, taking shared locks.
	ReadOnly bool
}

// Stack is an opened stack of layers: its ReadAt, WriteAt and Size are
// those of the top layer (the LV, else the volume, else the partition,
// else the device). It is safe for concurrent use as its layers are, and
// has the method set of an nbd.Backend. Closing it closes every layer,
// top first, and drops the locks.
type Stack struct {
	top interface {
		io.ReaderAt
		io.WriterAt
	}
	size     int64
	bs       int
	readOnly bool
	vol      *Volume
	part     *partition.Device
	lv       *lvm.LVDevice
	name     []string // the layers' names, bottom first
	syncs    []func() error
	closers  []io.Closer // top first
}

// OpenStack opens the disk at path (a file, a block device, or a URI of a
// registered scheme), locked as Open locks it, and the layers o names on
// it:
//
//	s, err := blkcrypt.OpenStack(ctx, "disk.img", blkcrypt.StackOptions{
//		Partition: "PARTLABEL=cryptroot",
//		Open:      blkcrypt.OpenOptions{Passphrase: pw},
//		LV:        "vg0/root",
//	})
//	// s reads and writes vg0/root; s.Close closes the LV, the volume,
//	// the partition and the disk.
//
// Errors name the layer that failed and wrap its package's sentinel
// (partition.ErrNotFound, lvm.ErrNotFound, ErrWrongPassphrase, …).
func OpenStack(ctx context.Context, path string, o StackOptions) (*Stack, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	o.Open.ReadOnly = o.Open.ReadOnly || o.ReadOnly
	o.ReadOnly = o.Open.ReadOnly
	if o.Partition == "" && o.Unlock != UnlockNever {
		// The volume is the device itself: Open locks it (and a
		// detached header) and keeps a URI device's context.
		unlock := true
		if o.Unlock == UnlockDetected {
			typ, err := o.typeAt(ctx, func() (string, error) { return detectPath(ctx, path) })
			if err != nil {
				return nil, err
			}
			unlock = typ != ""
		}
		if unlock {
			v, err := Open(ctx, path, o.Open)
			if err != nil {
				return nil, err
			}
			return o.finish(newVolumeStack(v, path))
		}
	}
	disk, err := openDisk(ctx, path, o.ReadOnly)
	if err != nil {
		return nil, err
	}
	size, err := disk.Size()
	if err != nil {
		disk.Close()
		return nil, err
	}
	s, err := openStackOn(ctx, disk, size, filepath.Base(path), o)
	if err != nil {
		disk.Close()
		return nil, err
	}
	s.closers = append(s.closers, disk)
	return s, nil
}

// OpenStackDevice is OpenStack over a device already open (an image in
// memory, an NBD client): read-only unless it is an io.WriterAt, sized as
// OpenDevice sizes it, and neither locked nor closed by the stack.
func OpenStackDevice(ctx context.Context, dev io.ReaderAt, o StackOptions) (*Stack, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: a nil device", ErrInvalidOptions)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	o.Open.ReadOnly = o.Open.ReadOnly || o.ReadOnly
	o.ReadOnly = o.Open.ReadOnly
	size, err := DeviceSize(dev)
	if err != nil {
		return nil, err
	}
	return openStackOn(ctx, dev, size, "the device", o)
}

// openStackOn opens the layers above the open disk: the partition, the
// volume, the LV.
func openStackOn(ctx context.Context, disk io.ReaderAt, size int64, name string, o StackOptions) (*Stack, error) {
	base := &Stack{top: writable(disk, o.ReadOnly), size: size, bs: 512, readOnly: o.ReadOnly || !isWriter(disk), name: []string{name}}
	if sy, ok := disk.(interface{ Sync() error }); ok && !base.readOnly {
		base.syncs = []func() error{sy.Sync}
	}
	s := base
	if o.Partition != "" {
		part, err := openPartition(disk, size, o.Partition, partition.DeviceOptions{ReadOnly: o.ReadOnly})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		psize, _ := part.Size()
		s.part, s.top, s.size, s.readOnly = part, part, psize, o.ReadOnly || part.ReadOnly()
		s.name = []string{fmt.Sprintf("partition %d of %s", part.Partition().Number, name)}
		s.syncs = []func() error{part.Sync}
		s.closers = []io.Closer{part}
	}
	if o.Unlock != UnlockNever {
		unlock := true
		var err error
		if o.Unlock == UnlockDetected {
			var typ string
			typ, err = o.typeAt(ctx, func() (string, error) { return DetectErr(s.top) })
			unlock = typ != ""
		}
		if err == nil && unlock {
			err = s.unlock(ctx, o)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return o.finish(s, nil)
}

// typeAt is the type to unlock: Open.Type, else what the detached header
// or (detect) the device carries, "" for nothing to unlock.
func (o *StackOptions) typeAt(ctx context.Context, detect func() (string, error)) (string, error) {
	if o.Open.Type != "" {
		return o.Open.Type, nil
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	switch {
	case o.Open.HeaderDevice != nil:
		return DetectErr(o.Open.HeaderDevice)
	case o.Open.Header != "":
		return detectPath(ctx, o.Open.Header)
	}
	return detect()
}

// unlock opens the volume on the stack's top (the partition or the disk),
// which the Volume then owns.
func (s *Stack) unlock(ctx context.Context, o StackOptions) error {
	oo := o.Open
	if oo.HeaderDevice == nil && oo.Header != "" {
		// OpenDevice reads HeaderDevice only: lock the header file as
		// Open would, for as long as the stack is open.
		f, release, err := openLocked(oo.Header, oo.ReadOnly)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, &LockedFile{f, release})
		oo.HeaderDevice = f
	}
	if s.readOnly {
		oo.ReadOnly = true
	}
	v, err := OpenDevice(ctx, stackLayer{s.top, s.size, s.syncs}, oo)
	if err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	s.vol, s.top, s.size, s.bs = v, v, v.Size(), v.SectorSize()
	s.readOnly = s.readOnly || v.ReadOnly()
	s.name = append(s.name, v.Type()+" "+v.CipherSpec())
	s.syncs = append([]func() error{v.Flush}, s.syncs...)
	s.closers = append([]io.Closer{v}, s.closers...)
	return nil
}

// stackLayer is the layer under a Volume: its Sync syncs the layers
// below (the Volume's Flush calls it), its Close is the stack's.
type stackLayer struct {
	io.ReaderAt
	size  int64
	syncs []func() error
}

func (l stackLayer) WriteAt(b []byte, off int64) (int, error) {
	if w, ok := l.ReaderAt.(io.WriterAt); ok {
		return w.WriteAt(b, off)
	}
	return 0, ErrReadOnly
}

func (l stackLayer) Size() (int64, error) { return l.size, nil }

func (l stackLayer) Sync() error {
	for _, f := range l.syncs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// newVolumeStack is the stack of a volume Open opened on the device
// itself.
func newVolumeStack(v *Volume, path string) (*Stack, error) {
	return &Stack{top: v, size: v.Size(), bs: v.SectorSize(), readOnly: v.ReadOnly(), vol: v,
		name: []string{filepath.Base(path), v.Type() + " " + v.CipherSpec()}, syncs: []func() error{v.Flush}, closers: []io.Closer{v}}, nil
}

// finish opens the LV, when o names one, on top of s.
func (o *StackOptions) finish(s *Stack, err error) (*Stack, error) {
	if err != nil || o.LV == "" {
		return s, err
	}
	top := io.ReaderAt(s.top)
	if s.readOnly {
		top = readOnlyReader{s.top}
	}
	lv, err := OpenLV(top, s.size, o.LV)
	if err != nil {
		if errors.Is(err, lvm.ErrNoPV) && s.vol == nil {
			err = fmt.Errorf("logical volume %s: %s holds no LUKS, BitLocker or FileVault 2 volume and no LVM2 physical volume: %w", o.LV, s, err)
		} else {
			err = fmt.Errorf("logical volume %s: %w", o.LV, err)
		}
		s.Close()
		return nil, err
	}
	lvSize, _ := lv.Size()
	s.lv, s.top, s.size = lv, lv, lvSize
	s.readOnly = s.readOnly || lv.ReadOnly()
	s.name = append(s.name, "lv "+o.LV)
	s.syncs = append([]func() error{lv.Sync}, s.syncs...)
	s.closers = append([]io.Closer{lv}, s.closers...)
	return s, nil
}

// readOnlyReader hides a layer's WriteAt, so that an LV over it is
// read-only.
type readOnlyReader struct{ r io.ReaderAt }

func (r readOnlyReader) ReadAt(b []byte, off int64) (int, error) { return r.r.ReadAt(b, off) }

// ReadAt reads the top layer.
func (s *Stack) ReadAt(b []byte, off int64) (int, error) { return s.top.ReadAt(b, off) }

// WriteAt writes the top layer; a read-only stack refuses (ErrReadOnly).
func (s *Stack) WriteAt(b []byte, off int64) (int, error) {
	if s.readOnly {
		return 0, ErrReadOnly
	}
	return s.top.WriteAt(b, off)
}

// Size is the top layer's size in bytes.
func (s *Stack) Size() int64 { return s.size }

// BlockSize is the volume's sector size, or 512 without a volume.
func (s *Stack) BlockSize() int { return s.bs }

// ReadOnly reports whether writes are refused.
func (s *Stack) ReadOnly() bool { return s.readOnly }

// Flush makes every write so far durable: it syncs each layer, top first,
// down to the disk.
func (s *Stack) Flush() error {
	for _, f := range s.syncs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// Sync is Flush, for callers that look for a device's Sync.
func (s *Stack) Sync() error { return s.Flush() }

// Volume is the unlocked volume, or nil when nothing was unlocked.
func (s *Stack) Volume() *Volume { return s.vol }

// Partition is the partition, or nil without StackOptions.Partition.
func (s *Stack) Partition() *partition.Device { return s.part }

// LV is the logical volume, or nil without StackOptions.LV.
func (s *Stack) LV() *lvm.LVDevice { return s.lv }

// String names the layers, bottom first: "partition 3 of disk.img, luks2
// aes-xts-plain64, lv vg0/root".
func (s *Stack) String() string { return strings.Join(s.name, ", ") }

// Close closes every layer, top first; closing a nil or closed Stack is a
// no-op.
func (s *Stack) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// openDisk opens the device at path locked as Open locks it (a URI device
// is not locked), with a Size method.
func openDisk(ctx context.Context, path string, readOnly bool) (URIDevice, error) {
	if IsURI(path) {
		return OpenURI(ctx, path, readOnly)
	}
	f, release, err := openLocked(path, readOnly)
	if err != nil {
		return nil, err
	}
	return lockedDisk{&LockedFile{f, release}}, nil
}

// lockedDisk gives a LockedFile the URIDevice method set.
type lockedDisk struct{ *LockedFile }

func (l lockedDisk) Size() (int64, error) { return DeviceSize(l.LockedFile.File) }

// detectPath names the format at the start of path (a file or URI),
// read without a lock: Open or openDisk takes the lock after.
func detectPath(ctx context.Context, path string) (string, error) {
	if IsURI(path) {
		d, err := OpenURI(ctx, path, true)
		if err != nil {
			return "", err
		}
		defer d.Close()
		return DetectErr(d)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return DetectErr(f)
}

func isWriter(d io.ReaderAt) bool { _, ok := d.(io.WriterAt); return ok }

// writable is d as the stack's bottom layer: an io.WriterAt that refuses
// when d is read-only or not writable.
func writable(d io.ReaderAt, readOnly bool) interface {
	io.ReaderAt
	io.WriterAt
} {
	if w, ok := d.(interface {
		io.ReaderAt
		io.WriterAt
	}); ok && !readOnly {
		return w
	}
	return stackLayer{ReaderAt: readOnlyReader{d}}
}
