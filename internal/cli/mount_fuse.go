//go:build linux || darwin

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// runMount unlocks DEVICE as `read` does (same flags, same openVolume) and
// serves the decrypted volume as DIR/volume until it is unmounted from
// outside (fusermount -u) or the command gets SIGINT, SIGTERM or SIGHUP. The Volume is
// flushed and closed only after the last FUSE request is answered.
func runMount(ctx context.Context, env *Env, p *parsed) error {
	dev, dir, err := mountArgs(p)
	if err != nil {
		return err
	}
	hardenProcess()
	readOnly := p.bool("read-only")
	v, err := openVolume(ctx, env, p, dev, readOnly)
	if err != nil {
		return err
	}
	// A format that opens read-only on its own (TrueCrypt without
	// --tcrypt-read-write, BitLocker, FileVault 2) mounts read-only too.
	readOnly = readOnly || v.ReadOnly()
	// A mount outlives the terminal it was started from only by intent;
	// closing that terminal (SIGHUP) should unmount cleanly rather than kill
	// the process and leave a dead mount point behind. Caught before the
	// mount exists, so there is no moment when SIGHUP would kill it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	node := newVolumeNode(v, readOnly, env)
	srv, unmount, err := mountVolume(dev, dir, node)
	if err != nil {
		v.Close()
		return err
	}
	fmt.Fprintln(env.Stderr, mountMessage(dev, dir, v.Size(), readOnly))

	served := make(chan struct{})
	go func() { srv.Wait(); close(served) }()
	select {
	case <-served: // unmounted from outside
	case <-ctx.Done():
		stopMount(env, dir, unmount)
		<-served
	case <-hup:
		stopMount(env, dir, unmount)
		<-served
	}
	return v.Close()
}

// stopMount unmounts dir, or detaches it when a file is still open.
func stopMount(env *Env, dir string, unmount func() error) {
	if err := unmountRetrying(unmount); err == nil {
		return
	}
	// An open file keeps the mount busy. Detach it so no new open can
	// start, and keep answering the open ones: ending now would fail their
	// writes half way.
	if err := detachMount(dir); err != nil {
		fmt.Fprintf(env.Stderr, "blkcrypt: %s is busy and cannot be detached (%s); serving until it is unmounted\n", dir, oneLine(err.Error()))
		return
	}
	fmt.Fprintf(env.Stderr, "blkcrypt: %s is busy; detached it, waiting for open files to be closed\n", dir)
}

// unmountRetrying tries a few times over about 300 ms: the kernel sends
// the release of a file just closed asynchronously, so a mount that is
// idle can look busy for a moment.
func unmountRetrying(unmount func() error) error {
	var err error
	delay := 5 * time.Millisecond
	for try := 0; try < 5; try++ {
		if err = unmount(); err == nil {
			return nil
		}
		time.Sleep(delay)
		delay *= 2
	}
	return err
}

// mountVolume mounts the file system with one file, node, in dir. unmount
// ends the mount if no file is open, and fails otherwise.
func mountVolume(dev, dir string, node *volumeNode) (srv *fuse.Server, unmount func() error, err error) {
	root := &fs.Inode{}
	ttl := time.Second
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: fsName(dev),
			Name:   "blkcrypt",
			// The Volume encrypts up to 1 MiB per call; the kernel caps
			// requests at its max_pages (1 MiB on Linux 4.20+).
			MaxWrite:      1 << 20,
			DisableXAttrs: true,
		},
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &ttl,
		UID:             uint32(os.Getuid()),
		GID:             uint32(os.Getgid()),
		OnAdd: func(ctx context.Context) {
			ch := root.NewPersistentInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
			root.AddChild(mountFileName, ch, false)
		},
	}
	if node.readOnly {
		// The kernel then refuses writes itself (EROFS), mmap included.
		opts.MountOptions.Options = append(opts.MountOptions.Options, "ro")
	}
	srv, unmount, err = mountFS(dir, root, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot mount %s: %w", dir, err)
	}
	return srv, unmount, nil
}

// fsName is the source column of /proc/mounts: the device's base name
// (full paths with spaces make mount tables hard to read).
func fsName(dev string) string {
	return "blkcrypt:" + filepath.Base(dev)
}

// volumeNode is the one file. The kernel may cache its pages for reads
// but holds no write back: without the writeback cache (go-fuse does not
// ask for it) FUSE files are write-through, so every write(2) has reached
// Volume.WriteAt, and so the image's file, when it returns. fsync, and
// close after a write, flush the Volume.
type volumeNode struct {
	fs.Inode
	v        *blkcrypt.Volume
	readOnly bool
	mtime    atomic.Int64 // unix nanoseconds of the last write, for the kernel's cache checks
	uid, gid uint32

	errMu   sync.Mutex
	errs    int
	stderr  io.Writer
	created time.Time
}

var (
	_ fs.NodeGetattrer = (*volumeNode)(nil)
	_ fs.NodeSetattrer = (*volumeNode)(nil)
	_ fs.NodeOpener    = (*volumeNode)(nil)
)

func newVolumeNode(v *blkcrypt.Volume, readOnly bool, env *Env) *volumeNode {
	n := &volumeNode{v: v, readOnly: readOnly, stderr: env.Stderr, created: time.Now(),
		uid: uint32(os.Getuid()), gid: uint32(os.Getgid())}
	n.mtime.Store(n.created.UnixNano())
	return n
}

func (n *volumeNode) attr(a *fuse.Attr) {
	// Decrypted data: only the user who mounted it, as for the key.
	a.Mode = syscall.S_IFREG | 0o600
	if n.readOnly {
		a.Mode = syscall.S_IFREG | 0o400
	}
	a.Size = uint64(n.v.Size())
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = uint32(max(n.v.BlockSize(), 4096))
	a.Nlink = 1
	a.Owner = fuse.Owner{Uid: n.uid, Gid: n.gid}
	mt := time.Unix(0, n.mtime.Load())
	a.SetTimes(&n.created, &mt, &mt)
}

func (n *volumeNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.attr(&out.Attr)
	return 0
}

// Setattr accepts what a block device accepts. Its size is fixed, but an
// open with O_TRUNC (cat > volume) arrives as a truncation to 0, which a
// block device ignores, so that and the current size are no-ops. Times
// are ours to keep; mode and owner cannot change.
func (n *volumeNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if n.readOnly {
			return syscall.EROFS
		}
		if sz != 0 && sz != uint64(n.v.Size()) {
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

func (n *volumeNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.readOnly && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	return &volumeHandle{n: n}, 0, 0
}

// errno turns a Volume error into what the caller of read(2)/write(2)
// sees, and reports the first few on stderr: a failing image should not
// look like a quiet EIO.
func (n *volumeNode) errno(op string, err error) syscall.Errno {
	switch {
	case errors.Is(err, blkcrypt.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, blkcrypt.ErrOutOfRange):
		return syscall.EINVAL
	}
	n.errMu.Lock()
	n.errs++
	if n.errs <= 10 {
		fmt.Fprintf(n.stderr, "blkcrypt: %s: %s\n", op, oneLine(err.Error()))
		if n.errs == 10 {
			fmt.Fprintln(n.stderr, "blkcrypt: further I/O errors are not shown")
		}
	}
	n.errMu.Unlock()
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// volumeHandle is one open of the file. dirty says a write went through
// it since the last flush, so that closing a reader costs no sync.
type volumeHandle struct {
	n     *volumeNode
	dirty atomic.Bool
}

var (
	_ fs.FileReader   = (*volumeHandle)(nil)
	_ fs.FileWriter   = (*volumeHandle)(nil)
	_ fs.FileFsyncer  = (*volumeHandle)(nil)
	_ fs.FileFlusher  = (*volumeHandle)(nil)
	_ fs.FileReleaser = (*volumeHandle)(nil)
)

func (h *volumeHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= h.n.v.Size() {
		return fuse.ReadResultData(nil), 0
	}
	k, err := h.n.v.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, h.n.errno("read", err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// Write stores at most up to the end of the volume. As on a block device,
// a write that starts at the end gets ENOSPC and one that crosses it is
// short.
func (h *volumeHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n := h.n
	if n.readOnly {
		return 0, syscall.EROFS
	}
	size := n.v.Size()
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
	k, err := n.v.WriteAt(data, off)
	n.mtime.Store(time.Now().UnixNano())
	if err != nil {
		return uint32(k), n.errno("write", err)
	}
	return uint32(k), 0
}

// Fsync makes every write that returned so far durable in the image.
func (h *volumeHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.dirty.Store(false)
	if err := h.n.v.Flush(); err != nil {
		h.dirty.Store(true)
		return h.n.errno("fsync", err)
	}
	return 0
}

// Flush runs on every close(2): after a write through this handle, close
// returns only when the data is in the image, and reports it if not.
func (h *volumeHandle) Flush(ctx context.Context) syscall.Errno {
	if !h.dirty.Swap(false) {
		return 0
	}
	if err := h.n.v.Flush(); err != nil {
		h.dirty.Store(true)
		return h.n.errno("flush", err)
	}
	return 0
}

// Release is the last close of the handle. Writes from mmap can reach us
// after the close's Flush, so flush again if there were any.
func (h *volumeHandle) Release(ctx context.Context) syscall.Errno {
	return h.Flush(ctx)
}
