package ext4

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// dirent is one directory entry other than "." and "..".
type dirent struct {
	name string
	ino  uint32
	typ  uint8 // file type byte of the entry (0: unknown, read the inode)
}

// Directory entry file types (with the filetype feature).
const (
	ftUnknown = 0
	ftReg     = 1
	ftDir     = 2
	ftChr     = 3
	ftBlk     = 4
	ftFifo    = 5
	ftSock    = 6
	ftSymlink = 7
)

func ftMode(t uint8) (fs.FileMode, bool) {
	switch t {
	case ftReg:
		return 0, true
	case ftDir:
		return fs.ModeDir, true
	case ftChr:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case ftBlk:
		return fs.ModeDevice, true
	case ftFifo:
		return fs.ModeNamedPipe, true
	case ftSock:
		return fs.ModeSocket, true
	case ftSymlink:
		return fs.ModeSymlink, true
	}
	return 0, false
}

// dirChunk is how much of a directory is read at a time.
const dirChunk = 64 << 10

// scanDir calls fn for every live entry of directory in (not "." or
// ".."), until fn returns true. It returns the inode number of the
// directory's ".." entry (0 when fn stopped the scan before it; ".." is
// always first, so in practice it is known).
func (f *FS) scanDir(in *inode, fn func(d dirent) bool) (uint32, error) {
	if !in.isDir() {
		return 0, fmt.Errorf("%w: inode %d is not a directory", ErrCorrupt, in.ino)
	}
	if in.flags&flagEncrypt != 0 {
		return 0, fmt.Errorf("%w: directory inode %d is encrypted (fscrypt)", ErrUnsupported, in.ino)
	}
	var dotdot uint32
	stop := false
	if in.flags&flagInline != 0 {
		// Inline directory: i_block starts with the parent's inode
		// number, then entries fill the rest of i_block and, after it,
		// the system.data value.
		if in.size < 4 {
			return 0, fmt.Errorf("%w: inline directory inode %d of %d bytes", ErrCorrupt, in.ino, in.size)
		}
		dotdot = binary.LittleEndian.Uint32(in.block[:4])
		if err := f.parseEntries(in, in.block[4:], &dotdot, fn, &stop); err != nil || stop {
			return dotdot, err
		}
		x, err := in.systemData()
		if err != nil {
			return 0, err
		}
		if len(x) > 0 {
			if err := f.parseEntries(in, x, &dotdot, fn, &stop); err != nil {
				return dotdot, err
			}
		}
		return dotdot, nil
	}
	if in.size%uint64(f.bs) != 0 {
		return 0, fmt.Errorf("%w: directory inode %d has size %d, not a multiple of the %d-byte block", ErrCorrupt, in.ino, in.size, f.bs)
	}
	c, err := f.contents(in)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, min(int64(in.size), dirChunk))
	for off := int64(0); off < int64(in.size) && !stop; off += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), int64(in.size)-off)]
		if _, err := c.readAt(chunk, off); err != nil {
			return 0, err
		}
		for b := 0; b < len(chunk) && !stop; b += int(f.bs) {
			blk := chunk[b : b+int(f.bs)]
			if allZero(blk) {
				continue // a hole or an uninitialized block holds no entries
			}
			if err := f.parseEntries(in, blk, &dotdot, fn, &stop); err != nil {
				return 0, err
			}
		}
	}
	return dotdot, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// parseEntries walks the linked entries of one directory block (or inline
// region). Entries with inode 0 are unused space: deleted entries, the
// fake entries that hold htree index nodes, and the metadata_csum tail.
func (f *FS) parseEntries(in *inode, b []byte, dotdot *uint32, fn func(dirent) bool, stop *bool) error {
	le := binary.LittleEndian
	filetype := f.incompat&incompatFiletype != 0
	for off := 0; off < len(b); {
		if len(b)-off < 8 {
			return fmt.Errorf("%w: directory inode %d: entry header at %d overruns its %d-byte block", ErrCorrupt, in.ino, off, len(b))
		}
		e := b[off:]
		ino := le.Uint32(e[0:])
		recLen := int(le.Uint16(e[4:]))
		if f.bs >= 65536 && (recLen == 65535 || recLen == 0) {
			recLen = 65536
		} else {
			recLen = recLen&0xFFFC | (recLen&3)<<16
		}
		if recLen < 8 || recLen%4 != 0 || recLen > len(b)-off {
			return fmt.Errorf("%w: directory inode %d: entry at %d has rec_len %d in a %d-byte block", ErrCorrupt, in.ino, off, recLen, len(b))
		}
		nameLen := int(e[6])
		typ := e[7]
		if !filetype {
			nameLen |= int(e[7]) << 8
			typ = ftUnknown
		}
		if 8+nameLen > recLen {
			return fmt.Errorf("%w: directory inode %d: name of %d bytes overruns its %d-byte entry", ErrCorrupt, in.ino, nameLen, recLen)
		}
		off += recLen
		if ino == 0 {
			continue
		}
		name := string(e[8 : 8+nameLen])
		if ino > f.inodesCount {
			return fmt.Errorf("%w: directory inode %d: entry %q names inode %d of %d", ErrCorrupt, in.ino, name, ino, f.inodesCount)
		}
		switch {
		case name == ".":
			continue
		case name == "..":
			*dotdot = ino
			continue
		case name == "" || strings.ContainsAny(name, "/\x00"):
			return fmt.Errorf("%w: directory inode %d: entry name %q", ErrCorrupt, in.ino, name)
		case ino == rootIno:
			// Only "." and ".." name the root. Its ".." is itself, so
			// the parent check cannot catch a name that loops back to
			// it from the root directory.
			return fmt.Errorf("%w: directory inode %d: entry %q names the root directory", ErrCorrupt, in.ino, name)
		}
		if fn(dirent{name: name, ino: ino, typ: typ}) {
			*stop = true
			return nil
		}
	}
	return nil
}

// readDir lists directory in, reached from directory parent, sorted by
// name. Its ".." must be parent: that keeps every directory reachable by
// exactly one path, so a hostile entry pointing back up the tree is an
// error instead of an endless walk.
func (f *FS) readDir(in *inode, parent uint32) ([]dirent, error) {
	var ents []dirent
	dotdot, err := f.scanDir(in, func(d dirent) bool {
		ents = append(ents, d)
		return false
	})
	if err != nil {
		return nil, err
	}
	if err := checkParent(in, dotdot, parent); err != nil {
		return nil, err
	}
	slices.SortFunc(ents, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(ents); i++ {
		if ents[i].name == ents[i-1].name {
			return nil, fmt.Errorf("%w: directory inode %d: name %q twice", ErrCorrupt, in.ino, ents[i].name)
		}
	}
	return ents, nil
}

func checkParent(in *inode, dotdot, parent uint32) error {
	if dotdot != parent {
		return fmt.Errorf("%w: directory inode %d has '..' = inode %d but is linked from directory inode %d (a directory loop or cross-link)", ErrCorrupt, in.ino, dotdot, parent)
	}
	return nil
}

// lookup finds name in directory in (reached from parent). It reads the
// whole directory once into a name index kept in a small cache, so
// opening every file of a large directory one by one (a walk, cp -r)
// costs one scan of it, not one per file.
func (f *FS) lookup(in *inode, parent uint32, name string) (dirent, error) {
	ix, err := f.dirIndex(in)
	if err != nil {
		return dirent{}, err
	}
	if err := checkParent(in, ix.dotdot, parent); err != nil {
		return dirent{}, err
	}
	d, ok := ix.names[name]
	if !ok {
		return dirent{}, fs.ErrNotExist
	}
	return d, nil
}

// dirIndexCache is how many directories' name indexes an FS keeps:
// enough for the directories along a path and the one being walked.
const dirIndexCache = 8

type dirIdx struct {
	ino    uint32
	dotdot uint32
	names  map[string]dirent
}

func (f *FS) dirIndex(in *inode) (*dirIdx, error) {
	f.mu.Lock()
	for i, ix := range f.dirs {
		if ix.ino == in.ino {
			// Move to the front: least recently used falls off the end.
			copy(f.dirs[1:i+1], f.dirs[:i])
			f.dirs[0] = ix
			f.mu.Unlock()
			return ix, nil
		}
	}
	f.mu.Unlock()
	ix := &dirIdx{ino: in.ino, names: map[string]dirent{}}
	dotdot, err := f.scanDir(in, func(d dirent) bool {
		if _, dup := ix.names[d.name]; !dup {
			ix.names[d.name] = d
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	ix.dotdot = dotdot
	f.mu.Lock()
	if len(f.dirs) < dirIndexCache {
		f.dirs = append(f.dirs, nil)
	}
	copy(f.dirs[1:], f.dirs[:len(f.dirs)-1])
	f.dirs[0] = ix
	f.mu.Unlock()
	return ix, nil
}
