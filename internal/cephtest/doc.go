// Package cephtest runs a throwaway single-node Ceph cluster for tests
// (scripts/ceph-single-node.sh: one monitor, one memstore OSD, no auth,
// loopback only) and reaches its RBD images the ways blkcrypt's users do:
// qemu-nbd's raw rbd export as an NBD URI, and qemu's rbd driver with
// librbd's own LUKS encryption (encrypt.format) as the independent judge.
//
// One cluster serves a whole test binary: Get starts it on first use and
// Main stops it after the tests. A watchdog process stops it too when the
// test binary dies without reaching Main's cleanup (a -timeout panic, a
// kill), so no daemon outlives the run. Missing Ceph or qemu tools follow
// internal/testenv: a failure under CI, a skip elsewhere.
//
// The package and its tests are Linux only: Debian's Ceph packages are.
package cephtest
