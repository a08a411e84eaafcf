// Package lvm reads LVM2 physical volumes and exposes their logical
// volumes as devices, in userspace and without device-mapper: what a
// Debian or Ubuntu "encrypted LVM" install needs once its LUKS partition
// is open (a PV inside the decrypted volume, LVs holding / and swap).
//
// # Contract
//
// ReadPV finds a PV on any io.ReaderAt of known size (a disk, a
// partition, a decrypted volume, an image): the "LABELONE" label in one of
// the first four 512-byte sectors (its sector number, lvm2's CRC of the
// rest of the sector, type "LVM2 001"), the PV header it points to (PV
// uuid, device size, the data area and metadata area lists), and every
// metadata area: its header (CRC, magic " LVM2 x[5A%r0N*>", version 1, its
// own start, its size) and the committed text its first raw location
// points to, read from the area's circular buffer (wrapping past the end
// to just after the header) and checked against the location's CRC. Of
// the copies whose header, CRC and syntax are good and that are not
// flagged ignored, the one with the highest seqno is kept. No label is
// ErrNoPV; damaged areas are reported per area (MetadataArea.Err), not as
// a failure of ReadPV.
//
// The metadata text is parsed by this package's own parser, lvm2's
// syntax (libdm-config) token for token: sections, `name = value`,
// integers (a leading 0 is octal, as strtoll reads it), floats, quoted and
// bare strings, lists, comments. It is bounded: at most 32 MiB of text,
// sections nested at most 32 deep (the recursion is limited to that),
// at most 2^19 nodes and values. ParseMetadata checks what lvm2's import
// checks and more: the format header, uuids in lvm2's alphabet, every
// LV's segments contiguous from extent 0 (no gap, no overlap,
// segment_count of them), striped areas inside their PV, stripes that
// divide the segment into whole stripe_size chunks (dm-striped's rule),
// no PV extent mapped twice, no integer out of its on-disk range, no
// key given twice where one is read. A violation is an error; a text is
// never read two ways.
//
// Open takes one or more PVDevices, uses the newest metadata copy among
// them (highest seqno; PVs of different VGs, or the same PV twice, are
// errors; none at all is ErrNoMetadata) and matches each device to the PV
// of that metadata with the same uuid. Before any LV is opened it checks
// that each given PV's extents lie inside its device and clear of its
// label sector and metadata areas, so that no write through an LV can
// reach LVM metadata whatever the text says. PVs may be missing.
//
// VG.LVs and VG.LV describe the LVs (segments, stripes, which LV uses
// which as a component). VG.OpenLV gives an *LVDevice for an LV whose
// segments are all "striped" ("linear" is lvm2's name for one stripe) on
// PVs: a linear segment maps its extents in order; a striped segment
// takes stripe_size chunks round-robin across its stripes, as dm-striped
// does. ReadAt and WriteAt are bounded to the LV: reading past the end is
// io.EOF, writing past it writes nothing (ErrOutOfRange). Writes go only
// to the PV bytes the LV's extents map; LVM metadata is never written by
// this package. An LV is read-only (ErrReadOnly) when its status or its
// VG's lacks WRITE or one of its devices is not an io.WriterAt or is
// marked PVDevice.ReadOnly. Sync syncs
// the devices that have Sync() error; Close leaves them open (they belong
// to the caller). LVDevice has the device shape
// interface{ io.ReaderAt; io.WriterAt; Sync() error; Size() (int64,
// error); Close() error }.
//
// Refused with a one-line error naming the reason: any other segment type
// (thin, thin-pool, raid0-10, mirror, cache, cache-pool, writecache,
// snapshot, vdo, vdo-pool, integrity, error, zero, …, and a type with
// lvm2's "+FLAG" suffix such as cache-pool+METADATA_FORMAT) as
// ErrUnsupported naming the type as the text spells it; an LV that is a component of another (a thin pool's
// data or metadata, a RAID image, a snapshot's origin or COW store, a
// cache origin) as ErrUnsupported naming the user and its type, since
// writing under them would corrupt them; a stripe on another LV (pvmove
// in progress) as ErrUnsupported; an LV on a PV that was not given as
// ErrMissingPV naming the PV's metadata name, uuid and last device path.
//
// Errors start with "lvm: ", are one line, and wrap the sentinels below
// with %w. Bad input of any kind is an error, never a panic, and costs
// memory bounded by the caps above and the device size.
package lvm
