package ext4

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// Sentinel errors. Every error of this package wraps one of them (or an
// io/fs error such as fs.ErrNotExist), and each matches the shared error
// of the same meaning (volspec.ErrNoHeader, ErrCorrupt, ErrUnsupported)
// under errors.Is.
var (
	// ErrNotExt4 means there is no ext2/3/4 superblock (magic 0xEF53 at
	// byte 1080) on the device.
	ErrNotExt4 = volspec.Sub("not an ext2/ext3/ext4 filesystem", volspec.ErrNoHeader)
	// ErrCorrupt means on-disk metadata that is inconsistent or points
	// outside the filesystem: a bad checksum, a number out of range, an
	// extent tree too deep or looping, a directory entry that overruns its
	// block, a directory whose ".." does not name the directory it was
	// reached from.
	ErrCorrupt = volspec.Sub("corrupt ext4 filesystem", volspec.ErrCorrupt)
	// ErrUnsupported means a valid filesystem or inode using a feature this
	// reader does not implement (compression, dirdata, an external journal
	// device, fscrypt-encrypted inodes).
	ErrUnsupported = volspec.Sub("unsupported ext4 feature", volspec.ErrUnsupported)
)

// Feature bits, from the kernel's Documentation/filesystems/ext4 and
// e2fsprogs' ext2_fs.h.
const (
	compatSparseSuper2 = 0x200

	incompatCompression = 0x1
	incompatFiletype    = 0x2
	incompatRecover     = 0x4
	incompatJournalDev  = 0x8
	incompatMetaBG      = 0x10
	incompatExtents     = 0x40
	incompat64bit       = 0x80
	incompatMMP         = 0x100
	incompatFlexBG      = 0x200
	incompatEAInode     = 0x400
	incompatDirdata     = 0x1000
	incompatCsumSeed    = 0x2000
	incompatLargedir    = 0x4000
	incompatInlineData  = 0x8000
	incompatEncrypt     = 0x10000
	incompatCasefold    = 0x20000

	rocompatSparseSuper  = 0x1
	rocompatBigalloc     = 0x200
	rocompatMetadataCsum = 0x400
)

// incompatNames names every INCOMPAT bit for messages; knownIncompat are
// the ones this reader handles (see doc.go for what each means here).
var incompatNames = map[uint32]string{
	incompatCompression: "compression", incompatFiletype: "filetype",
	incompatRecover: "needs_recovery", incompatJournalDev: "journal_dev",
	incompatMetaBG: "meta_bg", incompatExtents: "extent", incompat64bit: "64bit",
	incompatMMP: "mmp", incompatFlexBG: "flex_bg", incompatEAInode: "ea_inode",
	incompatDirdata: "dirdata", incompatCsumSeed: "metadata_csum_seed",
	incompatLargedir: "large_dir", incompatInlineData: "inline_data",
	incompatEncrypt: "encrypt", incompatCasefold: "casefold",
}

const knownIncompat = incompatFiletype | incompatRecover | incompatMetaBG |
	incompatExtents | incompat64bit | incompatMMP | incompatFlexBG |
	incompatEAInode | incompatCsumSeed | incompatLargedir | incompatInlineData |
	incompatEncrypt | incompatCasefold

const (
	superOffset = 1024
	superSize   = 1024
	superMagic  = 0xEF53
	rootIno     = 2
	// maxLogBlock limits the block size to 64 KiB, the largest the kernel
	// and e2fsprogs create.
	maxLogBlock = 6
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32cRaw is the kernel's crc32c_le(seed, p): Castagnoli without the
// final inversion that hash/crc32 applies.
func crc32cRaw(seed uint32, p []byte) uint32 {
	return ^crc32.Update(^seed, castagnoli, p)
}

// FS is a read-only ext2, ext3 or ext4 filesystem on an io.ReaderAt. It is
// safe for concurrent use; open files are not (as with os.File, one reader
// at a time), except that ReadAt may be called concurrently.
type FS struct {
	dev  io.ReaderAt
	size int64 // bytes of the filesystem: blocks × block size

	bs             int64
	blocks         uint64
	inodesCount    uint32
	inodesPerGroup uint32
	blocksPerGroup uint32
	firstDataBlock uint32
	inodeSize      uint32
	descSize       uint32
	groups         uint64
	firstMetaBG    uint32
	backupBGs      [2]uint32
	compat         uint32
	incompat       uint32
	rocompat       uint32
	label          string
	uuid           [16]byte

	mu     sync.Mutex
	itable map[uint32]uint64 // group → first block of its inode table
	dirs   []*dirIdx         // recently used directory indexes, newest first
}

// Open reads the superblock of the filesystem on dev, whose size is size
// bytes, and checks that this reader can use it. Nothing is written.
func Open(dev io.ReaderAt, size int64) (*FS, error) {
	if size < superOffset+superSize {
		return nil, fmt.Errorf("%w: device of %d bytes is too small", ErrNotExt4, size)
	}
	sb := make([]byte, superSize)
	if _, err := dev.ReadAt(sb, superOffset); err != nil {
		return nil, fmt.Errorf("ext4: reading the superblock: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != superMagic {
		return nil, ErrNotExt4
	}
	f := &FS{dev: dev, itable: make(map[uint32]uint64)}
	f.compat = le.Uint32(sb[0x5C:])
	f.incompat = le.Uint32(sb[0x60:])
	f.rocompat = le.Uint32(sb[0x64:])
	if f.rocompat&rocompatMetadataCsum != 0 {
		if t := sb[0x175]; t != 1 {
			return nil, fmt.Errorf("%w: superblock checksum type %d (only 1, crc32c, exists)", ErrCorrupt, t)
		}
		want := le.Uint32(sb[0x3FC:])
		if got := crc32cRaw(0xFFFFFFFF, sb[:0x3FC]); got != want {
			return nil, fmt.Errorf("%w: superblock checksum %#08x, computed %#08x", ErrCorrupt, want, got)
		}
	}
	if bad := f.incompat &^ knownIncompat; bad != 0 {
		var names []string
		for bit := uint32(1); bit != 0; bit <<= 1 {
			if bad&bit != 0 {
				if n, ok := incompatNames[bit]; ok {
					names = append(names, n)
				} else {
					names = append(names, fmt.Sprintf("unknown incompat %#x", bit))
				}
			}
		}
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, strings.Join(names, ", "))
	}

	logBS := le.Uint32(sb[0x18:])
	if logBS > maxLogBlock {
		return nil, fmt.Errorf("%w: block size 2^(10+%d)", ErrCorrupt, logBS)
	}
	f.bs = 1024 << logBS
	// With bigalloc a group spans clusters_per_group clusters of
	// 2^(log_cluster − log_block) blocks, so it may hold more blocks than
	// one bitmap block has bits.
	clusterRatio := int64(1)
	if f.rocompat&rocompatBigalloc != 0 {
		logCluster := le.Uint32(sb[0x1C:])
		if logCluster < logBS || logCluster-logBS > 16 {
			return nil, fmt.Errorf("%w: cluster size 2^(10+%d) with block size 2^(10+%d)", ErrCorrupt, logCluster, logBS)
		}
		clusterRatio = 1 << (logCluster - logBS)
	}
	f.blocks = uint64(le.Uint32(sb[0x4:]))
	if f.incompat&incompat64bit != 0 {
		f.blocks |= uint64(le.Uint32(sb[0x150:])) << 32
	}
	f.inodesCount = le.Uint32(sb[0x0:])
	f.firstDataBlock = le.Uint32(sb[0x14:])
	f.blocksPerGroup = le.Uint32(sb[0x20:])
	f.inodesPerGroup = le.Uint32(sb[0x28:])
	rev := le.Uint32(sb[0x4C:])
	f.inodeSize = 128
	if rev >= 1 {
		f.inodeSize = uint32(le.Uint16(sb[0x58:]))
	}
	f.descSize = 32
	if f.incompat&incompat64bit != 0 {
		f.descSize = uint32(le.Uint16(sb[0xFE:]))
		if f.descSize < 64 || f.descSize > 1024 || f.descSize&(f.descSize-1) != 0 {
			return nil, fmt.Errorf("%w: group descriptor size %d", ErrCorrupt, f.descSize)
		}
	}
	f.firstMetaBG = le.Uint32(sb[0x104:])
	f.backupBGs = [2]uint32{le.Uint32(sb[0x24C:]), le.Uint32(sb[0x250:])}
	copy(f.uuid[:], sb[0x68:0x78])
	f.label = cString(sb[0x78:0x88])

	// Geometry, checked before any of it is used to compute an offset.
	switch {
	case f.blocks == 0 || f.blocks > uint64(size)/uint64(f.bs):
		return nil, fmt.Errorf("%w: %d blocks of %d bytes do not fit the %d-byte device", ErrCorrupt, f.blocks, f.bs, size)
	case uint64(f.firstDataBlock) >= f.blocks || f.firstDataBlock > 1:
		return nil, fmt.Errorf("%w: first data block %d", ErrCorrupt, f.firstDataBlock)
	case f.blocksPerGroup == 0 || int64(f.blocksPerGroup) > 8*f.bs*clusterRatio:
		return nil, fmt.Errorf("%w: %d blocks per group with %d-byte blocks", ErrCorrupt, f.blocksPerGroup, f.bs)
	case f.inodesPerGroup == 0 || int64(f.inodesPerGroup) > 8*f.bs:
		return nil, fmt.Errorf("%w: %d inodes per group with %d-byte blocks", ErrCorrupt, f.inodesPerGroup, f.bs)
	case f.inodeSize < 128 || int64(f.inodeSize) > f.bs || f.inodeSize&(f.inodeSize-1) != 0:
		return nil, fmt.Errorf("%w: inode size %d", ErrCorrupt, f.inodeSize)
	case f.descSize > uint32(f.bs):
		return nil, fmt.Errorf("%w: group descriptor size %d exceeds the %d-byte block", ErrCorrupt, f.descSize, f.bs)
	}
	f.size = int64(f.blocks) * f.bs
	f.groups = (f.blocks - uint64(f.firstDataBlock) + uint64(f.blocksPerGroup) - 1) / uint64(f.blocksPerGroup)
	if f.inodesCount < rootIno || uint64(f.inodesCount) > f.groups*uint64(f.inodesPerGroup) {
		return nil, fmt.Errorf("%w: %d inodes in %d groups of %d", ErrCorrupt, f.inodesCount, f.groups, f.inodesPerGroup)
	}
	// The root must be a directory; checking it here turns a damaged
	// inode table into an error from Open rather than from the first use.
	root, err := f.inode(rootIno)
	if err != nil {
		return nil, err
	}
	if !root.isDir() {
		return nil, fmt.Errorf("%w: root inode is not a directory (mode %#o)", ErrCorrupt, root.mode)
	}
	return f, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// BlockSize returns the filesystem block size in bytes.
func (f *FS) BlockSize() int { return int(f.bs) }

// Size returns the size of the filesystem in bytes (blocks × block size).
func (f *FS) Size() int64 { return f.size }

// Label returns the volume label (s_volume_name).
func (f *FS) Label() string { return f.label }

// UUID returns the filesystem UUID (s_uuid).
func (f *FS) UUID() [16]byte { return f.uuid }

// NeedsRecovery reports the needs_recovery feature: the journal holds
// transactions the kernel would replay at mount. This reader does not
// replay the journal, so it sees the filesystem as of the last checkpoint.
func (f *FS) NeedsRecovery() bool { return f.incompat&incompatRecover != 0 }

// readAt reads exactly len(p) bytes at off, which must lie inside the
// filesystem: a short read is corruption (a block number past the end),
// not EOF.
func (f *FS) readAt(p []byte, off int64) error {
	if off < 0 || off > f.size || int64(len(p)) > f.size-off {
		return fmt.Errorf("%w: read of %d bytes at %d outside the %d-byte filesystem", ErrCorrupt, len(p), off, f.size)
	}
	n, err := f.dev.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("ext4: reading %d bytes at %d: %w", len(p), off, err)
}

// readBlock reads one filesystem block.
func (f *FS) readBlock(blk uint64) ([]byte, error) {
	if blk >= f.blocks {
		return nil, fmt.Errorf("%w: block %d past the last block %d", ErrCorrupt, blk, f.blocks-1)
	}
	b := make([]byte, f.bs)
	if err := f.readAt(b, int64(blk)*f.bs); err != nil {
		return nil, err
	}
	return b, nil
}

// hasSuper reports whether group g holds a superblock backup (and so the
// group descriptors after it), as ext2fs_bg_has_super decides.
func (f *FS) hasSuper(g uint64) bool {
	if g == 0 {
		return true
	}
	if f.compat&compatSparseSuper2 != 0 {
		return g == uint64(f.backupBGs[0]) || g == uint64(f.backupBGs[1])
	}
	if g <= 1 || f.rocompat&rocompatSparseSuper == 0 {
		return true
	}
	if g&1 == 0 {
		return false
	}
	for _, base := range []uint64{3, 5, 7} {
		p := base
		for p < g {
			p *= base
		}
		if p == g {
			return true
		}
	}
	return false
}

// descriptorBlock returns the block holding descriptor block number i
// (descriptors of groups i×perBlock …): right after the superblock, or
// with meta_bg, at the start of the first group of meta group i.
func (f *FS) descriptorBlock(i uint64) uint64 {
	start := uint64(f.firstDataBlock)
	if start == 0 && f.bs == 1024 {
		start = 1 // 1 KiB blocks with bigalloc: the superblock is block 1
	}
	if f.incompat&incompatMetaBG == 0 || i < uint64(f.firstMetaBG) {
		return start + 1 + i
	}
	g := i * uint64(f.bs) / uint64(f.descSize)
	blk := uint64(f.firstDataBlock) + g*uint64(f.blocksPerGroup)
	if f.hasSuper(g) {
		blk++
	}
	return blk
}

// inodeTable returns the first block of group g's inode table, checked to
// leave room for the whole table inside the filesystem.
func (f *FS) inodeTable(g uint32) (uint64, error) {
	f.mu.Lock()
	t, ok := f.itable[g]
	f.mu.Unlock()
	if ok {
		return t, nil
	}
	perBlock := uint64(f.bs) / uint64(f.descSize)
	blk := f.descriptorBlock(uint64(g) / perBlock)
	if blk >= f.blocks {
		return 0, fmt.Errorf("%w: descriptor block %d of group %d past the end", ErrCorrupt, blk, g)
	}
	d := make([]byte, f.descSize)
	off := int64(blk)*f.bs + int64(uint64(g)%perBlock)*int64(f.descSize)
	if err := f.readAt(d, off); err != nil {
		return 0, err
	}
	t = uint64(binary.LittleEndian.Uint32(d[0x8:]))
	if f.descSize >= 64 {
		t |= uint64(binary.LittleEndian.Uint32(d[0x28:])) << 32
	}
	tableBlocks := (uint64(f.inodesPerGroup)*uint64(f.inodeSize) + uint64(f.bs) - 1) / uint64(f.bs)
	if t == 0 || t >= f.blocks || tableBlocks > f.blocks-t {
		return 0, fmt.Errorf("%w: group %d inode table at block %d", ErrCorrupt, g, t)
	}
	f.mu.Lock()
	// Bounded by the number of groups, itself bounded by the device size.
	f.itable[g] = t
	f.mu.Unlock()
	return t, nil
}
