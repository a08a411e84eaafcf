// Package fat reads FAT12, FAT16 and FAT32 filesystems with VFAT long
// names, read-only, as an io/fs.FS over an io.ReaderAt.
//
//	fsys, err := fat.Open(dev, size)
//	data, err := fs.ReadFile(fsys, "docs/Long File Name.txt")
//
// The FAT type is decided as Microsoft's specification and Linux decide
// it, by the count of data clusters (below 4085 FAT12, below 65525 FAT16,
// else FAT32), never by the label in the boot sector. A long name is used
// only when its entries are complete, in order and carry the checksum of
// the short entry that follows them; otherwise the 8.3 name is shown, as
// Linux's vfat driver and mtools do. Names are matched case-insensitively
// (ASCII and Unicode simple folding), as FAT itself does.
//
// Times are FAT's local times with no zone; they are returned in UTC
// unchanged, which is what mtools prints.
//
// The volume is not trusted: cluster chains that loop or leave the
// volume, a boot sector with impossible geometry, directories longer than
// FAT allows or that contain one of their ancestors all fail with an
// error wrapping ErrCorrupt. Memory is bounded by the volume: the FAT is
// held in memory (at most 4 bytes a cluster) and a chain is never longer
// than the cluster count.
package fat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
)

// ErrCorrupt is wrapped by every error about the volume's content: a boot
// sector that is not FAT, a chain that loops or leaves the volume, a
// directory that nests into itself.
var ErrCorrupt = errors.New("fat: corrupt filesystem")

// Type is the FAT variant of a volume.
type Type int

const (
	FAT12 Type = 12
	FAT16 Type = 16
	FAT32 Type = 32
)

func (t Type) String() string { return fmt.Sprintf("FAT%d", int(t)) }

// maxDirEntries is FAT's limit on a directory's entries (the specification
// and every implementation stop at 65536), which bounds a directory read.
const maxDirEntries = 65536

// FS is a read-only FAT volume. It implements fs.FS, fs.ReadDirFS,
// fs.StatFS and fs.ReadFileFS, and is safe for concurrent use (it only
// reads dev through ReadAt).
type FS struct {
	dev         io.ReaderAt
	typ         Type
	bps         int64  // bytes per sector
	clusterSize int64  // bytes per cluster
	clusters    uint32 // count of data clusters: valid numbers are 2..clusters+1
	dataStart   int64  // byte offset of cluster 2
	rootStart   int64  // FAT12/16: byte offset of the fixed root directory
	rootEntries int64  // FAT12/16: its entry count
	rootCluster uint32 // FAT32: first cluster of the root directory
	fat         []byte // the first FAT, only its entries for clusters 0..clusters+1
	label       string
	serial      uint32

	// Parsed directories by first cluster, so that a walk that opens
	// every file of a large directory does not parse it again for each
	// (quadratic); bounded by maxCached entries in all.
	mu     sync.Mutex
	cache  map[uint32]dirCache
	cached int
}

// dirCache is one parsed directory.
type dirCache struct {
	ents   []entry
	dotdot int64
	byName map[string]int // exact names to their index in ents
}

// maxCached bounds the directory entries kept parsed: twice the largest
// directory FAT allows.
const maxCached = 2 * maxDirEntries

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Open reads the boot sector and the first FAT of the volume of size bytes
// in dev.
func Open(dev io.ReaderAt, size int64) (*FS, error) {
	var bs [512]byte
	if size < int64(len(bs)) {
		return nil, corrupt("volume of %d bytes is smaller than a boot sector", size)
	}
	if _, err := dev.ReadAt(bs[:], 0); err != nil {
		return nil, fmt.Errorf("fat: read boot sector: %w", err)
	}
	le := binary.LittleEndian
	bps := int64(le.Uint16(bs[11:]))
	spc := int64(bs[13])
	reserved := int64(le.Uint16(bs[14:]))
	nfats := int64(bs[16])
	rootEntries := int64(le.Uint16(bs[17:]))
	total := int64(le.Uint16(bs[19:]))
	fatSectors := int64(le.Uint16(bs[22:]))
	if total == 0 {
		total = int64(le.Uint32(bs[32:]))
	}
	if fatSectors == 0 {
		fatSectors = int64(le.Uint32(bs[36:]))
	}
	switch {
	case bs[0] != 0xEB && bs[0] != 0xE9:
		return nil, corrupt("boot sector has no jump instruction")
	case bps != 512 && bps != 1024 && bps != 2048 && bps != 4096:
		return nil, corrupt("%d bytes per sector", bps)
	case spc == 0 || spc&(spc-1) != 0:
		return nil, corrupt("%d sectors per cluster", spc)
	case reserved == 0:
		return nil, corrupt("no reserved sectors")
	case nfats == 0:
		return nil, corrupt("no FAT")
	case fatSectors == 0:
		return nil, corrupt("FAT of zero sectors")
	case total*bps > size:
		return nil, corrupt("boot sector claims %d bytes, the volume has %d", total*bps, size)
	}
	rootSectors := (rootEntries*32 + bps - 1) / bps
	meta := reserved + nfats*fatSectors + rootSectors
	if meta >= total {
		return nil, corrupt("%d sectors of metadata in a volume of %d", meta, total)
	}
	f := &FS{
		dev:         dev,
		bps:         bps,
		clusterSize: spc * bps,
		dataStart:   meta * bps,
		rootStart:   (reserved + nfats*fatSectors) * bps,
		rootEntries: rootEntries,
	}
	n := (total - meta) / spc
	if n > 0x0FFFFFF5 {
		return nil, corrupt("%d clusters", n)
	}
	f.clusters = uint32(n)
	var ext []byte // the extended BPB: label and serial
	switch {
	case n < 4085:
		f.typ = FAT12
		ext = bs[36:]
	case n < 65525:
		f.typ = FAT16
		ext = bs[36:]
	default:
		f.typ = FAT32
		ext = bs[64:]
		if rootEntries != 0 || le.Uint16(bs[22:]) != 0 {
			return nil, corrupt("FAT32 volume with a fixed root directory")
		}
		f.rootCluster = le.Uint32(bs[44:]) & 0x0FFFFFFF
		if !f.valid(f.rootCluster) {
			return nil, corrupt("root directory at cluster %d", f.rootCluster)
		}
	}
	if f.typ != FAT32 && rootEntries == 0 {
		return nil, corrupt("%s volume with no root directory entries", f.typ)
	}
	if ext[2] == 0x29 { // extended boot signature: serial and label present
		f.serial = le.Uint32(ext[3:])
		f.label = strings.TrimRight(decodeOEM(ext[7:18]), " ")
	}
	// Only the entries for existing clusters are read: the FAT may be
	// larger than the volume needs, never smaller.
	need := (int64(f.clusters) + 2) * int64(f.typ) / 8
	if f.typ == FAT12 {
		need = (int64(f.clusters)+2)*3/2 + 1
	}
	if need > fatSectors*bps {
		return nil, corrupt("FAT of %d bytes for %d clusters", fatSectors*bps, f.clusters)
	}
	f.fat = make([]byte, need)
	if _, err := dev.ReadAt(f.fat, reserved*bps); err != nil {
		return nil, fmt.Errorf("fat: read FAT: %w", err)
	}
	return f, nil
}

// Type returns the FAT variant.
func (f *FS) Type() Type { return f.typ }

// Label returns the volume label as Windows and blkid show it: the
// label entry of the root directory if there is one, else the boot
// sector's; without padding, and "" for none ("NO NAME" is none).
func (f *FS) Label() string {
	l := f.label
	if r, ok := f.rootLabel(); ok {
		l = r
	}
	if l == "NO NAME" {
		return ""
	}
	return l
}

// rootLabel returns the label entry of the root directory, if any; a
// root directory that cannot be read has none.
func (f *FS) rootLabel() (string, bool) {
	var raw []byte
	if f.typ == FAT32 {
		// Only the first cluster: mkfs and mlabel put the label there,
		// and a label lookup must not fail over a long chain.
		raw = make([]byte, f.clusterSize)
		if f.readCluster(raw, f.rootCluster, 0) != nil {
			return "", false
		}
	} else {
		raw = make([]byte, f.rootEntries*32)
		if _, err := f.dev.ReadAt(raw, f.rootStart); err != nil {
			return "", false
		}
	}
	for i := 0; i+32 <= len(raw); i += 32 {
		d := raw[i : i+32]
		if d[0] == 0 {
			break
		}
		if d[0] != 0xE5 && d[11]&0x3F != attrLFN && d[11]&attrVolume != 0 {
			return strings.TrimRight(decodeOEM(d[:11]), " "), true
		}
	}
	return "", false
}

// Serial returns the volume serial number, which blkid shows as the UUID
// XXXX-XXXX.
func (f *FS) Serial() uint32 { return f.serial }

// ClusterSize returns the bytes per cluster.
func (f *FS) ClusterSize() int64 { return f.clusterSize }

func (f *FS) valid(c uint32) bool { return c >= 2 && c-2 < f.clusters }

// next returns the FAT entry of cluster c, which the caller has checked
// is valid.
func (f *FS) next(c uint32) uint32 {
	switch f.typ {
	case FAT12:
		v := binary.LittleEndian.Uint16(f.fat[c+c/2:])
		if c&1 != 0 {
			return uint32(v >> 4)
		}
		return uint32(v & 0xFFF)
	case FAT16:
		return uint32(binary.LittleEndian.Uint16(f.fat[2*c:]))
	}
	return binary.LittleEndian.Uint32(f.fat[4*c:]) & 0x0FFFFFFF
}

func (f *FS) isEnd(v uint32) bool {
	switch f.typ {
	case FAT12:
		return v >= 0xFF8
	case FAT16:
		return v >= 0xFFF8
	}
	return v >= 0x0FFFFFF8
}

// chain returns the clusters of the chain from first, at most max of them
// (the chain may go on: a file's size says how much of it is used). A
// chain that revisits a cluster, points outside the volume or at a free
// or bad cluster is corrupt; the result is never longer than the cluster
// count, so a loop is found within it.
func (f *FS) chain(first uint32, max int64, what string) ([]uint32, error) {
	if max > int64(f.clusters) {
		max = int64(f.clusters)
	}
	var out []uint32
	c := first
	for int64(len(out)) < max {
		if !f.valid(c) {
			return nil, corrupt("cluster chain of %s reaches cluster %#x", what, c)
		}
		out = append(out, c)
		v := f.next(c)
		if f.isEnd(v) {
			return out, noRevisit(out, what)
		}
		c = v
	}
	if err := noRevisit(out, what); err != nil {
		return nil, err
	}
	// All clusters read and no end: the next one can only be a revisit.
	if max == int64(f.clusters) && len(out) > 0 && !f.isEnd(f.next(out[len(out)-1])) {
		return nil, corrupt("cluster chain of %s loops", what)
	}
	return out, nil
}

// noRevisit fails if a chain holds a cluster twice: a loop that the
// length bound alone would only cut short, returning the same data again.
func noRevisit(cl []uint32, what string) error {
	s := slices.Clone(cl)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return corrupt("cluster chain of %s loops at cluster %d", what, s[i])
		}
	}
	return nil
}

// entry is one directory entry, its long name resolved.
type entry struct {
	name    string
	short   string // the 8.3 name, for lookups
	attr    byte
	cluster uint32
	size    int64
	mtime   time.Time
}

const (
	attrReadOnly = 0x01
	attrVolume   = 0x08
	attrDir      = 0x10
	attrLFN      = 0x0F
)

func (e *entry) isDir() bool { return e.attr&attrDir != 0 }

// dir returns the parsed directory whose first cluster is c (0: the
// root directory), from the cache if it is there. The ".." entry is not
// among its entries: dotdot is its cluster, or -1 if there is none. A
// directory listing one subdirectory twice is corrupt. The result is
// shared: it must not be changed.
func (f *FS) dir(c uint32, what string) (dirCache, error) {
	f.mu.Lock()
	d, ok := f.cache[c]
	f.mu.Unlock()
	if ok {
		return d, nil
	}
	ents, dotdot, err := f.parseDirAt(c, what)
	if err != nil {
		return dirCache{}, err
	}
	d = dirCache{ents: ents, dotdot: dotdot, byName: make(map[string]int, len(ents))}
	seen := make(map[uint32]bool)
	for i := len(ents) - 1; i >= 0; i-- { // the first of equal names wins
		d.byName[ents[i].name] = i
		if e := ents[i]; e.isDir() {
			if seen[e.cluster] {
				return dirCache{}, corrupt("directory %s lists cluster %d twice", what, e.cluster)
			}
			seen[e.cluster] = true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cached+len(ents) > maxCached || f.cache == nil {
		f.cache, f.cached = make(map[uint32]dirCache), 0
	}
	f.cache[c] = d
	f.cached += len(ents)
	return d, nil
}

// parseDirAt reads and parses the directory at cluster c (0: the root);
// see dir.
func (f *FS) parseDirAt(c uint32, what string) (ents []entry, dotdot int64, err error) {
	var raw []byte
	if c == 0 && f.typ != FAT32 {
		raw = make([]byte, f.rootEntries*32)
		if _, err := f.dev.ReadAt(raw, f.rootStart); err != nil {
			return nil, 0, fmt.Errorf("fat: read root directory: %w", err)
		}
	} else {
		if c == 0 {
			c = f.rootCluster
		}
		// A directory may not pass FAT's limit; that bounds what one
		// directory costs in memory whatever the chain says.
		limit := (maxDirEntries*32 + f.clusterSize - 1) / f.clusterSize
		cl, err := f.chain(c, limit+1, what)
		if err != nil {
			return nil, 0, err
		}
		if int64(len(cl)) > limit {
			return nil, 0, corrupt("directory %s is longer than %d entries", what, maxDirEntries)
		}
		raw = make([]byte, int64(len(cl))*f.clusterSize)
		for i, x := range cl {
			if err := f.readCluster(raw[int64(i)*f.clusterSize:][:f.clusterSize], x, 0); err != nil {
				return nil, 0, err
			}
		}
	}
	ents, dotdot = parseDir(raw)
	return ents, dotdot, nil
}

func (f *FS) readCluster(p []byte, c uint32, off int64) error {
	_, err := f.dev.ReadAt(p, f.dataStart+int64(c-2)*f.clusterSize+off)
	if err != nil {
		return fmt.Errorf("fat: read cluster %d: %w", c, err)
	}
	return nil
}

// parseDir decodes raw directory entries. Long-name entries are gathered
// in order (last first, as on disk) and used for the next short entry
// only if their sequence is complete and each carries that entry's
// checksum; anything else is an orphan and the 8.3 name stands, as in
// Linux's vfat.
func parseDir(raw []byte) (out []entry, dotdot int64) {
	dotdot = -1
	var lfn []uint16 // the long name gathered so far, in name order
	var sum byte
	want := 0 // the next sequence number expected, 0: none in progress
	for i := 0; i+32 <= len(raw); i += 32 {
		d := raw[i : i+32]
		if d[0] == 0 {
			break
		}
		if d[0] == 0xE5 {
			want = 0
			continue
		}
		if d[11]&0x3F == attrLFN {
			seq := int(d[0] & 0x1F)
			switch {
			case d[0]&0x40 != 0 && seq > 0:
				lfn = lfn[:0]
				want, sum = seq, d[13]
			case want == 0 || seq != want || d[13] != sum:
				want = 0
				continue
			}
			var part []uint16
			for _, o := range [...]int{1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30} {
				part = append(part, binary.LittleEndian.Uint16(d[o:]))
			}
			lfn = append(part, lfn...)
			want--
			if want == 0 {
				want = -1 // complete: waits for its short entry
			}
			continue
		}
		long := ""
		if want == -1 && checksum(d[:11]) == sum {
			for j, u := range lfn {
				if u == 0 {
					lfn = lfn[:j]
					break
				}
			}
			long = string(utf16.Decode(lfn))
			// A control character is not allowed in a long name (and
			// would let a hostile name break a one-line error or a
			// listing): such a name is not used, as a bad checksum.
			if strings.ContainsFunc(long, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				long = ""
			}
		}
		want = 0
		if d[11]&attrVolume != 0 {
			continue // the volume label, or junk
		}
		short := shortName(d)
		if short == "." || short == ".." {
			if short == ".." && d[11]&attrDir != 0 {
				dotdot = int64(binary.LittleEndian.Uint16(d[20:]))<<16 | int64(binary.LittleEndian.Uint16(d[26:]))
			}
			continue
		}
		name := long
		if name == "" {
			name = caseShort(d, short)
		}
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
			continue // not a name io/fs can carry
		}
		le := binary.LittleEndian
		out = append(out, entry{
			name:    name,
			short:   short,
			attr:    d[11],
			cluster: uint32(le.Uint16(d[20:]))<<16 | uint32(le.Uint16(d[26:])),
			size:    int64(le.Uint32(d[28:])),
			mtime:   fatTime(le.Uint16(d[24:]), le.Uint16(d[22:])),
		})
	}
	return out, dotdot
}

// checksum is the VFAT checksum of an 11-byte short name, stored in each
// of its long-name entries.
func checksum(n []byte) byte {
	var s byte
	for _, b := range n {
		s = (s>>1 | s<<7) + b
	}
	return s
}

// shortName returns "NAME.EXT" of a short entry, without padding.
func shortName(d []byte) string {
	b := make([]byte, 11)
	copy(b, d[:11])
	if b[0] == 0x05 { // a name starting with 0xE5, escaped
		b[0] = 0xE5
	}
	base := strings.TrimRight(decodeOEM(b[:8]), " ")
	ext := strings.TrimRight(decodeOEM(b[8:11]), " ")
	if ext == "" {
		return base
	}
	return base + "." + ext
}

// caseShort applies the lower-case flags Windows NT sets in byte 12 for a
// name that fits 8.3 in one case (Linux and mtools honour them).
func caseShort(d []byte, short string) string {
	base, ext, _ := strings.Cut(short, ".")
	if short == "." || short == ".." {
		return short
	}
	if d[12]&0x08 != 0 {
		base = strings.ToLower(base)
	}
	if d[12]&0x10 != 0 {
		ext = strings.ToLower(ext)
	}
	if ext == "" {
		return base
	}
	return base + "." + ext
}

func fatTime(date, tm uint16) time.Time {
	if date == 0 {
		return time.Time{}
	}
	return time.Date(1980+int(date>>9), time.Month(date>>5&0xF), int(date&0x1F),
		int(tm>>11), int(tm>>5&0x3F), int(tm&0x1F)*2, 0, time.UTC)
}

// cp437 is the upper half of code page 437, the OEM code page mkfs.vfat
// and mtools use by default for short names.
const cp437 = "ÇüéâäàåçêëèïîìÄÅÉæÆôöòûùÿÖÜ¢£¥₧ƒáíóúñÑªº¿⌐¬½¼¡«»░▒▓│┤╡╢╖╕╣║╗╝╜╛┐└┴┬├─┼╞╟╚╔╩╦╠═╬╧╨╤╥╙╘╒╓╫╪┘┌█▄▌▐▀αßΓπΣσµτΦΘΩδ∞φε∩≡±≥≤⌠⌡÷≈°∙·√ⁿ²■\u00a0"

var cp437Runes = []rune(cp437)

// cp437Low is what code page 437 shows for the control bytes 0x00-0x1F,
// which a valid short name never holds; a damaged one is shown with
// these glyphs rather than with control characters.
var cp437Low = []rune(" ☺☻♥♦♣♠•◘○◙♂♀♪♫☼►◄↕‼¶§▬↨↑↓→←∟↔▲▼")

func decodeOEM(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c < 0x20 {
			sb.WriteRune(cp437Low[c])
		} else if c == 0x7f {
			sb.WriteRune('⌂')
		} else if c < 0x80 {
			sb.WriteByte(c)
		} else {
			sb.WriteRune(cp437Runes[c-0x80])
		}
	}
	return sb.String()
}
