package blkcrypt

import (
	"errors"
	"fmt"
	"io"
	mbits "math/bits"
	"sync"
	"sync/atomic"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Sentinel errors of the volume layer.
var (
	// ErrOutOfRange means a request reaches past the end of the volume.
	ErrOutOfRange = errors.New("request outside the volume")
	// ErrReadOnly means a write to a volume opened read-only.
	ErrReadOnly = volspec.ErrReadOnly
	// ErrClosed means the volume was closed, or is being closed: the
	// request was refused before it touched the device.
	ErrClosed = errors.New("volume is closed")
)

// Device is the ciphertext store under a volume: a file or block device.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// Volume is the decrypted view of a range of a device: reads decrypt,
// writes encrypt, in whole sectors underneath. Requests need not be
// aligned: partial sectors are read, modified and written back under a lock,
// and overlapping requests are ordered, so no reader sees a torn sector.
// A Volume is safe for concurrent use.
//
// Every request holds a share of the volume for as long as it runs. Close
// refuses new requests with ErrClosed, waits for the ones in flight, and
// only then flushes, wipes the key and closes the device: a request that
// succeeded was encrypted with the live key and reached the device before
// the final flush began.
type Volume struct {
	dev      Device
	m        sectorMap // the cryptography: one cipher, a cascade, a reencryption
	sio      sectorIO  // m when it does its own I/O (sectors with metadata), or nil
	off      int64     // data start on the device, bytes
	size     int64     // bytes
	ss       int64
	readOnly bool
	locks    [lockStripes]sync.RWMutex
	onClose  func()
	typ      string // set by Open: the volume type
	note     string // set by Open: the format's warning

	// state counts requests in flight, with closingBit set once Close
	// began. One atomic add per request keeps the hot path free of a lock
	// that every reader would contend on.
	state atomic.Int64
	// idle receives a token whenever the count drops to zero while
	// closing; Close rechecks the count after each token. Close makes it
	// (once) before it sets closingBit, which is all a Volume built
	// without NewVolume needs as well.
	idle     chan struct{}
	idleOnce sync.Once
}

const closingBit = 1 << 62

// Requests lock the 128 KiB regions they touch, through one of
// lockStripes locks each: regions 256 MiB apart share a lock. With fewer
// (256 locks of 64 KiB, 16 MiB apart) the 64 MiB that nbdcopy keeps in
// flight over four connections made three writes in four wait for an
// unrelated one, and fall back from StartWriteAt to a worker
// (docs/scaling.md). The locks take 48 KiB per volume.
const (
	lockStripes = 2048
	lockShift   = 17
	chunkSize   = 1 << 20
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// NewVolume makes a volume over dev: size bytes of ciphertext starting at
// byte offset off, encrypted with c. Sector numbers count from off.
func NewVolume(dev Device, c *sector.Cipher, off, size int64, readOnly bool) (*Volume, error) {
	if dev == nil || c == nil {
		return nil, fmt.Errorf("%w: NewVolume needs a device and a cipher", ErrInvalidOptions)
	}
	return newVolume(dev, oneCipher{c}, off, size, readOnly)
}

// newVolume makes a volume over dev under any sector map.
func newVolume(dev Device, m sectorMap, off, size int64, readOnly bool) (*Volume, error) {
	var ss int64
	sio, _ := m.(sectorIO)
	if am, ok := m.(*aeadMap); ok {
		ss = int64(am.a.SectorSize())
	} else {
		ss = int64(m.layers()[0].SectorSize())
	}
	if off < 0 || size < 0 {
		return nil, fmt.Errorf("%w: negative offset or size", ErrInvalidOptions)
	}
	if size%ss != 0 {
		return nil, fmt.Errorf("%w: volume size %d is not a multiple of the %d-byte sector size", ErrInvalidOptions, size, ss)
	}
	return &Volume{dev: dev, m: m, sio: sio, off: off, size: size, ss: ss, readOnly: readOnly}, nil
}

// Size is the decrypted size in bytes.
func (v *Volume) Size() int64 {
	if v == nil {
		return 0
	}
	return v.size
}

// SectorSize is the encryption sector size in bytes.
func (v *Volume) SectorSize() int {
	if v == nil {
		return 0
	}
	return int(v.ss)
}

// BlockSize is SectorSize, for the NBD server.
func (v *Volume) BlockSize() int { return v.SectorSize() }

// ReadOnly reports whether writes are refused.
func (v *Volume) ReadOnly() bool { return v == nil || v.dev == nil || v.readOnly }

// Cipher returns the sector cipher: for a cascade, the outermost one (the
// one applied to the plaintext first); Ciphers lists them all.
func (v *Volume) Cipher() *sector.Cipher {
	if !v.usable() {
		return nil
	}
	l := v.m.layers()
	if len(l) == 0 {
		return nil // an integrity volume: see AEAD
	}
	return l[len(l)-1]
}

// Ciphers lists the volume's sector ciphers, the one applied to the
// ciphertext on the device first: one for most formats, two or three for
// a TrueCrypt/VeraCrypt cascade. During a LUKS2 reencryption it is the new
// cipher (the old one maps the part not done yet).
func (v *Volume) Ciphers() []*sector.Cipher {
	if !v.usable() {
		return nil
	}
	return append([]*sector.Cipher(nil), v.m.layers()...)
}

// CipherSpec names the volume's encryption in dm-crypt form,
// "aes-xts-plain64", a cascade's ciphers joined by "+" from the
// innermost: what the NBD export description says.
func (v *Volume) CipherSpec() string {
	if a := v.AEAD(); a != nil {
		return a.Spec() + "+" + a.Integrity()
	}
	s := ""
	for i, c := range v.Ciphers() {
		if i > 0 {
			s += "+"
		}
		s += c.Spec().String()
	}
	return s
}

// DataOffset is where the ciphertext starts on the device, in bytes.
func (v *Volume) DataOffset() int64 {
	if v == nil {
		return 0
	}
	return v.off
}

// stripeSet is a set of lock stripes, as a bit mask.
type stripeSet [lockStripes / 64]uint64

// lockRange locks the stripes covering [off, off+n) in ascending order and
// returns them for unlockRange. It allocates nothing.
func (v *Volume) lockRange(off, n int64, write bool) stripeSet {
	set := v.stripes(off, n)
	for w, bits := range set {
		for ; bits != 0; bits &= bits - 1 {
			i := w*64 + mbits.TrailingZeros64(bits)
			if write {
				v.locks[i].Lock()
			} else {
				v.locks[i].RLock()
			}
		}
	}
	return set
}

// stripes returns the stripes covering [off, off+n).
func (v *Volume) stripes(off, n int64) stripeSet {
	var set stripeSet
	r0, r1 := off>>lockShift, (off+n-1)>>lockShift
	if r1-r0+1 >= lockStripes {
		for i := range set {
			set[i] = ^uint64(0)
		}
		return set
	}
	for r := r0; r <= r1; r++ {
		i := r % lockStripes
		set[i/64] |= 1 << (i % 64)
	}
	return set
}

func (v *Volume) unlockRange(set stripeSet, write bool) {
	for w, bits := range set {
		for ; bits != 0; bits &= bits - 1 {
			i := w*64 + mbits.TrailingZeros64(bits)
			if write {
				v.locks[i].Unlock()
			} else {
				v.locks[i].RUnlock()
			}
		}
	}
}

// usable reports whether v is a Volume made by NewVolume or Open: a nil
// *Volume and the zero Volume hold no device, and every request on them
// is ErrClosed instead of a panic.
func (v *Volume) usable() bool { return v != nil && v.dev != nil }

// acquire takes a share of the volume for one request. On success the
// caller must call release when the request no longer touches the device or
// the key.
func (v *Volume) acquire() error {
	if !v.usable() {
		return ErrClosed
	}
	if v.state.Add(1)&closingBit != 0 {
		v.release()
		return ErrClosed
	}
	return nil
}

func (v *Volume) release() {
	if v.state.Add(-1) == closingBit {
		// Non-blocking: one pending token is enough for Close to recheck.
		select {
		case v.idle <- struct{}{}:
		default:
		}
	}
}

// check validates a request's range; the caller holds a share.
func (v *Volume) check(n int, off int64) error {
	if off < 0 || off > v.size || int64(n) > v.size-off {
		return fmt.Errorf("%w: %d bytes at offset %d, volume size %d", ErrOutOfRange, n, off, v.size)
	}
	return nil
}

// ReadAt reads decrypted bytes. Like a file, a read that reaches the end of
// the volume returns the bytes before it and io.EOF.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	if err := v.acquire(); err != nil {
		return 0, err
	}
	defer v.release()
	if off >= v.size && len(p) > 0 {
		if off < 0 {
			return 0, fmt.Errorf("%w: negative offset", ErrOutOfRange)
		}
		return 0, io.EOF
	}
	var eof error
	if int64(len(p)) > v.size-off && off >= 0 {
		p, eof = p[:v.size-off], io.EOF
	}
	if err := v.check(len(p), off); err != nil || len(p) == 0 {
		return 0, err
	}
	set := v.lockRange(off, int64(len(p)), false)
	defer v.unlockRange(set, false)
	done := 0
	for done < len(p) {
		n, err := v.readChunk(p[done:], off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, eof
}

// readChunk reads at most chunkSize bytes' worth of sectors.
func (v *Volume) readChunk(p []byte, off int64) (int, error) {
	ss := v.ss
	start := off / ss * ss
	head := off - start
	if head == 0 && int64(len(p)) >= ss {
		// Aligned: read ciphertext straight into p and decrypt in place.
		n := min(int64(len(p))/ss*ss, chunkSize)
		q := p[:n]
		if err := v.readPlain(q, start); err != nil {
			return 0, err
		}
		return int(n), nil
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	end := min(off+int64(len(p)), start+chunkSize)
	end = (end + ss - 1) / ss * ss
	buf := (*bp)[:end-start]
	if err := v.readPlain(buf, start); err != nil {
		return 0, err
	}
	n := copy(p, buf[head:])
	clear(buf)
	return n, nil
}

func (v *Volume) readCipher(buf []byte, start int64) error {
	n, err := v.dev.ReadAt(buf, v.off+start)
	if n == len(buf) {
		return nil
	}
	if err == nil || err == io.EOF {
		return fmt.Errorf("device is truncated: short read at offset %d", v.off+start+int64(n))
	}
	return err
}

// WriteAt encrypts p into the volume at off. Partial sectors at either end
// are read, merged and rewritten.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) { return v.write(p, off, false) }

// WriteAtInPlace is WriteAt for a caller that is done with p: the whole
// sectors of p are encrypted in p itself and written from there, so p
// holds ciphertext afterwards (or anything, after an error). It saves
// WriteAt's pass through a second buffer, whose cache misses an NBD
// server's writes over librbd paid for (nbd.InPlaceWriter;
// docs/scaling.md).
func (v *Volume) WriteAtInPlace(p []byte, off int64) (int, error) { return v.write(p, off, true) }

func (v *Volume) write(p []byte, off int64, inPlace bool) (int, error) {
	if !v.usable() {
		return 0, ErrClosed
	}
	if v.readOnly {
		return 0, ErrReadOnly
	}
	if err := v.acquire(); err != nil {
		return 0, err
	}
	defer v.release()
	return v.writeAt(p, off, inPlace)
}

// writeAt is WriteAt (or with inPlace WriteAtInPlace) for a caller that
// holds a share.
func (v *Volume) writeAt(p []byte, off int64, inPlace bool) (int, error) {
	if err := v.check(len(p), off); err != nil || len(p) == 0 {
		return 0, err
	}
	set := v.lockRange(off, int64(len(p)), true)
	defer v.unlockRange(set, true)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	ss := v.ss
	done := 0
	for done < len(p) {
		o := off + int64(done)
		start := o / ss * ss
		end := min(off+int64(len(p)), start+chunkSize)
		aEnd := (end + ss - 1) / ss * ss
		buf := (*bp)[:aEnd-start]
		head := o - start
		if head != 0 || end != aEnd {
			// Read-modify-write of the partial first and last sectors.
			if head != 0 {
				if err := v.readSector(buf[:ss], start); err != nil {
					return done, err
				}
			}
			if end != aEnd && (aEnd-ss > start || head == 0) {
				if err := v.readSector(buf[len(buf)-int(ss):], aEnd-ss); err != nil {
					return done, err
				}
			}
		}
		var n int
		if v.sio != nil {
			// The map writes sectors and their metadata itself.
			plain := buf
			if head == 0 && end == aEnd {
				plain = p[done : done+len(buf)]
				n = len(buf)
			} else {
				n = copy(buf[head:end-start], p[done:])
			}
			if err := v.sio.writeSectors(plain, start); err != nil {
				return done, err
			}
			done += n
			continue
		}
		if head == 0 && end == aEnd {
			// Whole sectors: encrypt out of place, p is left as it was.
			n = len(buf)
			if inPlace {
				buf = p[done : done+n]
			}
			if err := v.encrypt(buf, p[done:done+n], start); err != nil {
				return done, err
			}
		} else {
			n = copy(buf[head:end-start], p[done:])
			if err := v.encrypt(buf, buf, start); err != nil {
				return done, err
			}
		}
		if _, err := v.dev.WriteAt(buf, v.off+start); err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

func (v *Volume) readSector(dst []byte, at int64) error { return v.readPlain(dst, at) }

// readPlain reads whole sectors at byte start of the volume into buf,
// decrypted (and verified, for sectors with metadata).
func (v *Volume) readPlain(buf []byte, start int64) error {
	if v.sio != nil {
		return v.sio.readSectors(buf, start)
	}
	if err := v.readCipher(buf, start); err != nil {
		return err
	}
	return v.decrypt(buf, start)
}

// AEAD is the authenticated sector cipher of a volume made with
// cryptsetup --integrity (LUKS2 over dm-integrity), or nil.
func (v *Volume) AEAD() *sector.AEAD {
	if !v.usable() {
		return nil
	}
	if am, ok := v.m.(*aeadMap); ok {
		return am.a
	}
	return nil
}

// WriteZeroes writes encrypted zeros over [off, off+n). The whole range is
// one request: Close cannot cut it in two.
func (v *Volume) WriteZeroes(off, n int64) error {
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
	if n < 0 || off < 0 || off > v.size || n > v.size-off {
		return fmt.Errorf("%w: %d bytes at offset %d, volume size %d", ErrOutOfRange, n, off, v.size)
	}
	bp := bufPool.Get().(*[]byte)
	z := *bp
	clear(z)
	defer bufPool.Put(bp)
	for n > 0 {
		k := min(n, int64(len(z)))
		if _, err := v.writeAt(z[:k], off, false); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// Flush makes written data durable: every write that returned before
// Flush was called.
func (v *Volume) Flush() error {
	if err := v.acquire(); err != nil {
		return err
	}
	defer v.release()
	return v.flush()
}

func (v *Volume) flush() error {
	if v.readOnly {
		return nil
	}
	return v.dev.Sync()
}

// Close refuses new requests, waits for those in flight, flushes, wipes the
// key and closes the device. Requests that arrive meanwhile, and a second
// Close, get ErrClosed. Close of a nil *Volume or a zero Volume (which
// holds nothing) returns ErrClosed too.
func (v *Volume) Close() error {
	if !v.usable() {
		return ErrClosed
	}
	v.idleOnce.Do(func() { v.idle = make(chan struct{}, 1) })
	for {
		s := v.state.Load()
		if s&closingBit != 0 {
			return ErrClosed
		}
		if v.state.CompareAndSwap(s, s|closingBit) {
			break
		}
	}
	// A refused request bumps the count for a moment, so wait for zero
	// again after every token rather than trusting the first one.
	for v.state.Load() != closingBit {
		<-v.idle
	}
	err := v.flush()
	v.m.wipe()
	if v.onClose != nil {
		v.onClose()
	}
	if cerr := v.dev.Close(); err == nil {
		err = cerr
	}
	return err
}
