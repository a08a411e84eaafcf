//go:build unix

package nbd

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockDir takes an exclusive flock on dir, giving up (busy) after a few
// seconds: holders keep it only for a check and a bind.
func lockDir(dir string) (func(), error) {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrPermission) {
		// A directory we may bind in but not read (mode 0311): go on
		// without the lock; the stale check still runs.
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the socket's directory: %w", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Flock(int(d.Fd()), syscall.LOCK_UN); d.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			d.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: directory %s is locked by another server that is starting", ErrSocketBusy, dir)
			}
			return nil, fmt.Errorf("locking the socket's directory: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
