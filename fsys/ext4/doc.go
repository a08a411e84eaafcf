// Package ext4 reads ext2, ext3 and ext4 filesystems from an io.ReaderAt,
// in userspace, without root and without writing anything.
//
// Open(dev, size) checks the superblock and returns an *FS, which
// implements fs.FS, fs.ReadDirFS, fs.ReadFileFS, fs.StatFS and
// fs.ReadLinkFS (ReadLink and Lstat). A disk image, a partition, a
// logical volume or an unlocked LUKS device can be the io.ReaderAt; the
// package reads only what a request needs.
//
// # What is read
//
//   - Superblock at byte 1024 (magic 0xEF53), 1 to 64 KiB blocks, 32- and
//     64-byte group descriptors (64bit), meta_bg descriptor placement,
//     sparse_super and sparse_super2 backups, any inode size.
//   - With metadata_csum the superblock checksum (crc32c) is verified and
//     a mismatch is ErrCorrupt. Other metadata checksums (group
//     descriptors, inodes, extent and directory blocks) are not verified:
//     the structural checks below keep damaged metadata from doing harm.
//   - File data through extent trees (any depth up to the kernel's 5;
//     uninitialized extents and holes read as zeros), through ext2/ext3
//     block maps (direct, single, double and triple indirect; holes read as
//     zeros), or inline (inline_data: i_block, then the system.data
//     extended attribute in the inode).
//   - Directories, linear or htree: every block is read in order; htree
//     index blocks look like empty entries to that walk, so the result is
//     the same. Inline directories too. "." and ".." are never listed;
//     ReadDir returns entries sorted by name.
//   - Symbolic links: fast (in i_block, under 60 bytes), slow (in a block)
//     and inline.
//   - fs.FileInfo: permission, setuid, setgid and sticky bits, the file
//     type (directory, symlink, character and block device, FIFO, socket),
//     size, mtime with the nanoseconds and epoch bits of large inodes. Sys
//     returns a *Stat: inode number, raw mode, uid, gid (32-bit), link
//     count, atime, ctime, mtime, crtime, device number, flags.
//
// Files opened with Open implement io.ReaderAt, io.Seeker and io.WriterTo.
// A read maps a run of logical blocks to one contiguous stretch of the
// device and reads it with a single ReadAt of up to 4 MiB, so streaming a
// large file (io.Copy uses WriterTo) costs about one device read per 4 MiB
// rather than one per block. Reads smaller than a block go through a
// one-block cache per open file.
//
// # Paths and symbolic links
//
// Names follow io/fs: fs.ValidPath, slash-separated, relative to the
// filesystem root, else fs.ErrInvalid. Open, Stat, ReadDir and ReadFile
// follow symbolic links, in the middle of a path and at its end, as
// os.DirFS does; Lstat and ReadLink do not follow the last element. A
// target resolves inside this filesystem only: an absolute target starts
// at its root, and ".." stops at the root (as in a chroot). More than 40
// links in one lookup is an error ("too many levels of symbolic links"). A
// dangling link gives fs.ErrNotExist. Lookups compare names byte for byte,
// also in casefold directories.
//
// # Features
//
// Accepted INCOMPAT features: filetype, extent, 64bit, meta_bg, flex_bg,
// mmp, metadata_csum_seed, large_dir, inline_data, ea_inode, casefold (names
// listed as stored; lookups are exact), encrypt (the filesystem opens;
// reading an encrypted inode, directory or link is ErrUnsupported), and
// needs_recovery: the journal is not replayed, so a filesystem that was not
// cleanly unmounted is seen as of its last checkpoint (FS.NeedsRecovery
// reports it). Refused with ErrUnsupported, naming the feature: compression,
// dirdata, journal_dev (an external journal, not a filesystem), and any bit
// this package does not know. RO_COMPAT features do not change what a
// reader sees and are all accepted (bigalloc included: extents still count
// blocks).
//
// # Damaged and hostile images
//
// Every on-disk number is checked before it is used: block numbers against
// the filesystem size (itself checked against the device size), inode
// numbers against the inode count, entry lengths against their block,
// extent entries against their node, sizes against what the inode type
// allows. Extent trees deeper than 5 or whose child is not exactly one
// level below its parent (which is how a loop shows) are ErrCorrupt. A
// directory must name, in its "..", the directory it was reached from;
// otherwise it is ErrCorrupt, so a directory linked into its own subtree
// (or twice) gives an error instead of an endless fs.WalkDir. Errors are
// one line, wrap ErrCorrupt, ErrUnsupported or ErrNotExt4 (and, through
// internal/volspec, the module's shared errors of the same meaning), and
// are returned inside *fs.PathError where a path is involved. Nothing
// panics on bad input, every loop is bounded by the image, and memory is
// bounded by the request: one block or one 4 MiB buffer for reads (a
// file's recorded size is never used to size a buffer except by
// ReadFile, which grows its result as data is read), one directory's
// entries for ReadDir, a leaf of extents or four indirect blocks per open
// file, and name indexes of the 8 directories most recently looked up
// (so opening every file of a large directory scans it once).
//
// An *FS is safe for concurrent use. An open file's Read and Seek are not
// (as with os.File); its ReadAt is.
package ext4
