package ext4

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"time"
)

// Mode type bits of i_mode.
const (
	sIFMT   = 0xF000
	sIFSOCK = 0xC000
	sIFLNK  = 0xA000
	sIFREG  = 0x8000
	sIFBLK  = 0x6000
	sIFDIR  = 0x4000
	sIFCHR  = 0x2000
	sIFIFO  = 0x1000
)

// Inode flags (i_flags) that change how an inode is read.
const (
	flagEncrypt  = 0x800
	flagExtents  = 0x80000
	flagEAInode  = 0x200000
	flagInline   = 0x10000000
	blockArrayLn = 60 // i_block: 15 × 4 bytes
)

// inode is the part of an on-disk inode this reader uses.
type inode struct {
	ino     uint32
	mode    uint16
	uid     uint32
	gid     uint32
	size    uint64
	links   uint16
	flags   uint32
	block   [blockArrayLn]byte
	atime   time.Time
	ctime   time.Time
	mtime   time.Time
	crtime  time.Time
	hasCrt  bool
	fileACL uint64
	raw     []byte // the whole on-disk inode, for in-inode xattrs
	extra   uint32 // i_extra_isize
}

func (in *inode) isDir() bool     { return in.mode&sIFMT == sIFDIR }
func (in *inode) isSymlink() bool { return in.mode&sIFMT == sIFLNK }
func (in *inode) isReg() bool     { return in.mode&sIFMT == sIFREG }

// inode reads and checks inode ino.
func (f *FS) inode(ino uint32) (*inode, error) {
	if ino == 0 || ino > f.inodesCount {
		return nil, fmt.Errorf("%w: inode number %d outside 1…%d", ErrCorrupt, ino, f.inodesCount)
	}
	g := (ino - 1) / f.inodesPerGroup
	idx := (ino - 1) % f.inodesPerGroup
	table, err := f.inodeTable(g)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, f.inodeSize)
	if err := f.readAt(raw, int64(table)*f.bs+int64(idx)*int64(f.inodeSize)); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	in := &inode{ino: ino, raw: raw}
	in.mode = le.Uint16(raw[0x0:])
	in.uid = uint32(le.Uint16(raw[0x2:])) | uint32(le.Uint16(raw[0x78:]))<<16
	in.gid = uint32(le.Uint16(raw[0x18:])) | uint32(le.Uint16(raw[0x7A:]))<<16
	in.size = uint64(le.Uint32(raw[0x4:])) | uint64(le.Uint32(raw[0x6C:]))<<32
	in.links = le.Uint16(raw[0x1A:])
	in.flags = le.Uint32(raw[0x20:])
	copy(in.block[:], raw[0x28:0x28+blockArrayLn])
	in.fileACL = uint64(le.Uint32(raw[0x68:])) | uint64(le.Uint16(raw[0x76:]))<<32
	if f.inodeSize > 128 {
		in.extra = uint32(le.Uint16(raw[0x80:]))
		if in.extra&3 != 0 || 128+in.extra > f.inodeSize {
			return nil, fmt.Errorf("%w: inode %d: extra size %d", ErrCorrupt, ino, in.extra)
		}
	}
	// A time's "extra" word, present when i_extra_isize covers it, holds
	// two more epoch bits and the nanoseconds.
	stamp := func(off, extraOff uint32) time.Time {
		sec := int64(int32(le.Uint32(raw[off:])))
		var nsec int64
		if extraOff+4 <= 128+in.extra {
			x := le.Uint32(raw[extraOff:])
			sec += int64(x&3) << 32
			nsec = int64(x >> 2)
			if nsec > 999999999 {
				nsec = 0 // e2fsck would clear it; a time is not worth an error
			}
		}
		return time.Unix(sec, nsec)
	}
	in.atime = stamp(0x8, 0x8C)
	in.ctime = stamp(0xC, 0x84)
	in.mtime = stamp(0x10, 0x88)
	if 0x94+4 <= 128+in.extra {
		in.crtime = stamp(0x90, 0x94)
		in.hasCrt = true
	}

	switch in.mode & sIFMT {
	case sIFREG, sIFDIR, sIFLNK, sIFCHR, sIFBLK, sIFIFO, sIFSOCK:
	default:
		return nil, fmt.Errorf("%w: inode %d: mode %#o is no file type (unused inode?)", ErrCorrupt, ino, in.mode)
	}
	if in.flags&flagInline != 0 {
		if f.incompat&incompatInlineData == 0 {
			return nil, fmt.Errorf("%w: inode %d: inline data without the inline_data feature", ErrCorrupt, ino)
		}
		if in.flags&flagExtents != 0 {
			return nil, fmt.Errorf("%w: inode %d: both inline data and extents", ErrCorrupt, ino)
		}
	}
	// Sizes: a directory lies inside the filesystem; a file's logical
	// blocks are 32-bit numbers; a symlink target is at most a block.
	maxSize := uint64(f.bs) << 32
	switch {
	case in.isDir():
		maxSize = uint64(f.size)
	case in.isSymlink():
		maxSize = uint64(f.bs)
	}
	if in.size > maxSize {
		return nil, fmt.Errorf("%w: inode %d: size %d exceeds %d", ErrCorrupt, ino, in.size, maxSize)
	}
	return in, nil
}

// fileMode converts i_mode to io/fs mode bits.
func fileMode(m uint16) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode | typeMode(m)
}

func typeMode(m uint16) fs.FileMode {
	switch m & sIFMT {
	case sIFDIR:
		return fs.ModeDir
	case sIFLNK:
		return fs.ModeSymlink
	case sIFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case sIFBLK:
		return fs.ModeDevice
	case sIFIFO:
		return fs.ModeNamedPipe
	case sIFSOCK:
		return fs.ModeSocket
	}
	return 0
}

// Stat is what FileInfo.Sys returns: the inode fields io/fs has no place
// for.
type Stat struct {
	Ino   uint32 // inode number
	Mode  uint16 // i_mode as on disk (type and permission bits)
	Uid   uint32
	Gid   uint32
	Nlink uint16
	Size  uint64
	Atime time.Time
	Ctime time.Time // inode change time
	Mtime time.Time
	// Crtime is the creation time, zero when the inode is too small to
	// record it (128-byte inodes).
	Crtime time.Time
	// Rdev is the device number of a character or block device inode,
	// in the kernel's new_encode_dev form (see Major, Minor); 0 otherwise.
	Rdev  uint32
	Flags uint32 // i_flags
}

// Major and Minor split Rdev.
func (s *Stat) Major() uint32 { return (s.Rdev & 0xfff00) >> 8 }

// Minor returns the minor device number.
func (s *Stat) Minor() uint32 { return (s.Rdev & 0xff) | ((s.Rdev >> 12) & 0xfff00) }

type fileInfo struct {
	name string
	in   *inode
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return int64(fi.in.size) }
func (fi *fileInfo) Mode() fs.FileMode  { return fileMode(fi.in.mode) }
func (fi *fileInfo) ModTime() time.Time { return fi.in.mtime }
func (fi *fileInfo) IsDir() bool        { return fi.in.isDir() }
func (fi *fileInfo) Sys() any {
	in := fi.in
	st := &Stat{Ino: in.ino, Mode: in.mode, Uid: in.uid, Gid: in.gid, Nlink: in.links,
		Size: in.size, Atime: in.atime, Ctime: in.ctime, Mtime: in.mtime, Flags: in.flags}
	if in.hasCrt {
		st.Crtime = in.crtime
	}
	if t := in.mode & sIFMT; t == sIFCHR || t == sIFBLK {
		le := binary.LittleEndian
		// Old encoding in i_block[0] (8-bit major and minor), the new one
		// in i_block[1], as the kernel's ext4_iget reads them.
		if old := le.Uint32(in.block[0:]); old != 0 {
			st.Rdev = (old>>8&0xff)<<8 | old&0xff
		} else {
			st.Rdev = le.Uint32(in.block[4:])
		}
	}
	return st
}

// inlineData returns the stored bytes of an inline-data inode: i_block
// followed by the value of the in-inode extended attribute system.data,
// cut to the inode's size. They may be fewer than the size (mke2fs -d
// makes such inodes for files that are all hole); the rest reads as
// zeros, as the kernel's ext4_readpage_inline zero-fills it.
func (f *FS) inlineData(in *inode) ([]byte, error) {
	size := in.size
	if size <= blockArrayLn {
		return append([]byte(nil), in.block[:size]...), nil
	}
	x, err := in.systemData()
	if err != nil {
		return nil, err
	}
	x = x[:min(uint64(len(x)), size-blockArrayLn)]
	out := make([]byte, 0, blockArrayLn+len(x))
	out = append(out, in.block[:]...)
	return append(out, x...), nil
}

// systemData finds the value of system.data among the extended attributes
// stored in the inode after i_extra_isize. It returns nil when the inode
// has none (inline data that fits i_block).
func (in *inode) systemData() ([]byte, error) {
	le := binary.LittleEndian
	start := 128 + int(in.extra)
	raw := in.raw
	if len(raw) <= 128 || start+4 > len(raw) || le.Uint32(raw[start:]) != 0xEA020000 {
		return nil, nil
	}
	base := start + 4 // value offsets count from the first entry
	for p := base; p+4 <= len(raw) && le.Uint32(raw[p:]) != 0; {
		if p+16 > len(raw) {
			return nil, fmt.Errorf("%w: inode %d: xattr entry past the inode", ErrCorrupt, in.ino)
		}
		nameLen := int(raw[p])
		index := raw[p+1]
		voff := int(le.Uint16(raw[p+2:]))
		vino := le.Uint32(raw[p+4:])
		vsize := int(le.Uint32(raw[p+8:]))
		if p+16+nameLen > len(raw) {
			return nil, fmt.Errorf("%w: inode %d: xattr name past the inode", ErrCorrupt, in.ino)
		}
		name := string(raw[p+16 : p+16+nameLen])
		if index == 7 && name == "data" { // 7: the "system." prefix
			if vino != 0 {
				return nil, fmt.Errorf("%w: inode %d: inline data kept in an EA inode", ErrUnsupported, in.ino)
			}
			if vsize < 0 || base+voff > len(raw) || vsize > len(raw)-base-voff {
				return nil, fmt.Errorf("%w: inode %d: system.data value (%d bytes at %d) past the inode", ErrCorrupt, in.ino, vsize, voff)
			}
			return raw[base+voff : base+voff+vsize], nil
		}
		p += (16 + nameLen + 3) &^ 3
	}
	return nil, nil
}
