//go:build linux || darwin

package mount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/lvm"
	"github.com/blkcrypt/blkcrypt/partition"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Supported reports whether Start works on this system.
const Supported = true

// A Mount is a mounted file system with one file, the device.
type Mount struct {
	dir, file string
	srv       *fuse.Server
	unmount   func() error
	done      chan struct{}
}

// Start mounts dir (see CheckDir) with one file, dev, and serves it until
// it is unmounted: by Unmount, or from outside (fusermount3 -u DIR).
func Start(dir string, dev Device, o Options) (*Mount, error) {
	if dev == nil {
		return nil, errors.New("mount: a nil device")
	}
	abs, err := CheckDir(dir)
	if err != nil {
		return nil, err
	}
	node := newNode(dev, o)
	root := &fs.Inode{}
	ttl := time.Second
	source := o.Source
	if source == "" {
		source = "blkcrypt"
	}
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: source,
			Name:   "blkcrypt",
			// A Volume encrypts up to 1 MiB per call; the kernel caps
			// requests at its max_pages (1 MiB on Linux 4.20+).
			MaxWrite:      1 << 20,
			DisableXAttrs: true,
		},
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &ttl,
		UID:             node.uid,
		GID:             node.gid,
		OnAdd: func(ctx context.Context) {
			ch := root.NewPersistentInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
			root.AddChild(o.fileName(), ch, false)
		},
	}
	if o.ReadOnly {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "ro")
	}
	srv, unmount, err := mountFS(abs, root, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot mount %s: %w", abs, err)
	}
	m := &Mount{dir: abs, file: filepath.Join(abs, o.fileName()), srv: srv, unmount: unmount, done: make(chan struct{})}
	go func() { srv.Wait(); close(m.done) }()
	return m, nil
}

// Path is the file that shows the device.
func (m *Mount) Path() string { return m.file }

// Done is closed when the mount has ended and every FUSE request was
// answered.
func (m *Mount) Done() <-chan struct{} { return m.done }

// Wait waits for Done.
func (m *Mount) Wait() { <-m.done }

// Unmount ends the mount. A file still open keeps it busy: then the
// mount is detached (a lazy unmount on Linux: no new open can start, and
// the open ones are answered until closed, so that their writes do not
// fail half way; a forced one on macOS) and detached is true. Wait for
// Done before closing the device either way.
func (m *Mount) Unmount() (detached bool, err error) {
	// A few tries over about 300 ms: the kernel sends the release of a
	// file just closed asynchronously, so an idle mount can look busy.
	delay := 5 * time.Millisecond
	for range 5 {
		if err = m.unmount(); err == nil {
			return false, nil
		}
		time.Sleep(delay)
		delay *= 2
	}
	if err := detachMount(m.dir); err != nil {
		return false, fmt.Errorf("%s is busy and cannot be detached: %w", m.dir, err)
	}
	return true, nil
}

// node is the one file.
type node struct {
	fs.Inode
	dev      Device
	readOnly bool
	bs       uint32
	mtime    atomic.Int64 // unix nanoseconds of the last write, for the kernel's cache checks
	uid, gid uint32
	created  time.Time

	errMu sync.Mutex
	errs  int
	logf  func(format string, args ...any)
}

var (
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
)

func newNode(dev Device, o Options) *node {
	n := &node{dev: dev, readOnly: o.ReadOnly, logf: o.Logf, created: time.Now(), bs: 4096,
		uid: uint32(os.Getuid()), gid: uint32(os.Getgid())}
	if b, ok := dev.(interface{ BlockSize() int }); ok && b.BlockSize() > 4096 {
		n.bs = uint32(b.BlockSize())
	}
	n.mtime.Store(n.created.UnixNano())
	return n
}

func (n *node) attr(a *fuse.Attr) {
	// Decrypted data: only the user who mounted it, as for the key.
	a.Mode = syscall.S_IFREG | 0o600
	if n.readOnly {
		a.Mode = syscall.S_IFREG | 0o400
	}
	a.Size = uint64(n.dev.Size())
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = n.bs
	a.Nlink = 1
	a.Owner = fuse.Owner{Uid: n.uid, Gid: n.gid}
	mt := time.Unix(0, n.mtime.Load())
	a.SetTimes(&n.created, &mt, &mt)
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.attr(&out.Attr)
	return 0
}

// Setattr accepts what a block device accepts: a truncation to 0 (an
// open with O_TRUNC) or to the size is a no-op; times are ours to keep;
// mode and owner cannot change.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if n.readOnly {
			return syscall.EROFS
		}
		if sz != 0 && sz != uint64(n.dev.Size()) {
			return syscall.EINVAL
		}
	}
	if _, ok := in.GetMode(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetUID(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetGID(); ok {
		return syscall.EPERM
	}
	n.attr(&out.Attr)
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.readOnly && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	return &handle{n: n}, 0, 0
}

// errno turns a device error into what read(2)/write(2) return, and logs
// the first few.
func (n *node) errno(op string, err error) syscall.Errno {
	if errors.Is(err, volspec.ErrReadOnly) || errors.Is(err, partition.ErrReadOnly) || errors.Is(err, lvm.ErrReadOnly) {
		return syscall.EROFS
	}
	n.errMu.Lock()
	n.errs++
	if n.errs <= 10 && n.logf != nil {
		n.logf("%s: %v", op, err)
		if n.errs == 10 {
			n.logf("further I/O errors are not shown")
		}
	}
	n.errMu.Unlock()
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// handle is one open of the file. dirty says a write went through it
// since the last flush, so that closing a reader costs no sync.
type handle struct {
	n     *node
	dirty atomic.Bool
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	size := h.n.dev.Size()
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	if int64(len(dest)) > size-off {
		dest = dest[:size-off]
	}
	k, err := h.n.dev.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, h.n.errno("read", err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// Write stores at most up to the end of the device: a write that starts
// at the end gets ENOSPC and one that crosses it is short.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n := h.n
	if n.readOnly {
		return 0, syscall.EROFS
	}
	size := n.dev.Size()
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if off >= size {
		if len(data) == 0 {
			return 0, 0
		}
		return 0, syscall.ENOSPC
	}
	if int64(len(data)) > size-off {
		data = data[:size-off]
	}
	// Marked before the write, so a flush racing with it is not skipped.
	h.dirty.Store(true)
	k, err := n.dev.WriteAt(data, off)
	n.mtime.Store(time.Now().UnixNano())
	if err != nil {
		return uint32(k), n.errno("write", err)
	}
	return uint32(k), 0
}

// Fsync makes every write that returned so far durable.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.dirty.Store(false)
	if err := h.n.dev.Flush(); err != nil {
		h.dirty.Store(true)
		return h.n.errno("fsync", err)
	}
	return 0
}

// Flush runs on every close(2): after a write through this handle, close
// returns only when the data is durable, and reports it if not.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if !h.dirty.Swap(false) {
		return 0
	}
	if err := h.n.dev.Flush(); err != nil {
		h.dirty.Store(true)
		return h.n.errno("flush", err)
	}
	return 0
}

// Release is the last close of the handle. Writes from mmap can reach us
// after the close's Flush, so flush again if there were any.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	return h.Flush(ctx)
}
