package blkcrypt

import (
	"context"
	"fmt"
	"io"
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
	t, err := partition.Read(dev, size, partition.Options{})
	if err != nil {
		return nil, fmt.Errorf("reading the partition table: %w", err)
	}
	d, err := t.Open(dev, sel, partition.DeviceOptions{})
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
