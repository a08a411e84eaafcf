//go:build ceph && cgo && linux

package rbd

/*
#cgo LDFLAGS: -lrbd -lrados
#include <stdlib.h>
#include <errno.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/cgo"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/blkcrypt/blkcrypt"
)

// Scheme is the registered device prefix.
const Scheme = "rbd:"

// Sentinel errors.
var (
	// ErrBadSpec: the device string is not rbd:POOL/IMAGE[@conf=FILE].
	ErrBadSpec = errors.New("rbd: bad device")
	// ErrCeph: librados or librbd failed; the error wraps the errno.
	ErrCeph = errors.New("rbd: ceph error")
	// ErrClosed: the image was closed.
	ErrClosed = errors.New("rbd: image closed")
	// ErrReadOnly: a write to an image opened read-only.
	ErrReadOnly = errors.New("rbd: image opened read-only")
	// ErrOutOfRange: a request outside the image.
	ErrOutOfRange = errors.New("rbd: request outside the image")
)

func init() {
	blkcrypt.RegisterURIScheme(Scheme, func(ctx context.Context, spec string, readOnly bool) (blkcrypt.URIDevice, error) {
		return Open(ctx, spec, readOnly)
	})
}

// Spec is a parsed device string.
type Spec struct {
	Pool, Image, Conf string
}

// ParseSpec parses rbd:POOL/IMAGE[@conf=FILE].
func ParseSpec(s string) (Spec, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Spec{}, fmt.Errorf("%w: %q does not start with %s", ErrBadSpec, s, Scheme)
	}
	var sp Spec
	if i := strings.Index(rest, "@"); i >= 0 {
		opt := rest[i+1:]
		rest = rest[:i]
		conf, ok := strings.CutPrefix(opt, "conf=")
		if !ok || conf == "" {
			return Spec{}, fmt.Errorf("%w: %q: only @conf=FILE may follow the image", ErrBadSpec, s)
		}
		sp.Conf = conf
	}
	pool, image, ok := strings.Cut(rest, "/")
	if !ok || pool == "" || image == "" || strings.Contains(image, "/") {
		return Spec{}, fmt.Errorf("%w: %q is not rbd:POOL/IMAGE[@conf=FILE]", ErrBadSpec, s)
	}
	sp.Pool, sp.Image = pool, image
	return sp, nil
}

// Image is an open RBD image: an io.ReaderAt and io.WriterAt with Sync,
// Size and Close, safe for concurrent use (librbd is).
type Image struct {
	spec     string
	readOnly bool
	size     int64

	// mu guards the handles against Close: requests hold it shared.
	mu      sync.RWMutex
	closed  bool
	cluster C.rados_t
	ioctx   C.rados_ioctx_t
	image   C.rbd_image_t
}

func cephErr(what string, r C.int) error {
	return fmt.Errorf("%w: %s: %w", ErrCeph, what, syscall.Errno(-r))
}

// Open connects to the cluster and opens the image spec names. ctx is
// checked before connecting; librados bounds the connection itself
// (client_mount_timeout, set here to 30 s).
func Open(ctx context.Context, spec string, readOnly bool) (*Image, error) {
	sp, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	im := &Image{spec: spec, readOnly: readOnly}
	if r := C.rados_create(&im.cluster, nil); r < 0 {
		return nil, cephErr("rados_create", r)
	}
	ok := false
	defer func() {
		if !ok {
			im.release()
		}
	}()
	var conf *C.char
	if sp.Conf != "" {
		conf = C.CString(sp.Conf)
		defer C.free(unsafe.Pointer(conf))
	}
	if r := C.rados_conf_read_file(im.cluster, conf); r < 0 {
		return nil, cephErr("reading the ceph configuration", r)
	}
	if r := C.rados_conf_parse_env(im.cluster, nil); r < 0 {
		return nil, cephErr("CEPH_ARGS", r)
	}
	for k, v := range map[string]string{"client_mount_timeout": "30", "rados_mon_op_timeout": "30"} {
		im.confSet(k, v)
	}
	if r := C.rados_connect(im.cluster); r < 0 {
		return nil, cephErr("connecting to the cluster", r)
	}
	// After the connection, so that the monitors' central configuration
	// (librados fetches it while connecting; not covered by a test)
	// counts as the user's choice too; before rbd_open, which reads them.
	im.tune()
	pool := C.CString(sp.Pool)
	defer C.free(unsafe.Pointer(pool))
	if r := C.rados_ioctx_create(im.cluster, pool, &im.ioctx); r < 0 {
		return nil, cephErr("pool "+sp.Pool, r)
	}
	name := C.CString(sp.Image)
	defer C.free(unsafe.Pointer(name))
	var r C.int
	if readOnly {
		r = C.rbd_open_read_only(im.ioctx, name, &im.image, nil)
	} else {
		r = C.rbd_open(im.ioctx, name, &im.image, nil)
	}
	if r < 0 {
		im.image = nil
		return nil, cephErr("image "+sp.Pool+"/"+sp.Image, r)
	}
	var size C.uint64_t
	if r := C.rbd_get_size(im.image, &size); r < 0 {
		return nil, cephErr("size", r)
	}
	im.size = int64(size)
	ok = true
	return im, nil
}

// tune changes two librbd defaults that cost CPU and buy a Volume nothing,
// measured with bench/rbd.sh's write (docs/scaling.md):
//
//   - rbd_disable_zero_copy_writes (default true) makes librbd copy every
//     write, so that a caller changing its buffer while the write is in
//     flight cannot make the data and its CRC disagree. Every write here
//     waits for its completion with the buffer untouched, and librbd's
//     zero-copy path delays that completion until it lets go of the buffer,
//     so the copy guards against nothing.
//   - rbd_cache (default true, policy writearound) acknowledges writes
//     before the OSDs have them and tracks them to order overlaps. The
//     Volume above writes whole sectors and flushes when its user asks, as
//     qemu's cache=none does (qemu turns rbd_cache off for it). A
//     configuration that changed either rbd_cache or rbd_cache_policy from
//     librbd's defaults keeps what it chose.
func (im *Image) tune() {
	im.confSet("rbd_disable_zero_copy_writes", "false")
	if im.confGet("rbd_cache") == "true" && im.confGet("rbd_cache_policy") == "writearound" {
		im.confSet("rbd_cache", "false")
	}
}

// confSet sets an option on the cluster handle, above what the
// configuration says.
func (im *Image) confSet(k, v string) {
	ck, cv := C.CString(k), C.CString(v)
	C.rados_conf_set(im.cluster, ck, cv)
	C.free(unsafe.Pointer(ck))
	C.free(unsafe.Pointer(cv))
}

// confGet returns an option's effective value, or "" if librados has none.
func (im *Image) confGet(k string) string {
	v, _ := im.getConf(k)
	return v
}

func (im *Image) getConf(k string) (string, error) {
	ck := C.CString(k)
	defer C.free(unsafe.Pointer(ck))
	var buf [256]C.char
	if r := C.rados_conf_get(im.cluster, ck, &buf[0], C.size_t(len(buf))); r < 0 {
		return "", cephErr("option "+k, r)
	}
	return C.GoString(&buf[0]), nil
}

// ConfigValue returns the value a Ceph option has for this image's cluster
// connection: the configuration's, or the one Open chose (see the package
// documentation). Unknown options wrap ErrCeph and ENOENT.
func (im *Image) ConfigValue(name string) (string, error) {
	im.mu.RLock()
	defer im.mu.RUnlock()
	if im.closed {
		return "", ErrClosed
	}
	return im.getConf(name)
}

// release frees whatever Open got.
func (im *Image) release() error {
	var err error
	if im.image != nil {
		if r := C.rbd_close(im.image); r < 0 {
			err = cephErr("closing the image", r)
		}
		im.image = nil
	}
	if im.ioctx != nil {
		C.rados_ioctx_destroy(im.ioctx)
		im.ioctx = nil
	}
	if im.cluster != nil {
		C.rados_shutdown(im.cluster)
		im.cluster = nil
	}
	return err
}

// QueueDepth asks an NBD server in front of the image for 64 requests in
// flight per connection (nbdcopy's queue), four times its default: every
// request is a network round trip through librbd to the OSDs, and with 16
// per connection the server stopped reading its clients while the OSD had
// room (nbdcopy writes 5% faster with 64; docs/scaling.md).
func (im *Image) QueueDepth() int { return 64 }

// Size is the image's size in bytes.
func (im *Image) Size() (int64, error) { return im.size, nil }

func (im *Image) String() string { return im.spec }

// ReadAt reads len(p) bytes at off; librbd reads straight into p.
func (im *Image) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", ErrOutOfRange)
	}
	if off >= im.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := len(p)
	if rest := im.size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := im.transfer(false, p, off)
	if err == nil && n < want {
		err = io.EOF
	}
	return n, err
}

// transfer runs a read or write of p at off, in as many librbd calls as it
// takes (a read may return short of the end), with the handles held
// against Close.
func (im *Image) transfer(write bool, p []byte, off int64) (int, error) {
	im.mu.RLock()
	defer im.mu.RUnlock()
	if im.closed {
		return 0, ErrClosed
	}
	n := 0
	for n < len(p) {
		r := im.aio(write, p[n:], off+int64(n))
		switch {
		case r < 0 && write:
			return n, cephErr("write", C.int(r))
		case r < 0:
			return n, cephErr("read", C.int(r))
		case r == 0 && write:
			// librbd's aio write reports 0 for the whole length.
			r = int64(len(p) - n)
		case r == 0:
			return n, io.ErrUnexpectedEOF
		}
		n += int(r)
	}
	return n, nil
}

// WriteAt writes p at off.
func (im *Image) WriteAt(p []byte, off int64) (int, error) {
	if im.readOnly {
		return 0, ErrReadOnly
	}
	if off < 0 || off > im.size || int64(len(p)) > im.size-off {
		return 0, fmt.Errorf("%w: write of %d bytes at %d on a %d-byte image", ErrOutOfRange, len(p), off, im.size)
	}
	if len(p) == 0 {
		return 0, nil
	}
	return im.transfer(true, p, off)
}

// WriteAtAsync starts a write of p at off and returns without waiting for
// it: done gets the outcome, from a thread of librbd's (so it must not
// block for long), or at once from the caller's goroutine if the write
// could not start. p must not change until done is called. It is what lets
// an NBD server answer a write from its completion, with no goroutine
// waiting for each one (blkcrypt.Volume.StartWriteAt; docs/scaling.md).
func (im *Image) WriteAtAsync(p []byte, off int64, done func(n int, err error)) {
	switch {
	case im.readOnly:
		done(0, ErrReadOnly)
		return
	case off < 0 || off > im.size || int64(len(p)) > im.size-off:
		done(0, fmt.Errorf("%w: write of %d bytes at %d on a %d-byte image", ErrOutOfRange, len(p), off, im.size))
		return
	case len(p) == 0:
		done(0, nil)
		return
	}
	im.mu.RLock()
	if im.closed {
		im.mu.RUnlock()
		done(0, ErrClosed)
		return
	}
	a := &asyncWrite{im: im, n: len(p), done: done}
	a.h = cgo.NewHandle(completer(a))
	a.pin.Pin(&p[0])
	// librbd's aio write is all or nothing: it completes with 0 for the
	// whole length, or with an error.
	if r := im.submit(true, p, off, a.h); r < 0 {
		a.complete(r)
	}
}

// Sync flushes librbd's cache to the OSDs.
func (im *Image) Sync() error {
	im.mu.RLock()
	defer im.mu.RUnlock()
	if im.closed {
		return ErrClosed
	}
	if r := C.rbd_flush(im.image); r < 0 {
		return cephErr("flush", r)
	}
	return nil
}

// Close flushes and closes the image and the cluster connection.
func (im *Image) Close() error {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.closed {
		return ErrClosed
	}
	im.closed = true
	var err error
	if im.image != nil && !im.readOnly {
		if r := C.rbd_flush(im.image); r < 0 {
			err = cephErr("flush", r)
		}
	}
	return errors.Join(err, im.release())
}
