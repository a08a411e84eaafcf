//go:build linux

package kdf

import (
	"syscall"
	"time"
)

// threadCPUTime is the user CPU time of the calling OS thread (the caller
// locks itself to its thread), like cryptsetup's getrusage measurement but
// blind to other goroutines of this process.
func threadCPUTime() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ru.Utime.Nano())
}

func memInfoKiB() (total, free, swap uint64, ok bool) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, 0, 0, false
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	return uint64(si.Totalram) * unit / 1024, uint64(si.Freeram) * unit / 1024, uint64(si.Totalswap) * unit / 1024, true
}
