package lvm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// On-disk layout (lvm2 lib/label/label.h, lib/format_text/layout.h), all
// little-endian:
//
// The label is one 512-byte sector among the first four:
//
//	0  "LABELONE"
//	8  u64 sector number of this label (it must say where it is)
//	16 u32 CRC of bytes 20-511 (lvm2's CRC, seed 0xf597a6cf)
//	20 u32 offset of the PV header from the start of the label sector
//	24 "LVM2 001"
//
// The PV header (normally at 32): the 32-character PV uuid, a u64 device
// size in bytes, then two lists of {u64 offset, u64 size} in bytes, data
// areas then metadata areas, each ended by an entry whose offset is 0.
//
// A metadata area starts with a 512-byte header:
//
//	0  u32 CRC of bytes 4-511
//	4  magic " LVM2 x[5A%r0N*>"
//	20 u32 version (1)
//	24 u64 start: the area's own byte offset on the device
//	32 u64 size of the area in bytes
//	40 raw locations {u64 offset, u64 size, u32 checksum, u32 flags}, ended
//	   by a zero offset: the first is the committed metadata text.
//
// The rest of the area is a circular buffer: a text at offset o of size s
// runs to the end of the area and continues at offset 512 when o+s is
// beyond it. Its checksum is lvm2's CRC over both pieces, and s counts the
// text's trailing NUL.

const (
	idLen            = 32
	labelScanSectors = 4
	pvHeaderSize     = idLen + 8 // uuid and device size, before the lists
	mdaHeaderSize    = 512
	rawLocnIgnored   = 0x1
	labelID          = "LABELONE"
	labelType        = "LVM2 001"
)

var fmttMagic = []byte(" LVM2 x[5A%r0N*>")

// ErrNoPV is returned (wrapped) by ReadPV, and by Open for the device in
// question, when no valid LVM2 label is in the device's first four
// sectors. A LABELONE whose sector number, checksum or type is wrong is
// ignored by lvm2 as well, so it is ErrNoPV too, with the reason.
var ErrNoPV = errors.New("no LVM2 physical volume label")

// ErrNoMetadata is returned (wrapped) by Open when none of the devices
// given holds a usable copy of VG metadata: orphan PVs (pvcreate without
// vgcreate), PVs made with --metadatacopies 0 only, or every copy
// damaged. The message gives each copy's reason.
var ErrNoMetadata = errors.New("no valid volume group metadata")

// Area is a byte range of a PV, as the PV header lists it. A data area's
// Size 0 means "to the end of the device".
type Area struct {
	Offset uint64
	Size   uint64
}

// MetadataArea is one metadata area of a PV and what was found in it.
type MetadataArea struct {
	Area
	// Ignored is the IGNORED flag of its raw location (pvchange
	// --metadataignore y): lvm2 keeps no metadata there to be read.
	Ignored bool
	// Empty says the area holds no metadata text yet (an orphan PV).
	Empty bool
	// Wrapped says the text runs past the area's end and continues
	// after its header, as the circular buffer allows.
	Wrapped bool
	// VGName, VGUUID and Seqno describe the copy read, when Err is nil
	// and the area is neither Ignored nor Empty.
	VGName string
	VGUUID string
	Seqno  uint64
	// Err says why the area's copy cannot be used: a bad header
	// checksum or magic, a location outside the area, a text checksum
	// mismatch, a text that does not parse.
	Err error

	text []byte
}

// PV is what ReadPV found on a device.
type PV struct {
	UUID          string // lvm2's 38-character form with dashes
	LabelSector   int    // 0-3
	DeviceSize    uint64 // bytes, as the PV header records it
	DataAreas     []Area
	MetadataAreas []MetadataArea
	// BootloaderAreas are the areas of the PV header extension (pvcreate
	// --bootloaderareasize), kept free of extents like metadata areas.
	BootloaderAreas []Area
	// Metadata is the newest valid copy of the VG metadata text (the
	// highest seqno among the areas whose checksum and syntax are
	// good), without its trailing NUL; nil when there is none. VGName,
	// VGUUID and Seqno describe it.
	Metadata []byte
	VGName   string
	VGUUID   string
	Seqno    uint64

	uuid string // 32 characters, no dashes
}

// ReadPV reads the LVM2 label, the PV header and every metadata area of a
// device of size bytes, keeping the newest valid metadata text. A device
// without a label is ErrNoPV. Damaged metadata areas do not fail it: their
// MetadataArea.Err says why, and Metadata is nil if no copy is usable.
// Memory is bounded: 2 KiB for the label, 512 bytes per area header, and
// at most two texts of at most 32 MiB each (the best so far and the one
// being read), never more than the device holds.
func ReadPV(dev io.ReaderAt, size int64) (*PV, error) {
	pv, err := readPV(dev, size)
	if err != nil {
		return nil, fmt.Errorf("lvm: %w", err)
	}
	return pv, nil
}

func readPV(dev io.ReaderAt, size int64) (*PV, error) {
	if size < sectorSize {
		return nil, fmt.Errorf("%w: a device of %d bytes is smaller than a sector", ErrNoPV, size)
	}
	buf := make([]byte, min(size, labelScanSectors*sectorSize))
	if err := readFull(dev, buf, 0); err != nil {
		return nil, fmt.Errorf("reading the label sectors: %w", err)
	}
	var why error
	sector := -1
	for s := 0; (s+1)*sectorSize <= len(buf); s++ {
		lh := buf[s*sectorSize : (s+1)*sectorSize]
		if string(lh[:8]) != labelID {
			continue
		}
		switch {
		case binary.LittleEndian.Uint64(lh[8:]) != uint64(s):
			why = fmt.Errorf("the LABELONE in sector %d says sector %d", s, binary.LittleEndian.Uint64(lh[8:]))
		case lvmCRC(lh[20:]) != binary.LittleEndian.Uint32(lh[16:]):
			why = fmt.Errorf("the label in sector %d has a bad checksum", s)
		case string(lh[24:32]) != labelType:
			why = fmt.Errorf("the label in sector %d is of type %q, not %q", s, lh[24:32], labelType)
		default:
			sector = s
		}
		if sector >= 0 {
			break
		}
	}
	if sector < 0 {
		if why != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoPV, why)
		}
		return nil, ErrNoPV
	}
	label := buf[sector*sectorSize : (sector+1)*sectorSize]
	pv := &PV{LabelSector: sector}
	if err := pv.parseHeader(label); err != nil {
		return nil, fmt.Errorf("PV header in sector %d: %w", sector, err)
	}
	best := -1
	for i := range pv.MetadataAreas {
		m := &pv.MetadataAreas[i]
		m.Err = readMDA(dev, size, m)
		if m.Err != nil || m.Ignored || m.Empty {
			continue
		}
		if best < 0 || m.Seqno > pv.MetadataAreas[best].Seqno {
			if best >= 0 {
				pv.MetadataAreas[best].text = nil
			}
			best = i
		} else {
			m.text = nil // keep one text in memory
		}
	}
	if best >= 0 {
		m := &pv.MetadataAreas[best]
		pv.Metadata, pv.VGName, pv.VGUUID, pv.Seqno = m.text, m.VGName, m.VGUUID, m.Seqno
		m.text = nil
	}
	return pv, nil
}

func (pv *PV) parseHeader(label []byte) error {
	off := binary.LittleEndian.Uint32(label[20:])
	if off < 32 || off > sectorSize-pvHeaderSize {
		return fmt.Errorf("offset %d is outside the label sector", off)
	}
	h := label[off:]
	if !validUUID(string(h[:idLen])) {
		return fmt.Errorf("the PV uuid %q is not an lvm2 uuid", h[:idLen])
	}
	pv.uuid = string(h[:idLen])
	pv.UUID = formatUUID(pv.uuid)
	pv.DeviceSize = binary.LittleEndian.Uint64(h[idLen:])
	rest := h[pvHeaderSize:]
	// Two lists, each ended by a zero offset inside the sector, as
	// lvm2's label_check_pv_layout requires.
	list := func(what string, add func(Area)) error {
		for {
			if len(rest) < 16 {
				return fmt.Errorf("the %s list runs past the label sector", what)
			}
			a := Area{binary.LittleEndian.Uint64(rest), binary.LittleEndian.Uint64(rest[8:])}
			rest = rest[16:]
			if a.Offset == 0 {
				return nil
			}
			add(a)
		}
	}
	if err := list("data area", func(a Area) { pv.DataAreas = append(pv.DataAreas, a) }); err != nil {
		return err
	}
	if err := list("metadata area", func(a Area) { pv.MetadataAreas = append(pv.MetadataAreas, MetadataArea{Area: a}) }); err != nil {
		return err
	}
	// The extension (lvm2 2.02.116 and later): u32 version, u32 flags,
	// then the bootloader area list, when it fits in the sector and its
	// version is not 0, as lvm2 reads it.
	if len(rest) < 8 || binary.LittleEndian.Uint32(rest) == 0 {
		return nil
	}
	rest = rest[8:]
	return list("bootloader area", func(a Area) { pv.BootloaderAreas = append(pv.BootloaderAreas, a) })
}

// readMDA reads a metadata area's header and its committed text into m.
func readMDA(dev io.ReaderAt, devSize int64, m *MetadataArea) error {
	if m.Size < mdaHeaderSize || m.Offset > uint64(devSize) || m.Size > uint64(devSize)-m.Offset {
		return fmt.Errorf("area at byte %d of %d bytes does not fit the %d-byte device", m.Offset, m.Size, devSize)
	}
	h := make([]byte, mdaHeaderSize)
	if err := readFull(dev, h, int64(m.Offset)); err != nil {
		return fmt.Errorf("reading the area header at byte %d: %w", m.Offset, err)
	}
	if lvmCRC(h[4:]) != binary.LittleEndian.Uint32(h) {
		return fmt.Errorf("area header at byte %d has a bad checksum", m.Offset)
	}
	if !bytes.Equal(h[4:20], fmttMagic) {
		return fmt.Errorf("area header at byte %d has a bad magic", m.Offset)
	}
	if v := binary.LittleEndian.Uint32(h[20:]); v != 1 {
		return fmt.Errorf("area header at byte %d has version %d, not 1", m.Offset, v)
	}
	if start := binary.LittleEndian.Uint64(h[24:]); start != m.Offset {
		return fmt.Errorf("area header at byte %d says it starts at byte %d", m.Offset, start)
	}
	// The circular buffer's size is the header's, as lvm2 uses it; it
	// must lie inside the area the PV header gives.
	areaSize := binary.LittleEndian.Uint64(h[32:])
	if areaSize < mdaHeaderSize || areaSize > m.Size {
		return fmt.Errorf("area header at byte %d gives a size of %d bytes, outside %d-%d", m.Offset, areaSize, mdaHeaderSize, m.Size)
	}
	off := binary.LittleEndian.Uint64(h[40:])
	size := binary.LittleEndian.Uint64(h[48:])
	sum := binary.LittleEndian.Uint32(h[56:])
	flags := binary.LittleEndian.Uint32(h[60:])
	if off == 0 && size == 0 {
		m.Empty = true
		return nil
	}
	if flags&rawLocnIgnored != 0 {
		m.Ignored = true
		return nil
	}
	if off < mdaHeaderSize || off >= areaSize || size == 0 || size > areaSize-mdaHeaderSize {
		return fmt.Errorf("metadata text at offset %d of %d bytes is outside the %d-byte area at byte %d", off, size, areaSize, m.Offset)
	}
	if size > maxTextSize {
		return fmt.Errorf("metadata text of %d bytes is over the %d-byte limit", size, maxTextSize)
	}
	text := make([]byte, size)
	first := size
	if off+size > areaSize {
		first = areaSize - off
		m.Wrapped = true
	}
	if err := readFull(dev, text[:first], int64(m.Offset+off)); err != nil {
		return fmt.Errorf("reading the metadata text at byte %d: %w", m.Offset+off, err)
	}
	if first < size {
		if err := readFull(dev, text[first:], int64(m.Offset+mdaHeaderSize)); err != nil {
			return fmt.Errorf("reading the wrapped metadata text at byte %d: %w", m.Offset+mdaHeaderSize, err)
		}
	}
	if got := lvmCRC(text); got != sum {
		return fmt.Errorf("metadata text at byte %d has checksum %#08x, the area header says %#08x", m.Offset+off, got, sum)
	}
	if i := bytes.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	root, err := parseText(text)
	if err != nil {
		return err
	}
	name, id, seqno, err := vgSummary(root)
	if err != nil {
		return fmt.Errorf("metadata text at byte %d: %w", m.Offset+off, err)
	}
	m.text, m.VGName, m.VGUUID, m.Seqno = text, name, id, seqno
	return nil
}

// vgSummary gives the name, uuid and seqno of the VG a text describes,
// enough to choose the newest copy; ParseMetadata checks the rest.
func vgSummary(root *node) (name, id string, seqno uint64, err error) {
	for _, c := range root.children {
		if !c.section {
			continue
		}
		if id, err = c.str("id", true); err != nil {
			return "", "", 0, err
		}
		if !validUUID(id) {
			return "", "", 0, fmt.Errorf("%s: id %q is not an lvm2 uuid", c.key, id)
		}
		if seqno, _, err = c.uint("seqno", true, math.MaxUint32); err != nil {
			return "", "", 0, err
		}
		return c.key, id, seqno, nil
	}
	return "", "", 0, errors.New("no volume group section")
}

// readFull reads len(b) bytes at off; a device that ends early is an
// error, io.EOF alongside a full read is not.
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
