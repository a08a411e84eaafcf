package integrity

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The journal (journal mode): JournalSections sections of SectionSectors
// sectors after the superblock. A section is 8 metadata sectors holding
// SectionEntries entries (entry n in sector n%8 at offset (n/8)·entry
// size), then one block of data per entry. Every journal sector ends with
// a 64-bit commit id: one of four constants xored with the section and
// sector numbers, the constant's index (the commit sequence) advancing
// each time the writer wraps around the ring. The data sectors' own last
// 8 bytes live in the entry (last_bytes). An entry is its logical sector
// (high half 0xffffffff: unused), last_bytes, then the tag.

const nCommitIDs = 4

// commitIDs are the four constants (an encrypted journal's are
// encrypted, see journalCrypt).
type commitIDs [nCommitIDs]uint64

var plainCommitIDs = commitIDs{0x1111111111111111, 0x2222222222222222, 0x3333333333333333, 0x4444444444444444}

func (ids *commitIDs) id(section, sector int, seq int) uint64 {
	return ids[seq] ^ (uint64(section)<<32 ^ uint64(sector))
}

func prevSeq(s int) int { return (s + nCommitIDs - 1) % nCommitIDs }
func nextSeq(s int) int { return (s + 1) % nCommitIDs }

const (
	sectorUnused     = 0xffffffff
	sectorInProgress = 0xfffffffe
)

// maxJournalBytes bounds the journal this package reads (the kernel keeps
// the whole journal in memory; its default is at most 64 MiB).
const maxJournalBytes = 1 << 30

// ErrJournal is wrapped by errors about a journal that cannot be replayed
// (bad commit ids with no way to tell old from new, a MAC mismatch, an
// entry whose tag does not verify).
var ErrJournal = errors.New("integrity: journal")

// journalEntry is one replayable entry: which section and slot, for which
// block.
type journalEntry struct {
	section, slot int
	sector        uint64 // logical 512-byte sector of the block
}

// journalState is what replay_journal decides from the journal on disk.
type journalState struct {
	entries []journalEntry // to replay, oldest first
	// clear: the journal must be re-initialised after the replay (a torn
	// commit, or nothing to continue from); else writing continues at
	// continueSection with commitSeq.
	clear           bool
	empty           bool // no entry in use anywhere
	continueSection int
	commitSeq       int
	lastUsed        int
	writeStart      int
}

// analyzeJournal reads the journal's metadata and commit ids through r
// (the device) and decides, exactly as the kernel's replay_journal, which
// sections hold committed entries and where writing continues. mac, when
// the volume has a journal MAC, checks every replayed section.
func analyzeJournal(r io.ReaderAt, g *Geometry, ids *commitIDs, macFn func(section int, meta []byte) []byte) (*journalState, error) {
	n := g.JournalSections
	if uint64(n)*uint64(g.SectionSectors)*512 > maxJournalBytes {
		return nil, fmt.Errorf("%w: %d sections of %d sectors exceed the %d MiB this package reads", ErrJournal, n, g.SectionSectors, maxJournalBytes>>20)
	}
	var used [nCommitIDs]bool
	var maxSection [nCommitIDs]int
	seqMask := make([]uint8, n)
	meta := make([][]byte, n)
	empty := true
	secBuf := make([]byte, g.SectionSectors*512)
	for i := 0; i < n; i++ {
		if _, err := r.ReadAt(secBuf, journalOffset(g, i)); err != nil {
			return nil, fmt.Errorf("integrity: reading journal section %d: %w", i, err)
		}
		for j := 0; j < g.SectionSectors; j++ {
			id := binary.LittleEndian.Uint64(secBuf[j*512+journalSectorData:])
			k := -1
			for s := 0; s < nCommitIDs; s++ {
				if ids.id(i, j, s) == id {
					k = s
					break
				}
			}
			if k < 0 {
				// The kernel clears such a journal without replaying it;
				// a journal we cannot read (encrypted, or not a journal at
				// all) must not be thrown away on a guess.
				return nil, fmt.Errorf("%w: section %d sector %d has no valid commit id (encrypted journal, or damage)", ErrJournal, i, j)
			}
			used[k] = true
			maxSection[k] = i
			seqMask[i] |= 1 << k
		}
		meta[i] = append([]byte(nil), secBuf[:journalBlockSecs*512]...)
		if empty {
			for e := 0; e < g.SectionEntries; e++ {
				if !entryUnused(g, meta[i], e) {
					empty = false
					break
				}
			}
		}
	}
	var unused int
	if !used[nCommitIDs-1] {
		unused = nCommitIDs - 1
		for unused > 0 && !used[unused-1] {
			unused--
		}
	} else {
		for unused = 0; unused < nCommitIDs && used[unused]; unused++ {
		}
		if unused == nCommitIDs {
			return nil, fmt.Errorf("%w: all four commit ids in use", ErrJournal)
		}
	}
	st := &journalState{}
	st.lastUsed = prevSeq(unused)
	want := prevSeq(st.lastUsed)
	if !used[want] && used[prevSeq(want)] {
		empty = true
	}
	start := maxSection[st.lastUsed] + 1
	if start >= n {
		want = nextSeq(want)
		start = 0
	}
	st.writeStart = start
	st.empty = empty
	i := start
	sections := 0
	var replay []int
	for ; sections < n; sections++ {
		if seqMask[i] != 1<<want {
			break // a commit torn by a crash: not replayed
		}
		replay = append(replay, i)
		i++
		if i >= n {
			want = nextSeq(want)
			i = 0
		}
	}
	if !empty {
		for _, s := range replay {
			if macFn != nil {
				if !macOK(meta[s], macFn(s, meta[s])) {
					return nil, fmt.Errorf("%w: section %d: journal MAC mismatch", ErrJournal, s)
				}
			}
			for e := 0; e < g.SectionEntries; e++ {
				if entryUnused(g, meta[s], e) {
					continue
				}
				sec := entrySector(g, meta[s], e)
				if sec >= g.DataSectors {
					continue // the kernel drops these (in-progress entries among them)
				}
				if sec%uint64(g.SectorsPerBlock) != 0 {
					return nil, fmt.Errorf("%w: section %d entry %d: sector %d is not block-aligned", ErrJournal, s, e, sec)
				}
				st.entries = append(st.entries, journalEntry{section: s, slot: e, sector: sec})
			}
		}
	}
	if sections == n {
		st.continueSection = start
		st.commitSeq = want
	} else {
		st.clear = true
	}
	return st, nil
}

func journalOffset(g *Geometry, section int) int64 {
	return (8 + int64(section)*int64(g.SectionSectors)) << 9
}

// entryOffset is the byte offset of entry e in a section's metadata.
func entryOffset(g *Geometry, e int) int {
	return (e%journalBlockSecs)*512 + (e/journalBlockSecs)*g.JournalEntrySize
}

func entryUnused(g *Geometry, meta []byte, e int) bool {
	return binary.LittleEndian.Uint32(meta[entryOffset(g, e)+4:]) == sectorUnused
}

func entrySector(g *Geometry, meta []byte, e int) uint64 {
	return binary.LittleEndian.Uint64(meta[entryOffset(g, e):])
}

func entryLastBytes(g *Geometry, meta []byte, e, s int) []byte {
	o := entryOffset(g, e) + 8 + 8*s
	return meta[o : o+8]
}

func entryTag(g *Geometry, meta []byte, e int) []byte {
	o := entryOffset(g, e) + 8 + 8*g.SectorsPerBlock
	return meta[o : o+g.TagSize]
}

// entryDataOffset is the device byte offset of entry e's block.
func entryDataOffset(g *Geometry, section, e int) int64 {
	return journalOffset(g, section) + int64(journalBlockSecs+e*g.SectorsPerBlock)<<9
}

// readJournalBlock reads entry e's block into dst (BlockSize bytes) and
// its tag into tag, restoring the bytes the commit ids displaced.
func readJournalBlock(r io.ReaderAt, g *Geometry, meta []byte, section, e int, dst, tag []byte) error {
	if _, err := r.ReadAt(dst, entryDataOffset(g, section, e)); err != nil {
		return fmt.Errorf("integrity: reading journal section %d entry %d: %w", section, e, err)
	}
	for s := 0; s < g.SectorsPerBlock; s++ {
		copy(dst[s*512+journalSectorData:(s+1)*512], entryLastBytes(g, meta, e, s))
	}
	copy(tag, entryTag(g, meta, e))
	return nil
}

// macOK compares the MAC slots of the 8 metadata sectors with want.
func macOK(meta, want []byte) bool {
	got := make([]byte, 0, journalMACSize)
	for j := 0; j < journalBlockSecs; j++ {
		got = append(got, meta[j*512+journalSectorData-journalMACPerSec:j*512+journalSectorData]...)
	}
	return subtle.ConstantTimeCompare(got, want) == 1
}

// sectionMAC computes a section's journal MAC (section_mac): the salt and
// section number on FIXED_HMAC volumes, then every entry's sector field;
// the digest cut or zero-padded to 64 bytes.
func sectionMAC(spec *hashSpec, sb *Superblock, g *Geometry) func(section int, meta []byte) []byte {
	return func(section int, meta []byte) []byte {
		h := spec.New()
		if sb.Flags&FlagFixedHMAC != 0 {
			h.Write(sb.Salt[:])
			var s [8]byte
			binary.LittleEndian.PutUint64(s[:], uint64(section))
			h.Write(s[:])
		}
		for e := 0; e < g.SectionEntries; e++ {
			o := entryOffset(g, e)
			h.Write(meta[o : o+8])
		}
		out := make([]byte, journalMACSize)
		copy(out, h.Sum(nil))
		return out
	}
}

// buildSection fills buf (SectionSectors·512 bytes) with a section
// holding the given blocks (at most SectionEntries; the rest of the slots
// unused), commit ids for seq, and the MAC.
func buildSection(buf []byte, g *Geometry, ids *commitIDs, section, seq int, sectors []uint64, data, tags []byte, macFn func(int, []byte) []byte) {
	bs := g.BlockSize()
	meta := buf[:journalBlockSecs*512]
	blocks := buf[journalBlockSecs*512:]
	n := copy(blocks, data[:len(sectors)*bs])
	clear(blocks[n:])
	buildMeta(meta, g, ids, section, seq, sectors, blocks, tags, macFn)
	stampIDs(blocks, ids, section, journalBlockSecs, seq)
}

// buildMeta fills meta (the 8 metadata sectors of a section) with entries
// for the given blocks (at most SectionEntries; the rest of the slots
// unused): each block's sector, the last 8 bytes of each of its 512-byte
// sectors (which the commit ids displace in the journal) and its tag;
// then the MAC and the metadata sectors' commit ids for seq. data is the
// blocks as they are before stampIDs.
func buildMeta(meta []byte, g *Geometry, ids *commitIDs, section, seq int, sectors []uint64, data, tags []byte, macFn func(int, []byte) []byte) {
	clear(meta)
	bs := g.BlockSize()
	for e := 0; e < g.SectionEntries; e++ {
		o := entryOffset(g, e)
		if e >= len(sectors) {
			binary.LittleEndian.PutUint32(meta[o+4:], sectorUnused)
			continue
		}
		binary.LittleEndian.PutUint64(meta[o:], sectors[e])
		blk := data[e*bs : (e+1)*bs]
		for s := 0; s < g.SectorsPerBlock; s++ {
			copy(meta[o+8+8*s:o+16+8*s], blk[s*512+journalSectorData:(s+1)*512])
		}
		copy(meta[o+8+8*g.SectorsPerBlock:], tags[e*g.TagSize:(e+1)*g.TagSize])
	}
	if macFn != nil {
		mac := macFn(section, meta)
		for j := 0; j < journalBlockSecs; j++ {
			copy(meta[j*512+journalSectorData-journalMACPerSec:], mac[j*journalMACPerSec:(j+1)*journalMACPerSec])
		}
	}
	stampIDs(meta, ids, section, 0, seq)
}

// stampIDs writes the commit ids for seq into the last 8 bytes of every
// 512-byte sector of buf, the section's sectors from the one numbered
// from.
func stampIDs(buf []byte, ids *commitIDs, section, from, seq int) {
	for j := 0; j*512 < len(buf); j++ {
		binary.LittleEndian.PutUint64(buf[j*512+journalSectorData:], ids.id(section, from+j, seq))
	}
}

// restoreLastBytes puts back the last 8 bytes of each 512-byte sector of
// the first len(data)/BlockSize entries' blocks, which stampIDs replaced,
// from the entries in meta.
func restoreLastBytes(data, meta []byte, g *Geometry) {
	bs := g.BlockSize()
	for e := 0; e*bs < len(data); e++ {
		for s := 0; s < g.SectorsPerBlock; s++ {
			copy(data[e*bs+s*512+journalSectorData:e*bs+(s+1)*512], entryLastBytes(g, meta, e, s))
		}
	}
}
