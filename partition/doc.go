// Package partition reads GPT and MBR partition tables and opens a
// partition as a device of its own, so that a LUKS, BitLocker or other
// volume inside a partitioned disk image can be opened without a loop
// device, kpartx or root.
//
//	t, err := partition.Read(f, size, partition.Options{})
//	p, err := t.Find("PARTLABEL=cryptroot") // or "3", "PARTUUID=…"
//	d, err := partition.Open(f, p, partition.DeviceOptions{})
//	defer d.Close()
//
// # Tables
//
// Read detects the table from sector 0: no 0x55AA signature is
// ErrNoTable; an MBR with a type-0xEE entry (protective or hybrid) means
// GPT; any other MBR is read as one. The partitions are those Linux would
// create, numbered as Linux numbers /dev/sdaN:
//
//   - GPT: entry index + 1 for each entry whose type GUID is not zero.
//     Both headers are checked as the UEFI specification says (signature,
//     header CRC32, MyLBA, usable range, entry size 128×2ⁿ, entry array
//     CRC32) and more: every used entry inside the usable range, no two
//     overlapping, the entry array inside the device and no larger than 4
//     MiB. The primary (LBA 1) is used when sound; otherwise the backup at
//     the last LBA, with Table.Backup set and a line in Table.Warnings.
//     Both unusable is ErrCorrupt. Logical sectors of 512 and 4096 bytes
//     are probed (Options.SectorSize fixes one).
//   - MBR: the primary entries are 1–4; each extended partition (types
//     0x05, 0x0f, 0x85) is listed with Extended set and its EBR chain is
//     followed, its logical partitions numbered from 5 in chain order, as
//     Linux's parse_extended does. A chain that loops, has more than 252
//     logical partitions (Linux's 256-partition limit), or points outside
//     its extended partition is ErrCorrupt. The MBR does not record its
//     sector size: 512 unless Options.SectorSize says otherwise
//     (DeviceSectorSize asks the kernel for a block device). BSD, Solaris
//     and Minix sub-partitions, which Linux adds after the logical ones,
//     are not read.
//
// Where Linux is lenient we refuse: partitions that overlap or reach past
// the end of the device are ErrCorrupt, because a write through one
// would land in another or nowhere. A GPT disk image that grew reads
// with a warning (its backup is where the primary's AlternateLBA says,
// not at the end); one that shrank is ErrCorrupt, as it is to Linux.
//
// Read is meant for untrusted images: it reads only inside the device,
// allocates at most a few MiB whatever the table claims, ends on every
// input (FuzzGPT, FuzzMBR), and returns one-line errors.
//
// # Devices
//
// Open (or Table.Open, which also checks the partition against the
// device size) returns a *Device whose offset 0 is the partition's first
// byte. It has the method set of blkcrypt.URIDevice: ReadAt, WriteAt,
// Sync, Size, Close. A write that does not lie wholly inside the
// partition is refused before anything is written (ErrOutOfRange); a
// read is served like a file's, bytes up to the end then io.EOF, and
// never reads past the partition. Sync passes to the disk's Sync; Close
// syncs a writable disk and closes it only with DeviceOptions.CloseDisk.
// The Device takes no lock: the caller locks the disk (Device.Disk).
//
// # Errors
//
// Every error wraps one of ErrNoTable, ErrCorrupt, ErrNotFound,
// ErrAmbiguous, ErrInvalid, ErrOutOfRange, ErrReadOnly, or an I/O error
// of the disk, fs.ErrClosed after Close, io.EOF or io.ErrUnexpectedEOF.
package partition
