package integrity

import (
	"fmt"
)

// Bitmap mode keeps, in the journal area, one bit per region of
// 2^Log2BlocksPerBitmapBit blocks: set before a region is written in
// place, cleared after a flush. After a crash the superblock still says
// FlagDirtyBitmap and the tags of the set regions are recomputed.

func bitmapBytes(sb *Superblock, g *Geometry) int {
	bits := (g.Blocks() + 1<<sb.Log2BlocksPerBitmapBit - 1) >> sb.Log2BlocksPerBitmapBit
	return int((bits + 7) / 8)
}

// log2BlocksPerBitmapBit is the kernel's choice for the default
// sectors_per_bit: 32768 sectors, more if the journal area cannot hold
// the bitmap.
func log2BlocksPerBitmapBit(sb *Superblock, g *Geometry) uint8 {
	l := 15 // __fls(DEFAULT_SECTORS_PER_BITMAP_BIT)
	if l < int(sb.Log2SectorsPerBlock) {
		l = int(sb.Log2SectorsPerBlock)
	}
	inJournal := uint64(g.SectionSectors) * uint64(g.JournalSections) << 12
	if inJournal > 0xffffffff {
		inJournal = 0xffffffff
	}
	for inJournal < (g.DataSectors+1<<l-1)>>l {
		l++
	}
	return uint8(l - int(sb.Log2SectorsPerBlock))
}

func (v *Volume) loadBitmap() error {
	n := bitmapBytes(v.sb, &v.g)
	if uint64(n) > (v.g.InitialSectors-8)<<9 {
		return fmt.Errorf("integrity: the dirty bitmap (%d bytes) does not fit the journal area", n)
	}
	v.skip = make([]byte, n)
	if _, err := v.dev.ReadAt(v.skip, SuperblockArea); err != nil {
		return fmt.Errorf("integrity: reading the dirty bitmap: %w", err)
	}
	return nil
}

// recalcDirty recomputes the tags of every dirty region from its data,
// then re-initialises the journal and marks the superblock clean, in the
// order that leaves a crash at any point to redo the same work.
func (v *Volume) recalcDirty() error {
	if v.hash == nil {
		return fmt.Errorf("%w: a dirty bitmap needs the tag algorithm to recompute tags", ErrUnsupported)
	}
	spb := uint64(v.g.SectorsPerBlock)
	per := uint64(1) << v.sb.Log2BlocksPerBitmapBit
	bs, ts := uint64(v.g.BlockSize()), uint64(v.g.TagSize)
	perArea := v.g.InterleaveSectors / spb
	t := v.hash.tagger(v.sb)
	for bit := uint64(0); bit < uint64(len(v.skip))*8; bit++ {
		if v.skip[bit/8]&(1<<(bit%8)) == 0 {
			continue
		}
		first := bit * per
		if first >= v.g.Blocks() {
			break
		}
		n := min(per, v.g.Blocks()-first)
		for i := uint64(0); i < n; {
			b := first + i
			run := min(n-i, perArea-b%perArea, 1<<20/bs)
			data := make([]byte, run*bs)
			if _, err := v.dev.ReadAt(data, int64(v.g.DataSector(b*spb))<<9); err != nil {
				return fmt.Errorf("integrity: recalculating block %d: %w", b, err)
			}
			tags := make([]byte, run*ts)
			for k := uint64(0); k < run; k++ {
				t.tag(tags[k*ts:(k+1)*ts], (b+k)*spb, data[k*bs:(k+1)*bs])
			}
			if _, err := v.dev.WriteAt(tags, v.g.TagOffset(b*spb)); err != nil {
				return fmt.Errorf("integrity: recalculating block %d: %w", b, err)
			}
			i += run
		}
	}
	if err := v.sync(); err != nil {
		return err
	}
	if err := v.initJournal(0, 0); err != nil {
		return err
	}
	v.sb.Flags &^= FlagDirtyBitmap
	if err := v.writeSuperblock(); err != nil {
		return err
	}
	v.skip = nil
	v.nextSec, v.seq = 0, 1
	return nil
}

// beginBitmap enters bitmap mode: the superblock says dirty first, then
// the bitmap is cleared (a crash between leaves old journal bytes read as
// a bitmap: some regions recomputed, nothing lost).
func (v *Volume) beginBitmap() error {
	v.sb.Log2BlocksPerBitmapBit = log2BlocksPerBitmapBit(v.sb, &v.g)
	v.sb.Flags |= FlagDirtyBitmap
	if err := v.writeSuperblock(); err != nil {
		return err
	}
	n := bitmapBytes(v.sb, &v.g)
	v.skip = make([]byte, n)
	z := make([]byte, (n+bitmapBlockSize-1)/bitmapBlockSize*bitmapBlockSize)
	if _, err := v.dev.WriteAt(z, SuperblockArea); err != nil {
		return fmt.Errorf("integrity: writing the bitmap: %w", err)
	}
	if err := v.sync(); err != nil {
		return err
	}
	v.skip = nil // bits set by this process are not "unchecked"
	v.bitmap = make([]byte, n)
	v.bitmapOn = true
	v.dirty = map[uint64]bool{}
	return nil
}

// markDirty sets the bits of blocks first…first+n on disk (and syncs)
// before they are written.
func (v *Volume) markDirty(first, n uint64) error {
	if !v.bitmapOn {
		if err := v.beginBitmap(); err != nil {
			return err
		}
	}
	l := v.sb.Log2BlocksPerBitmapBit
	changed := map[uint64]bool{}
	for bit := first >> l; bit <= (first+n-1)>>l; bit++ {
		if v.bitmap[bit/8]&(1<<(bit%8)) == 0 {
			v.bitmap[bit/8] |= 1 << (bit % 8)
			changed[bit/(bitmapBlockSize*8)] = true
		}
		v.dirty[bit] = true
	}
	if len(changed) == 0 {
		return nil
	}
	for blk := range changed {
		if err := v.writeBitmapBlock(blk); err != nil {
			return err
		}
	}
	return v.sync()
}

func (v *Volume) writeBitmapBlock(blk uint64) error {
	b := make([]byte, bitmapBlockSize)
	copy(b, v.bitmap[blk*bitmapBlockSize:])
	if _, err := v.dev.WriteAt(b, SuperblockArea+int64(blk)*bitmapBlockSize); err != nil {
		return fmt.Errorf("integrity: writing the bitmap: %w", err)
	}
	return nil
}

// cleanBitmap clears the bits of regions written since the last flush
// (their data and tags are durable now).
func (v *Volume) cleanBitmap() error {
	changed := map[uint64]bool{}
	for bit := range v.dirty {
		v.bitmap[bit/8] &^= 1 << (bit % 8)
		changed[bit/(bitmapBlockSize*8)] = true
	}
	v.dirty = map[uint64]bool{}
	for blk := range changed {
		if err := v.writeBitmapBlock(blk); err != nil {
			return err
		}
	}
	return v.sync()
}

// endBitmap leaves bitmap mode as the kernel's suspend does: the journal
// re-initialised, the superblock no longer dirty.
func (v *Volume) endBitmap() error {
	if err := v.initJournal(0, 0); err != nil {
		return err
	}
	v.sb.Flags &^= FlagDirtyBitmap
	if err := v.writeSuperblock(); err != nil {
		return err
	}
	v.bitmapOn = false
	return nil
}
