// Package probe says what a block device or image holds at its start, as
// util-linux's blkid does (blkid -p): the filesystem or container type by
// blkid's TYPE names, its UUID, label and version.
//
//	info, err := probe.Identify(dev, size)
//	// info.Type == "crypto_LUKS", info.UUID == "0f6c…", info.Version == "2"
//
// Known types: crypto_LUKS (LUKS1 and LUKS2), BitLocker, LVM2_member, xfs,
// btrfs, ext2, ext3 and ext4 (told apart by their features as
// libblkid's ext.c does; jbd and ext4dev too, untested), ntfs, swap and
// vfat (FAT12, FAT16, FAT32). The fields
// are formatted as blkid prints them, so they can be compared with
// `blkid -p -o export` and used in fstab-style UUID= lines.
//
// Partition tables are not read here (package partition does): Identify
// looks at one filesystem or container starting at offset 0 of dev.
// Reads are bounded by the structures probed: a few sectors for most, an
// MFT record or two for NTFS, and for FAT its first FAT (at most 4 bytes
// a cluster, which package fat needs to accept the volume). A signature
// whose structure does not hold up is not reported, as in blkid.
package probe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/blkcrypt/blkcrypt/fsys/fat"
	"github.com/blkcrypt/blkcrypt/fsys/ntfs"
)

// ErrUnknown is returned by Identify when no known signature is found.
var ErrUnknown = errors.New("probe: no known filesystem or container signature")

// Info is what Identify found. Empty fields are those blkid leaves out.
type Info struct {
	Type    string // blkid's TYPE: "crypto_LUKS", "vfat", "ext4", …
	UUID    string // blkid's UUID, formatted as blkid prints it
	Label   string // blkid's LABEL
	Version string // blkid's VERSION: "2" for LUKS2, "FAT32", "1.0" for ext4, …
	Usage   string // blkid's USAGE: "filesystem", "crypto", "raid" or "other"
}

func (i Info) String() string {
	s := "TYPE=" + i.Type
	for _, kv := range [][2]string{{"UUID", i.UUID}, {"LABEL", i.Label}, {"VERSION", i.Version}} {
		if kv[1] != "" {
			s += fmt.Sprintf(" %s=%q", kv[0], kv[1])
		}
	}
	return s
}

// reader reads at fixed offsets; a read beyond the device is "no
// signature there", not an error.
type reader struct {
	dev  io.ReaderAt
	size int64
	err  error // the first read error other than the end of the device
}

func (r *reader) at(off, n int64) []byte {
	if off < 0 || n < 0 || off+n > r.size {
		return nil
	}
	b := make([]byte, n)
	if _, err := r.dev.ReadAt(b, off); err != nil {
		if !errors.Is(err, io.EOF) && r.err == nil {
			r.err = err
		}
		return nil
	}
	return b
}

// prober looks for one type; it returns ok false when the type is absent.
type prober func(r *reader) (Info, bool)

// probers run in blkid's order of precedence for the types that may
// share a start: containers before the filesystems they could hide, and
// NTFS and BitLocker before FAT, whose boot sector they share.
var probers = []prober{luks, bitlocker, lvm2, xfs, btrfs, ext, ntfsProbe, swap, vfat}

// Identify reports the filesystem or container at offset 0 of dev, whose
// size is size bytes. It returns ErrUnknown when there is none it knows,
// and a wrapped read error when dev fails.
func Identify(dev io.ReaderAt, size int64) (Info, error) {
	r := &reader{dev: dev, size: size}
	for _, p := range probers {
		if info, ok := p(r); ok {
			return info, nil
		}
		if r.err != nil {
			return Info{}, fmt.Errorf("probe: read: %w", r.err)
		}
	}
	return Info{}, ErrUnknown
}

// cstr returns b up to its first NUL.
func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// uuid formats 16 bytes as blkid does: 8-4-4-4-12 lower-case hex.
func uuid(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func isZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// luks: the LUKS1 or LUKS2 primary header. The UUID is the header's text;
// LUKS2 also has a label.
func luks(r *reader) (Info, bool) {
	h := r.at(0, 512)
	if h == nil || string(h[:6]) != "LUKS\xba\xbe" {
		return Info{}, false
	}
	v := binary.BigEndian.Uint16(h[6:])
	info := Info{Type: "crypto_LUKS", Usage: "crypto", Version: fmt.Sprint(v), UUID: cstr(h[168:208])}
	switch v {
	case 1:
	case 2:
		info.Label = cstr(h[24:72])
	default:
		return Info{}, false
	}
	return info, true
}

// bitlocker: the BitLocker boot sector (Vista, Windows 7 and later, or
// To Go) and the FVE metadata block it points at, whose version blkid
// reports. BitLocker has no UUID or label blkid shows.
func bitlocker(r *reader) (Info, bool) {
	b := r.at(0, 512)
	if b == nil {
		return Info{}, false
	}
	var off int64
	togo := []byte{0x3b, 0xd6, 0x67, 0x49, 0x29, 0x2e, 0xd8, 0x4a, 0x83, 0x99, 0xf6, 0xa3, 0x39, 0xe3, 0xd0, 0x01}
	switch {
	case string(b[3:11]) == "-FVE-FS-" && b[0] == 0xEB && b[1] == 0x58: // Windows 7 and later
		off = int64(binary.LittleEndian.Uint64(b[176:]))
	case string(b[3:11]) == "-FVE-FS-" && b[0] == 0xEB && b[1] == 0x52: // Vista: a cluster number
		off = int64(binary.LittleEndian.Uint64(b[56:])) * int64(binary.LittleEndian.Uint16(b[11:])) * int64(b[13])
	case string(b[3:11]) == "MSWIN4.1" && bytes.Equal(b[424:440], togo):
		off = int64(binary.LittleEndian.Uint64(b[440:]))
	default:
		return Info{}, false
	}
	m := r.at(off, 16)
	if m == nil || string(m[:8]) != "-FVE-FS-" {
		return Info{}, false
	}
	return Info{Type: "BitLocker", Usage: "crypto", Version: fmt.Sprint(binary.LittleEndian.Uint16(m[10:]))}, true
}

// lvm2: the LVM2 label in one of the first four sectors and the PV UUID
// of the PV header after it, dashed as lvm2 and blkid print it.
func lvm2(r *reader) (Info, bool) {
	for s := int64(0); s < 4; s++ {
		b := r.at(s*512, 512)
		if b == nil || string(b[:8]) != "LABELONE" || string(b[24:32]) != "LVM2 001" ||
			binary.LittleEndian.Uint64(b[8:]) != uint64(s) {
			continue
		}
		off := binary.LittleEndian.Uint32(b[20:])
		if off < 32 || off+32 > 512 {
			continue
		}
		u := b[off : off+32]
		id := fmt.Sprintf("%s-%s-%s-%s-%s-%s-%s", u[0:6], u[6:10], u[10:14], u[14:18], u[18:22], u[22:26], u[26:32])
		return Info{Type: "LVM2_member", Usage: "raid", Version: "LVM2 001", UUID: id}, true
	}
	return Info{}, false
}

// xfs: the primary superblock.
func xfs(r *reader) (Info, bool) {
	b := r.at(0, 512)
	if b == nil || string(b[:4]) != "XFSB" {
		return Info{}, false
	}
	bs := binary.BigEndian.Uint32(b[4:])
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 {
		return Info{}, false
	}
	return Info{Type: "xfs", Usage: "filesystem", UUID: uuid(b[32:48]), Label: cstr(b[108:120])}, true
}

// btrfs: the superblock at 64 KiB.
func btrfs(r *reader) (Info, bool) {
	b := r.at(0x10000, 0x300)
	if b == nil || string(b[0x40:0x48]) != "_BHRfS_M" {
		return Info{}, false
	}
	return Info{Type: "btrfs", Usage: "filesystem", UUID: uuid(b[0x20:0x30]), Label: cstr(b[0x12b:0x22b])}, true
}

// The ext feature flags blkid tells ext2, ext3, ext4 and jbd apart by
// (libblkid's superblocks/ext.c).
const (
	compatHasJournal   = 0x0004
	incompatFiletype   = 0x0002
	incompatRecover    = 0x0004
	incompatJournalDev = 0x0008
	incompatMetaBG     = 0x0010
	roSparseSuper      = 0x0001
	roLargeFile        = 0x0002
	roBtreeDir         = 0x0004
	ext2Incompat       = incompatFiletype | incompatMetaBG
	ext3Incompat       = incompatFiletype | incompatRecover | incompatMetaBG
	ext23RO            = roSparseSuper | roLargeFile | roBtreeDir
	flagTestFS         = 0x0004
)

// ext: the superblock at 1 KiB. Like blkid: a journal device is jbd; no
// journal and only ext2's features is ext2; a journal and only ext3's
// features is ext3; anything else is ext4 (unless it is flagged a test
// filesystem, which blkid calls ext4dev).
func ext(r *reader) (Info, bool) {
	b := r.at(1024, 1024)
	if b == nil || binary.LittleEndian.Uint16(b[56:]) != 0xEF53 {
		return Info{}, false
	}
	le := binary.LittleEndian
	compat, incompat, ro := le.Uint32(b[92:]), le.Uint32(b[96:]), le.Uint32(b[100:])
	info := Info{Usage: "filesystem", UUID: uuid(b[104:120]), Label: cstr(b[120:136]),
		Version: fmt.Sprintf("%d.%d", le.Uint32(b[76:]), le.Uint16(b[62:]))}
	switch {
	case incompat&incompatJournalDev != 0:
		info.Type, info.Usage, info.Label = "jbd", "other", cstr(b[120:136])
	case compat&compatHasJournal == 0 && incompat&^ext2Incompat == 0 && ro&^ext23RO == 0:
		info.Type = "ext2"
	case compat&compatHasJournal != 0 && incompat&^ext3Incompat == 0 && ro&^ext23RO == 0:
		info.Type = "ext3"
	case le.Uint32(b[0x160:])&flagTestFS != 0:
		info.Type = "ext4dev"
	default:
		info.Type = "ext4"
	}
	if isZero(b[104:120]) {
		info.UUID = ""
	}
	return info, true
}

// ntfsProbe: the NTFS boot sector, its serial as the UUID (16 upper-case
// hex digits, as blkid shows it) and the label from $Volume.
func ntfsProbe(r *reader) (Info, bool) {
	b := r.at(0, 512)
	if b == nil || string(b[3:11]) != "NTFS    " {
		return Info{}, false
	}
	v, err := ntfs.Open(r.dev, r.size)
	if err != nil {
		return Info{}, false
	}
	return Info{Type: "ntfs", Usage: "filesystem",
		UUID: fmt.Sprintf("%016X", v.Serial()), Label: v.Label()}, true
}

// swap: the Linux swap signature at the end of the first page, for each
// page size Linux has; version 1 (SWAPSPACE2) has a UUID and a label.
func swap(r *reader) (Info, bool) {
	for _, page := range []int64{4096, 8192, 16384, 32768, 65536} {
		sig := r.at(page-10, 10)
		switch string(sig) {
		case "SWAP-SPACE":
			return Info{Type: "swap", Usage: "other", Version: "0"}, true
		case "SWAPSPACE2":
			h := r.at(1024, 44)
			if h == nil {
				return Info{}, false
			}
			info := Info{Type: "swap", Usage: "other", Version: fmt.Sprint(binary.LittleEndian.Uint32(h[0:]))}
			if !isZero(h[12:28]) {
				info.UUID = uuid(h[12:28])
			}
			info.Label = cstr(h[28:44])
			return info, true
		}
	}
	return Info{}, false
}

// vfat: a FAT boot sector that package fat accepts; blkid calls every
// FAT type vfat and says which in VERSION. The UUID is the serial.
func vfat(r *reader) (Info, bool) {
	b := r.at(0, 512)
	if b == nil || b[510] != 0x55 || b[511] != 0xAA {
		return Info{}, false
	}
	v, err := fat.Open(r.dev, r.size)
	if err != nil {
		return Info{}, false
	}
	s := v.Serial()
	return Info{Type: "vfat", Usage: "filesystem", Version: v.Type().String(), Label: v.Label(),
		UUID: fmt.Sprintf("%04X-%04X", s>>16, s&0xFFFF)}, true
}
