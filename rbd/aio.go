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

//export blkcryptRBDDone
func blkcryptRBDDone(h C.uintptr_t, r C.ssize_t) {
	cgo.Handle(h).Value().(chan int64) <- int64(r)
}

// aio runs one librbd read or write of p at off and waits for its
// completion in Go, not in a thread blocked in C: with tens of requests in
// flight the synchronous calls kept as many threads asleep in librbd and
// the scheduler busy waking them. p stays pinned until librbd is done
// with it, which is after the call into C returns.
func (im *Image) aio(write bool, p []byte, off int64) int64 {
	done := make(chan int64, 1)
	h := cgo.NewHandle(done)
	defer h.Delete()
	var pin runtime.Pinner
	pin.Pin(&p[0])
	defer pin.Unpin()
	w := C.int(0)
	if write {
		w = 1
	}
	if r := C.blkcrypt_rbd_aio(im.image, w, C.uint64_t(off), C.size_t(len(p)), (*C.char)(unsafe.Pointer(&p[0])), C.uintptr_t(h)); r < 0 {
		return int64(r)
	}
	return <-done
}
