package luks2

import (
	"context"
	"errors"
	"fmt"

	"github.com/blkcrypt/blkcrypt/sector"
)

// Online is a LUKS2 reencryption driven one hotzone at a time by a caller
// that keeps serving the volume meanwhile (blkcrypt serve --reencrypt), as
// cryptsetup reencrypts an active dm-crypt device. The caller routes each
// data byte below Done to the new key and the rest to the old one, and
// keeps every request away from the range Next names while Step runs: Step
// reads that range, writes its resilience data, reencrypts it and moves
// the boundary, exactly as an offline step does, so either tool resumes
// whatever a crash leaves.
//
// An Online is not safe for concurrent use; its methods are called by the
// one goroutine that runs the reencryption.
type Online struct {
	h         *Header
	dev, data Device
	r         *reenc
	hz        uint64
	finished  bool
}

// OpenOnline loads the reencryption stored in dev's header (or starts one
// with opts when there is none, unless opts.ResumeOnly), unlocks both
// keys with passphrase and recovers an interrupted hotzone, as
// cryptsetup's open of a LUKS2 device in reencryption does. Nothing else
// is written: the data moves only in Step. With start false an absent
// reencryption is ErrNoReencryption (an open that only follows the
// segments). dev must be writable when a hotzone needs recovery.
func OpenOnline(ctx context.Context, dev Device, passphrase []byte, opts ReencryptOptions, start bool) (*Online, error) {
	ctx, known := withDerivedKeys(ctx) // reencrypt_keys.go: init's keys, not derived again
	defer known.wipe()
	h, err := ReadContext(ctx, dev)
	if err != nil {
		return nil, err
	}
	data := opts.Data
	if data == nil {
		data = dev
	}
	if h.reencKeyslot() < 0 {
		if opts.ResumeOnly || !start {
			return nil, ErrNoReencryption
		}
		opts.InitOnly = true
		if err := h.reencryptInit(ctx, dev, data, passphrase, opts); err != nil {
			return nil, err
		}
		if h, err = ReadContext(ctx, dev); err != nil {
			return nil, err
		}
	} else if err := h.checkResumeOptions(opts); err != nil {
		return nil, err
	}
	r, err := h.loadReenc(ctx, dev, data, passphrase, slotArg(opts.Slot))
	if err != nil {
		return nil, err
	}
	o := &Online{h: h, dev: dev, data: data, r: r}
	if r.finishOnly {
		// Every byte is under the new key already; only metadata is left.
		if err := h.reencFinish(dev, r); err != nil {
			r.wipe()
			return nil, err
		}
		o.finished = true
		return o, nil
	}
	if r.crashed {
		if err := r.recoverHotzone(dev, data); err != nil {
			r.wipe()
			return nil, fmt.Errorf("recovering the interrupted reencryption hotzone: %w", err)
		}
		if err := h.commit(dev, h.segmentsRoot(r, r.hotOff+r.hotLen, 0)); err != nil {
			r.wipe()
			return nil, err
		}
		r.progress, r.crashed = r.hotOff+r.hotLen, false
	}
	if o.hz = r.hotzoneMax(opts); o.hz == 0 {
		r.wipe()
		return nil, fmt.Errorf("%w: no room for a hotzone", ErrNoFreeSlot)
	}
	return o, nil
}

// Size is the number of data bytes the reencryption covers: the volume
// the caller serves.
func (o *Online) Size() uint64 { return o.r.size }

// Done is how many bytes from the start of the data area are under the
// new key.
func (o *Online) Done() uint64 {
	if o.finished {
		return o.r.size
	}
	return o.r.progress
}

// DataOffset is where the data area starts on the data device.
func (o *Online) DataOffset() uint64 { return o.r.dataOff }

// Finished reports whether the reencryption metadata is gone: the volume
// is an ordinary LUKS2 volume under the new key.
func (o *Online) Finished() bool { return o.finished }

// Ciphers returns fresh sector ciphers for the data below Done (newC) and
// above it (oldC; nil once only the new key is known), numbered from the
// start of the data area; the caller wipes them.
func (o *Online) Ciphers() (oldC, newC *sector.Cipher, err error) {
	r := o.r
	if r.newKey == nil {
		return nil, nil, fmt.Errorf("%w: the new volume key is not known", ErrWrongPassphrase)
	}
	if newC, err = sector.New(r.newCipher, r.newKey, sector.Options{SectorSize: r.newSS, IVOffset: r.ivBase}); err != nil {
		return nil, nil, fmt.Errorf("%w: new cipher: %w", ErrUnsupported, err)
	}
	if r.oldKey == nil {
		return nil, newC, nil
	}
	if oldC, err = sector.New(r.oldCipher, r.oldKey, sector.Options{SectorSize: r.oldSS, IVOffset: r.ivBase}); err != nil {
		newC.Wipe()
		return nil, nil, fmt.Errorf("%w: old cipher: %w", ErrUnsupported, err)
	}
	return oldC, newC, nil
}

// Align is the granularity of the boundary: both sector sizes divide it,
// so a sector is never split between the keys.
func (o *Online) Align() int { return max(o.r.oldSS, o.r.newSS) }

// Next is the hotzone Step processes next, in bytes from the start of the
// data area; n is zero when every byte is done.
func (o *Online) Next() (off, n uint64) {
	if o.finished || o.r.progress >= o.r.size {
		return o.r.size, 0
	}
	return o.r.progress, min(o.hz, o.r.size-o.r.progress)
}

// Step reencrypts the hotzone Next names. The caller must keep every
// read and write of the volume out of that range until Step returns; on
// success Done has moved past it.
func (o *Online) Step() error {
	r := o.r
	off, n := o.Next()
	if n == 0 {
		return nil
	}
	buf := make([]byte, n)
	defer clear(buf)
	if _, err := readFull(o.data, buf, int64(r.dataOff+off)); err != nil {
		return fmt.Errorf("reading the hotzone at %d: %w", r.dataOff+off, err)
	}
	// Online, none commits the boundary after every step too: the volume
	// may be closed (or the process killed) between any two steps, and no
	// later call could then write it.
	none := r.resilience == "none"
	if !none {
		if err := r.protect(o.dev, buf); err != nil {
			return fmt.Errorf("writing reencryption resilience data: %w", err)
		}
		if err := o.h.commit(o.dev, o.h.segmentsRoot(r, off, n)); err != nil {
			return err
		}
	}
	sec := off / 512
	if err := r.oldC.DecryptSectors(buf, buf, sec); err != nil {
		return err
	}
	if err := r.newC.EncryptSectors(buf, buf, sec); err != nil {
		return err
	}
	if _, err := o.data.WriteAt(buf, int64(r.dataOff+off)); err != nil {
		return fmt.Errorf("writing the hotzone at %d: %w", r.dataOff+off, err)
	}
	{
		if err := o.data.Sync(); err != nil {
			return err
		}
		if off+n < r.size {
			if err := o.h.commit(o.dev, o.h.segmentsRoot(r, off+n, 0)); err != nil {
				return err
			}
		}
	}
	r.progress = off + n
	return nil
}

// Stop makes what the steps wrote durable. Every step commits its
// boundary, so a stopped run (or a killed process) leaves a state both
// tools resume.
func (o *Online) Stop() error {
	if o.finished {
		return nil
	}
	return o.data.Sync()
}

// Finish ends a reencryption whose every byte is done: the old keyslots,
// backup segments and reencryption metadata go in one commit.
func (o *Online) Finish() error {
	if o.finished {
		return nil
	}
	if o.r.progress < o.r.size {
		return errors.New("the reencryption is not done yet")
	}
	if o.r.resilience == "none" {
		if err := o.data.Sync(); err != nil {
			return err
		}
	}
	if err := o.h.reencFinish(o.dev, o.r); err != nil {
		return err
	}
	o.finished = true
	return nil
}

// Close wipes the keys.
func (o *Online) Close() { o.r.wipe() }
