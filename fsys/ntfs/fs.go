package ntfs

import (
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"
)

var (
	_ fs.FS         = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
	_ fs.ReadFileFS = (*FS)(nil)
)

// $FILE_NAME namespaces.
const (
	nsPOSIX = 0
	nsDOS   = 2
)

// fileAttrDir is the "has an $I30 index" bit of a $FILE_NAME's
// attributes: the entry is a directory.
const fileAttrDir = 0x10000000

// ientry is one entry of a directory index.
type ientry struct {
	num   uint64
	seq   uint16
	name  string
	isDir bool
	dos   bool // a DOS 8.3 name, beside a long one for the same file
}

// ref splits an MFT reference into record number and sequence.
func ref(v uint64) (uint64, uint16) { return v & 0xFFFFFFFFFFFF, uint16(v >> 48) }

// parseEntries decodes the index entries in b. It returns the names and
// the VCNs of the child nodes. Each entry is at least 16 bytes long, so
// the loop ends within b.
func parseEntries(b []byte, what string) ([]ientry, []int64, error) {
	le := binary.LittleEndian
	var out []ientry
	var subs []int64
	for off := 0; ; {
		if off+16 > len(b) {
			return nil, nil, corrupt("%s: index entries run past their node", what)
		}
		e := b[off:]
		n := int(le.Uint16(e[8:]))
		kl := int(le.Uint16(e[10:]))
		flags := le.Uint32(e[12:])
		if n < 16 || n%8 != 0 || n > len(e) || 16+kl > n {
			return nil, nil, corrupt("%s: index entry of length %d", what, n)
		}
		if flags&1 != 0 { // a child node before this entry
			if n < 24 {
				return nil, nil, corrupt("%s: index entry of length %d has no child", what, n)
			}
			subs = append(subs, int64(le.Uint64(e[n-8:])))
		}
		if flags&2 != 0 { // the last entry holds no key
			return out, subs, nil
		}
		if kl < 66 {
			return nil, nil, corrupt("%s: index key of %d bytes", what, kl)
		}
		k := e[16 : 16+kl]
		nl, ns := int(k[64]), k[65]
		if 66+2*nl > kl {
			return nil, nil, corrupt("%s: file name runs past its key", what)
		}
		num, seq := ref(le.Uint64(e))
		out = append(out, ientry{num: num, seq: seq, name: utf16String(k[66 : 66+2*nl]),
			isDir: le.Uint32(k[56:])&fileAttrDir != 0, dos: ns == nsDOS})
		off += n
	}
}

// dirEntries lists the directory of record rec: the entries of its
// $INDEX_ROOT and of every INDX block reachable from it, each block
// visited once (a node that is its own descendant is corrupt).
func (f *FS) dirEntries(rec *record, what string) ([]ientry, error) {
	root, err := rec.find(attrIndexRoot, "$I30", what)
	if err != nil {
		if errors.Is(err, errNoAttr) {
			return nil, corrupt("directory %s has no index", what)
		}
		return nil, err
	}
	le := binary.LittleEndian
	v := root.value
	if len(v) < 32 {
		return nil, corrupt("%s: index root of %d bytes", what, len(v))
	}
	bsize := int64(le.Uint32(v[8:]))
	eo, ts := int64(le.Uint32(v[16:])), int64(le.Uint32(v[20:]))
	if eo < 16 || eo > ts || 16+ts > int64(len(v)) {
		return nil, corrupt("%s: index root header", what)
	}
	ents, subs, err := parseEntries(v[16+eo:16+ts], what)
	if err != nil {
		return nil, err
	}
	if len(subs) == 0 {
		return ents, nil
	}
	if bsize < 512 || bsize > 64<<10 || bsize&(bsize-1) != 0 {
		return nil, corrupt("%s: index block of %d bytes", what, bsize)
	}
	// VCNs count clusters, or 512-byte units when a block is smaller
	// than a cluster.
	unit := f.clusterSize
	if bsize < f.clusterSize {
		unit = 512
	}
	alloc, err := rec.find(attrIndexAlloc, "$I30", what)
	if err != nil {
		if errors.Is(err, errNoAttr) {
			return nil, corrupt("directory %s has child nodes and no index allocation", what)
		}
		return nil, err
	}
	s, err := f.openStream(alloc, what)
	if err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	buf := make([]byte, bsize)
	for len(subs) > 0 {
		vcn := subs[len(subs)-1]
		subs = subs[:len(subs)-1]
		if seen[vcn] {
			return nil, corrupt("%s: index block %d is reached twice", what, vcn)
		}
		seen[vcn] = true
		if vcn < 0 || vcn > (s.size-bsize)/unit {
			return nil, corrupt("%s: index block %d outside the index", what, vcn)
		}
		if _, err := s.ReadAt(buf, vcn*unit); err != nil && err != io.EOF {
			return nil, err
		}
		if err := fixup(buf, "INDX", what+" index block"); err != nil {
			return nil, err
		}
		eo, ts := int64(le.Uint32(buf[0x18:])), int64(le.Uint32(buf[0x1C:]))
		if eo < 16 || eo > ts || 0x18+ts > bsize {
			return nil, corrupt("%s: index block %d header", what, vcn)
		}
		e, sub, err := parseEntries(buf[0x18+eo:0x18+ts], what)
		if err != nil {
			return nil, err
		}
		ents = append(ents, e...)
		subs = append(subs, sub...)
	}
	return ents, nil
}

// node is a resolved path: its record and the records above it.
type node struct {
	rec  *record
	name string
	anc  []uint64
}

func (f *FS) resolve(op, name string) (node, error) {
	if !fs.ValidPath(name) {
		return node{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	rec, err := f.record(recRoot, 0)
	if err != nil {
		return node{}, &fs.PathError{Op: op, Path: name, Err: err}
	}
	cur := node{rec: rec, name: "."}
	if name == "." {
		return cur, nil
	}
	for _, part := range strings.Split(name, "/") {
		if cur.rec.flags&recDir == 0 {
			return node{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		d, err := f.dir(cur.rec, quote(name))
		if err != nil {
			return node{}, &fs.PathError{Op: op, Path: name, Err: err}
		}
		ents := d.ents
		i, ok := d.byName[part]
		if !ok {
			i = lookup(ents, part)
		}
		if num, ok := d.byDOS[strings.ToUpper(part)]; ok && i < 0 {
			i = slices.IndexFunc(ents, func(e ientry) bool { return e.num == num })
		}
		if i < 0 {
			return node{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		if e := ents[i]; e.num == cur.rec.num || slices.Contains(cur.anc, e.num) {
			return node{}, &fs.PathError{Op: op, Path: name, Err: corrupt("directory %s contains itself or a directory above it (MFT record %d)", quote(name), e.num)}
		}
		rec, err := f.record(ents[i].num, ents[i].seq)
		if err != nil {
			return node{}, &fs.PathError{Op: op, Path: name, Err: err}
		}
		if ents[i].isDir != (rec.flags&recDir != 0) {
			// A walk goes by the index's word: a file it calls a
			// directory would fail as "not a directory".
			return node{}, &fs.PathError{Op: op, Path: name, Err: corrupt("the index and MFT record %d disagree on whether %s is a directory", rec.num, quote(name))}
		}
		if rec.flags&recDir != 0 {
			if err := checkParent(rec, cur.rec.num, quote(name)); err != nil {
				return node{}, &fs.PathError{Op: op, Path: name, Err: err}
			}
		}
		cur = node{rec: rec, name: ents[i].name, anc: append(slices.Clip(cur.anc), cur.rec.num)}
	}
	return cur, nil
}

// checkParent requires every name of directory rec to be in directory
// parent. NTFS has no hard links to directories; with this check and
// list's, every directory has one path, and a walk of a volume whose
// directories share subdirectories (a DAG, exponential in paths) fails
// instead of running for ever.
func checkParent(rec *record, parent uint64, what string) error {
	for _, a := range rec.attrs {
		if a.typ != attrFileName {
			continue
		}
		if !a.resident || len(a.value) < 8 {
			return corrupt("directory %s: bad $FILE_NAME attribute", what)
		}
		if p, _ := ref(binary.LittleEndian.Uint64(a.value)); p != parent {
			return corrupt("directory %s has a name in MFT record %d, its parent is %d", what, p, parent)
		}
	}
	return nil
}

// list returns the user entries of directory n, refusing one that points
// at n or a directory above it.
func (f *FS) list(n node, what string) ([]ientry, error) {
	d, err := f.dir(n.rec, what)
	if err != nil {
		return nil, err
	}
	for _, e := range d.ents {
		if e.num == n.rec.num || slices.Contains(n.anc, e.num) {
			return nil, corrupt("directory %s contains itself or a directory above it (MFT record %d)", what, e.num)
		}
	}
	return d.ents, nil
}

// dirCache is a parsed directory: its user entries and their index by
// exact name.
type dirCache struct {
	ents   []ientry
	byName map[string]int
	byDOS  map[string]uint64 // DOS 8.3 names (upper case) to their MFT record
}

// maxCached bounds the directory entries kept parsed in all.
const maxCached = 1 << 17

// dir returns the user entries of the directory of record rec (system
// files and the root's "." left out), from the cache if they are there;
// a directory that lists one subdirectory twice is corrupt. The result
// is shared: it must not be changed. The cache keeps a walk that opens
// every file of a large directory from reading its index again for each
// (quadratic).
func (f *FS) dir(rec *record, what string) (dirCache, error) {
	f.mu.Lock()
	d, ok := f.cache[rec.num]
	f.mu.Unlock()
	if ok {
		return d, nil
	}
	ents, err := f.dirEntries(rec, what)
	if err != nil {
		return dirCache{}, err
	}
	out := ents[:0]
	dirs := make(map[uint64]bool)
	for _, e := range ents {
		if e.num < firstUserRec {
			continue // system files, and the root's "." entry
		}
		if e.name == "" || e.name == "." || e.name == ".." || strings.ContainsAny(e.name, "/\x00") {
			continue // not a name io/fs can carry (nor NTFS, but for the root's ".")
		}
		if e.dos {
			// Not listed (the long name is), but found by lookups as
			// Windows finds it.
			if d.byDOS == nil {
				d.byDOS = make(map[string]uint64)
			}
			d.byDOS[strings.ToUpper(e.name)] = e.num
			continue
		}
		if e.isDir {
			if dirs[e.num] {
				return dirCache{}, corrupt("directory %s lists MFT record %d twice", what, e.num)
			}
			dirs[e.num] = true
		}
		out = append(out, e)
	}
	d.ents, d.byName = out, make(map[string]int, len(out))
	for i := len(out) - 1; i >= 0; i-- { // the first of equal names wins
		d.byName[out[i].name] = i
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cached+len(out) > maxCached || f.cache == nil {
		f.cache, f.cached = make(map[uint64]dirCache), 0
	}
	f.cache[rec.num] = d
	f.cached += len(out)
	return d, nil
}

func lookup(ents []ientry, part string) int {
	for i := range ents {
		if ents[i].name == part {
			return i
		}
	}
	for i := range ents {
		if strings.EqualFold(ents[i].name, part) {
			return i
		}
	}
	return -1
}

// stat builds the fs.FileInfo of a record: the size of its unnamed
// $DATA, the modification time of $STANDARD_INFORMATION.
func (f *FS) stat(rec *record, name string) (fileInfo, error) {
	fi := fileInfo{name: name, dir: rec.flags&recDir != 0}
	for _, a := range rec.attrs {
		if a.typ == attrStandardInfo && a.resident && len(a.value) >= 16 {
			fi.mtime = ntfsTime(binary.LittleEndian.Uint64(a.value[8:]))
		}
	}
	if !fi.dir {
		a, err := rec.data("", quote(name))
		switch {
		case errors.Is(err, errNoAttr):
		case errors.Is(err, ErrUnsupported):
			// Stat still works on what cannot be read: the size is
			// in the attribute header.
			for _, a := range rec.attrs {
				if a.typ == attrData && a.name == "" {
					fi.size = a.dataSize
					if a.resident {
						fi.size = int64(len(a.value))
					}
				}
			}
		case err != nil:
			return fileInfo{}, err
		case a.resident:
			fi.size = int64(len(a.value))
		default:
			fi.size = a.dataSize
		}
	}
	return fi, nil
}

// Open opens name: an fs.ReadDirFile for a directory, a *File (also an
// io.ReaderAt and io.Seeker) for a file.
func (f *FS) Open(name string) (fs.File, error) {
	n, err := f.resolve("open", name)
	if err != nil {
		return nil, err
	}
	fi, err := f.stat(n.rec, n.name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if fi.dir {
		ents, err := f.readDir(n, name)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return &dir{info: fi, ents: ents}, nil
	}
	s, err := f.fileStream(n.rec, name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &File{s: s, info: fi}, nil
}

func (f *FS) fileStream(rec *record, name string) (*stream, error) {
	a, err := rec.data("", quote(name))
	if errors.Is(err, errNoAttr) {
		return nil, unsupported("%s has no unnamed data stream", quote(name))
	}
	if err != nil {
		return nil, err
	}
	return f.openStream(a, quote(name))
}

// readDir lists directory n as fs.DirEntry values sorted by name; each
// entry's Info reads its MFT record.
func (f *FS) readDir(n node, name string) ([]fs.DirEntry, error) {
	ents, err := f.list(n, quote(name))
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, len(ents))
	for i, e := range ents {
		out[i] = &dirEntry{f: f, e: e}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// ReadDir lists the directory name, sorted by name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := f.resolve("readdir", name)
	if err != nil {
		return nil, err
	}
	if n.rec.flags&recDir == 0 {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("ntfs: not a directory")}
	}
	ents, err := f.readDir(n, name)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return ents, nil
}

// Stat returns the fs.FileInfo of name.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	n, err := f.resolve("stat", name)
	if err != nil {
		return nil, err
	}
	fi, err := f.stat(n.rec, n.name)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return fi, nil
}

// ReadFile returns the content of the file name. A file larger than the
// volume (only a sparse one can be) is refused here, to keep memory
// bounded by the volume; Open reads it piece by piece.
func (f *FS) ReadFile(name string) ([]byte, error) {
	n, err := f.resolve("readfile", name)
	if err != nil {
		return nil, err
	}
	if n.rec.flags&recDir != 0 {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: errors.New("ntfs: is a directory")}
	}
	s, err := f.fileStream(n.rec, name)
	if err != nil {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	if s.size > f.size {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: unsupported("file of %d bytes is larger than the volume: read it through Open", s.size)}
	}
	b := make([]byte, s.size)
	if _, err := s.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	return b, nil
}

// File is an open regular file: fs.File, io.ReaderAt and io.Seeker.
type File struct {
	s    *stream
	info fileInfo
	off  int64
}

func (fl *File) Stat() (fs.FileInfo, error)              { return fl.info, nil }
func (fl *File) Close() error                            { return nil }
func (fl *File) ReadAt(p []byte, off int64) (int, error) { return fl.s.ReadAt(p, off) }
func (fl *File) Read(p []byte) (int, error) {
	n, err := fl.s.ReadAt(p, fl.off)
	fl.off += int64(n)
	return n, err
}

func (fl *File) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += fl.off
	case io.SeekEnd:
		offset += fl.s.size
	}
	if offset < 0 {
		return 0, errors.New("ntfs: seek before the start")
	}
	fl.off = offset
	return offset, nil
}

type dir struct {
	info fileInfo
	ents []fs.DirEntry
	off  int
}

func (d *dir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dir) Close() error               { return nil }
func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errors.New("ntfs: is a directory")}
}

func (d *dir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.ents[d.off:]
	if n <= 0 {
		d.off = len(d.ents)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	rest = rest[:min(n, len(rest))]
	d.off += len(rest)
	return rest, nil
}

// dirEntry is a listed name; its Info reads the MFT record.
type dirEntry struct {
	f *FS
	e ientry
}

func (d *dirEntry) Name() string { return d.e.name }
func (d *dirEntry) IsDir() bool  { return d.e.isDir }
func (d *dirEntry) Type() fs.FileMode {
	if d.e.isDir {
		return fs.ModeDir
	}
	return 0
}

func (d *dirEntry) Info() (fs.FileInfo, error) {
	rec, err := d.f.record(d.e.num, d.e.seq)
	if err != nil {
		return nil, err
	}
	fi, err := d.f.stat(rec, d.e.name)
	if err != nil {
		return nil, err
	}
	return fi, nil
}

type fileInfo struct {
	name  string
	size  int64
	dir   bool
	mtime time.Time
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) ModTime() time.Time { return i.mtime }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }
func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
