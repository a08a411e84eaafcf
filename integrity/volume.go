package integrity

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Device is what a volume lives on: a file, a block device, a powercut
// model. Sync makes every completed write durable.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// Mode is how writes reach the disk.
type Mode int

const (
	// ModeJournal (the kernel's J, integritysetup's default): every write
	// is committed to the journal first, so a block and its tag change
	// together across a power cut.
	ModeJournal Mode = iota
	// ModeDirect (the kernel's D, --integrity-no-journal): data and tag
	// are written in place; a power cut between the two leaves a block
	// that does not verify.
	ModeDirect
	// ModeBitmap (the kernel's B, --integrity-bitmap-mode): the region is
	// marked dirty in the on-disk bitmap before data and tags are written
	// in place, and clean again after a flush; after a power cut the tags
	// of dirty regions are recomputed from whatever data is there (the
	// data itself is not atomic, the tag always matches it).
	ModeBitmap
)

// Options open a volume.
type Options struct {
	// Algorithm is the tag algorithm of a standalone volume (crc32c,
	// crc32, sha1, sha256, hmac(sha256), …; integritysetup's hmac-sha256
	// spelling works too). Empty: the tags are opaque metadata that the
	// caller reads and writes (ReadSectors/WriteSectors with tags), as
	// dm-crypt's AEAD modes use them.
	Algorithm string
	// Key is the HMAC key of a keyed Algorithm.
	Key []byte
	// JournalMAC and JournalMACKey check (and write) the journal's MAC
	// when the volume has one (integritysetup --journal-integrity).
	JournalMAC    string
	JournalMACKey []byte
	// JournalCrypt and JournalCryptKey decrypt (and encrypt) the journal
	// of a volume made with integritysetup --journal-crypt. Stream
	// ciphers the kernel xors the journal with: ctr(aes) (ctr-aes);
	// others are refused with ErrUnsupported.
	JournalCrypt    string
	JournalCryptKey []byte
	// Mode of writes; ignored when ReadOnly.
	Mode     Mode
	ReadOnly bool
	// TagSize and SectorSize, when non-zero, must match the superblock
	// (integritysetup open --tag-size/--sector-size).
	TagSize, SectorSize int
	// DeviceSize is the device's size in bytes, for a Device that cannot
	// tell it (no Size method, not an *os.File); 0 asks the device. A
	// superblock promising more sectors than the device holds is refused
	// either way.
	DeviceSize int64
}

// ErrIntegrity is the error of a block whose tag does not match its data
// (the kernel's EILSEQ). It is always wrapped in a *SectorError naming the
// block.
var ErrIntegrity = errors.New("integrity: tag mismatch")

// SectorError is a tag mismatch at one block.
type SectorError struct {
	Sector uint64 // first 512-byte sector of the block, as the kernel logs it
	Block  uint64 // block (data sector) number
}

func (e *SectorError) Error() string {
	return fmt.Sprintf("integrity: checksum failed at sector %d (block %d)", e.Sector, e.Block)
}

// Unwrap makes errors.Is(err, ErrIntegrity) true.
func (e *SectorError) Unwrap() error { return ErrIntegrity }

// ErrReadOnly is returned by writes to a read-only volume.
var ErrReadOnly = errors.New("integrity: volume is read-only")

// Volume is an open dm-integrity volume: its blocks with their tags.
// Methods are safe for concurrent use (writes are serialised).
type Volume struct {
	dev  Device
	sb   *Superblock
	g    Geometry
	opts Options

	hash    *hashSpec
	ids     *commitIDs
	jmac    func(int, []byte) []byte
	jmacKey *hashSpec

	mu sync.RWMutex
	// overlay: blocks whose newest content is in the journal (read-only
	// opens of a volume with committed entries), block → entry.
	overlay  map[uint64]journalEntry
	metas    map[int][]byte // section → metadata of overlay sections
	skip     []byte         // dirty bitmap (ModeBitmap volumes after a crash), bit per region
	nextSec  int            // journal: next section to write
	seq      int            // journal: its commit sequence
	bitmapOn bool           // bitmap mode: superblock marked dirty
	bitmap   []byte         // bitmap mode: the bits on disk
	// wroteJournal: the journal holds entries this process committed.
	wroteJournal bool
	dirty        map[uint64]bool
	// secBuf and secSectors: a journal section and its entries' sectors,
	// kept from commit to commit (under mu).
	secBuf     []byte
	secSectors []uint64
	closed     bool
}

// Open reads the superblock and prepares the volume. A writable open
// does what the kernel does on activation: replays a journal left by a
// crash (journal and bitmap modes) and recomputes the tags of regions a
// crash left dirty in bitmap mode. A read-only open writes nothing: it
// serves committed journal entries from the journal itself.
func Open(dev Device, opts Options) (*Volume, error) {
	buf := make([]byte, SuperblockArea)
	if _, err := dev.ReadAt(buf, 0); err != nil {
		return nil, fmt.Errorf("integrity: reading superblock: %w", err)
	}
	sb, err := ParseSuperblock(buf)
	if err != nil {
		return nil, err
	}
	if sb.Flags&FlagInline != 0 {
		return nil, fmt.Errorf("%w: inline tags (superblock version 6) live in the disk's own metadata, out of userspace reach", ErrUnsupported)
	}
	g, _ := sb.Geometry()
	size, ok := deviceSize(dev)
	if opts.DeviceSize > 0 {
		size, ok = opts.DeviceSize, true
	}
	if ok && !g.fits(uint64(size)>>9) {
		return nil, fmt.Errorf("integrity: the %d-byte device is smaller than the layout needs (%d sectors)", size, g.DeviceSectors())
	}
	if opts.TagSize != 0 && opts.TagSize != int(sb.TagSize) {
		return nil, fmt.Errorf("integrity: tag size %d does not match the superblock's %d", opts.TagSize, sb.TagSize)
	}
	if opts.SectorSize != 0 && opts.SectorSize != sb.SectorSize() {
		return nil, fmt.Errorf("integrity: sector size %d does not match the superblock's %d", opts.SectorSize, sb.SectorSize())
	}
	v := &Volume{dev: dev, sb: sb, g: g, opts: opts, ids: &plainCommitIDs}
	v.opts.Key, v.opts.JournalMACKey, v.opts.JournalCryptKey = nil, nil, nil
	if opts.JournalCrypt != "" {
		if sb.Flags&FlagDirtyBitmap != 0 || opts.Mode == ModeBitmap && !opts.ReadOnly {
			return nil, fmt.Errorf("%w: bitmap mode with an encrypted journal", ErrUnsupported)
		}
		jc, err := newJournalCrypt(opts.JournalCrypt, opts.JournalCryptKey, &g)
		if err != nil {
			return nil, err
		}
		v.dev = newCryptDev(dev, jc)
		v.ids = &jc.ids
	}
	if opts.Algorithm != "" {
		if v.hash, err = newHashSpec(opts.Algorithm, opts.Key); err != nil {
			return nil, err
		}
	}
	if (sb.Flags&FlagJournalMAC != 0) != (opts.JournalMAC != "") {
		v.wipe()
		if opts.JournalMAC == "" {
			return nil, errors.New("integrity: the volume has a journal MAC: give its algorithm and key (journal mac mismatch)")
		}
		return nil, errors.New("integrity: the volume has no journal MAC (journal mac mismatch)")
	}
	if opts.JournalMAC != "" {
		if v.jmacKey, err = newHashSpec(opts.JournalMAC, opts.JournalMACKey); err != nil {
			v.wipe()
			return nil, err
		}
		v.jmac = sectionMAC(v.jmacKey, sb, &v.g)
		if sb.Flags&FlagFixedHMAC != 0 && !sbMACOK(v.jmacKey, buf) {
			v.wipe()
			return nil, errors.New("integrity: superblock MAC mismatch (wrong journal MAC key?)")
		}
	}
	if err := v.activate(); err != nil {
		v.wipe()
		return nil, err
	}
	return v, nil
}

func (v *Volume) wipe() {
	v.hash.wipe()
	v.jmacKey.wipe()
	if cd, ok := v.dev.(*cryptDev); ok {
		clear(cd.c.chacha)
	}
}

func deviceSize(dev Device) (int64, bool) {
	switch d := dev.(type) {
	case interface{ Size() (int64, error) }:
		n, err := d.Size()
		return n, err == nil
	case *os.File:
		st, err := d.Stat()
		if err == nil && st.Mode().IsRegular() {
			return st.Size(), true
		}
		n, err := d.Seek(0, io.SeekEnd)
		return n, err == nil
	}
	return 0, false
}

// sbMAC is the superblock MAC (sb_mac): the journal MAC over the first
// 512 bytes less the digest, stored in the digest's place.
func sbMAC(spec *hashSpec, sector0 []byte) []byte {
	h := spec.New()
	size := h.Size()
	h.Write(sector0[:512-size])
	return h.Sum(nil)
}

func sbMACOK(spec *hashSpec, sector0 []byte) bool {
	want := sbMAC(spec, sector0)
	return hmac.Equal(want, sector0[512-len(want):512])
}

// activate replays the journal or takes note of a dirty bitmap.
func (v *Volume) activate() error {
	if v.sb.Flags&FlagDirtyBitmap != 0 {
		if err := v.loadBitmap(); err != nil {
			return err
		}
		if v.opts.ReadOnly {
			return nil
		}
		return v.recalcDirty()
	}
	st, err := analyzeJournal(v.dev, &v.g, v.ids, v.jmac)
	if err != nil {
		return err
	}
	if v.opts.ReadOnly {
		v.overlay = map[uint64]journalEntry{}
		v.metas = map[int][]byte{}
		for _, e := range st.entries {
			v.overlay[e.sector/uint64(v.g.SectorsPerBlock)] = e
			if v.metas[e.section] == nil {
				m := make([]byte, journalBlockSecs*512)
				if _, err := v.dev.ReadAt(m, journalOffset(&v.g, e.section)); err != nil {
					return fmt.Errorf("integrity: reading journal: %w", err)
				}
				v.metas[e.section] = m
			}
		}
		return nil
	}
	if err := v.replay(st); err != nil {
		return err
	}
	// As the kernel: a full ring continues in journal mode (and in the
	// other modes when it holds no entry); anything else is cleared.
	if st.clear || v.opts.Mode != ModeJournal && !st.empty {
		erase := prevSeq(prevSeq(st.lastUsed))
		if err := v.initJournal(st.writeStart, erase); err != nil {
			return err
		}
		v.nextSec, v.seq = 0, nextSeq(erase)
	} else {
		v.nextSec, v.seq = st.continueSection, st.commitSeq
	}
	return nil
}

// replay writes the committed journal entries to their places, checking
// each tag first (the kernel fails the device on a mismatch), then syncs.
func (v *Volume) replay(st *journalState) error {
	if len(st.entries) == 0 {
		return nil
	}
	bs := v.g.BlockSize()
	blk := make([]byte, bs)
	tag := make([]byte, v.g.TagSize)
	want := make([]byte, v.g.TagSize)
	var t *tagger
	if v.hash != nil {
		t = v.hash.tagger(v.sb)
	}
	metas := map[int][]byte{}
	for _, e := range st.entries {
		m := metas[e.section]
		if m == nil {
			m = make([]byte, journalBlockSecs*512)
			if _, err := v.dev.ReadAt(m, journalOffset(&v.g, e.section)); err != nil {
				return fmt.Errorf("integrity: reading journal: %w", err)
			}
			metas[e.section] = m
		}
		if err := readJournalBlock(v.dev, &v.g, m, e.section, e.slot, blk, tag); err != nil {
			return err
		}
		if t != nil {
			t.tag(want, e.sector, blk)
			if !hmac.Equal(want, tag) {
				return fmt.Errorf("%w: tag mismatch when replaying section %d entry %d: %w", ErrJournal, e.section, e.slot,
					&SectorError{Sector: e.sector, Block: e.sector / uint64(v.g.SectorsPerBlock)})
			}
		}
		if _, err := v.dev.WriteAt(blk, int64(v.g.DataSector(e.sector))<<9); err != nil {
			return fmt.Errorf("integrity: replaying journal: %w", err)
		}
		if _, err := v.dev.WriteAt(tag, v.g.TagOffset(e.sector)); err != nil {
			return fmt.Errorf("integrity: replaying journal: %w", err)
		}
	}
	return v.sync()
}

// initJournal writes every section empty with commit sequence seq,
// starting at section start (init_journal as the kernel's clear_journal
// calls it), then syncs.
func (v *Volume) initJournal(start, seq int) error {
	n := v.g.JournalSections
	buf := make([]byte, v.g.SectionSectors*512)
	for k := 0; k < n; k++ {
		i := (start + k) % n
		buildSection(buf, &v.g, v.ids, i, seq, nil, nil, nil, v.jmac)
		if _, err := v.dev.WriteAt(buf, journalOffset(&v.g, i)); err != nil {
			return fmt.Errorf("integrity: writing journal: %w", err)
		}
	}
	return v.sync()
}

func (v *Volume) sync() error {
	if err := v.dev.Sync(); err != nil {
		return fmt.Errorf("integrity: sync: %w", err)
	}
	return nil
}

// Superblock returns a copy of the superblock.
func (v *Volume) Superblock() Superblock { return *v.sb }

// Geometry returns the layout.
func (v *Volume) Geometry() Geometry { return v.g }

// SectorSize is the block size in bytes.
func (v *Volume) SectorSize() int { return v.g.BlockSize() }

// TagSize is the bytes of per-block metadata.
func (v *Volume) TagSize() int { return v.g.TagSize }

// Blocks is the number of blocks.
func (v *Volume) Blocks() uint64 { return v.g.Blocks() }

// Size is the data size in bytes.
func (v *Volume) Size() int64 { return int64(v.g.DataSectors) << 9 }

func (v *Volume) checkRange(data, tags []byte, first uint64) (uint64, error) {
	bs := v.g.BlockSize()
	if len(data)%bs != 0 {
		return 0, fmt.Errorf("integrity: %d bytes is not a whole number of %d-byte blocks", len(data), bs)
	}
	n := uint64(len(data) / bs)
	if first > v.g.Blocks() || n > v.g.Blocks()-first {
		return 0, fmt.Errorf("integrity: blocks %d+%d beyond the volume's %d", first, n, v.g.Blocks())
	}
	if tags != nil && len(tags) != int(n)*v.g.TagSize {
		return 0, fmt.Errorf("integrity: %d tag bytes for %d blocks of %d-byte tags", len(tags), n, v.g.TagSize)
	}
	if tags == nil && v.hash == nil {
		return 0, errors.New("integrity: the volume has no tag algorithm: tags must be passed")
	}
	return n, nil
}

// ReadSectors reads blocks first… into dst (a whole number of blocks).
// With a tag algorithm every block is checked and a mismatch returns a
// *SectorError (errors.Is ErrIntegrity) for the first bad block, with
// nothing of that block or later ones in dst. tags, when not nil, receives
// each block's stored tag (TagSize bytes a block): the raw per-sector
// metadata an AEAD layer above verifies itself.
func (v *Volume) ReadSectors(dst, tags []byte, first uint64) error {
	n, err := v.checkRange(dst, tags, first)
	if err != nil {
		return err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.closed {
		return os.ErrClosed
	}
	var t *tagger
	var want []byte
	if v.hash != nil {
		t = v.hash.tagger(v.sb)
		want = make([]byte, v.g.TagSize)
	}
	bs := v.g.BlockSize()
	spb := uint64(v.g.SectorsPerBlock)
	ts := v.g.TagSize
	tagBuf := tags
	if tagBuf == nil {
		tagBuf = make([]byte, int(n)*ts)
	}
	perArea := v.g.InterleaveSectors / spb
	for i := uint64(0); i < n; {
		b := first + i
		// A run inside one area, not crossing a journal-overlay block.
		run := min(n-i, perArea-b%perArea)
		for k := uint64(0); k < run; k++ {
			if _, ok := v.overlay[b+k]; ok {
				run = max(k, 1)
				break
			}
		}
		d := dst[i*uint64(bs) : (i+run)*uint64(bs)]
		tg := tagBuf[i*uint64(ts) : (i+run)*uint64(ts)]
		if e, ok := v.overlay[b]; ok && run == 1 {
			if err := readJournalBlock(v.dev, &v.g, v.metas[e.section], e.section, e.slot, d, tg); err != nil {
				return err
			}
		} else {
			if _, err := v.dev.ReadAt(d, int64(v.g.DataSector(b*spb))<<9); err != nil {
				return fmt.Errorf("integrity: reading block %d: %w", b, err)
			}
			if _, err := v.dev.ReadAt(tg, v.g.TagOffset(b*spb)); err != nil {
				return fmt.Errorf("integrity: reading tags of block %d: %w", b, err)
			}
		}
		if t != nil {
			for k := uint64(0); k < run; k++ {
				s := (b + k) * spb
				if v.unchecked(s) {
					continue
				}
				t.tag(want, s, d[k*uint64(bs):(k+1)*uint64(bs)])
				if !hmac.Equal(want, tg[k*uint64(ts):(k+1)*uint64(ts)]) {
					clear(dst[(i+k)*uint64(bs):])
					return &SectorError{Sector: s, Block: b + k}
				}
			}
		}
		i += run
	}
	return nil
}

// unchecked reports whether the kernel would skip checking the block at
// sector s: not yet recalculated, or in a region a bitmap-mode crash left
// dirty.
func (v *Volume) unchecked(s uint64) bool {
	if v.sb.Flags&FlagRecalculating != 0 && s >= v.sb.RecalcSector {
		return true
	}
	if v.skip != nil {
		bit := s >> (uint(v.sb.Log2SectorsPerBlock) + uint(v.sb.Log2BlocksPerBitmapBit))
		return v.skip[bit/8]&(1<<(bit%8)) != 0
	}
	return false
}

// WriteSectors writes blocks first… from src. With a tag algorithm the
// tags are computed and tags must be nil; without one, tags holds each
// block's metadata (TagSize bytes a block). In journal mode the blocks and
// tags are durable, together, when WriteSectors returns; in the other
// modes after Flush.
func (v *Volume) WriteSectors(src, tags []byte, first uint64) error {
	if tags != nil && v.hash != nil {
		return errors.New("integrity: the volume computes its tags: pass nil tags")
	}
	return v.write(src, tags, first, false, nil)
}

// WriteLentSectors is WriteSectors with tags for a caller that lends src
// and fills it as the write goes: ready(k) must return once blocks [0, k)
// of src and their tags are final (ready may be nil: all are). WriteLent-
// Sectors calls it with growing k before it reads those blocks, so that
// the caller can still be encrypting the later ones while the journal
// takes the first. src is changed during the call (in journal mode the
// commit ids take the last 8 bytes of each 512-byte sector while a
// section of the journal is written straight from it, saving a copy)
// and holds its blocks again when it returns; the caller must not touch
// the blocks it declared ready until then. An error from ready stops the
// write and is returned.
func (v *Volume) WriteLentSectors(src, tags []byte, first uint64, ready func(blocks int) error) error {
	if tags == nil || v.hash != nil {
		return errors.New("integrity: lent sectors need the tags of a volume without a tag algorithm")
	}
	return v.write(src, tags, first, true, ready)
}

func (v *Volume) write(src, tags []byte, first uint64, lent bool, ready func(int) error) error {
	if v.opts.ReadOnly {
		return ErrReadOnly
	}
	n, err := v.checkRange(src, tags, first)
	if err != nil || n == 0 {
		return err
	}
	if ready == nil {
		ready = func(int) error { return nil }
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return os.ErrClosed
	}
	ts := v.g.TagSize
	bs := v.g.BlockSize()
	spb := uint64(v.g.SectorsPerBlock)
	if tags == nil {
		tags = make([]byte, int(n)*ts)
		t := v.hash.tagger(v.sb)
		for k := 0; k < int(n); k++ {
			t.tag(tags[k*ts:(k+1)*ts], (first+uint64(k))*spb, src[k*bs:(k+1)*bs])
		}
	}
	switch v.opts.Mode {
	case ModeJournal:
		capacity := uint64(v.g.JournalSections * v.g.SectionEntries)
		for i := uint64(0); i < n; i += capacity {
			m := min(capacity, n-i)
			at := int(i)
			r := func(k int) error { return ready(at + k) }
			if err := v.commit(src[i*uint64(bs):(i+m)*uint64(bs)], tags[i*uint64(ts):(i+m)*uint64(ts)], first+i, lent, r); err != nil {
				return err
			}
		}
		return nil
	case ModeBitmap:
		if err := v.markDirty(first, n); err != nil {
			return err
		}
	}
	if err := ready(int(n)); err != nil {
		return err
	}
	return v.writeInPlace(src, tags, first, n)
}

// commit writes blocks through the journal: the sections (commit ids of
// the current sequence), a sync, the blocks and tags in place, a sync.
// With lent, a full section is written as its metadata sectors and then
// its blocks straight from src, stamped with the commit ids and restored
// afterwards (two writes, no copy: a crash between them leaves a section
// with mixed commit ids, which replay treats as torn, as it does a torn
// single write); an encrypted journal needs whole sections in one write
// and takes the copy.
func (v *Volume) commit(src, tags []byte, first uint64, lent bool, ready func(int) error) error {
	g := &v.g
	bs, ts := g.BlockSize(), g.TagSize
	n := len(src) / bs
	spb := uint64(g.SectorsPerBlock)
	if v.secBuf == nil {
		v.secBuf = make([]byte, g.SectionSectors*512)
		v.secSectors = make([]uint64, 0, g.SectionEntries)
	}
	buf := v.secBuf
	meta := buf[:journalBlockSecs*512]
	_, crypted := v.dev.(*cryptDev)
	sec, seq := v.nextSec, v.seq
	for i := 0; i < n; i += g.SectionEntries {
		m := min(g.SectionEntries, n-i)
		if err := ready(i + m); err != nil {
			return err
		}
		sectors := v.secSectors[:0]
		for k := 0; k < m; k++ {
			sectors = append(sectors, (first+uint64(i+k))*spb)
		}
		data, tg := src[i*bs:(i+m)*bs], tags[i*ts:(i+m)*ts]
		off := journalOffset(g, sec)
		if lent && m == g.SectionEntries && !crypted {
			buildMeta(meta, g, v.ids, sec, seq, sectors, data, tg, v.jmac)
			stampIDs(data, v.ids, sec, journalBlockSecs, seq)
			_, err := v.dev.WriteAt(meta, off)
			if err == nil {
				_, err = v.dev.WriteAt(data, off+int64(len(meta)))
			}
			restoreLastBytes(data, meta, g)
			if err != nil {
				return fmt.Errorf("integrity: writing journal: %w", err)
			}
		} else {
			buildSection(buf, g, v.ids, sec, seq, sectors, data, tg, v.jmac)
			if _, err := v.dev.WriteAt(buf, off); err != nil {
				return fmt.Errorf("integrity: writing journal: %w", err)
			}
		}
		sec++
		if sec >= g.JournalSections {
			sec, seq = 0, nextSeq(seq)
		}
	}
	if err := v.sync(); err != nil {
		return err
	}
	v.nextSec, v.seq = sec, seq
	v.wroteJournal = true
	if err := v.writeInPlace(src, tags, first, uint64(n)); err != nil {
		return err
	}
	return v.sync()
}

// writeInPlace writes blocks and their tags at their places, one write
// per area for each.
func (v *Volume) writeInPlace(src, tags []byte, first, n uint64) error {
	bs, ts := uint64(v.g.BlockSize()), uint64(v.g.TagSize)
	spb := uint64(v.g.SectorsPerBlock)
	perArea := v.g.InterleaveSectors / spb
	for i := uint64(0); i < n; {
		b := first + i
		run := min(n-i, perArea-b%perArea)
		if _, err := v.dev.WriteAt(src[i*bs:(i+run)*bs], int64(v.g.DataSector(b*spb))<<9); err != nil {
			return fmt.Errorf("integrity: writing block %d: %w", b, err)
		}
		if _, err := v.dev.WriteAt(tags[i*ts:(i+run)*ts], v.g.TagOffset(b*spb)); err != nil {
			return fmt.Errorf("integrity: writing tags of block %d: %w", b, err)
		}
		i += run
	}
	return nil
}

// ReadAt reads len(p) bytes at byte offset off of the data, checking the
// tag of every block it touches.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > v.Size() {
		return 0, fmt.Errorf("integrity: read at %d outside the %d-byte volume", off, v.Size())
	}
	var err error
	if int64(len(p)) > v.Size()-off {
		p, err = p[:v.Size()-off], io.EOF
	}
	if len(p) == 0 {
		return 0, err
	}
	bs := int64(v.g.BlockSize())
	fb, lb := off/bs, (off+int64(len(p))-1)/bs
	if off%bs == 0 && int64(len(p))%bs == 0 {
		if e := v.ReadSectors(p, nil, uint64(fb)); e != nil {
			return 0, e
		}
		return len(p), err
	}
	buf := make([]byte, (lb-fb+1)*bs)
	if e := v.ReadSectors(buf, nil, uint64(fb)); e != nil {
		return 0, e
	}
	copy(p, buf[off-fb*bs:])
	return len(p), err
}

// WriteAt writes p at byte offset off, reading (and checking) the blocks
// it covers only partly.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > v.Size() {
		return 0, fmt.Errorf("integrity: write of %d bytes at %d outside the %d-byte volume", len(p), off, v.Size())
	}
	if len(p) == 0 {
		return 0, nil
	}
	bs := int64(v.g.BlockSize())
	fb, lb := off/bs, (off+int64(len(p))-1)/bs
	if off%bs == 0 && int64(len(p))%bs == 0 {
		if err := v.WriteSectors(p, nil, uint64(fb)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	buf := make([]byte, (lb-fb+1)*bs)
	if off%bs != 0 {
		if err := v.ReadSectors(buf[:bs], nil, uint64(fb)); err != nil {
			return 0, err
		}
	}
	if (off+int64(len(p)))%bs != 0 && (lb > fb || off%bs == 0) {
		if err := v.ReadSectors(buf[(lb-fb)*bs:], nil, uint64(lb)); err != nil {
			return 0, err
		}
	}
	copy(buf[off-fb*bs:], p)
	if err := v.WriteSectors(buf, nil, uint64(fb)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush makes every completed write durable (and, in bitmap mode, marks
// the written regions clean again).
func (v *Volume) Flush() error {
	if v.opts.ReadOnly {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return os.ErrClosed
	}
	if err := v.sync(); err != nil {
		return err
	}
	if v.opts.Mode == ModeBitmap && len(v.dirty) > 0 {
		return v.cleanBitmap()
	}
	return nil
}

// Close flushes a writable volume and leaves it as the kernel's
// deactivation does (bitmap mode: the bitmap clean and the superblock no
// longer dirty). The device is not closed.
func (v *Volume) Close() error {
	err := v.Flush()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	if err == nil && !v.opts.ReadOnly && v.bitmapOn {
		err = v.endBitmap()
	}
	if err == nil && v.wroteJournal {
		err = v.emptyJournal()
	}
	v.closed = true
	v.wipe()
	return err
}

// writeSuperblock writes the superblock (with its MAC when the volume has
// one) and syncs.
func (v *Volume) writeSuperblock() error {
	v.sb.setVersion(v.opts.Mode == ModeBitmap && !v.opts.ReadOnly)
	b := v.sb.Marshal()
	if v.jmacKey != nil && v.sb.Flags&FlagFixedHMAC != 0 {
		mac := sbMAC(v.jmacKey, b)
		copy(b[512-len(mac):], mac)
	}
	if _, err := v.dev.WriteAt(b, 0); err != nil {
		return fmt.Errorf("integrity: writing superblock: %w", err)
	}
	return v.sync()
}

var le = binary.LittleEndian

// emptyJournal leaves the journal without entries as the kernel's
// deactivation does (every section rewritten empty, one lap on: the
// sections from the next one to the end with the current sequence, the
// ones before it with the next), after the blocks are durable in place.
// Until then a replay would rewrite blocks from the journal, undoing any
// later change made to the device behind the volume's back.
func (v *Volume) emptyJournal() error {
	n := v.g.JournalSections
	buf := make([]byte, v.g.SectionSectors*512)
	for i := 0; i < n; i++ {
		seq := v.seq
		if i < v.nextSec {
			seq = nextSeq(v.seq)
		}
		buildSection(buf, &v.g, v.ids, i, seq, nil, nil, nil, v.jmac)
		if _, err := v.dev.WriteAt(buf, journalOffset(&v.g, i)); err != nil {
			return fmt.Errorf("integrity: writing journal: %w", err)
		}
	}
	v.wroteJournal = false
	return v.sync()
}

// SectionDevice is a window of another device: what a LUKS2 AEAD segment
// hands to Open and Format (dm-integrity's superblock sits at the
// segment's offset, the tags inside the segment).
type SectionDevice struct {
	Dev    Device
	Offset int64 // bytes
	Length int64 // bytes
}

// ReadAt reads inside the window.
func (s *SectionDevice) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= s.Length {
		return 0, io.EOF
	}
	var err error
	if int64(len(p)) > s.Length-off {
		p, err = p[:s.Length-off], io.EOF
	}
	n, e := s.Dev.ReadAt(p, s.Offset+off)
	if e != nil {
		return n, e
	}
	return n, err
}

// WriteAt writes inside the window and refuses anything beyond it.
func (s *SectionDevice) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > s.Length {
		return 0, fmt.Errorf("integrity: write of %d bytes at %d outside the %d-byte section", len(p), off, s.Length)
	}
	return s.Dev.WriteAt(p, s.Offset+off)
}

// Sync syncs the underlying device.
func (s *SectionDevice) Sync() error { return s.Dev.Sync() }

// Size is the window's length.
func (s *SectionDevice) Size() (int64, error) { return s.Length, nil }
