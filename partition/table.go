package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// The errors of this package. Each error returned wraps one of them (with
// %w), so callers test with errors.Is; the message says what was found.
var (
	// ErrNoTable: the device has neither a GPT nor an MBR partition table
	// (no 0x55AA signature at byte 510, or an MBR whose boot indicators
	// are not 0x00/0x80, which is a filesystem boot sector, not a table).
	ErrNoTable = errors.New("no partition table")
	// ErrCorrupt: a table was found but cannot be trusted: both GPT
	// headers damaged, entries overlapping or outside the usable area or
	// the device, an absurd entry count or size, an EBR chain that loops,
	// is too long or leaves its extended partition.
	ErrCorrupt = errors.New("corrupt partition table")
	// ErrNotFound: Find's selector names no partition.
	ErrNotFound = errors.New("no such partition")
	// ErrAmbiguous: Find's selector (a label) names more than one partition.
	ErrAmbiguous = errors.New("ambiguous partition selector")
	// ErrInvalid: a bad argument (an unsupported sector size, an empty
	// selector, a Partition that is no range of bytes, an extended
	// partition given to Open).
	ErrInvalid = errors.New("invalid argument")
	// ErrOutOfRange: a write that does not lie wholly inside the partition,
	// or a negative offset.
	ErrOutOfRange = errors.New("request outside the partition")
	// ErrReadOnly: a write to a Device opened read-only or over a disk that
	// is no io.WriterAt.
	ErrReadOnly = errors.New("partition device is read-only")
)

// Scheme is the kind of partition table.
type Scheme string

const (
	// GPT is the UEFI GUID Partition Table (behind a protective or hybrid
	// MBR).
	GPT Scheme = "gpt"
	// MBR is the DOS/MBR table with its extended partitions ("dos" to
	// sfdisk).
	MBR Scheme = "mbr"
)

// Options tune Read. The zero value probes.
type Options struct {
	// SectorSize is the disk's logical sector size, the unit of every LBA
	// in the table: 512 or 4096 (any power of two from 512 to 65536 is
	// taken). 0 probes: a GPT header is looked for at LBA 1 of 512-byte
	// sectors, then of 4096-byte sectors; an MBR, which does not record
	// its unit, is read with 512. For a block device pass what the
	// kernel says (DeviceSectorSize); an image file copied from a
	// 4096-byte disk with an MBR needs 4096 said explicitly.
	SectorSize int
}

// Table is a partition table as read from a device.
type Table struct {
	Scheme     Scheme
	SectorSize int   // bytes per LBA, as probed or given
	DiskSize   int64 // the size given to Read

	// GPT only.
	DiskGUID       GUID
	FirstUsableLBA uint64
	LastUsableLBA  uint64
	EntryCount     uint32 // NumberOfPartitionEntries: slots, used or not
	// Backup is true when the primary GPT (header at LBA 1 or its
	// entries) is damaged and the table was read from the backup at the
	// last LBA. Warnings then says what was wrong with the primary.
	Backup bool

	// MBR only: the disk signature at byte 440, from which the kernel
	// forms the MBR PARTUUIDs.
	DiskID uint32

	// Partitions in the order of their Number.
	Partitions []Partition

	// Warnings are problems that did not stop the read: a damaged
	// primary or backup GPT (the other one was used), a backup not at
	// the end of the device, EBR entries Linux would ignore too. One line
	// each.
	Warnings []string
}

// Partition is one entry of a table.
type Partition struct {
	// Number is the N of /dev/sdaN as Linux numbers it: a GPT partition
	// is its entry's index + 1 (unused entries keep their numbers, so 1,
	// 2, 5 is possible); MBR primaries are 1–4 and logical partitions 5
	// on, in the order of the EBR chain.
	Number int
	// Start and Size are in bytes from the start of the device.
	Start int64
	Size  int64

	// GPT only.
	Type       GUID   // PartitionTypeGUID
	UUID       GUID   // UniquePartitionGUID
	Name       string // PARTLABEL, decoded from UTF-16LE
	Attributes uint64 // bit 0 required, 1 no block IO, 2 legacy BIOS bootable, 48-63 type specific

	// MBR only.
	MBRType  byte
	Bootable bool // boot indicator 0x80
	Extended bool // a primary of type 0x05, 0x0f or 0x85: the container of the logical partitions
	Logical  bool // inside an extended partition (Number ≥ 5)

	// PartUUID is the PARTUUID the kernel gives the partition: the GPT
	// unique GUID in lower case, or for MBR "%08x-%02x" of the disk
	// signature and the number ("1234abcd-05").
	PartUUID string
}

// TypeName names the partition's type ("Linux LUKS", "Linux", …) as
// sgdisk or sfdisk would, "" for a type not known here.
func (p Partition) TypeName() string {
	if p.Type.IsZero() {
		return MBRTypeName(p.MBRType)
	}
	return GPTTypeName(p.Type)
}

// End is the byte offset just past the partition.
func (p Partition) End() int64 { return p.Start + p.Size }

// Read reads the partition table of the size-byte device dev.
//
// It reads LBA 0: without the 0x55AA signature there is no table
// (ErrNoTable). With a type-0xEE entry the MBR is protective (or hybrid)
// and the GPT rules: the header at LBA 1 and its entries are checked
// (signature, header CRC32, MyLBA, usable range inside the device, entry
// size 128×2ⁿ, entry array no larger than 4 MiB and inside the device,
// array CRC32, every used entry inside the usable range and none
// overlapping); if any check fails the backup header at the last LBA is
// checked the same way and used, with Backup set and a warning. Both
// damaged is ErrCorrupt. Without 0xEE the MBR is read: the four primary
// entries and the EBR chain of each extended partition.
//
// Read never reads more than the device holds, allocates at most a few
// MiB whatever the table claims, and returns one-line errors.
func Read(dev io.ReaderAt, size int64, o Options) (*Table, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: nil device", ErrInvalid)
	}
	if size < 0 {
		return nil, fmt.Errorf("%w: negative device size %d", ErrInvalid, size)
	}
	sizes := []int{512, 4096}
	if o.SectorSize != 0 {
		ss := o.SectorSize
		if ss < 512 || ss > 65536 || ss&(ss-1) != 0 {
			return nil, fmt.Errorf("%w: sector size %d (want 512, 4096 or another power of two from 512 to 65536)", ErrInvalid, ss)
		}
		sizes = []int{ss}
	}
	if size < 512 {
		return nil, fmt.Errorf("%w: the device (%d bytes) is smaller than one sector", ErrNoTable, size)
	}
	mbr := make([]byte, 512)
	if err := readFull(dev, mbr, 0); err != nil {
		return nil, fmt.Errorf("reading the MBR: %w", err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xAA {
		return nil, fmt.Errorf("%w: no 0x55AA signature at byte 510 of sector 0", ErrNoTable)
	}
	if protective(mbr) {
		return readGPTProbe(dev, size, sizes)
	}
	ss := sizes[0]
	if size < int64(ss) {
		return nil, fmt.Errorf("%w: the device (%d bytes) is smaller than one %d-byte sector", ErrNoTable, size, ss)
	}
	t, err := readMBR(dev, size, ss, mbr)
	if err != nil {
		return nil, err
	}
	// A GPT behind an MBR without a 0xEE entry is what Linux ignores
	// too; say so, since the user may expect it.
	for _, s := range sizes {
		if hasGPTSignature(dev, size, int64(s)) {
			t.Warnings = append(t.Warnings, fmt.Sprintf("a GPT header at LBA 1 (%d-byte sectors) is ignored: the MBR has no protective (0xEE) entry", s))
			break
		}
	}
	return t, nil
}

// protective reports whether the MBR has a GPT protective entry (type
// 0xEE). Linux also accepts a hybrid MBR, 0xEE beside other entries, as a
// GPT disk, and so do we.
func protective(mbr []byte) bool {
	for i := 0; i < 4; i++ {
		e := mbr[446+16*i:]
		if e[4] == 0xEE {
			return true
		}
	}
	return false
}

func hasGPTSignature(dev io.ReaderAt, size, ss int64) bool {
	if size < 2*ss {
		return false
	}
	var sig [8]byte
	return readFull(dev, sig[:], ss) == nil && string(sig[:]) == gptSignature
}

// readFull reads len(p) bytes at off; a short device is io.ErrUnexpectedEOF.
func readFull(dev io.ReaderAt, p []byte, off int64) error {
	n, err := dev.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%d bytes at offset %d: %w", len(p), off, err)
}

// Find returns the partition sel selects, as the CLI's --partition takes
// it:
//   - "N", a decimal number: the partition numbered N (/dev/sdaN);
//   - "PARTUUID=…": the partition whose PartUUID is … (any case);
//   - "PARTLABEL=…": the GPT partition whose Name is exactly …;
//   - otherwise a bare PARTUUID (a GUID, or "1234abcd-05" for MBR) if one
//     matches, else a bare label.
//
// No match is ErrNotFound; a label shared by several partitions is
// ErrAmbiguous (name it by number or PARTUUID instead).
func (t *Table) Find(sel string) (Partition, error) {
	if sel == "" {
		return Partition{}, fmt.Errorf("%w: empty partition selector", ErrInvalid)
	}
	if isDecimal(sel) {
		n, err := strconv.Atoi(sel)
		if err == nil {
			for _, p := range t.Partitions {
				if p.Number == n {
					return p, nil
				}
			}
		}
		return Partition{}, fmt.Errorf("%w: no partition %s (the %s table has %s)", ErrNotFound, sel, t.Scheme, t.numbers())
	}
	if v, ok := cutPrefixFold(sel, "PARTUUID="); ok {
		if p, ok := t.byPartUUID(v); ok {
			return p, nil
		}
		return Partition{}, fmt.Errorf("%w: no partition has PARTUUID %s", ErrNotFound, v)
	}
	if v, ok := cutPrefixFold(sel, "PARTLABEL="); ok {
		return t.byLabel(v)
	}
	if looksLikeGUID(sel) || looksLikeMBRPartUUID(sel) {
		if p, ok := t.byPartUUID(sel); ok {
			return p, nil
		}
	}
	return t.byLabel(sel)
}

func (t *Table) byPartUUID(v string) (Partition, bool) {
	if len(v) == 38 && v[0] == '{' && v[37] == '}' {
		v = v[1:37]
	}
	for _, p := range t.Partitions {
		if p.PartUUID != "" && strings.EqualFold(p.PartUUID, v) {
			return p, true
		}
	}
	return Partition{}, false
}

func (t *Table) byLabel(v string) (Partition, error) {
	var found []Partition
	for _, p := range t.Partitions {
		if t.Scheme == GPT && p.Name == v {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		if t.Scheme != GPT {
			return Partition{}, fmt.Errorf("%w: %q is no partition number or PARTUUID, and an MBR has no labels", ErrNotFound, v)
		}
		return Partition{}, fmt.Errorf("%w: no partition number, PARTUUID or PARTLABEL %q", ErrNotFound, v)
	}
	nums := make([]string, len(found))
	for i, p := range found {
		nums[i] = strconv.Itoa(p.Number)
	}
	return Partition{}, fmt.Errorf("%w: label %q names partitions %s", ErrAmbiguous, v, strings.Join(nums, ", "))
}

func (t *Table) numbers() string {
	if len(t.Partitions) == 0 {
		return "no partitions"
	}
	const most = 16
	var b strings.Builder
	for i, p := range t.Partitions {
		if i == most {
			fmt.Fprintf(&b, ", … (%d in all)", len(t.Partitions))
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(p.Number))
	}
	return b.String()
}

func isDecimal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0 && len(s) <= 9
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

// checkOverlap refuses partitions that share bytes; what names the
// caller's unit (LBAs or sectors) in the error, which the caller wraps.
func checkOverlap(ps []Partition, unit int64, what string) error {
	s := make([]Partition, len(ps))
	copy(s, ps)
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	for i := 1; i < len(s); i++ {
		a, b := s[i-1], s[i]
		if b.Start < a.End() {
			return fmt.Errorf("partitions %d (%s %d-%d) and %d (%s %d-%d) overlap",
				a.Number, what, a.Start/unit, a.End()/unit-1, b.Number, what, b.Start/unit, b.End()/unit-1)
		}
	}
	return nil
}

var le = binary.LittleEndian
