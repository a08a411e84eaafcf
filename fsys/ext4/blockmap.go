package ext4

import (
	"encoding/binary"
	"fmt"
)

// A run is a stretch of logical blocks of a file that is either stored
// contiguously from physical block phys, or reads as zeros (a hole or an
// uninitialized extent).
type run struct {
	phys uint64
	n    uint64
	zero bool
}

const (
	extentMagic = 0xF30A
	// maxExtentDepth is the kernel's EXT4_MAX_EXTENT_DEPTH.
	maxExtentDepth = 5
	// maxLogical is one past the last logical block a file can have:
	// logical block numbers are 32 bits.
	maxLogical = 1 << 32
	// initMaxLen is the longest initialized extent; a longer ee_len marks
	// an uninitialized one of ee_len − 32768 blocks.
	initMaxLen = 32768
)

type extent struct {
	lblk uint32
	len  uint32
	phys uint64
	zero bool
}

// mapper finds the physical blocks of one inode's logical blocks. It keeps
// the last extent leaf or indirect blocks it read, so a sequential read
// touches each metadata block once.
type mapper struct {
	f  *FS
	in *inode

	// extents: the leaf covering logical blocks [leafLo, leafHi).
	leaf           []extent
	leafLo, leafHi uint64
	haveLeaf       bool

	// block maps: a few indirect blocks by physical number.
	cache [4]indirect
	next  int
}

type indirect struct {
	blk  uint64
	ptrs []uint32
}

func newMapper(f *FS, in *inode) *mapper { return &mapper{f: f, in: in} }

// lookup maps logical block lblk, returning a run of at most max blocks.
func (m *mapper) lookup(lblk, max uint64) (run, error) {
	if lblk >= maxLogical {
		return run{}, fmt.Errorf("%w: inode %d: logical block %d past 2^32", ErrCorrupt, m.in.ino, lblk)
	}
	var r run
	var err error
	if m.in.flags&flagExtents != 0 {
		r, err = m.lookupExtent(lblk)
	} else {
		r, err = m.lookupIndirect(lblk, max)
	}
	if err != nil {
		return run{}, err
	}
	if r.n > max {
		r.n = max
	}
	return r, nil
}

// parseNode checks an extent tree node (the 60 bytes of i_block or a
// block) and returns its depth and entries region.
func (m *mapper) parseNode(b []byte, where string) (depth, entries int, err error) {
	le := binary.LittleEndian
	if le.Uint16(b[0:]) != extentMagic {
		return 0, 0, fmt.Errorf("%w: inode %d: extent header magic %#04x in %s", ErrCorrupt, m.in.ino, le.Uint16(b[0:]), where)
	}
	entries = int(le.Uint16(b[2:]))
	maxEntries := int(le.Uint16(b[4:]))
	depth = int(le.Uint16(b[6:]))
	if maxEntries > (len(b)-12)/12 || entries > maxEntries {
		return 0, 0, fmt.Errorf("%w: inode %d: extent node with %d of %d entries in %d bytes (%s)", ErrCorrupt, m.in.ino, entries, maxEntries, len(b), where)
	}
	if depth > maxExtentDepth {
		return 0, 0, fmt.Errorf("%w: inode %d: extent tree depth %d > %d", ErrCorrupt, m.in.ino, depth, maxExtentDepth)
	}
	return depth, entries, nil
}

func (m *mapper) lookupExtent(lblk uint64) (run, error) {
	if !m.haveLeaf || lblk < m.leafLo || lblk >= m.leafHi {
		if err := m.loadLeaf(lblk); err != nil {
			return run{}, err
		}
	}
	// The leaf's extents are sorted and disjoint (checked by loadLeaf).
	holeEnd := m.leafHi
	for _, e := range m.leaf {
		lo, hi := uint64(e.lblk), uint64(e.lblk)+uint64(e.len)
		if lblk < lo {
			holeEnd = lo
			break
		}
		if lblk < hi {
			off := lblk - lo
			return run{phys: e.phys + off, n: hi - lblk, zero: e.zero}, nil
		}
	}
	return run{n: holeEnd - lblk, zero: true}, nil
}

// loadLeaf walks the extent tree from the inode to the leaf covering
// lblk. Each level must be exactly one shallower than its parent, so the
// walk ends after at most maxExtentDepth blocks whatever the pointers say:
// a loop shows up as a depth mismatch.
func (m *mapper) loadLeaf(lblk uint64) error {
	le := binary.LittleEndian
	node := m.in.block[:]
	where := "i_block"
	lo, hi := uint64(0), uint64(maxLogical)
	depth, n, err := m.parseNode(node, where)
	if err != nil {
		return err
	}
	for {
		if depth == 0 {
			break
		}
		// Last index entry whose first block is <= lblk.
		pick := -1
		prev := uint64(0)
		for i := 0; i < n; i++ {
			e := node[12+12*i:]
			first := uint64(le.Uint32(e[0:]))
			// Entries must increase and stay below the parent's next
			// index; the first may start before lo (the kernel does not
			// always lower the parent key when an extent moves down).
			if i > 0 && first <= prev || first >= hi {
				return fmt.Errorf("%w: inode %d: extent index entries out of order in %s", ErrCorrupt, m.in.ino, where)
			}
			prev = first
			if first <= lblk {
				pick = i
			} else {
				if pick < 0 {
					// lblk lies before the first index: a hole.
					m.leaf, m.leafLo, m.leafHi, m.haveLeaf = nil, lo, first, true
					return nil
				}
				hi = first
				break
			}
		}
		if pick < 0 {
			m.leaf, m.leafLo, m.leafHi, m.haveLeaf = nil, lo, hi, true
			return nil
		}
		e := node[12+12*pick:]
		lo = uint64(le.Uint32(e[0:]))
		child := uint64(le.Uint32(e[4:])) | uint64(le.Uint16(e[8:]))<<32
		if child < uint64(m.f.firstDataBlock)+1 || child >= m.f.blocks {
			return fmt.Errorf("%w: inode %d: extent index points at block %d", ErrCorrupt, m.in.ino, child)
		}
		b, err := m.f.readBlock(child)
		if err != nil {
			return err
		}
		where = fmt.Sprintf("block %d", child)
		d, cn, err := m.parseNode(b, where)
		if err != nil {
			return err
		}
		if d != depth-1 {
			return fmt.Errorf("%w: inode %d: extent node at depth %d below one at depth %d (a loop?)", ErrCorrupt, m.in.ino, d, depth)
		}
		node, depth, n = b, d, cn
	}
	leaf := make([]extent, 0, n)
	prevEnd := uint64(0)
	for i := 0; i < n; i++ {
		e := node[12+12*i:]
		x := extent{lblk: le.Uint32(e[0:]), len: uint32(le.Uint16(e[4:]))}
		x.phys = uint64(le.Uint32(e[8:])) | uint64(le.Uint16(e[6:]))<<32
		if x.len > initMaxLen {
			x.len -= initMaxLen
			x.zero = true
		}
		start, end := uint64(x.lblk), uint64(x.lblk)+uint64(x.len)
		if x.len == 0 || start < prevEnd || end > hi {
			return fmt.Errorf("%w: inode %d: extent %d (blocks %d+%d) overlaps or leaves its node (%s)", ErrCorrupt, m.in.ino, i, start, x.len, where)
		}
		if x.phys < uint64(m.f.firstDataBlock) || x.phys >= m.f.blocks || uint64(x.len) > m.f.blocks-x.phys {
			return fmt.Errorf("%w: inode %d: extent at block %d+%d past the %d-block filesystem", ErrCorrupt, m.in.ino, x.phys, x.len, m.f.blocks)
		}
		prevEnd = end
		leaf = append(leaf, x)
	}
	m.leaf, m.leafLo, m.leafHi, m.haveLeaf = leaf, lo, hi, true
	return nil
}

// lookupIndirect maps through the ext2/ext3 block map: 12 direct blocks,
// then single, double and triple indirect blocks. It coalesces physically
// contiguous blocks into one run of up to max blocks.
func (m *mapper) lookupIndirect(lblk, max uint64) (run, error) {
	first, span, err := m.pointer(lblk)
	if err != nil {
		return run{}, err
	}
	if first == 0 {
		// A hole, span blocks long (a missing indirect block covers all
		// the blocks below it).
		return run{n: span, zero: true}, nil
	}
	r := run{phys: first, n: 1}
	for r.n < max && lblk+r.n < maxLogical {
		p, _, err := m.pointer(lblk + r.n)
		if err != nil {
			return run{}, err
		}
		if p != r.phys+r.n {
			break
		}
		r.n++
	}
	return r, nil
}

// pointer returns the physical block of lblk (0 for a hole) and, for a
// hole, how many blocks from lblk on are known to be holes too.
func (m *mapper) pointer(lblk uint64) (uint64, uint64, error) {
	le := binary.LittleEndian
	per := uint64(m.f.bs / 4)
	ptr := func(i int) uint64 { return uint64(le.Uint32(m.in.block[4*i:])) }
	var root uint64
	var levels int
	idx := lblk
	switch {
	case idx < 12:
		return m.checkPtr(ptr(int(idx)), 1)
	case idx-12 < per:
		root, levels, idx = ptr(12), 1, idx-12
	case idx-12-per < per*per:
		root, levels, idx = ptr(13), 2, idx-12-per
	case idx-12-per-per*per < per*per*per:
		root, levels, idx = ptr(14), 3, idx-12-per-per*per
	default:
		return 0, 1, fmt.Errorf("%w: inode %d: logical block %d beyond the triple indirect block", ErrCorrupt, m.in.ino, lblk)
	}
	blk := root
	for l := levels; l > 0; l-- {
		below := uint64(1)
		for i := 1; i < l; i++ {
			below *= per
		}
		if blk == 0 {
			return 0, below*per - idx, nil
		}
		if blk >= m.f.blocks || blk <= uint64(m.f.firstDataBlock) {
			return 0, 0, fmt.Errorf("%w: inode %d: indirect block %d outside the filesystem", ErrCorrupt, m.in.ino, blk)
		}
		ptrs, err := m.indirect(blk)
		if err != nil {
			return 0, 0, err
		}
		i := idx / below
		idx %= below
		blk = uint64(ptrs[i])
		if l == 1 {
			return m.checkPtr(blk, 1)
		}
		if blk == 0 {
			return 0, below - idx, nil
		}
	}
	return 0, 1, nil // not reached: levels >= 1
}

func (m *mapper) checkPtr(p, span uint64) (uint64, uint64, error) {
	if p != 0 && p >= m.f.blocks {
		return 0, 0, fmt.Errorf("%w: inode %d: data block %d past the %d-block filesystem", ErrCorrupt, m.in.ino, p, m.f.blocks)
	}
	return p, span, nil
}

func (m *mapper) indirect(blk uint64) ([]uint32, error) {
	for _, c := range m.cache {
		if c.ptrs != nil && c.blk == blk {
			return c.ptrs, nil
		}
	}
	b, err := m.f.readBlock(blk)
	if err != nil {
		return nil, err
	}
	ptrs := make([]uint32, len(b)/4)
	for i := range ptrs {
		ptrs[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	m.cache[m.next] = indirect{blk, ptrs}
	m.next = (m.next + 1) % len(m.cache)
	return ptrs, nil
}
