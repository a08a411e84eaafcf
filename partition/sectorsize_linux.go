//go:build linux

package partition

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// blkSSZGet is BLKSSZGET, _IO(0x12, 104): the logical block size.
const blkSSZGet = 0x1268

// DeviceSectorSize returns the logical sector size of f when it is a
// block device (the kernel's BLKSSZGET, 512 or 4096), to pass as
// Options.SectorSize, and 0 for anything else (a regular file carries no
// sector size: 0 makes Read probe).
func DeviceSectorSize(f *os.File) (int, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("sector size of %s: %w", f.Name(), err)
	}
	if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		return 0, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("sector size of %s: %w", f.Name(), err)
	}
	var ss int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, blkSSZGet, uintptr(unsafe.Pointer(&ss)))
	}); err != nil {
		return 0, fmt.Errorf("sector size of %s: %w", f.Name(), err)
	}
	if errno != 0 {
		return 0, fmt.Errorf("sector size of %s: BLKSSZGET: %w", f.Name(), errno)
	}
	return int(ss), nil
}
