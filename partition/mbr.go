package partition

import (
	"fmt"
	"io"
)

// maxPartitions is Linux's DISK_MAX_PARTS: a disk has at most 256
// partitions, so an EBR chain of more than 252 logical partitions is
// refused rather than followed.
const maxPartitions = 256

// mbrEntry is one 16-byte partition entry.
type mbrEntry struct {
	status byte
	typ    byte
	start  uint64 // LBA, relative to whatever the table's rules say
	count  uint64 // sectors
}

func mbrEntries(sec []byte) [4]mbrEntry {
	var es [4]mbrEntry
	for i := range es {
		e := sec[446+16*i:]
		es[i] = mbrEntry{status: e[0], typ: e[4], start: uint64(le.Uint32(e[8:])), count: uint64(le.Uint32(e[12:]))}
	}
	return es
}

// readMBR reads the four primary entries of mbr (sector 0, signature
// checked) and the logical partitions of each extended one.
func readMBR(dev io.ReaderAt, size int64, ss int, mbr []byte) (*Table, error) {
	es := mbrEntries(mbr)
	// As Linux does: a boot indicator other than 0x00 or 0x80 means the
	// sector is a filesystem's boot sector (FAT, NTFS), not a table.
	for i, e := range es {
		if e.status != 0 && e.status != 0x80 {
			return nil, fmt.Errorf("%w: sector 0 has a 0x55AA signature, but entry %d's boot indicator %#02x is neither 0x00 nor 0x80 (a filesystem boot sector?)",
				ErrNoTable, i+1, e.status)
		}
	}
	sectors := uint64(size / int64(ss))
	t := &Table{Scheme: MBR, SectorSize: ss, DiskSize: size, DiskID: le.Uint32(mbr[440:])}
	var exts []Partition
	for i, e := range es {
		if e.count == 0 {
			continue // Linux's test for an unused entry, whatever the type
		}
		n := i + 1
		if e.start == 0 || e.start+e.count > sectors {
			return nil, fmt.Errorf("%w: partition %d (sectors %d-%d) is not inside the device's sectors 1-%d",
				ErrCorrupt, n, e.start, e.start+e.count-1, sectors-1)
		}
		p := t.mbrPartition(n, e, e.start, ss)
		p.Extended = isExtended(e.typ)
		t.Partitions = append(t.Partitions, p)
		if p.Extended {
			exts = append(exts, p)
		}
	}
	if err := checkOverlap(t.Partitions, int64(ss), "sectors"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	next := 5
	var logical []Partition
	var ebrs []int64
	for _, x := range exts {
		ls, at, err := t.readEBRChain(dev, ss, x, &next)
		if err != nil {
			return nil, err
		}
		logical = append(logical, ls...)
		ebrs = append(ebrs, at...)
	}
	if err := checkOverlap(logical, int64(ss), "sectors"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	// A logical partition holding an EBR would let a write through it
	// cut the chain.
	for _, p := range logical {
		for _, e := range ebrs {
			if e >= p.Start && e < p.End() {
				return nil, fmt.Errorf("%w: logical partition %d (sectors %d-%d) contains the EBR at sector %d",
					ErrCorrupt, p.Number, p.Start/int64(ss), p.End()/int64(ss)-1, e/int64(ss))
			}
		}
	}
	t.Partitions = append(t.Partitions, logical...)
	return t, nil
}

func (t *Table) mbrPartition(n int, e mbrEntry, abs uint64, ss int) Partition {
	return Partition{
		Number:   n,
		Start:    int64(abs) * int64(ss),
		Size:     int64(e.count) * int64(ss),
		MBRType:  e.typ,
		Bootable: e.status == 0x80,
		PartUUID: fmt.Sprintf("%08x-%02x", t.DiskID, n),
	}
}

// readEBRChain follows the EBRs of the extended partition x as Linux's
// parse_extended does: in each EBR, the entries that are not extended
// are logical partitions (relative to that EBR), numbered on from *next;
// the first extended entry links to the next EBR (relative to the start
// of x). It returns the logical partitions and the byte offsets of the
// EBRs.
//
// Unlike Linux, which stops quietly after 100 empty links or at 256
// partitions, a loop, a chain past 252 logical partitions, or an EBR or
// logical partition outside x is ErrCorrupt: the table is wrong, and
// guessing which part of it to trust could direct writes to the wrong
// bytes.
func (t *Table) readEBRChain(dev io.ReaderAt, ss int, x Partition, next *int) ([]Partition, []int64, error) {
	xs := uint64(x.Start / int64(ss)) // first sector of x
	xn := uint64(x.Size / int64(ss))  // its length in sectors
	var parts []Partition
	var ebrs []int64
	seen := map[uint64]bool{}
	this, thisLen := xs, xn // the EBR and the region it describes
	sec := make([]byte, ss)
	for link := 0; ; link++ {
		if seen[this] {
			return nil, nil, fmt.Errorf("%w: the EBR chain of extended partition %d loops back to sector %d", ErrCorrupt, x.Number, this)
		}
		if link >= maxPartitions {
			return nil, nil, fmt.Errorf("%w: the EBR chain of extended partition %d has more than %d links", ErrCorrupt, x.Number, maxPartitions)
		}
		seen[this] = true
		if err := readFull(dev, sec, int64(this)*int64(ss)); err != nil {
			return nil, nil, fmt.Errorf("reading the EBR at sector %d: %w", this, err)
		}
		if sec[510] != 0x55 || sec[511] != 0xAA {
			// Linux ends the chain here without a word; an extended
			// partition with no logical ones yet may hold a blank EBR.
			if link > 0 || !allZero(sec) {
				t.Warnings = append(t.Warnings, fmt.Sprintf("the EBR at sector %d (extended partition %d) has no 0x55AA signature; the chain ends there", this, x.Number))
			}
			break
		}
		ebrs = append(ebrs, int64(this)*int64(ss))
		es := mbrEntries(sec)
		for i, e := range es {
			if e.count == 0 || isExtended(e.typ) {
				continue
			}
			abs := this + e.start
			inside := e.start > 0 && abs >= xs && abs+e.count <= xs+xn
			if i >= 2 {
				// Linux's guard: the third and fourth entries of an EBR
				// sometimes hold garbage, used only when they fit.
				if !inside || e.start+e.count > thisLen {
					t.Warnings = append(t.Warnings, fmt.Sprintf("entry %d of the EBR at sector %d is ignored: it does not fit its extended partition", i+1, this))
					continue
				}
			}
			if !inside {
				return nil, nil, fmt.Errorf("%w: a logical partition in the EBR at sector %d (sectors %d-%d) is not inside extended partition %d (sectors %d-%d)",
					ErrCorrupt, this, abs, abs+e.count-1, x.Number, xs, xs+xn-1)
			}
			if *next > maxPartitions {
				return nil, nil, fmt.Errorf("%w: more than %d partitions", ErrCorrupt, maxPartitions)
			}
			p := t.mbrPartition(*next, e, abs, ss)
			p.Logical = true
			parts = append(parts, p)
			*next++
		}
		var link0 *mbrEntry
		for i := range es {
			if es[i].count != 0 && isExtended(es[i].typ) {
				link0 = &es[i]
				break
			}
		}
		if link0 == nil {
			break
		}
		if link0.start == 0 || link0.start >= xn || link0.start+link0.count > xn {
			return nil, nil, fmt.Errorf("%w: the EBR at sector %d links to sectors %d-%d, outside extended partition %d (sectors %d-%d)",
				ErrCorrupt, this, xs+link0.start, xs+link0.start+link0.count-1, x.Number, xs, xs+xn-1)
		}
		this, thisLen = xs+link0.start, link0.count
	}
	return parts, ebrs, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
