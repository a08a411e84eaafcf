// Package rbd is a native Ceph RBD device for blkcrypt, through librbd's
// C API (cgo), built only with the `ceph` build tag so that the default
// build stays pure Go:
//
//	go build -tags ceph ./cmd/blkcrypt      # needs librbd-dev (librbd.h, librados.h)
//
// Importing it registers the device form qemu and rbd use,
//
//	rbd:POOL/IMAGE[@conf=FILE]
//
// with blkcrypt.RegisterURIScheme, so that Open, Format, the CLI verbs and
// `blkcrypt serve` take it as a DEVICE. Without @conf the cluster is found
// as the rbd tool finds it (CEPH_CONF, then /etc/ceph/ceph.conf);
// CEPH_ARGS is honoured; the client is client.admin.
//
// Two librbd defaults are changed, because they cost CPU and buy a Volume
// nothing: writes are zero-copy (rbd_disable_zero_copy_writes=false; no
// write's buffer changes before its completion), and librbd's
// cache is off (rbd_cache=false, as qemu's cache=none sets it) unless the
// configuration changed rbd_cache or rbd_cache_policy from librbd's
// defaults, say rbd_cache_policy = writeback to keep a cache.
//
// An Image asks an NBD server in front of it for 64 requests in flight
// per connection (QueueDepth; the server's default is 16): each request is
// a network round trip, and the deeper queue keeps the OSDs busy. Its
// WriteAtAsync (blkcrypt.AsyncWriter) starts a write and returns; the
// completion runs on librbd's thread. A Volume's StartWriteAt uses it, so
// an NBD server answers writes from their completions with no goroutine
// waiting for each.
//
// Without the tag the package is empty, and an RBD image is reached over
// NBD instead: qemu-nbd's raw rbd export as an nbd+unix:// URI. Which route
// is faster is measured by bench/rbd.sh (docs/scaling.md has the figures).
package rbd
