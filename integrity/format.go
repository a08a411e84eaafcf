package integrity

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
)

// FormatOptions describe a new standalone volume, with integritysetup
// format's defaults for every zero field.
type FormatOptions struct {
	// Algorithm and Key: the tag algorithm (default crc32c). For a
	// volume whose tags a layer above writes (dm-crypt AEAD), set
	// RawTags and TagSize instead.
	Algorithm string
	Key       []byte
	RawTags   bool
	// TagSize defaults to the algorithm's digest size.
	TagSize int
	// SectorSize: 512 (default) to 4096.
	SectorSize int
	// JournalSectors defaults to the kernel's: the device's size/128, at
	// most 131072 sectors (64 MiB).
	JournalSectors uint64
	// InterleaveSectors defaults to 32768 (rounded down to a power of 2,
	// 8 to 2^31).
	InterleaveSectors uint64
	// JournalMAC/JournalMACKey give the journal a MAC.
	JournalMAC    string
	JournalMACKey []byte
	// JournalCrypt/JournalCryptKey encrypt the journal (ctr(aes)).
	JournalCrypt    string
	JournalCryptKey []byte
	// LegacyPadding and LegacyHMAC turn off the fix_padding and fix_hmac
	// layouts integritysetup uses by default.
	LegacyPadding, LegacyHMAC bool
	// DeviceSize in bytes; 0 asks the device (Size() or a file's size).
	DeviceSize int64
	// Force formats over a device whose first 4 KiB are not zero.
	Force bool
	// NoWipe leaves the data area and tags as they are (integritysetup
	// format --no-wipe): blocks read as tag mismatches until written.
	NoWipe bool
}

// ErrNotEmpty is returned by Format on a device that already holds data
// at its start, without Force.
var ErrNotEmpty = errors.New("integrity: the device is not empty (its first 4 KiB hold data); use Force")

// Format writes a new volume as integritysetup format leaves it: the data
// area zeroed with every tag computed (raw-tag volumes: zero tags), an
// empty journal, then the superblock last, so that a crash during Format
// leaves no volume rather than a half-made one.
func Format(dev Device, o FormatOptions) (*Superblock, error) {
	size := o.DeviceSize
	if size == 0 {
		var ok bool
		if size, ok = deviceSize(dev); !ok {
			return nil, errors.New("integrity: cannot tell the device size: set DeviceSize")
		}
	}
	devSectors := uint64(size) >> 9
	if !o.Force {
		head := make([]byte, SuperblockArea)
		if _, err := dev.ReadAt(head, 0); err != nil && err != io.EOF {
			return nil, fmt.Errorf("integrity: reading the device: %w", err)
		}
		if !bytes.Equal(head, make([]byte, SuperblockArea)) {
			return nil, ErrNotEmpty
		}
	}
	var spec *hashSpec
	var err error
	if o.RawTags {
		if o.Algorithm != "" || o.TagSize == 0 {
			return nil, errors.New("integrity: raw tags need a tag size and no algorithm")
		}
	} else {
		if o.Algorithm == "" {
			o.Algorithm = "crc32c"
		}
		if spec, err = newHashSpec(o.Algorithm, o.Key); err != nil {
			return nil, err
		}
		defer spec.wipe()
		if o.TagSize == 0 {
			o.TagSize = spec.digest
		}
	}
	if o.TagSize <= 0 || o.TagSize > MaxTagSize {
		return nil, fmt.Errorf("integrity: tag size %d (1 to %d)", o.TagSize, MaxTagSize)
	}
	if o.SectorSize == 0 {
		o.SectorSize = 512
	}
	l2spb := -1
	for l := 0; l <= 3; l++ {
		if o.SectorSize == 512<<l {
			l2spb = l
		}
	}
	if l2spb < 0 {
		return nil, fmt.Errorf("integrity: sector size %d (512, 1024, 2048 or 4096)", o.SectorSize)
	}
	var jspec *hashSpec
	if o.JournalMAC != "" {
		if jspec, err = newHashSpec(o.JournalMAC, o.JournalMACKey); err != nil {
			return nil, err
		}
		defer jspec.wipe()
	}
	sb := &Superblock{TagSize: uint16(o.TagSize), Log2SectorsPerBlock: uint8(l2spb)}
	if jspec != nil {
		sb.Flags |= FlagJournalMAC
	}
	if !o.LegacyHMAC && (!o.RawTags || jspec != nil) {
		sb.Flags |= FlagFixedHMAC
		if _, err := rand.Read(sb.Salt[:]); err != nil {
			return nil, err
		}
	}
	if !o.LegacyPadding {
		sb.Flags |= FlagFixedPadding
	}
	g, err := geometryFor(sb.Log2SectorsPerBlock, o.TagSize, sb.Flags, 1, minLog2Interleave, 0)
	if err != nil {
		return nil, err
	}
	js := o.JournalSectors
	if js == 0 {
		js = min(DefaultMaxJournalSectors, devSectors>>DefaultJournalSizeFactor)
	}
	sections := max(js/uint64(g.SectionSectors), 1)
	if sections > 0xffffffff {
		return nil, fmt.Errorf("integrity: journal of %d sectors is too large", js)
	}
	sb.JournalSections = uint32(sections)
	il := o.InterleaveSectors
	if il == 0 {
		il = DefaultInterleaveSectors
	}
	l2il := 63
	for il>>uint(l2il) == 0 {
		l2il--
	}
	sb.Log2InterleaveSectors = uint8(min(max(l2il, minLog2Interleave), maxLog2Interleave))
	if g, err = sb.Geometry(); err != nil {
		return nil, err
	}
	sb.ProvidedDataSectors = providedDataSectors(g, devSectors)
	if sb.ProvidedDataSectors == 0 {
		return nil, fmt.Errorf("integrity: the %d-byte device is too small for this layout", size)
	}
	if g, err = sb.Geometry(); err != nil {
		return nil, err
	}
	sb.Log2BlocksPerBitmapBit = log2BlocksPerBitmapBit(sb, &g)
	sb.setVersion(false)

	v := &Volume{dev: dev, sb: sb, g: g, ids: &plainCommitIDs}
	if o.JournalCrypt != "" {
		jc, err := newJournalCrypt(o.JournalCrypt, o.JournalCryptKey, &g)
		if err != nil {
			return nil, err
		}
		v.dev = newCryptDev(dev, jc)
		v.ids = &jc.ids
	}
	if jspec != nil {
		v.jmacKey = jspec
		v.jmac = sectionMAC(jspec, sb, &v.g)
	}
	// The superblock area is cleared first: a crash from here on leaves
	// no volume.
	if _, err := dev.WriteAt(make([]byte, SuperblockArea), 0); err != nil {
		return nil, fmt.Errorf("integrity: format: %w", err)
	}
	if !o.NoWipe {
		if err := v.wipeData(spec); err != nil {
			return nil, err
		}
	}
	if err := v.initJournal(0, 0); err != nil {
		return nil, err
	}
	if err := v.writeSuperblock(); err != nil {
		return nil, err
	}
	out := *sb
	return &out, nil
}

// wipeData zeroes every area's data and writes its tags (the tags of
// zero blocks, or zeros for raw tags), padding included.
func (v *Volume) wipeData(spec *hashSpec) error {
	g := &v.g
	spb := uint64(g.SectorsPerBlock)
	bs, ts := uint64(g.BlockSize()), uint64(g.TagSize)
	zero := make([]byte, bs)
	var t *tagger
	if spec != nil {
		t = spec.tagger(v.sb)
	}
	const chunk = 1 << 20
	zeros := make([]byte, chunk)
	for s := uint64(0); s < g.DataSectors; s += g.InterleaveSectors {
		n := min(g.InterleaveSectors, g.DataSectors-s) // sectors in this area
		meta := make([]byte, g.MetadataRun<<9)
		if t != nil {
			for k := uint64(0); k < n/spb; k++ {
				t.tag(meta[k*ts:(k+1)*ts], s+k*spb, zero)
			}
		}
		if _, err := v.dev.WriteAt(meta, v.g.TagOffset(s)); err != nil {
			return fmt.Errorf("integrity: format: %w", err)
		}
		off := int64(g.DataSector(s)) << 9
		for left := int64(n) << 9; left > 0; {
			w := min(left, chunk)
			if _, err := v.dev.WriteAt(zeros[:w], off); err != nil {
				return fmt.Errorf("integrity: format: %w", err)
			}
			off += w
			left -= w
		}
	}
	return nil
}

// Dump writes what integritysetup dump (cryptsetup 2.6) prints for the
// superblock.
func Dump(w io.Writer, sb *Superblock, device string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Info for integrity device %s.\n", device)
	fmt.Fprintf(&b, "superblock_version %d\n", sb.Version)
	fmt.Fprintf(&b, "log2_interleave_sectors %d\n", sb.Log2InterleaveSectors)
	fmt.Fprintf(&b, "integrity_tag_size %d\n", sb.TagSize)
	fmt.Fprintf(&b, "journal_sections %d\n", sb.JournalSections)
	fmt.Fprintf(&b, "provided_data_sectors %d\n", sb.ProvidedDataSectors)
	fmt.Fprintf(&b, "sector_size %d\n", sb.SectorSize())
	if sb.Version == 2 && sb.Flags&FlagRecalculating != 0 { // as 2.6 does (not for later versions)
		fmt.Fprintf(&b, "recalc_sector %d\n", sb.RecalcSector)
	}
	fmt.Fprintf(&b, "log2_blocks_per_bitmap %d\n", sb.Log2BlocksPerBitmapBit)
	b.WriteString("flags ")
	for _, f := range []struct {
		bit  uint32
		name string
	}{{FlagJournalMAC, "have_journal_mac"}, {FlagRecalculating, "recalculating"}, {FlagDirtyBitmap, "dirty_bitmap"},
		{FlagFixedPadding, "fix_padding"}, {FlagFixedHMAC, "fix_hmac"}, {FlagInline, "inline"}} {
		if sb.Flags&f.bit != 0 {
			b.WriteString(f.name + " ")
		}
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

// ReadSuperblock reads and validates the superblock of a device.
func ReadSuperblock(r io.ReaderAt) (*Superblock, error) {
	buf := make([]byte, SuperblockArea)
	if _, err := r.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("integrity: reading superblock: %w", err)
	}
	return ParseSuperblock(buf)
}
