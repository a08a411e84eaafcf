package blkcrypt

import (
	"io"
	mbits "math/bits"
)

// AsyncWriter is a Device that can start a write and report its end later,
// with no goroutine waiting for it: rbd.Image, whose writes are network
// round trips. done runs once, on whatever thread completes the write.
type AsyncWriter interface {
	WriteAtAsync(p []byte, off int64, done func(n int, err error))
}

// asyncDev returns the volume's device as an AsyncWriter, or nil.
func (v *Volume) asyncDev() AsyncWriter {
	a, _ := v.baseDevice().(AsyncWriter)
	return a
}

// StartWriteAt is WriteAtInPlace without the wait, for a device that is an
// AsyncWriter: it encrypts p in place, starts the device's write and
// returns true; done gets the outcome later, from the thread that
// completed the write, and p must stay untouched until then. The request
// holds its share of the volume and its range's lock until done is called,
// so Close, Flush ordering and overlapping requests work as for WriteAt.
//
// It returns false, having done nothing, where the write cannot start that
// way: a device without WriteAtAsync, a request that is not whole sectors
// inside the volume, a read-only or closing volume, one in reencryption, or
// a range whose lock another request holds. The caller then uses
// WriteAtInPlace, which waits and reports the reason. So StartWriteAt
// never waits for another request (only, at most, for the device to take
// the write: librbd's throttles): an NBD server calls it from the goroutine
// that reads its client's requests, and answers from done
// (nbd.AsyncWriter; docs/scaling.md).
func (v *Volume) StartWriteAt(p []byte, off int64, done func(error)) bool {
	if !v.usable() || v.readOnly || v.reenc() != nil || len(p) == 0 || off%v.ss != 0 || int64(len(p))%v.ss != 0 {
		return false
	}
	dev := v.asyncDev()
	if dev == nil {
		return false
	}
	if v.acquire() != nil {
		return false
	}
	if v.check(len(p), off) != nil {
		v.release()
		return false
	}
	set, ok := v.tryLockRange(off, int64(len(p)))
	if !ok {
		v.release()
		return false
	}
	if err := v.encrypt(p, p, off); err != nil {
		v.unlockRange(set, true)
		v.release()
		done(err)
		return true
	}
	dev.WriteAtAsync(p, v.off+off, func(n int, err error) {
		v.unlockRange(set, true)
		v.release()
		if err == nil && n != len(p) {
			err = io.ErrShortWrite
		}
		done(err)
	})
	return true
}

// tryLockRange is lockRange for writing that gives up, holding nothing,
// rather than wait for a stripe another request holds.
func (v *Volume) tryLockRange(off, n int64) (stripeSet, bool) {
	set := v.stripes(off, n)
	var held stripeSet
	for w, bits := range set {
		for ; bits != 0; bits &= bits - 1 {
			i := w*64 + mbits.TrailingZeros64(bits)
			if !v.locks[i].TryLock() {
				v.unlockRange(held, true)
				return stripeSet{}, false
			}
			held[w] |= bits & -bits
		}
	}
	return set, true
}
