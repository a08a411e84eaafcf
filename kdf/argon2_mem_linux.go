//go:build linux

package kdf

import (
	"fmt"
	"math"
	"unsafe"

	"golang.org/x/sys/unix"
)

// allocBlocks maps n zeroed blocks outside the Go heap. Unlike make, it
// does not zero memory the kernel gives zeroed, it fails with an error
// rather than killing the process when there is no memory, and free
// returns the memory to the system at once instead of at some later
// collection and scavenge: a cancelled derivation retried in a loop
// holds one array at a time. The mapping is left out of core dumps.
//
// It asks for transparent huge pages: faulting in 4 KiB pages one at a
// time can cost as much as the hashing (on a 2-vCPU virtual machine,
// 0.9 s of CPU for 256 MiB, against 0.2-0.4 s in 2 MiB pages), and
// Argon2's random reads miss the TLB less. Where huge pages are
// unavailable the kernel uses small ones.
func allocBlocks(n int) (B []block, free func(), err error) {
	const blockSize = int(unsafe.Sizeof(block{}))
	const hugePage = 2 << 20
	if n < 1 || n > (math.MaxInt-hugePage)/blockSize {
		return nil, nil, fmt.Errorf("%w: %d argon2 blocks", ErrInvalid, n)
	}
	size := n * blockSize
	// One huge page more, to start the array on a huge-page boundary.
	mem, err := unix.Mmap(-1, 0, size+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("kdf: argon2 memory of %d KiB: %w", n, err)
	}
	off := 0
	if r := int(uintptr(unsafe.Pointer(&mem[0])) % hugePage); r != 0 {
		off = hugePage - r
	}
	use := mem[off : off+size]
	// Both best effort: older kernels lack them, and without them the
	// derivation is slower or in core dumps, not wrong.
	_ = unix.Madvise(use, unix.MADV_HUGEPAGE)
	_ = unix.Madvise(mem, unix.MADV_DONTDUMP)
	B = unsafe.Slice((*block)(unsafe.Pointer(&use[0])), n)
	return B, func() { _ = unix.Munmap(mem) }, nil
}
