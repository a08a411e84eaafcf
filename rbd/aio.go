//go:build ceph && cgo && linux

package rbd

/*
#include <stdint.h>
#include <sys/types.h>
#include <rbd/librbd.h>
int blkcrypt_rbd_aio(rbd_image_t img, int write, uint64_t off, size_t len, char *buf, uintptr_t h);
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// completer is what a request's cgo.Handle holds: it gets librbd's return
// value, on the librbd thread that completed the request.
type completer interface{ complete(r int64) }

// waiter is a synchronous request's completer.
type waiter chan int64

func (w waiter) complete(r int64) { w <- r }

//export blkcryptRBDDone
func blkcryptRBDDone(h C.uintptr_t, r C.ssize_t) {
	cgo.Handle(h).Value().(completer).complete(int64(r))
}

// submit starts one librbd read or write of p at off, which c hears the
// end of. It returns librbd's error if librbd refused the request, in
// which case c is never called.
func (im *Image) submit(write bool, p []byte, off int64, h cgo.Handle) int64 {
	w := C.int(0)
	if write {
		w = 1
	}
	return int64(C.blkcrypt_rbd_aio(im.image, w, C.uint64_t(off), C.size_t(len(p)), (*C.char)(unsafe.Pointer(&p[0])), C.uintptr_t(h)))
}

// aio runs one librbd read or write of p at off and waits for its
// completion in Go, not in a thread blocked in C: with tens of requests in
// flight the synchronous calls kept as many threads asleep in librbd and
// the scheduler busy waking them. p stays pinned until librbd is done
// with it, which is after the call into C returns.
func (im *Image) aio(write bool, p []byte, off int64) int64 {
	done := make(waiter, 1)
	h := cgo.NewHandle(completer(done))
	defer h.Delete()
	var pin runtime.Pinner
	pin.Pin(&p[0])
	defer pin.Unpin()
	if r := im.submit(write, p, off, h); r < 0 {
		return r
	}
	return <-done
}

// asyncWrite is a write started by WriteAtAsync. It holds p pinned and the
// image's handles shared until librbd completes it.
type asyncWrite struct {
	im   *Image
	h    cgo.Handle
	pin  runtime.Pinner
	n    int
	done func(int, error)
}

func (a *asyncWrite) complete(r int64) {
	a.pin.Unpin()
	a.h.Delete()
	a.im.mu.RUnlock()
	n, err := a.n, error(nil)
	if r < 0 {
		n, err = 0, cephErr("write", C.int(r))
	}
	a.done(n, err)
}
