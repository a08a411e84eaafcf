// Package fsys is the parent of the filesystem readers: each subpackage
// reads one kind of filesystem from an image or device, read-only, in
// userspace, as an io/fs.FS over an io.ReaderAt (a file, a partition of
// a disk image, or an unlocked LUKS volume), so that io/fs's helpers
// (fs.WalkDir, fs.ReadFile, fs.Sub, http.FS, …) work on it unchanged.
//
//   - fsys/ext4: ext2, ext3 and ext4.
//   - fsys/fat: FAT12, FAT16 and FAT32 with VFAT long names.
//   - fsys/ntfs: NTFS (resident, non-resident and sparse data;
//     compressed and encrypted files are refused).
//   - fsys/probe: what a device holds, by blkid's TYPE names (crypto_LUKS,
//     BitLocker, LVM2_member, vfat, ext4, ntfs, xfs, btrfs, swap, …) with
//     its UUID, label and version.
//
// This package itself picks the reader by what a device holds (Open:
// fsys/probe's identification, then fsys/fat, fsys/ext4 or fsys/ntfs) and
// copies out of any of them keeping modes and times (CopyOut, Copy), so
// that a program gets from a device (a partition, a Volume, an LV: see
// blkcrypt.OpenStack) to a file in one call each.
//
// The shared convention: Open(dev io.ReaderAt, size int64) reads the
// filesystem of size bytes at offset 0 of dev (an io.SectionReader
// places it elsewhere); the result implements fs.FS, fs.ReadDirFS,
// fs.StatFS and fs.ReadFileFS, and opened files are also io.ReaderAt and
// io.Seeker. Nothing is written. The image is not trusted: a damaged or
// hostile one yields a one-line error wrapping the package's ErrCorrupt,
// never a panic, a hang or memory beyond what the image's own size
// justifies.
package fsys
