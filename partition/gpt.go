package partition

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"unicode/utf16"
)

const (
	gptSignature = "EFI PART"
	// gptHeaderMin is the size of the revision 1.0 header (UEFI 2.x,
	// "GPT Header"); HeaderSize may be larger, up to one sector.
	gptHeaderMin = 92
	// gptEntryMin is the revision 1.0 entry; SizeOfPartitionEntry is
	// 128×2ⁿ and the bytes after the first 128 are reserved.
	gptEntryMin = 128
	// maxEntryArray caps the partition entry array we read. The spec's
	// minimum is 16 KiB (128 entries of 128 bytes) and no tool writes
	// more than a few times that; a header claiming more is refused
	// before anything is allocated, whatever its CRC says.
	maxEntryArray = 4 << 20
)

// errNoHeader: no "EFI PART" at the LBA; the probe then tries the other
// sector size instead of reporting damage.
var errNoHeader = errors.New("no GPT header signature")

// gptHeader is a checked header with its entries.
type gptHeader struct {
	lba         uint64
	alt         uint64
	first, last uint64
	disk        GUID
	entryLBA    uint64
	count       uint32
	entrySize   uint32
	entriesCRC  uint32
	revision    uint32
	parts       []Partition
}

// readGPTProbe reads the GPT behind a protective MBR, trying each sector
// size in turn: the first at which a valid primary or backup is found
// wins. The error reported is that of a size at which a header signature
// was found, since that is the disk's real sector size.
func readGPTProbe(dev io.ReaderAt, size int64, sizes []int) (*Table, error) {
	var firstErr error
	for _, ss := range sizes {
		t, err := readGPT(dev, size, ss)
		if err == nil {
			return t, nil
		}
		if !errors.Is(err, errNoHeader) && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, fmt.Errorf("%w: a protective MBR (type 0xEE) but no GPT header at LBA 1 or the last LBA for %s-byte sectors",
		ErrCorrupt, sizeList(sizes))
}

func sizeList(sizes []int) string {
	s := ""
	for i, n := range sizes {
		if i > 0 {
			s += " or "
		}
		s += fmt.Sprint(n)
	}
	return s
}

// readGPT reads the GPT with ss-byte sectors: the primary if it is
// sound, else the backup at the last LBA. errNoHeader when neither has a
// signature.
func readGPT(dev io.ReaderAt, size int64, ss int) (*Table, error) {
	if size/int64(ss) < 3 {
		return nil, errNoHeader
	}
	lastLBA := uint64(size/int64(ss)) - 1
	prim, perr := loadGPT(dev, size, ss, 1)
	if perr == nil {
		t := gptTable(prim, size, ss)
		t.Warnings = append(t.Warnings, checkBackup(dev, size, ss, prim, lastLBA)...)
		return t, nil
	}
	back, berr := loadGPT(dev, size, ss, lastLBA)
	if berr == nil {
		t := gptTable(back, size, ss)
		t.Backup = true
		what := "header or its entries are damaged (" + perr.Error() + ")"
		if errors.Is(perr, errNoHeader) {
			what = "header is missing"
		}
		t.Warnings = append(t.Warnings, fmt.Sprintf("the primary GPT %s; using the backup at LBA %d", what, lastLBA))
		if back.alt != 1 {
			t.Warnings = append(t.Warnings, fmt.Sprintf("the backup GPT header's AlternateLBA is %d, not 1", back.alt))
		}
		return t, nil
	}
	if errors.Is(perr, errNoHeader) && errors.Is(berr, errNoHeader) {
		return nil, errNoHeader
	}
	if perr.Error() == berr.Error() {
		// The usual case for a table written wrong rather than damaged:
		// both copies say the same wrong thing.
		return nil, fmt.Errorf("%w: both GPT copies (LBAs 1 and %d, %d-byte sectors): %v", ErrCorrupt, lastLBA, ss, perr)
	}
	return nil, fmt.Errorf("%w: both GPT copies are unusable (%d-byte sectors): primary at LBA 1: %v; backup at LBA %d: %v",
		ErrCorrupt, ss, perr, lastLBA, berr)
}

// checkBackup looks at the backup when the primary was used: damage or
// disagreement is a warning (the disk still reads, but a tool that
// rewrites the table should be run).
func checkBackup(dev io.ReaderAt, size int64, ss int, prim *gptHeader, lastLBA uint64) []string {
	var w []string
	at := lastLBA
	if prim.alt != lastLBA {
		// A disk image that grew keeps its backup at the old end, where
		// the primary points; sgdisk -e moves it.
		w = append(w, fmt.Sprintf("the primary GPT header's AlternateLBA is %d, not the last LBA %d (the device was resized?)", prim.alt, lastLBA))
		if prim.alt > 1 && prim.alt < lastLBA {
			at = prim.alt
		}
	}
	back, err := loadGPT(dev, size, ss, at)
	if err != nil {
		return append(w, fmt.Sprintf("the backup GPT at LBA %d is damaged (%v); the primary is used", at, err))
	}
	if back.disk != prim.disk || back.first != prim.first || back.last != prim.last ||
		back.count != prim.count || back.entrySize != prim.entrySize || back.entriesCRC != prim.entriesCRC {
		w = append(w, fmt.Sprintf("the backup GPT at LBA %d differs from the primary; the primary is used", at))
	}
	if back.alt != 1 {
		w = append(w, fmt.Sprintf("the backup GPT header's AlternateLBA is %d, not 1", back.alt))
	}
	return w
}

func gptTable(h *gptHeader, size int64, ss int) *Table {
	return &Table{
		Scheme:         GPT,
		SectorSize:     ss,
		DiskSize:       size,
		DiskGUID:       h.disk,
		FirstUsableLBA: h.first,
		LastUsableLBA:  h.last,
		EntryCount:     h.count,
		Partitions:     h.parts,
	}
}

// loadGPT reads and checks the header at lba and its entry array. The
// errors are plain (the caller wraps ErrCorrupt once) except errNoHeader.
func loadGPT(dev io.ReaderAt, size int64, ss int, lba uint64) (*gptHeader, error) {
	lastLBA := uint64(size/int64(ss)) - 1
	if lba > lastLBA {
		return nil, fmt.Errorf("LBA %d is beyond the device", lba)
	}
	sec := make([]byte, ss)
	if err := readFull(dev, sec, int64(lba)*int64(ss)); err != nil {
		return nil, err
	}
	if string(sec[:8]) != gptSignature {
		return nil, errNoHeader
	}
	h := &gptHeader{lba: lba}
	h.revision = le.Uint32(sec[8:])
	hsize := le.Uint32(sec[12:])
	if hsize < gptHeaderMin || hsize > uint32(ss) {
		return nil, fmt.Errorf("header size %d is not %d to %d", hsize, gptHeaderMin, ss)
	}
	want := le.Uint32(sec[16:])
	hdr := make([]byte, hsize)
	copy(hdr, sec)
	hdr[16], hdr[17], hdr[18], hdr[19] = 0, 0, 0, 0
	if got := crc32.ChecksumIEEE(hdr); got != want {
		return nil, fmt.Errorf("header CRC32 is %08x, the header says %08x", got, want)
	}
	if h.revision>>16 != 1 {
		return nil, fmt.Errorf("header revision %#08x is not 1.x", h.revision)
	}
	if my := le.Uint64(sec[24:]); my != lba {
		return nil, fmt.Errorf("header MyLBA is %d, but it was read at LBA %d", my, lba)
	}
	h.alt = le.Uint64(sec[32:])
	h.first = le.Uint64(sec[40:])
	h.last = le.Uint64(sec[48:])
	h.disk = guidFromDisk(sec[56:72])
	h.entryLBA = le.Uint64(sec[72:])
	h.count = le.Uint32(sec[80:])
	h.entrySize = le.Uint32(sec[84:])
	h.entriesCRC = le.Uint32(sec[88:])

	if h.first > h.last || h.last >= lastLBA || h.first <= 1 {
		return nil, fmt.Errorf("usable LBAs %d-%d are not inside the device's LBAs 2-%d", h.first, h.last, lastLBA-1)
	}
	if lba >= h.first && lba <= h.last {
		return nil, fmt.Errorf("the header's LBA %d is inside the usable LBAs %d-%d", lba, h.first, h.last)
	}
	if h.entrySize < gptEntryMin || h.entrySize%gptEntryMin != 0 || (h.entrySize/gptEntryMin)&(h.entrySize/gptEntryMin-1) != 0 {
		return nil, fmt.Errorf("entry size %d is not 128×2ⁿ", h.entrySize)
	}
	arrayBytes := uint64(h.count) * uint64(h.entrySize)
	if arrayBytes > maxEntryArray {
		return nil, fmt.Errorf("%d entries of %d bytes make a %d-byte entry array, more than the %d this reader allows",
			h.count, h.entrySize, arrayBytes, maxEntryArray)
	}
	arraySectors := (arrayBytes + uint64(ss) - 1) / uint64(ss)
	if arraySectors > 0 {
		end := h.entryLBA + arraySectors - 1 // no overflow: checked below first
		switch {
		case h.entryLBA == 0 || h.entryLBA > lastLBA || arraySectors > lastLBA-h.entryLBA+1:
			return nil, fmt.Errorf("the entry array (LBA %d, %d sectors) is not inside the device's LBAs 1-%d", h.entryLBA, arraySectors, lastLBA)
		case lba >= h.entryLBA && lba <= end:
			return nil, fmt.Errorf("the entry array (LBAs %d-%d) covers the header at LBA %d", h.entryLBA, end, lba)
		case end >= h.first && h.entryLBA <= h.last:
			return nil, fmt.Errorf("the entry array (LBAs %d-%d) overlaps the usable LBAs %d-%d", h.entryLBA, end, h.first, h.last)
		}
	}
	arr := make([]byte, arrayBytes)
	if err := readFull(dev, arr, int64(h.entryLBA)*int64(ss)); err != nil {
		return nil, fmt.Errorf("reading the entry array: %w", err)
	}
	if got := crc32.ChecksumIEEE(arr); got != h.entriesCRC {
		return nil, fmt.Errorf("entry array CRC32 is %08x, the header says %08x", got, h.entriesCRC)
	}
	parts, err := gptEntries(h, arr, ss)
	if err != nil {
		return nil, err
	}
	h.parts = parts
	return h, nil
}

// gptEntries decodes the used entries (type GUID not zero) and checks
// that each lies inside the usable LBAs and that none overlap.
func gptEntries(h *gptHeader, arr []byte, ss int) ([]Partition, error) {
	var parts []Partition
	for i := uint32(0); i < h.count; i++ {
		e := arr[uint64(i)*uint64(h.entrySize):][:gptEntryMin]
		typ := guidFromDisk(e[0:16])
		if typ.IsZero() {
			continue
		}
		start, end := le.Uint64(e[32:]), le.Uint64(e[40:])
		if start > end || start < h.first || end > h.last {
			return nil, fmt.Errorf("partition %d (LBAs %d-%d) is not inside the usable LBAs %d-%d", i+1, start, end, h.first, h.last)
		}
		uuid := guidFromDisk(e[16:32])
		parts = append(parts, Partition{
			Number:     int(i) + 1,
			Start:      int64(start) * int64(ss),
			Size:       int64(end-start+1) * int64(ss),
			Type:       typ,
			UUID:       uuid,
			Name:       utf16Name(e[56:128]),
			Attributes: le.Uint64(e[48:]),
			PartUUID:   uuid.String(),
		})
	}
	// Linux accepts overlapping entries; we refuse them, because a write
	// through one partition would change another.
	if err := checkOverlap(parts, int64(ss), "LBAs"); err != nil {
		return nil, err
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Number < parts[j].Number })
	return parts, nil
}

// utf16Name decodes PartitionName: 36 UTF-16LE code units, ended by the
// first NUL; a lone surrogate becomes U+FFFD.
func utf16Name(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := le.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}
