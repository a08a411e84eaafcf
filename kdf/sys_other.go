//go:build !linux

package kdf

import "time"

var processStart = time.Now()

// threadCPUTime falls back to wall-clock time where thread CPU time is not
// available.
func threadCPUTime() time.Duration { return time.Since(processStart) }

func memInfoKiB() (total, free, swap uint64, ok bool) { return 0, 0, 0, false }
