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
func allocBlocks(n int) (B []block, free func(), err error) {
	const blockSize = int(unsafe.Sizeof(block{}))
	if n < 1 || n > math.MaxInt/blockSize {
		return nil, nil, fmt.Errorf("%w: %d argon2 blocks", ErrInvalid, n)
	}
	mem, err := unix.Mmap(-1, 0, n*blockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("kdf: argon2 memory of %d KiB: %w", n, err)
	}
	_ = unix.Madvise(mem, unix.MADV_DONTDUMP) // best effort: older kernels lack it
	B = unsafe.Slice((*block)(unsafe.Pointer(&mem[0])), n)
	return B, func() { _ = unix.Munmap(mem) }, nil
}
