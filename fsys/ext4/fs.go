package ext4

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

var (
	_ fs.FS         = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.ReadFileFS = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
	_ fs.ReadLinkFS = (*FS)(nil)
)

// maxLinks is how many symbolic links one path may go through, as the
// kernel's MAXSYMLINKS (ELOOP beyond it).
const maxLinks = 40

var (
	errNotDir  = errors.New("not a directory")
	errIsDir   = errors.New("is a directory")
	errLoop    = errors.New("too many levels of symbolic links")
	errNotLink = fmt.Errorf("not a symbolic link: %w", fs.ErrInvalid)
)

// resolve walks name (an io/fs path) from the root. Symbolic links met
// before the last element are followed, and the last one too when follow
// is set; targets resolve inside the filesystem (an absolute target starts
// at its root, ".." stops at the root). It returns the inode and the
// inode number of the directory it was found in (the root for the root).
func (f *FS) resolve(name string, follow bool) (*inode, uint32, error) {
	root, err := f.inode(rootIno)
	if err != nil {
		return nil, 0, err
	}
	stack := []uint32{rootIno} // directories from the root down to cur
	cur := root
	parentOf := func() uint32 {
		if len(stack) < 2 {
			return rootIno
		}
		return stack[len(stack)-2]
	}
	var rest []string
	if name != "." {
		rest = strings.Split(name, "/")
	}
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..": // only from a symlink target: ValidPath has no ".."
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
				if cur, err = f.inode(stack[len(stack)-1]); err != nil {
					return nil, 0, err
				}
			}
			continue
		}
		if !cur.isDir() {
			return nil, 0, errNotDir
		}
		d, err := f.lookup(cur, parentOf(), c)
		if err != nil {
			return nil, 0, err
		}
		child, err := f.inode(d.ino)
		if err != nil {
			return nil, 0, err
		}
		if child.isSymlink() && (len(rest) > 0 || follow) {
			if links++; links > maxLinks {
				return nil, 0, errLoop
			}
			target, err := f.readLink(child)
			if err != nil {
				return nil, 0, err
			}
			if strings.HasPrefix(target, "/") {
				stack, cur = stack[:1], root
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		stack = append(stack, child.ino)
		cur = child
	}
	return cur, parentOf(), nil
}

// readLink returns a symlink's target: in i_block for a fast symlink
// (shorter than 60 bytes), else inline data or blocks.
func (f *FS) readLink(in *inode) (string, error) {
	if in.flags&flagEncrypt != 0 {
		return "", fmt.Errorf("%w: symlink inode %d is encrypted (fscrypt)", ErrUnsupported, in.ino)
	}
	if in.size == 0 {
		return "", fmt.Errorf("%w: symlink inode %d is empty", ErrCorrupt, in.ino)
	}
	if in.size < blockArrayLn {
		// A fast symlink (or an inline one: the same bytes). The kernel and
		// e2fsprogs decide by size alone, whatever the flags say.
		return string(in.block[:in.size]), nil
	}
	c, err := f.contents(in)
	if err != nil {
		return "", err
	}
	b := make([]byte, in.size) // at most one block: checked by f.inode
	if _, err := c.readAt(b, 0); err != nil && err != io.EOF {
		return "", err
	}
	return string(b), nil
}

func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// Open opens the named file, following symbolic links. A directory
// opens as an fs.ReadDirFile; anything else as a file that also
// implements io.ReaderAt, io.Seeker and io.WriterTo (device, FIFO and
// socket inodes read as empty).
func (f *FS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, pathErr("open", name, fs.ErrInvalid)
	}
	in, parent, err := f.resolve(name, true)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if in.isDir() {
		return &dir{f: f, name: name, in: in, parent: parent}, nil
	}
	c, err := f.contents(in)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return &file{name: name, c: c}, nil
}

// Stat describes the named file, following symbolic links.
func (f *FS) Stat(name string) (fs.FileInfo, error) { return f.stat("stat", name, true) }

// Lstat describes the named file without following a final symbolic link.
func (f *FS) Lstat(name string) (fs.FileInfo, error) { return f.stat("lstat", name, false) }

func (f *FS) stat(op, name string, follow bool) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, pathErr(op, name, fs.ErrInvalid)
	}
	in, _, err := f.resolve(name, follow)
	if err != nil {
		return nil, pathErr(op, name, err)
	}
	return &fileInfo{name: path.Base(name), in: in}, nil
}

// ReadLink returns the target of the named symbolic link, as stored.
func (f *FS) ReadLink(name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", pathErr("readlink", name, fs.ErrInvalid)
	}
	in, _, err := f.resolve(name, false)
	if err != nil {
		return "", pathErr("readlink", name, err)
	}
	if !in.isSymlink() {
		return "", pathErr("readlink", name, errNotLink)
	}
	t, err := f.readLink(in)
	return t, pathErr("readlink", name, err)
}

// ReadDir lists the named directory, sorted by name, without "." and "..".
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, pathErr("readdir", name, fs.ErrInvalid)
	}
	in, parent, err := f.resolve(name, true)
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	if !in.isDir() {
		return nil, pathErr("readdir", name, errNotDir)
	}
	ents, err := f.dirEntries(in, parent)
	return ents, pathErr("readdir", name, err)
}

// ReadFile returns the contents of the named file. The buffer grows as
// data is read, not from the recorded size.
func (f *FS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, pathErr("readfile", name, fs.ErrInvalid)
	}
	in, _, err := f.resolve(name, true)
	if err != nil {
		return nil, pathErr("readfile", name, err)
	}
	if in.isDir() {
		return nil, pathErr("readfile", name, errIsDir)
	}
	c, err := f.contents(in)
	if err != nil {
		return nil, pathErr("readfile", name, err)
	}
	out := make([]byte, 0, min(in.size, 1<<20))
	for uint64(len(out)) < in.size {
		n := int(min(in.size-uint64(len(out)), maxRun))
		out = slices.Grow(out, n)
		m, err := c.readAt(out[len(out):len(out)+n], int64(len(out)))
		out = out[:len(out)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, pathErr("readfile", name, err)
		}
	}
	return out, nil
}

func (f *FS) dirEntries(in *inode, parent uint32) ([]fs.DirEntry, error) {
	ents, err := f.readDir(in, parent)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, len(ents))
	// Each directory has one name (its ".." names the parent, checked by
	// readDir): two entries naming one directory would make every walk
	// below them exponential.
	dirs := map[uint32]bool{}
	for i, d := range ents {
		t, ok := ftMode(d.typ)
		if !ok {
			// No filetype feature (or an odd type byte): the inode says.
			child, err := f.inode(d.ino)
			if err != nil {
				return nil, err
			}
			t = typeMode(child.mode)
		}
		if t.IsDir() {
			if dirs[d.ino] {
				return nil, fmt.Errorf("%w: directory inode %d: directory inode %d has two names", ErrCorrupt, in.ino, d.ino)
			}
			dirs[d.ino] = true
		}
		out[i] = &dirEntry{f: f, d: d, typ: t}
	}
	return out, nil
}

type dirEntry struct {
	f   *FS
	d   dirent
	typ fs.FileMode
}

func (e *dirEntry) Name() string      { return e.d.name }
func (e *dirEntry) IsDir() bool       { return e.typ.IsDir() }
func (e *dirEntry) Type() fs.FileMode { return e.typ }
func (e *dirEntry) String() string    { return fs.FormatDirEntry(e) }

// Info describes the entry itself (a symlink is not followed).
func (e *dirEntry) Info() (fs.FileInfo, error) {
	in, err := e.f.inode(e.d.ino)
	if err != nil {
		return nil, err
	}
	return &fileInfo{name: e.d.name, in: in}, nil
}

func (fi *fileInfo) String() string { return fs.FormatFileInfo(fi) }

// dir is an open directory.
type dir struct {
	f      *FS
	name   string
	in     *inode
	parent uint32
	ents   []fs.DirEntry
	loaded bool
	pos    int
}

func (d *dir) Stat() (fs.FileInfo, error) { return &fileInfo{name: path.Base(d.name), in: d.in}, nil }
func (d *dir) Close() error               { return nil }
func (d *dir) Read([]byte) (int, error)   { return 0, pathErr("read", d.name, errIsDir) }

// ReadDir returns the next n entries (all the rest when n <= 0), in name
// order, as fs.ReadDirFile specifies.
func (d *dir) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.loaded {
		ents, err := d.f.dirEntries(d.in, d.parent)
		if err != nil {
			return nil, pathErr("readdir", d.name, err)
		}
		d.ents, d.loaded = ents, true
	}
	rest := d.ents[d.pos:]
	if n <= 0 {
		d.pos = len(d.ents)
		return slices.Clone(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.pos += n
	return slices.Clone(rest[:n]), nil
}
