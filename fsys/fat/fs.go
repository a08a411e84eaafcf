package fat

import (
	"errors"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	_ fs.FS         = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
	_ fs.ReadFileFS = (*FS)(nil)
)

// rootID is the cluster that stands for the root directory in the
// ancestor lists: the fixed root of FAT12/16 has no cluster.
func (f *FS) rootID() uint32 {
	if f.typ == FAT32 {
		return f.rootCluster
	}
	return 0
}

// resolve walks name from the root. It returns the entry and the first
// clusters of the directories above it, root first; a directory entry
// that points at one of its ancestors (or at the root) is corrupt, which
// keeps fs.WalkDir from descending forever.
func (f *FS) resolve(op, name string) (entry, []uint32, error) {
	if !fs.ValidPath(name) {
		return entry{}, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	cur := entry{name: ".", attr: attrDir}
	var anc []uint32
	if name == "." {
		return cur, nil, nil
	}
	for _, part := range strings.Split(name, "/") {
		if !cur.isDir() {
			return entry{}, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		id := cur.cluster
		if len(anc) == 0 {
			id = f.rootID()
		}
		ents, err := f.readChild(cur.cluster, anc, quote(name))
		if err != nil {
			return entry{}, nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		anc = append(anc, id)
		i, ok := ents.byName[part]
		if !ok {
			i = lookup(ents.ents, part)
		}
		if i < 0 {
			return entry{}, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		cur = ents.ents[i]
		if cur.isDir() {
			if err := f.checkSubdir(cur, anc); err != nil {
				return entry{}, nil, &fs.PathError{Op: op, Path: name, Err: err}
			}
		}
	}
	return cur, anc, nil
}

// readChild reads directory c, whose enclosing directories are anc (root
// first; none for the root itself). A subdirectory's ".." must name its
// parent and a directory may list a subdirectory only once: then every
// directory has one path, and a walk of a volume whose directories
// share subdirectories (a DAG, exponential in paths) fails instead of
// running for ever.
func (f *FS) readChild(c uint32, anc []uint32, what string) (dirCache, error) {
	d, err := f.dir(c, what)
	if err != nil {
		return dirCache{}, err
	}
	if len(anc) > 0 {
		parent := anc[len(anc)-1]
		// ".." of a directory in the root is 0, on FAT32 too (some
		// writers put the root's cluster there).
		ok := d.dotdot == int64(parent) || len(anc) == 1 && d.dotdot == 0
		if !ok {
			return dirCache{}, corrupt("directory %s: its \"..\" is cluster %d, its parent %d", what, d.dotdot, parent)
		}
	}
	return d, nil
}

// checkSubdir fails for a directory entry whose cluster is free or one of
// anc: a directory nested into itself.
func (f *FS) checkSubdir(e entry, anc []uint32) error {
	if e.cluster == 0 || slices.Contains(anc, e.cluster) {
		return corrupt("directory %s points back at an enclosing directory (cluster %d)", quote(e.name), e.cluster)
	}
	return nil
}

// quote keeps names from the volume on one line in errors.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}

// lookup finds part among ents: the exact name first, then FAT's
// case-insensitive match on the long or the short name.
func lookup(ents []entry, part string) int {
	for i := range ents {
		if ents[i].name == part {
			return i
		}
	}
	for i := range ents {
		if strings.EqualFold(ents[i].name, part) || strings.EqualFold(ents[i].short, part) {
			return i
		}
	}
	return -1
}

// Open opens the file or directory name; the result is an fs.File that
// is also an io.ReaderAt and io.Seeker for files, an fs.ReadDirFile for
// directories.
func (f *FS) Open(name string) (fs.File, error) {
	e, anc, err := f.resolve("open", name)
	if err != nil {
		return nil, err
	}
	if e.isDir() {
		ents, err := f.list(e, anc, name)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return &dir{info: info(e), ents: ents}, nil
	}
	fl, err := f.openFile(e, name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return fl, nil
}

// list returns the entries of directory e, sorted by name, each
// subdirectory checked against e and its ancestors.
func (f *FS) list(e entry, anc []uint32, name string) ([]fs.DirEntry, error) {
	d, err := f.readChild(e.cluster, anc, quote(name))
	if err != nil {
		return nil, err
	}
	ents := d.ents
	self := e.cluster
	if len(anc) == 0 {
		self = f.rootID()
	}
	anc = append(slices.Clip(anc), self)
	out := make([]fs.DirEntry, 0, len(ents))
	for _, c := range ents {
		if c.isDir() {
			if err := f.checkSubdir(c, anc); err != nil {
				return nil, err
			}
		}
		out = append(out, fs.FileInfoToDirEntry(info(c)))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// ReadDir lists the directory name sorted by file name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, anc, err := f.resolve("readdir", name)
	if err != nil {
		return nil, err
	}
	if !e.isDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("fat: not a directory")}
	}
	ents, err := f.list(e, anc, name)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return ents, nil
}

// Stat returns the fs.FileInfo of name.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	e, _, err := f.resolve("stat", name)
	if err != nil {
		return nil, err
	}
	return info(e), nil
}

// ReadFile returns the content of the file name.
func (f *FS) ReadFile(name string) ([]byte, error) {
	e, _, err := f.resolve("readfile", name)
	if err != nil {
		return nil, err
	}
	if e.isDir() {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: errors.New("fat: is a directory")}
	}
	fl, err := f.openFile(e, name)
	if err != nil {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	b := make([]byte, e.size)
	if _, err := fl.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	return b, nil
}

// openFile maps the clusters of a file; the chain must cover its size.
func (f *FS) openFile(e entry, name string) (*File, error) {
	fl := &File{fs: f, info: info(e), size: e.size}
	if e.size == 0 {
		return fl, nil
	}
	need := (e.size + f.clusterSize - 1) / f.clusterSize
	cl, err := f.chain(e.cluster, need, quote(name))
	if err != nil {
		return nil, err
	}
	if int64(len(cl)) < need {
		return nil, corrupt("cluster chain of %s is shorter than its %d bytes", quote(name), e.size)
	}
	fl.chain = cl
	return fl, nil
}

// File is an open regular file. It implements fs.File, io.ReaderAt and
// io.Seeker.
type File struct {
	fs    *FS
	info  fileInfo
	size  int64
	chain []uint32
	off   int64
}

func (fl *File) Stat() (fs.FileInfo, error) { return fl.info, nil }
func (fl *File) Close() error               { return nil }

func (fl *File) Read(p []byte) (int, error) {
	n, err := fl.ReadAt(p, fl.off)
	fl.off += int64(n)
	return n, err
}

func (fl *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("fat: negative offset")
	}
	if off >= fl.size {
		return 0, io.EOF
	}
	var err error
	if rem := fl.size - off; int64(len(p)) > rem {
		p, err = p[:rem], io.EOF
	}
	n := 0
	cs := fl.fs.clusterSize
	for n < len(p) {
		pos := off + int64(n)
		in := pos % cs
		k := min(int64(len(p)-n), cs-in)
		if e := fl.fs.readCluster(p[n:n+int(k)], fl.chain[pos/cs], in); e != nil {
			return n, e
		}
		n += int(k)
	}
	return n, err
}

func (fl *File) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += fl.off
	case io.SeekEnd:
		offset += fl.size
	}
	if offset < 0 {
		return 0, errors.New("fat: seek before the start")
	}
	fl.off = offset
	return offset, nil
}

// dir is an open directory.
type dir struct {
	info fileInfo
	ents []fs.DirEntry
	off  int
}

func (d *dir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dir) Close() error               { return nil }
func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errors.New("fat: is a directory")}
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

// fileInfo is the fs.FileInfo of an entry. Sys returns the FAT attribute
// byte (read-only 0x01, hidden 0x02, system 0x04, directory 0x10,
// archive 0x20).
type fileInfo struct {
	name  string
	size  int64
	attr  byte
	mtime time.Time
}

func info(e entry) fileInfo {
	size := e.size
	if e.isDir() {
		size = 0
	}
	return fileInfo{name: e.name, size: size, attr: e.attr, mtime: e.mtime}
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) ModTime() time.Time { return i.mtime }
func (i fileInfo) IsDir() bool        { return i.attr&attrDir != 0 }
func (i fileInfo) Sys() any           { return i.attr }
func (i fileInfo) Mode() fs.FileMode {
	if i.IsDir() {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
