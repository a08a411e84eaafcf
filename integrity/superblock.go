package integrity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// On-disk constants of dm-integrity (drivers/md/dm-integrity.c).
const (
	// SuperblockArea is the space the superblock occupies at the start of
	// the device (the kernel's SB_SECTORS of 512 bytes).
	SuperblockArea = 4096
	// SaltSize is the length of the superblock salt (SB_FLAG_FIXED_HMAC).
	SaltSize = 16
	// MaxTagSize is the largest tag a journal entry can hold.
	MaxTagSize = 504 - 8 - (8 + 8*8)

	sbMagic           = "integrt\x00"
	sbStructSize      = 64
	journalBlockSecs  = 8   // JOURNAL_BLOCK_SECTORS: metadata sectors per section
	journalSectorData = 504 // 512 minus the commit id
	journalMACPerSec  = 8
	journalMACSize    = journalMACPerSec * journalBlockSecs
	metadataPadding   = 8 // METADATA_PADDING_SECTORS
	minLog2Interleave = 3
	maxLog2Interleave = 31
	bitmapBlockSize   = 4096

	// DefaultInterleaveSectors, DefaultJournalSizeFactor and
	// DefaultMaxJournalSectors are the kernel's format defaults.
	DefaultInterleaveSectors = 32768
	DefaultJournalSizeFactor = 7
	DefaultMaxJournalSectors = 131072
	defaultSectorsPerBit     = 32768
)

// Superblock flags.
const (
	FlagJournalMAC    = 0x1  // the journal sections carry a MAC
	FlagRecalculating = 0x2  // tags at and after RecalcSector are not computed yet
	FlagDirtyBitmap   = 0x4  // bitmap mode: the journal area holds a dirty bitmap
	FlagFixedPadding  = 0x8  // tag areas padded to 4 KiB (else 128 KiB)
	FlagFixedHMAC     = 0x10 // the salt enters every tag and journal MAC
	FlagInline        = 0x20 // version 6: tags in the device's own metadata
)

// Superblock is dm-integrity's superblock ("integrt", versions 1 to 6).
type Superblock struct {
	Version                uint8
	Log2InterleaveSectors  uint8
	TagSize                uint16
	JournalSections        uint32
	ProvidedDataSectors    uint64 // 512-byte sectors the volume exposes
	Flags                  uint32
	Log2SectorsPerBlock    uint8
	Log2BlocksPerBitmapBit uint8
	RecalcSector           uint64
	Salt                   [SaltSize]byte
}

// ErrNotIntegrity means the device holds no dm-integrity superblock.
var ErrNotIntegrity = errors.New("integrity: no dm-integrity superblock (magic \"integrt\")")

// ErrUnsupported is returned for volumes that use a feature this package
// does not implement (inline tags, an encrypted journal).
var ErrUnsupported = errors.New("integrity: unsupported feature")

// ParseSuperblock decodes and validates a superblock from the first bytes
// of a device (at least 64).
func ParseSuperblock(b []byte) (*Superblock, error) {
	if len(b) < sbStructSize {
		return nil, fmt.Errorf("integrity: superblock: %d bytes, need %d", len(b), sbStructSize)
	}
	if string(b[:8]) != sbMagic {
		return nil, ErrNotIntegrity
	}
	le := binary.LittleEndian
	sb := &Superblock{
		Version:                b[8],
		Log2InterleaveSectors:  b[9],
		TagSize:                le.Uint16(b[10:]),
		JournalSections:        le.Uint32(b[12:]),
		ProvidedDataSectors:    le.Uint64(b[16:]),
		Flags:                  le.Uint32(b[24:]),
		Log2SectorsPerBlock:    b[28],
		Log2BlocksPerBitmapBit: b[29],
		RecalcSector:           le.Uint64(b[32:]),
	}
	copy(sb.Salt[:], b[48:64])
	if err := sb.Validate(); err != nil {
		return nil, err
	}
	return sb, nil
}

// Validate checks the fields the kernel checks when it activates a
// volume, and the bounds this package needs to compute the layout.
func (sb *Superblock) Validate() error {
	switch {
	case sb.Version < 1 || sb.Version > 6:
		return fmt.Errorf("integrity: superblock version %d (known: 1 to 6)", sb.Version)
	case sb.Flags&^0x3f != 0:
		return fmt.Errorf("integrity: unknown superblock flags %#x", sb.Flags&^0x3f)
	case sb.Log2SectorsPerBlock > 3:
		return fmt.Errorf("integrity: sector size %d (512 to 4096)", 512<<min(sb.Log2SectorsPerBlock, 20))
	case sb.TagSize == 0 || int(sb.TagSize) > MaxTagSize:
		return fmt.Errorf("integrity: tag size %d (1 to %d)", sb.TagSize, MaxTagSize)
	case sb.Flags&FlagInline != 0:
		// Version 6: the tags live in the disk's own metadata and there is
		// no journal; the superblock is valid, the volume is out of reach
		// (Open refuses it).
		return nil
	case sb.JournalSections == 0:
		return errors.New("integrity: corrupted superblock: journal_sections is 0")
	case sb.Log2InterleaveSectors < minLog2Interleave || sb.Log2InterleaveSectors > maxLog2Interleave:
		return fmt.Errorf("integrity: log2 interleave sectors %d (%d to %d)", sb.Log2InterleaveSectors, minLog2Interleave, maxLog2Interleave)
	case sb.ProvidedDataSectors == 0:
		return errors.New("integrity: no data sectors")
	case sb.ProvidedDataSectors&(uint64(1)<<sb.Log2SectorsPerBlock-1) != 0:
		return fmt.Errorf("integrity: %d data sectors is not a whole number of %d-byte blocks", sb.ProvidedDataSectors, 512<<sb.Log2SectorsPerBlock)
	case sb.ProvidedDataSectors > 1<<54:
		return fmt.Errorf("integrity: %d data sectors is beyond any device", sb.ProvidedDataSectors)
	case sb.Log2BlocksPerBitmapBit > 63:
		return fmt.Errorf("integrity: log2 blocks per bitmap bit %d", sb.Log2BlocksPerBitmapBit)
	}
	_, err := sb.Geometry()
	return err
}

// Marshal returns the superblock area (SuperblockArea bytes) as the
// kernel writes it: the structure, then zeros. A superblock MAC, when the
// volume has one, is added by the caller (see sbMAC).
func (sb *Superblock) Marshal() []byte {
	b := make([]byte, SuperblockArea)
	le := binary.LittleEndian
	copy(b, sbMagic)
	b[8] = sb.Version
	b[9] = sb.Log2InterleaveSectors
	le.PutUint16(b[10:], sb.TagSize)
	le.PutUint32(b[12:], sb.JournalSections)
	le.PutUint64(b[16:], sb.ProvidedDataSectors)
	le.PutUint32(b[24:], sb.Flags)
	b[28] = sb.Log2SectorsPerBlock
	b[29] = sb.Log2BlocksPerBitmapBit
	le.PutUint64(b[32:], sb.RecalcSector)
	copy(b[48:64], sb.Salt[:])
	return b
}

// setVersion picks the lowest version that has every flag in use, as the
// kernel's sb_set_version does before each superblock write.
func (sb *Superblock) setVersion(bitmapMode bool) {
	switch {
	case sb.Flags&FlagInline != 0:
		sb.Version = 6
	case sb.Flags&FlagFixedHMAC != 0:
		sb.Version = 5
	case sb.Flags&FlagFixedPadding != 0:
		sb.Version = 4
	case bitmapMode || sb.Flags&FlagDirtyBitmap != 0:
		sb.Version = 3
	case sb.Flags&FlagRecalculating != 0:
		sb.Version = 2
	default:
		sb.Version = 1
	}
}

// SectorSize is the volume's block size in bytes (512 to 4096).
func (sb *Superblock) SectorSize() int { return 512 << sb.Log2SectorsPerBlock }

// Geometry is the on-disk layout a superblock implies: the journal
// sections after the superblock, then repeated runs of a tag area and
// 2^Log2InterleaveSectors data sectors. Sector numbers are 512-byte units.
type Geometry struct {
	SectorsPerBlock   int // 1 to 8
	TagSize           int
	JournalEntrySize  int // bytes of one journal entry
	EntriesPerSector  int // journal entries per metadata sector
	SectionEntries    int // journal entries (blocks) per section
	SectionSectors    int // sectors per section: 8 metadata + the blocks
	JournalSections   int
	InitialSectors    uint64 // superblock + journal
	InterleaveSectors uint64
	MetadataRun       uint64 // sectors of one tag area
	DataSectors       uint64 // provided data sectors
	JournalMAC        bool
}

// Geometry computes the layout (calculate_journal_section_size and
// calculate_device_limits of the kernel).
func (sb *Superblock) Geometry() (Geometry, error) {
	return geometryFor(sb.Log2SectorsPerBlock, int(sb.TagSize), sb.Flags, sb.JournalSections, sb.Log2InterleaveSectors, sb.ProvidedDataSectors)
}

func geometryFor(log2spb uint8, tagSize int, flags, sections uint32, log2il uint8, provided uint64) (Geometry, error) {
	if log2spb > 3 || log2il < minLog2Interleave || log2il > maxLog2Interleave || tagSize <= 0 || flags&FlagInline != 0 {
		return Geometry{}, fmt.Errorf("integrity: no interleaved layout (sectors per block 2^%d, interleave 2^%d, tag size %d, flags %#x)", log2spb, log2il, tagSize, flags)
	}
	g := Geometry{
		SectorsPerBlock:   1 << log2spb,
		TagSize:           tagSize,
		JournalSections:   int(sections),
		InterleaveSectors: 1 << log2il,
		DataSectors:       provided,
		JournalMAC:        flags&FlagJournalMAC != 0,
	}
	g.JournalEntrySize = (8 + 8*g.SectorsPerBlock + tagSize + 7) &^ 7
	space := journalSectorData
	if g.JournalMAC {
		space -= journalMACPerSec
	}
	g.EntriesPerSector = space / g.JournalEntrySize
	if g.EntriesPerSector == 0 {
		return g, fmt.Errorf("integrity: a %d-byte tag leaves no room for a journal entry", tagSize)
	}
	g.SectionEntries = g.EntriesPerSector * journalBlockSecs
	g.SectionSectors = g.SectionEntries*g.SectorsPerBlock + journalBlockSecs
	hi, journal := bits.Mul64(uint64(g.SectionSectors), uint64(sections))
	g.InitialSectors = 8 + journal
	if hi != 0 || g.InitialSectors > 0xffffffff {
		return g, fmt.Errorf("integrity: %d journal sections do not fit the kernel's 32-bit layout", sections)
	}
	pad := uint64(512) << metadataPadding
	if flags&FlagFixedPadding != 0 {
		pad = metadataPadding << 9
	}
	run := uint64(tagSize) << (log2il - log2spb)
	g.MetadataRun = (run + pad - 1) / pad * pad >> 9
	if provided > 0 {
		if _, err := g.checkedEnd(); err != nil {
			return g, err
		}
	}
	return g, nil
}

// BlockSize is the bytes of one block (data sector).
func (g *Geometry) BlockSize() int { return g.SectorsPerBlock << 9 }

// Blocks is the number of blocks the volume exposes.
func (g *Geometry) Blocks() uint64 { return g.DataSectors / uint64(g.SectorsPerBlock) }

// areaStart is the first sector of area a (its tag area).
func (g *Geometry) areaStart(a uint64) uint64 {
	return g.InitialSectors + a*(g.InterleaveSectors+g.MetadataRun)
}

// DataSector is the device sector holding logical 512-byte sector s.
func (g *Geometry) DataSector(s uint64) uint64 {
	a, off := s/g.InterleaveSectors, s%g.InterleaveSectors
	return g.areaStart(a) + g.MetadataRun + off
}

// TagOffset is the byte offset on the device of the tag of the block that
// starts at logical sector s.
func (g *Geometry) TagOffset(s uint64) int64 {
	a, off := s/g.InterleaveSectors, s%g.InterleaveSectors
	return int64(g.areaStart(a))<<9 + int64(off/uint64(g.SectorsPerBlock))*int64(g.TagSize)
}

// checkedEnd returns the sector after the last data sector, refusing a
// layout whose arithmetic would overflow.
func (g *Geometry) checkedEnd() (uint64, error) {
	last := g.DataSectors - 1
	a := last / g.InterleaveSectors
	per := g.InterleaveSectors + g.MetadataRun
	hi, lo := bits.Mul64(a+1, per)
	if hi != 0 || lo > 1<<60 {
		return 0, fmt.Errorf("integrity: %d data sectors overflow the layout", g.DataSectors)
	}
	return g.DataSector(last) + 1, nil
}

// DeviceSectors is the smallest device (in 512-byte sectors) that holds
// the layout.
func (g *Geometry) DeviceSectors() uint64 {
	end, _ := g.checkedEnd()
	return end
}

// fits reports whether a device of n sectors holds the layout, as the
// kernel's calculate_device_limits decides.
func (g *Geometry) fits(n uint64) bool {
	if g.InitialSectors+metadataPadding >= n || g.DataSectors == 0 {
		return false
	}
	end, err := g.checkedEnd()
	return err == nil && end <= n
}

// providedDataSectors is what the kernel offers on a device of n sectors
// (get_provided_data_sectors: the largest count, found bit by bit, whose
// layout fits), rounded down to whole blocks.
func providedDataSectors(g Geometry, n uint64) uint64 {
	var p uint64
	for bit := 63 - bits.LeadingZeros64(n); bit >= 3; bit-- {
		g.DataSectors = p | 1<<bit
		if g.fits(n) {
			p = g.DataSectors
		}
	}
	return p &^ uint64(g.SectorsPerBlock-1)
}

// hasMagic reports whether b starts with the superblock magic.
func hasMagic(b []byte) bool { return bytes.HasPrefix(b, []byte(sbMagic)) }
