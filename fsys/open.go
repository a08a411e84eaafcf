package fsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/blkcrypt/blkcrypt/fsys/ext4"
	"github.com/blkcrypt/blkcrypt/fsys/fat"
	"github.com/blkcrypt/blkcrypt/fsys/ntfs"
	"github.com/blkcrypt/blkcrypt/fsys/probe"
)

var (
	// ErrNoFilesystem is Open on a device that holds no filesystem: no
	// known signature, or a container (LUKS, BitLocker, FileVault 2, an
	// LVM2 PV) to be opened first.
	ErrNoFilesystem = errors.New("no filesystem")
	// ErrUnsupported is Open on a filesystem no subpackage reads (xfs,
	// btrfs, swap).
	ErrUnsupported = errors.New("filesystem not supported")
)

// FS is what Open returns: every reader here implements all of it.
type FS interface {
	fs.FS
	fs.ReadDirFS
	fs.StatFS
	fs.ReadFileFS
}

// Open reads the filesystem at offset 0 of the size-byte dev with the
// reader its signature asks for (probe.Identify): fsys/fat for vfat,
// fsys/ext4 for ext2, ext3 and ext4, fsys/ntfs for ntfs. info is what
// Identify found, also with an error.
func Open(dev io.ReaderAt, size int64) (fsys FS, info probe.Info, err error) {
	info, err = probe.Identify(dev, size)
	if errors.Is(err, probe.ErrUnknown) {
		return nil, info, fmt.Errorf("%w blkcrypt can read: no known signature", ErrNoFilesystem)
	}
	if err != nil {
		return nil, info, err
	}
	switch info.Type {
	case "vfat":
		fsys, err = fat.Open(dev, size)
	case "ext2", "ext3", "ext4":
		fsys, err = ext4.Open(dev, size)
	case "ntfs":
		fsys, err = ntfs.Open(dev, size)
	case "crypto_LUKS", "BitLocker", "LVM2_member":
		err = fmt.Errorf("%w: it holds %s (open the volume or logical volume inside to reach one)", ErrNoFilesystem, info.Type)
	default:
		err = fmt.Errorf("%w: %s (FAT, ext2/3/4 and NTFS are read)", ErrUnsupported, info.Type)
	}
	if err != nil {
		return nil, info, err
	}
	return fsys, info, nil
}

// Name turns a path as a user writes it ("/etc/fstab", "EFI/", "/") into
// an io/fs name ("etc/fstab", "EFI", ".").
func Name(p string) (string, error) {
	n := strings.TrimPrefix(path.Clean("/"+p), "/")
	if n == "" {
		n = "."
	}
	if !fs.ValidPath(n) {
		return "", fmt.Errorf("invalid path %q", p)
	}
	return n, nil
}

// copyBufferSize is the size of Copy's reads.
//
// Large reads matter: each read of a file becomes reads of its extents
// through the layers below (an LV, a volume that decrypts a request
// across the cores), and io.Copy would let the writer's ReadFrom pick
// 8–32 KiB. Larger than 1 MiB is slower, not faster: the buffer is
// written by the device read and then decrypted in place, and a 1 MiB
// buffer used over and over stays in the cores' caches, while a 4 MiB one
// is written to cold memory on every read (with 4 MiB, cat through
// LUKS2+LVM cost clearly more CPU than read, which copies 1 MiB at a
// time: BenchmarkCatThroughStack in internal/cli). 1 MiB is also the largest
// request a Volume decrypts in one go, so the layers below gain nothing
// from more.
const copyBufferSize = 1 << 20

// copyBuffers holds Copy's buffers, so that copying a tree of small files
// does not allocate a buffer per file.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// Copy copies r to w in reads of 1 MiB (copyBufferSize), checking ctx
// before each. The buffer is cleared before Copy returns: it held the
// file's (decrypted) bytes.
func Copy(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	cr := &ctxReader{ctx: ctx, r: r}
	defer func() {
		clear((*bp)[:cr.most])
		copyBuffers.Put(bp)
	}()
	return io.CopyBuffer(struct{ io.Writer }{w}, cr, *bp)
}

// ctxReader is r that checks ctx before each read and keeps the largest
// count one read returned (the part of the buffer to clear).
type ctxReader struct {
	ctx  context.Context
	r    io.Reader
	most int
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(b)
	c.most = max(c.most, min(n, len(b)))
	return n, err
}

// CopyOut copies name of fsys (a file, a symbolic link, or a directory
// with everything in it) to dest on the local filesystem, as cp -a would
// without owners: files keep their permission bits and modification
// times, directories theirs after their contents are written, symbolic
// links their target. When dest is an existing directory the copy is
// made in it under name's base name; an existing file dest is replaced.
// The copy is made under a temporary name in dest's directory and
// renamed into place at the end, so a failed or cancelled copy leaves
// nothing behind. Devices, FIFOs and sockets are refused.
func CopyOut(ctx context.Context, fsys fs.FS, name, dest string) error {
	if st, err := os.Stat(dest); err == nil && st.IsDir() {
		base := path.Base(name)
		if base == "." {
			return fmt.Errorf("%s exists: copy the root directory to a new name", dest)
		}
		dest = filepath.Join(dest, base)
	}
	if _, err := os.Lstat(dest); err == nil {
		if st, _ := os.Stat(dest); st == nil || st.IsDir() {
			return fmt.Errorf("%s exists and is a directory", dest)
		}
	}
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".blkcrypt-cp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	staged := filepath.Join(tmp, "x")
	if err := copyOut(ctx, fsys, name, st, staged); err != nil {
		return err
	}
	return os.Rename(staged, dest)
}

// copyOut copies name (described by st) to dst.
func copyOut(ctx context.Context, fsys fs.FS, name string, st fs.FileInfo, dst string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mode := st.Mode()
	switch {
	case mode.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		ents, err := fs.ReadDir(fsys, name)
		if err != nil {
			return err
		}
		for _, e := range ents {
			est, err := e.Info()
			if err != nil {
				return err
			}
			if err := copyOut(ctx, fsys, path.Join(name, e.Name()), est, filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	case mode&fs.ModeSymlink != 0:
		target, err := fs.ReadLink(fsys, name)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst) // a symlink's own times are not kept
	case mode.IsRegular():
		in, err := fsys.Open(name)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := Copy(ctx, out, in); err != nil {
			out.Close()
			return fmt.Errorf("copying %s: %w", name, err)
		}
		if err := out.Close(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s is a %v, not a file, directory or symbolic link", name, mode.Type())
	}
	if err := os.Chmod(dst, mode.Perm()); err != nil {
		return err
	}
	return os.Chtimes(dst, time.Time{}, st.ModTime())
}
