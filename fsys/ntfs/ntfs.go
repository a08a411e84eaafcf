// Package ntfs reads NTFS volumes, read-only, as an io/fs.FS over an
// io.ReaderAt.
//
//	v, err := ntfs.Open(dev, size)
//	data, err := fs.ReadFile(v, "Users/me/notes.txt")
//
// It reads directories from their index ($INDEX_ROOT and the INDX blocks
// of $INDEX_ALLOCATION), files' unnamed $DATA whether resident or not
// (runlists, with sparse runs and bytes past the initialized size read
// as zeros), attribute lists (a file's attributes spread over extension
// records), names in the Win32 and POSIX namespaces, sizes and times
// (ModTime is $STANDARD_INFORMATION's, as ntfs-3g shows it). A DOS 8.3
// name beside a long one is not listed, as ntfsls does not list it, but
// finds the file. Names are matched exactly, then case-insensitively as
// Windows does. The system files (MFT records below 16: $MFT, $Bitmap, …)
// are not listed, as ntfsls and ntfs-3g do not list them.
//
// Compressed and encrypted files fail to open with an error wrapping
// ErrUnsupported; alternate data streams (named $DATA) are not shown, and
// the unnamed stream of a file that has them reads as usual.
//
// The volume is not trusted: a boot sector with impossible geometry, an
// MFT record whose fixups do not match, attributes or runlists that leave
// their record or the volume, index nodes that loop and directories that
// contain themselves fail with an error wrapping ErrCorrupt. Reads are
// bounded by the record and index block sizes (at most 64 KiB each), and
// a directory walk visits each index block once.
package ntfs

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf16"
)

var (
	// ErrCorrupt is wrapped by every error about the volume's content.
	ErrCorrupt = errors.New("ntfs: corrupt filesystem")
	// ErrUnsupported is wrapped by the errors for what this reader
	// refuses rather than misreads: compressed and encrypted data, a
	// file without an unnamed data stream.
	ErrUnsupported = errors.New("ntfs: unsupported")
)

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}

// Well-known MFT records.
const (
	recMFT       = 0
	recVolume    = 3
	recRoot      = 5
	firstUserRec = 16
)

// Attribute types.
const (
	attrStandardInfo = 0x10
	attrList         = 0x20
	attrFileName     = 0x30
	attrVolumeName   = 0x60
	attrData         = 0x80
	attrIndexRoot    = 0x90
	attrIndexAlloc   = 0xA0
	attrEnd          = 0xFFFFFFFF
)

// FS is a read-only NTFS volume. It implements fs.FS, fs.ReadDirFS,
// fs.StatFS and fs.ReadFileFS and is safe for concurrent use.
type FS struct {
	dev         io.ReaderAt
	size        int64
	clusterSize int64
	clusters    int64
	recordSize  int64
	serial      uint64
	mft         *stream // $MFT's $DATA

	mu     sync.Mutex
	cache  map[uint64]dirCache // parsed directories by MFT record (see dir)
	cached int                 // their entries in all
}

// Open reads the boot sector and the $MFT record of the NTFS volume of
// size bytes in dev.
func Open(dev io.ReaderAt, size int64) (*FS, error) {
	var b [512]byte
	if size < 512 {
		return nil, corrupt("volume of %d bytes is smaller than a boot sector", size)
	}
	if _, err := dev.ReadAt(b[:], 0); err != nil {
		return nil, fmt.Errorf("ntfs: read boot sector: %w", err)
	}
	if string(b[3:11]) != "NTFS    " {
		return nil, corrupt("no NTFS signature in the boot sector")
	}
	le := binary.LittleEndian
	bps := int64(le.Uint16(b[11:]))
	if bps < 256 || bps > 4096 || bps&(bps-1) != 0 {
		return nil, corrupt("%d bytes per sector", bps)
	}
	spc := int64(b[13])
	if spc > 0x80 { // a power of two written as its negative exponent
		if 256-spc > 12 {
			return nil, corrupt("sectors per cluster code %#x", b[13])
		}
		spc = 1 << (256 - spc)
	}
	if spc == 0 || spc&(spc-1) != 0 {
		return nil, corrupt("%d sectors per cluster", spc)
	}
	f := &FS{dev: dev, size: size, clusterSize: bps * spc, serial: le.Uint64(b[0x48:])}
	if f.clusterSize > 2<<20 {
		return nil, corrupt("cluster of %d bytes", f.clusterSize)
	}
	total := int64(le.Uint64(b[0x28:]))
	if total <= 0 || total > size/bps {
		return nil, corrupt("boot sector claims %d sectors, the volume has %d", total, size/bps)
	}
	f.clusters = total / spc
	var err error
	if f.recordSize, err = f.recSize(int8(b[0x40]), "MFT record"); err != nil {
		return nil, err
	}
	mftLCN := int64(le.Uint64(b[0x30:]))
	if mftLCN <= 0 || mftLCN >= f.clusters {
		return nil, corrupt("MFT at cluster %d of %d", mftLCN, f.clusters)
	}
	// Record 0 is read where the boot sector says; its $DATA then maps
	// the rest of the MFT.
	raw := make([]byte, f.recordSize)
	if _, err := dev.ReadAt(raw, mftLCN*f.clusterSize); err != nil {
		return nil, fmt.Errorf("ntfs: read $MFT record: %w", err)
	}
	rec, err := f.parseRecord(raw, recMFT)
	if err != nil {
		return nil, err
	}
	a, err := rec.data("", "$MFT")
	if errors.Is(err, errNoAttr) {
		return nil, corrupt("$MFT has no data attribute")
	}
	if err != nil {
		return nil, err
	}
	if a.resident {
		return nil, corrupt("resident $MFT")
	}
	hasList := slices.ContainsFunc(rec.attrs, func(a attr) bool { return a.typ == attrList })
	if hasList && len(a.more) == 0 {
		// A fragmented MFT continues its $DATA in extension records,
		// which are found through the part of it in record 0: read
		// through that part first, then through the whole.
		if f.mft, err = f.stream(a, "$MFT", false); err != nil {
			return nil, err
		}
		if rec, err = f.record(recMFT, 0); err != nil {
			return nil, err
		}
		if a, err = rec.data("", "$MFT"); err != nil {
			return nil, fmt.Errorf("%w: $MFT: %w", ErrCorrupt, err)
		}
	}
	if f.mft, err = f.openStream(a, "$MFT"); err != nil {
		return nil, err
	}
	if f.mft.size < recRoot*f.recordSize+f.recordSize {
		return nil, corrupt("$MFT of %d bytes has no root directory", f.mft.size)
	}
	return f, nil
}

// recSize decodes the record or index block size of the boot sector: a
// count of clusters, or if negative the base-2 logarithm of the bytes.
func (f *FS) recSize(v int8, what string) (int64, error) {
	var n int64
	if v < 0 {
		if -v < 9 || -v > 16 {
			return 0, corrupt("%s size code %d", what, v)
		}
		n = 1 << -v
	} else {
		n = int64(v) * f.clusterSize
	}
	if n < 512 || n > 64<<10 || n&(n-1) != 0 {
		return 0, corrupt("%s of %d bytes", what, n)
	}
	return n, nil
}

// Serial returns the volume serial number, which blkid shows as the UUID
// in 16 hex digits.
func (f *FS) Serial() uint64 { return f.serial }

// ClusterSize returns the bytes per cluster.
func (f *FS) ClusterSize() int64 { return f.clusterSize }

// Label returns the volume name from $Volume, or "" if it has none or it
// cannot be read.
func (f *FS) Label() string {
	rec, err := f.record(recVolume, 0)
	if err != nil {
		return ""
	}
	for _, a := range rec.attrs {
		if a.typ == attrVolumeName && a.resident {
			return utf16String(a.value)
		}
	}
	return ""
}

// record is a parsed MFT record.
type record struct {
	num   uint64
	seq   uint16
	flags uint16
	base  uint64 // the base record of an extension record, else 0
	attrs []attr
}

const (
	recInUse = 0x01
	recDir   = 0x02
)

// attr is one attribute of a record.
type attr struct {
	typ      uint32
	name     string
	flags    uint16
	resident bool
	value    []byte // resident: the value
	// non-resident:
	startVCN, lastVCN int64
	runs              []byte
	more              []attr // the further extents, in VCN order (see find)
	compUnit          uint16
	allocSize         int64
	dataSize          int64
	initSize          int64
}

const (
	attrFlagCompressed = 0x0001
	attrFlagEncrypted  = 0x4000
)

// fixup checks and undoes the update sequence of a multi-sector record
// (FILE or INDX): the last two bytes of each 512-byte stride hold the
// sequence number, and the real bytes are in the array.
func fixup(b []byte, magic string, what string) error {
	if string(b[:4]) != magic {
		return corrupt("%s has no %s signature", what, magic)
	}
	le := binary.LittleEndian
	off := int(le.Uint16(b[4:]))
	n := int(le.Uint16(b[6:]))
	if n < 2 || (n-1)*512 != len(b) || off+2*n > len(b) || off < 8 {
		return corrupt("%s has an update sequence of %d at %d", what, n, off)
	}
	usn := b[off : off+2]
	for i := 1; i < n; i++ {
		end := i*512 - 2
		if b[end] != usn[0] || b[end+1] != usn[1] {
			return corrupt("%s: fixup mismatch in sector %d", what, i-1)
		}
		copy(b[end:end+2], b[off+2*i:])
	}
	return nil
}

// rawRecord reads MFT record num; a non-zero seq must match the
// record's sequence number (a stale reference otherwise).
func (f *FS) rawRecord(num uint64, seq uint16) (*record, error) {
	if num >= uint64(f.mft.size/f.recordSize) {
		return nil, corrupt("MFT record %d beyond the MFT's %d", num, f.mft.size/f.recordSize)
	}
	raw := make([]byte, f.recordSize)
	if _, err := f.mft.ReadAt(raw, int64(num)*f.recordSize); err != nil {
		return nil, fmt.Errorf("ntfs: read MFT record %d: %w", num, err)
	}
	rec, err := f.parseRecord(raw, num)
	if err != nil {
		return nil, err
	}
	if rec.flags&recInUse == 0 {
		return nil, corrupt("MFT record %d is not in use", num)
	}
	if seq != 0 && rec.seq != seq {
		return nil, corrupt("reference to MFT record %d with sequence %d, the record has %d", num, seq, rec.seq)
	}
	return rec, nil
}

// record reads the base MFT record num with the attributes its
// attribute list places in extension records, if it has one.
func (f *FS) record(num uint64, seq uint16) (*record, error) {
	rec, err := f.rawRecord(num, seq)
	if err != nil {
		return nil, err
	}
	if rec.base != 0 {
		return nil, corrupt("MFT record %d is an extension of record %d, not a file", num, rec.base)
	}
	var list *attr
	for i := range rec.attrs {
		if rec.attrs[i].typ == attrList {
			if list != nil {
				return nil, corrupt("MFT record %d has two attribute lists", num)
			}
			list = &rec.attrs[i]
		}
	}
	if list == nil {
		return rec, nil
	}
	what := "attribute list of MFT record " + strconv.FormatUint(num, 10)
	var b []byte
	if list.resident {
		b = list.value
	} else {
		// An attribute list is at most a few KiB (it holds 32-byte
		// entries for at most the attributes of 64 KiB of records);
		// 1 MiB is far beyond any real one and bounds the read.
		if list.dataSize > 1<<20 {
			return nil, corrupt("%s of %d bytes", what, list.dataSize)
		}
		s, err := f.openStream(*list, what)
		if err != nil {
			return nil, err
		}
		b = make([]byte, s.size)
		if _, err := s.ReadAt(b, 0); err != nil && err != io.EOF {
			return nil, err
		}
	}
	// Each extension record named by the list is read once and all its
	// attributes join the base record's.
	seen := map[uint64]bool{num: true}
	le := binary.LittleEndian
	for len(b) > 0 {
		if len(b) < 26 {
			return nil, corrupt("%s: entry runs past the list", what)
		}
		n := int(le.Uint16(b[4:]))
		if n < 26 || n > len(b) {
			return nil, corrupt("%s: entry of length %d", what, n)
		}
		ext, extSeq := ref(le.Uint64(b[16:]))
		b = b[n:]
		if seen[ext] {
			continue
		}
		seen[ext] = true
		er, err := f.rawRecord(ext, extSeq)
		if err != nil {
			return nil, err
		}
		if er.base != num {
			return nil, corrupt("%s names record %d, which is not one of its extensions", what, ext)
		}
		for _, a := range er.attrs {
			if a.typ == attrList {
				return nil, corrupt("%s names record %d, which has an attribute list", what, ext)
			}
			rec.attrs = append(rec.attrs, a)
		}
	}
	return rec, nil
}

func (f *FS) parseRecord(raw []byte, num uint64) (*record, error) {
	what := "MFT record " + strconv.FormatUint(num, 10)
	if err := fixup(raw, "FILE", what); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	rec := &record{num: num, seq: le.Uint16(raw[0x10:]), flags: le.Uint16(raw[0x16:])}
	rec.base = le.Uint64(raw[0x20:]) & 0xFFFFFFFFFFFF
	used := int(le.Uint32(raw[0x18:]))
	off := int(le.Uint16(raw[0x14:]))
	if used > len(raw) || used < 0x30 {
		used = len(raw)
	}
	// Each attribute is at least 16 bytes long and lies inside the
	// record, so the walk ends within the record.
	for {
		if off+4 > used {
			return nil, corrupt("%s: attributes run past the record", what)
		}
		typ := le.Uint32(raw[off:])
		if typ == attrEnd {
			break
		}
		if off+24 > used {
			return nil, corrupt("%s: attribute at %d runs past the record", what, off)
		}
		n := int(le.Uint32(raw[off+4:]))
		if n < 24 || n%8 != 0 || off+n > used {
			return nil, corrupt("%s: attribute at %d of length %d", what, off, n)
		}
		a, err := parseAttr(raw[off:off+n], what)
		if err != nil {
			return nil, err
		}
		rec.attrs = append(rec.attrs, a)
		off += n
	}
	return rec, nil
}

func parseAttr(b []byte, what string) (attr, error) {
	le := binary.LittleEndian
	a := attr{typ: le.Uint32(b), flags: le.Uint16(b[12:]), resident: b[8] == 0}
	if nl, no := int(b[9]), int(le.Uint16(b[10:])); nl > 0 {
		if no+2*nl > len(b) {
			return attr{}, corrupt("%s: attribute name runs past the attribute", what)
		}
		a.name = utf16String(b[no : no+2*nl])
	}
	if a.resident {
		vl, vo := int(le.Uint32(b[16:])), int(le.Uint16(b[20:]))
		if vo+vl > len(b) || vl < 0 {
			return attr{}, corrupt("%s: resident value runs past the attribute", what)
		}
		a.value = b[vo : vo+vl]
		return a, nil
	}
	if len(b) < 64 {
		return attr{}, corrupt("%s: non-resident attribute of %d bytes", what, len(b))
	}
	a.startVCN = int64(le.Uint64(b[16:]))
	a.lastVCN = int64(le.Uint64(b[24:]))
	ro := int(le.Uint16(b[32:]))
	a.compUnit = le.Uint16(b[34:])
	a.allocSize = int64(le.Uint64(b[40:]))
	a.dataSize = int64(le.Uint64(b[48:]))
	a.initSize = int64(le.Uint64(b[56:]))
	if ro > len(b) || a.startVCN < 0 || a.lastVCN < a.startVCN-1 || a.dataSize < 0 || a.initSize < 0 || a.allocSize < 0 {
		return attr{}, corrupt("%s: non-resident attribute header", what)
	}
	a.runs = b[ro:]
	return a, nil
}

// data returns the $DATA attribute of that name ("": the file's
// content), refusing what this reader cannot read right.
func (r *record) data(name string, what string) (attr, error) {
	a, err := r.find(attrData, name, what)
	if err != nil {
		return attr{}, err
	}
	// A directory's index carries the same flags as a hint for the
	// files made in it; only data is refused for them.
	switch {
	case a.flags&attrFlagEncrypted != 0:
		return attr{}, unsupported("%s is encrypted", what)
	case a.flags&attrFlagCompressed != 0:
		// (A sparse attribute has a compression unit too: only the
		// flag says compressed.)
		return attr{}, unsupported("%s is compressed", what)
	}
	return a, nil
}

// find returns the attribute of type typ and name. A non-resident
// attribute may come in several extents (from an attribute list): they
// are put in VCN order in the first one's more, and must follow each
// other without gap or overlap.
func (r *record) find(typ uint32, name string, what string) (attr, error) {
	var found []attr
	for _, a := range r.attrs {
		if a.typ == typ && a.name == name {
			found = append(found, a)
		}
	}
	switch {
	case len(found) == 0:
		return attr{}, errNoAttr
	case len(found) == 1:
		return found[0], nil
	}
	slices.SortFunc(found, func(a, b attr) int { return cmp.Compare(a.startVCN, b.startVCN) })
	for i, a := range found {
		if a.resident {
			return attr{}, corrupt("%s has two attributes of type %#x", what, typ)
		}
		if i > 0 && a.startVCN != found[i-1].lastVCN+1 {
			return attr{}, corrupt("%s: extents of attribute %#x at VCN %d and %d", what, typ, found[i-1].startVCN, a.startVCN)
		}
	}
	first := found[0]
	first.more = found[1:]
	first.lastVCN = found[len(found)-1].lastVCN
	return first, nil
}

// errNoAttr is a missing attribute: a file without $DATA, a directory
// without $INDEX_ALLOCATION.
var errNoAttr = errors.New("ntfs: no such attribute")

// run is one extent of a non-resident attribute: clusters [vcn, vcn+n)
// of the stream at lcn, or zeros when sparse.
type run struct {
	vcn, lcn, n int64
	sparse      bool
}

// stream reads a non-resident attribute through its runlist, or a
// resident one from its value.
type stream struct {
	f        *FS
	resident []byte
	runs     []run
	size     int64 // data size
	init     int64 // initialized size: bytes past it read as zeros
}

// openStream decodes the runlist of a. Every run must lie inside the
// volume and the runs must cover the data size; their count is bounded
// by the runlist's bytes (two at least a run), so by the record size.
func (f *FS) openStream(a attr, what string) (*stream, error) {
	return f.stream(a, what, true)
}

// stream decodes the runlists of a; whole says they must cover its data
// size (false: the first extent of the $MFT alone, see Open).
func (f *FS) stream(a attr, what string, whole bool) (*stream, error) {
	if a.resident {
		return &stream{f: f, resident: a.value, size: int64(len(a.value)), init: int64(len(a.value))}, nil
	}
	if a.startVCN != 0 {
		return nil, corrupt("%s: data starts at VCN %d", what, a.startVCN)
	}
	s := &stream{f: f, size: a.dataSize, init: min(a.initSize, a.dataSize)}
	vcn := int64(0)
	for _, x := range append([]attr{a}, a.more...) {
		if x.startVCN != vcn {
			return nil, corrupt("%s: extent at VCN %d after %d clusters", what, x.startVCN, vcn)
		}
		var err error
		if vcn, err = f.decodeRuns(s, x.runs, vcn, what); err != nil {
			return nil, err
		}
	}
	if whole && (vcn*f.clusterSize < s.size || vcn < a.lastVCN+1) {
		return nil, corrupt("%s: runlist of %d clusters for %d bytes", what, vcn, s.size)
	}
	if !whole {
		s.size = min(s.size, vcn*f.clusterSize)
		s.init = min(s.init, s.size)
	}
	return s, nil
}

// maxVCN bounds the clusters of a stream (2^40: 16 TiB at 4 KiB
// clusters, past NTFS's own file size limit).
const maxVCN = 1 << 40

// decodeRuns appends the runs of one runlist, starting at cluster vcn of
// the stream, to s and returns the VCN after them. LCNs are relative to
// the previous run's, from 0 in each runlist.
func (f *FS) decodeRuns(s *stream, b []byte, vcn int64, what string) (int64, error) {
	lcn := int64(0)
	for len(b) > 0 && b[0] != 0 {
		ln, lo := int(b[0]&0xF), int(b[0]>>4)
		if ln == 0 || ln > 8 || lo > 8 || 1+ln+lo > len(b) {
			return 0, corrupt("%s: bad runlist entry", what)
		}
		n := int64(0)
		for i := ln; i >= 1; i-- {
			n = n<<8 | int64(b[i])
		}
		// A stream of 2^40 clusters is 2^61 bytes at the largest
		// cluster: the offsets computed from it cannot overflow.
		if n <= 0 || n > maxVCN-vcn {
			return 0, corrupt("%s: run of %d clusters", what, n)
		}
		r := run{vcn: vcn, n: n, sparse: lo == 0}
		if lo > 0 {
			d := int64(int8(b[ln+lo])) // sign-extended top byte
			for i := ln + lo - 1; i > ln; i-- {
				d = d<<8 | int64(b[i])
			}
			lcn += d
			if lcn < 0 || lcn >= f.clusters || n > f.clusters-lcn {
				return 0, corrupt("%s: run at cluster %d of %d clusters leaves the volume", what, lcn, n)
			}
			r.lcn = lcn
		}
		s.runs = append(s.runs, r)
		vcn += n
		b = b[1+ln+lo:]
	}
	return vcn, nil
}

// ReadAt reads the stream; past its initialized size it reads zeros.
func (s *stream) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("ntfs: negative offset")
	}
	if off >= s.size {
		return 0, io.EOF
	}
	var eof error
	if rem := s.size - off; int64(len(p)) > rem {
		p, eof = p[:rem], io.EOF
	}
	if s.resident != nil || s.runs == nil {
		n := copy(p, s.resident[min(off, int64(len(s.resident))):])
		clear(p[n:])
		return len(p), eof
	}
	cs := s.f.clusterSize
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		k := len(p) - done
		q := p[done:]
		if pos >= s.init {
			clear(q)
			break
		}
		if int64(k) > s.init-pos {
			k = int(s.init - pos)
		}
		vcn := pos / cs
		r := s.find(vcn)
		if r == nil {
			return done, corrupt("no run for cluster %d", vcn)
		}
		end := (r.vcn + r.n) * cs
		if int64(k) > end-pos {
			k = int(end - pos)
		}
		q = q[:k]
		if r.sparse {
			clear(q)
		} else if _, err := s.f.dev.ReadAt(q, r.lcn*cs+(pos-r.vcn*cs)); err != nil {
			return done, fmt.Errorf("ntfs: read cluster %d: %w", r.lcn+vcn-r.vcn, err)
		}
		done += k
	}
	return len(p), eof
}

func (s *stream) find(vcn int64) *run {
	lo, hi := 0, len(s.runs)
	for lo < hi {
		m := (lo + hi) / 2
		switch r := &s.runs[m]; {
		case vcn < r.vcn:
			hi = m
		case vcn >= r.vcn+r.n:
			lo = m + 1
		default:
			return r
		}
	}
	return nil
}

func utf16String(b []byte) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

// ntfsTime converts 100 ns ticks since 1601 to a time.
func ntfsTime(t uint64) time.Time {
	const epochDiff = 116444736000000000 // 1601 to 1970 in 100 ns ticks
	if t == 0 {
		return time.Time{}
	}
	d := int64(t - epochDiff)
	return time.Unix(d/1e7, d%1e7*100).UTC()
}

// quote keeps names from the volume on one line in errors.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}
