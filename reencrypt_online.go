package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// ReencryptOptions are a LUKS2 reencryption's parameters (the new cipher,
// key size, sector size, resilience, hotzone size, new keyslot's KDF).
type ReencryptOptions = luks2.ReencryptOptions

// Online reencryption (cryptsetup reencrypt on an active device).
//
// A LUKS2 volume whose header has a reencryption in progress opens as
// cryptsetup 2.6's open activates it: both keys are unlocked, an
// interrupted hotzone is recovered from its resilience data, and the
// volume maps every byte below the boundary to the new key and the rest
// to the old one, as the dm-crypt table of the segments does. Nothing
// moves until Volume.Reencrypt runs the steps, which the serve process
// does while NBD clients keep reading and writing.
//
// Each step holds the write side of the volume's range locks over its
// hotzone, so a request there waits while the hotzone is read, protected,
// reencrypted, written and committed, and no request sees a sector half
// way. The boundary moves only under those locks: a request holding the
// locks of its range sees one boundary for its whole run, and a request
// outside the hotzone is wholly on one side of it before and after.

// onlineReenc is a Volume's reencryption, and the Volume's sectorMap while
// it runs: the new-key and old-key ciphers, the boundary between them,
// and the luks2 state the steps advance.
type onlineReenc struct {
	on      *luks2.Online
	newC    *sector.Cipher
	oldC    *sector.Cipher
	done    atomic.Int64 // bytes of the data area under the new key
	run     sync.Mutex   // one Reencrypt at a time
	unlock  func()       // the reencryption lock, held while Reencrypt may run
	stopped bool         // an error left the luks2 state unusable
	// badEnd, when above zero, ends the hotzone of a failed step (it
	// starts at done): its sectors may be under either key, so requests
	// there fail until a reopen recovers it from the resilience data.
	badEnd atomic.Int64
}

// errHotzoneFailed is what a request in the hotzone of a failed step gets.
var errHotzoneFailed = errors.New("this range was being reencrypted when the reencryption failed; reopen the volume to recover it")

func (rx *onlineReenc) check(start, end, done int64) error {
	if b := rx.badEnd.Load(); b > 0 && start < b && end > done {
		return errHotzoneFailed
	}
	return nil
}

func (rx *onlineReenc) layers() []*sector.Cipher { return []*sector.Cipher{rx.newC} }

func (rx *onlineReenc) wipe() {
	if rx == nil {
		return
	}
	rx.newC.Wipe()
	if rx.oldC != nil {
		rx.oldC.Wipe()
	}
	rx.on.Close()
	if rx.unlock != nil {
		rx.unlock()
		rx.unlock = nil
	}
}

// decrypt decrypts whole sectors of src into dst, src starting at byte
// start of the volume, each with the key of its side of the boundary.
func (rx *onlineReenc) decrypt(dst, src []byte, start int64, split bool) error {
	d := rx.done.Load()
	end := start + int64(len(src))
	if err := rx.check(start, end, d); err != nil {
		return err
	}
	if start < d {
		n := min(end, d) - start
		if err := decryptWith(rx.newC, split, dst[:n], src[:n], start); err != nil {
			return err
		}
	}
	if end > d {
		s := max(start, d)
		if err := decryptWith(rx.oldC, split, dst[s-start:len(src)], src[s-start:], s); err != nil {
			return err
		}
	}
	return nil
}

// encrypt is decrypt's counterpart.
func (rx *onlineReenc) encrypt(dst, src []byte, start int64, split bool) error {
	d := rx.done.Load()
	end := start + int64(len(src))
	if err := rx.check(start, end, d); err != nil {
		return err
	}
	if start < d {
		n := min(end, d) - start
		if err := encryptWith(rx.newC, split, dst[:n], src[:n], start); err != nil {
			return err
		}
	}
	if end > d {
		s := max(start, d)
		if err := encryptWith(rx.oldC, split, dst[s-start:len(src)], src[s-start:], s); err != nil {
			return err
		}
	}
	return nil
}

// reenc is the volume's reencryption in progress, or nil.
func (v *Volume) reenc() *onlineReenc {
	rx, _ := v.m.(*onlineReenc)
	return rx
}

// decrypt decrypts whole sectors of b in place, b starting at byte start
// of the volume.
func (v *Volume) decrypt(b []byte, start int64) error {
	return v.m.decrypt(b, b, start, !v.busy())
}

// encrypt is decrypt's counterpart, from src into dst.
func (v *Volume) encrypt(dst, src []byte, start int64) error {
	return v.m.encrypt(dst, src, start, !v.busy())
}

// busy reports whether the Volume has another request in flight besides
// the caller's. Such requests are the parallelism already: a server with
// a queue of them keeps every core busy, and splitting one request across
// the sector engine's workers as well only adds hand-offs and polls. For
// nbdcopy writes through serve over librbd (64 requests in flight) that
// split cost a fifth more of serve's CPU and a tenth of the speed
// (docs/scaling.md). A lone stream (the read and write commands, a client
// with one request at a time) still gets the engine's split.
func (v *Volume) busy() bool { return v.state.Load()&^closingBit > 1 }

// rwDevice is a LUKS2 header or data device as luks2 takes it: the
// reencryption reads and writes data and commits metadata through it.
type rwDevice struct {
	io.ReaderAt
	w    io.WriterAt
	sync func() error
	size int64
}

func (d rwDevice) WriteAt(p []byte, off int64) (int, error) {
	if d.w == nil {
		return 0, ErrReadOnly
	}
	return d.w.WriteAt(p, off)
}
func (d rwDevice) Sync() error {
	if d.sync == nil {
		return nil
	}
	return d.sync()
}
func (d rwDevice) Size() (int64, error) { return d.size, nil }

func asRWDevice(r io.ReaderAt, size int64, readOnly bool) rwDevice {
	d := rwDevice{ReaderAt: r, size: size}
	if !readOnly {
		d.w, _ = r.(io.WriterAt)
	}
	if s, ok := r.(interface{ Sync() error }); ok {
		d.sync = s.Sync
	}
	return d
}

// openLUKS2Online opens a LUKS2 volume in reencryption, or starts one
// (o.Reencrypt set). The caller has read h from the header device.
func openLUKS2Online(ctx context.Context, h *luks2.Header, dev Device, size int64, o OpenOptions) (*Volume, error) {
	if o.VolumeKey != nil {
		return nil, fmt.Errorf("%w: a LUKS2 volume in reencryption opens with a passphrase or key file (it needs both volume keys)", ErrInvalidOptions)
	}
	if o.Reencrypt != nil && o.ReadOnly {
		return nil, fmt.Errorf("%w: a reencryption needs the volume read-write", ErrInvalidOptions)
	}
	pass := o.Passphrase
	if len(o.KeyFiles) > 0 {
		pass = o.KeyFiles[0]
	}
	data := asRWDevice(dev, size, o.ReadOnly)
	hdr := data
	ro := luks2.ReencryptOptions{Slot: o.Keyslot, ResumeOnly: true}
	if o.Reencrypt != nil {
		ro = *o.Reencrypt
		ro.Slot = o.Keyslot
	}
	if o.HeaderDevice != nil {
		hsize, err := DeviceSize(o.HeaderDevice)
		if err != nil {
			return nil, err
		}
		hdr = asRWDevice(o.HeaderDevice, hsize, o.ReadOnly)
		ro.Data = data
	} else {
		ro.Data = nil
	}
	// cryptsetup holds the reencryption lock while it recovers a hotzone
	// on open and for as long as it reencrypts.
	unlock, err := luks2.LockReencryption(h.UUID())
	if err != nil {
		return nil, err
	}
	on, err := luks2.OpenOnline(ctx, hdr, pass, ro, o.Reencrypt != nil)
	if err != nil {
		unlock()
		if errors.Is(err, ErrReadOnly) {
			return nil, fmt.Errorf("%w: the reencryption in progress must first be recovered or finished, which writes: open the volume read-write once (write, serve), or run cryptsetup repair (%w)", ErrInvalidOptions, err)
		}
		return nil, err
	}
	oldC, newC, err := on.Ciphers()
	if err != nil {
		on.Close()
		unlock()
		return nil, err
	}
	v, err := NewVolume(dev, newC, int64(on.DataOffset()), int64(on.Size()), o.ReadOnly)
	if err != nil {
		newC.Wipe()
		if oldC != nil {
			oldC.Wipe()
		}
		on.Close()
		unlock()
		return nil, err
	}
	if on.Finished() {
		// Nothing was left but metadata: an ordinary volume now.
		if oldC != nil {
			oldC.Wipe()
		}
		on.Close()
		unlock()
		v.typ = TypeLUKS2
		return v, nil
	}
	v.ss = int64(on.Align())
	rx := &onlineReenc{on: on, newC: newC, oldC: oldC}
	rx.done.Store(int64(on.Done()))
	if o.Reencrypt != nil {
		rx.unlock = unlock
	} else {
		unlock()
	}
	v.m = rx
	v.typ = TypeLUKS2
	return v, nil
}

// Reencrypting reports whether the volume has a LUKS2 reencryption in
// progress, and how many bytes of it are done.
func (v *Volume) Reencrypting() (done, total int64, ok bool) {
	if v == nil {
		return 0, 0, false
	}
	rx := v.reenc()
	if rx == nil {
		return v.size, v.size, false
	}
	return rx.done.Load(), v.size, true
}

// ErrNoReencryption means Reencrypt on a volume with no reencryption in
// progress; it matches ErrInvalidOptions.
var ErrNoReencryption = luks2.ErrNoReencryption

// Reencrypt runs the volume's LUKS2 reencryption to its end while the
// volume stays in use: one hotzone at a time, each under the write side of
// the range locks over it (requests elsewhere go on; those in the hotzone
// wait a step). progress, when set, is called after each step with the
// bytes done and the volume size. When ctx ends it stops between steps,
// leaving a state that blkcrypt (serve --reencrypt, reencrypt
// --resume-only) and cryptsetup resume, and returns ctx's error; a volume
// being closed stops it with ErrClosed. After a successful return the
// header is an ordinary LUKS2 header under the new key.
//
// Reencrypt works only on a volume opened with OpenOptions.Reencrypt (it
// holds the reencryption lock); a volume opened to follow another tool's
// reencryption gets ErrNoReencryption.
func (v *Volume) Reencrypt(ctx context.Context, progress func(done, total int64)) error {
	if !v.usable() {
		return ErrClosed
	}
	rx := v.reenc()
	if rx == nil || rx.unlock == nil {
		return fmt.Errorf("%w: open the volume with a reencryption (OpenOptions.Reencrypt)", ErrNoReencryption)
	}
	if !rx.run.TryLock() {
		return fmt.Errorf("%w: the reencryption is running already", ErrBusy)
	}
	defer rx.run.Unlock()
	for {
		if err := v.acquire(); err != nil {
			return err
		}
		if rx.stopped {
			v.release()
			return fmt.Errorf("%w: an earlier step failed; reopen the volume to resume", ErrBusy)
		}
		if err := ctx.Err(); err != nil {
			serr := rx.on.Stop()
			v.release()
			return errors.Join(err, serr)
		}
		off, n := rx.on.Next()
		if n == 0 {
			err := rx.on.Finish()
			v.release()
			return err
		}
		set := v.lockRange(int64(off), int64(n), true)
		err := rx.on.Step()
		if err == nil {
			rx.done.Store(int64(rx.on.Done()))
		} else {
			rx.stopped = true
			rx.badEnd.Store(int64(off + n))
		}
		v.unlockRange(set, true)
		v.release()
		if err != nil {
			return err
		}
		if progress != nil {
			progress(rx.done.Load(), v.size)
		}
	}
}
