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
	e        *engine
	hz       uint64
	pool     *bufferPool
	piece    []byte // checksum's: the hotzone is read again, a piece at a time
	finished bool
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
	} else if err := h.checkResumeOptions(runOpts{resilience: opts.Resilience, hash: opts.Hash, cipher: opts.Cipher}); err != nil {
		return nil, err
	}
	// The volume maps both sides with a cipher: an encryption or
	// decryption (one side plaintext) is not served while it runs.
	if mode := h.reencMode(); mode != "reencrypt" {
		return nil, fmt.Errorf("%w: an %s in progress (online, only a reencryption is supported)", ErrUnsupported, mode)
	}
	e, err := h.loadEngine(ctx, dev, data, passphrase, slotArg(opts.Slot)) // reencrypt_engine.go
	if err != nil {
		return nil, err
	}
	e.online = true
	o := &Online{e: e}
	if e.finishOnly {
		// Every byte is under the new key already; only metadata is left.
		if err := e.finish(); err != nil {
			e.wipe()
			return nil, err
		}
		o.finished = true
		return o, nil
	}
	if o.hz, err = e.hotzone(opts.HotzoneSize); err != nil {
		e.wipe()
		return nil, err
	}
	if e.crashed {
		if err := e.recover(); err != nil {
			e.wipe()
			return nil, err
		}
	}
	o.pool = newBufferPool(o.hz)
	return o, nil
}

// Size is the number of data bytes the reencryption covers: the volume
// the caller serves.
func (o *Online) Size() uint64 { return o.e.size }

// Done is how many bytes from the start of the data area are under the
// new key.
func (o *Online) Done() uint64 {
	if o.finished {
		return o.e.size
	}
	return o.e.progress()
}

// DataOffset is where the data area starts on the data device.
func (o *Online) DataOffset() uint64 { return o.e.to.off }

// Finished reports whether the reencryption metadata is gone: the volume
// is an ordinary LUKS2 volume under the new key.
func (o *Online) Finished() bool { return o.finished }

// Ciphers returns fresh sector ciphers for the data below Done (newC) and
// above it (oldC; nil once only the new key is known), numbered from the
// start of the data area; the caller wipes them.
func (o *Online) Ciphers() (oldC, newC *sector.Cipher, err error) {
	from, to := &o.e.from, &o.e.to
	if to.key == nil {
		return nil, nil, fmt.Errorf("%w: the new volume key is not known", ErrWrongPassphrase)
	}
	if newC, err = sector.New(to.cipher, to.key, sector.Options{SectorSize: to.ss, IVOffset: to.iv}); err != nil {
		return nil, nil, fmt.Errorf("%w: new cipher: %w", ErrUnsupported, err)
	}
	if from.key == nil {
		return nil, newC, nil
	}
	if oldC, err = sector.New(from.cipher, from.key, sector.Options{SectorSize: from.ss, IVOffset: from.iv}); err != nil {
		newC.Wipe()
		return nil, nil, fmt.Errorf("%w: old cipher: %w", ErrUnsupported, err)
	}
	return oldC, newC, nil
}

// Align is the granularity of the boundary: both sector sizes divide it,
// so a sector is never split between the keys.
func (o *Online) Align() int { return int(o.e.align()) }

// Next is the hotzone Step processes next, in bytes from the start of the
// data area; n is zero when every byte is done.
func (o *Online) Next() (off, n uint64) {
	if o.finished || o.e.finished() {
		return o.e.size, 0
	}
	return o.e.next(o.hz)
}

// Step reencrypts the hotzone Next names: the offline run's step, with no
// read-ahead (the next hotzone may still be written by a client until its
// step locks it). The caller must keep every read and write of the volume
// out of that range until Step returns; on success Done has moved past it.
func (o *Online) Step() error {
	off, n := o.Next()
	if n == 0 {
		return nil
	}
	c := o.e.prepareChunk(off, n, o.pool, nil) // reencrypt_pipeline.go
	if c.err != nil {
		o.pool.put(c.plain)
		return fmt.Errorf("reading the hotzone at %d: %w", o.e.src(off), c.err)
	}
	if c.plain == nil && o.piece == nil {
		o.piece = make([]byte, pieceSize)
	}
	return o.e.step(c, o.piece, o.pool)
}

// Stop makes what the steps wrote durable. Every step commits its
// boundary, so a stopped run (or a killed process) leaves a state both
// tools resume.
func (o *Online) Stop() error {
	if o.finished {
		return nil
	}
	return o.e.data.Sync()
}

// Finish ends a reencryption whose every byte is done: the old keyslots,
// backup segments and reencryption metadata go in one commit.
func (o *Online) Finish() error {
	if o.finished {
		return nil
	}
	if !o.e.finished() {
		return errors.New("the reencryption is not done yet")
	}
	if err := o.e.finish(); err != nil {
		return err
	}
	o.finished = true
	return nil
}

// Close wipes the keys.
func (o *Online) Close() {
	o.e.wipe()
	clear(o.piece)
}
