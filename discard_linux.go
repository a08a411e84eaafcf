//go:build linux

package blkcrypt

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Discard punches a hole in the device under the whole sectors inside
// [off, off+n), like dm-crypt with allow_discards. Partial sectors at either
// end are left alone. A discarded sector reads back as whatever the device
// returns for a hole (zeros decrypted: garbage), as on Linux. Discards leak
// which blocks are in use, so the NBD server only passes them on when asked.
func (v *Volume) Discard(off, n int64) error {
	if !v.usable() {
		return ErrClosed
	}
	if v.readOnly {
		return ErrReadOnly
	}
	if err := v.acquire(); err != nil {
		return err
	}
	defer v.release()
	if err := v.check(int(min(n, v.size)), off); err != nil {
		return err
	}
	if n > v.size-off {
		return fmt.Errorf("%w: discard of %d bytes at %d", ErrOutOfRange, n, off)
	}
	start := (off + v.ss - 1) / v.ss * v.ss
	end := (off + n) / v.ss * v.ss
	if end <= start {
		return nil
	}
	if d := uriDiscarder(v.dev); d != nil {
		set := v.lockRange(start, end-start, true)
		defer v.unlockRange(set, true)
		return d(v.off+start, end-start)
	}
	f, ok := v.dev.(interface{ Fd() uintptr })
	if !ok {
		return nil // nothing to punch: discards are advisory
	}
	set := v.lockRange(start, end-start, true)
	defer v.unlockRange(set, true)
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, v.off+start, end-start)
	if err == unix.EOPNOTSUPP {
		return nil
	}
	return err
}
