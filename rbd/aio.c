//go:build ceph && cgo && linux

// librbd's asynchronous calls with a completion that calls back into Go
// (blkcryptRBDDone, exported by aio.go): no Go thread waits in C while a
// request is in flight. The definitions live here because a Go file with
// //export may only declare C functions.

#include <stdint.h>
#include <rbd/librbd.h>

extern void blkcryptRBDDone(uintptr_t h, ssize_t r);

static void blkcrypt_rbd_done(rbd_completion_t c, void *arg) {
	ssize_t r = rbd_aio_get_return_value(c);
	rbd_aio_release(c);
	blkcryptRBDDone((uintptr_t)arg, r);
}

int blkcrypt_rbd_aio(rbd_image_t img, int write, uint64_t off, size_t len, char *buf, uintptr_t h) {
	rbd_completion_t c;
	int r = rbd_aio_create_completion((void *)h, blkcrypt_rbd_done, &c);
	if (r < 0)
		return r;
	r = write ? rbd_aio_write(img, off, len, buf, c) : rbd_aio_read(img, off, len, buf, c);
	if (r < 0)
		rbd_aio_release(c);
	return r;
}
