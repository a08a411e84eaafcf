package blkcrypt

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// ErrIntegrity is the error of a sector whose authentication tag (or
// dm-integrity checksum) does not verify: tampering or bit rot, where the
// kernel returns EILSEQ. It is the same sentinel as integrity.ErrIntegrity
// and always comes inside an *IntegrityError naming the sector; the
// request returns no plaintext of that sector.
var ErrIntegrity = integrity.ErrIntegrity

// IntegrityError names the sector that failed its check.
type IntegrityError struct {
	// Offset is the sector's byte offset in the volume; Sector the same
	// in 512-byte units (dm-crypt's "INTEGRITY AEAD ERROR, sector N").
	Offset int64
	Sector uint64
}

func (e *IntegrityError) Error() string {
	return fmt.Sprintf("integrity: sector %d (byte offset %d) does not verify", e.Sector, e.Offset)
}

// Unwrap makes errors.Is(err, ErrIntegrity) true.
func (e *IntegrityError) Unwrap() error { return ErrIntegrity }

// aeadMap is the sector map of a LUKS2 volume made with --integrity: the
// data area is a dm-integrity device whose per-sector tags hold the AEAD
// metadata (tag, then IV). It does its own I/O (sectorIO): a sector and
// its metadata are read together and written together, through the
// integrity volume's journal, so a power cut leaves either the old or the
// new pair, both verifying.
type aeadMap struct {
	a  *sector.AEAD
	iv *integrity.Volume
}

// sectorIO is a sector map that reads and writes the device itself:
// sectors with per-sector metadata. start is the byte offset in the
// volume; buffers are whole sectors of plaintext.
type sectorIO interface {
	readSectors(dst []byte, start int64) error
	writeSectors(src []byte, start int64) error
}

func (m *aeadMap) decrypt(dst, src []byte, start int64, split bool) error {
	return errors.New("blkcrypt: an integrity volume's sectors are read through its map")
}

func (m *aeadMap) encrypt(dst, src []byte, start int64, split bool) error {
	return errors.New("blkcrypt: an integrity volume's sectors are written through its map")
}

func (m *aeadMap) layers() []*sector.Cipher { return nil }
func (m *aeadMap) wipe()                    { m.a.Wipe() }

// readSectors reads and verifies whole sectors at byte start, in units
// shared with the helper goroutines: each unit one read of its data and
// one of its tags, then the AEAD. On an error dst holds nothing.
func (m *aeadMap) readSectors(dst []byte, start int64) error {
	r := m.newRun(dst, nil, start)
	defer r.free()
	r.start(true)
	for r.takeAndDo() {
	}
	r.waitFor(r.units)
	if err := r.firstErr(r.units); err != nil {
		clear(dst)
		return err
	}
	return nil
}

// writeSectors encrypts whole sectors at byte start and writes them with
// their metadata through the integrity volume, a chunk (bufPool's
// buffer) at a time. Within a chunk the AEAD runs in units over
// goroutines while the integrity volume writes the journal sections of
// the units that are done, straight from the ciphertext buffer
// (WriteLentSectors).
func (m *aeadMap) writeSectors(src []byte, start int64) error {
	ss := int64(m.a.SectorSize())
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	for len(src) > 0 {
		n := min(len(src), len(*bp))
		r := m.newRun((*bp)[:n], src[:n], start)
		r.start(false)
		err := m.iv.WriteLentSectors(r.dst, r.meta, uint64(start/ss), r.readyFn)
		// After an error units may still be running; after success none
		// (the volume asked for every block), and stop only checks.
		r.stop()
		r.free()
		if err != nil {
			return err
		}
		src, start = src[n:], start+int64(n)
	}
	return nil
}

// aeadUnitBytes is the size of the units a write is cut into for the
// goroutines that encrypt it: small enough that the journal can take the
// first section while the later ones are encrypted and that the two ends
// meet evenly, large enough that each is some tens of µs of work.
const aeadUnitBytes = 64 << 10

// Reads cut the request in units of decreasing size (guided self-
// scheduling): each unit is one read of its data and one of its tags, and
// on tmpfs sixteen 64 KiB reads cost 40% more than one of 1 MiB, so the
// first units are large (a share of what is left for each goroutine),
// and the last ones small so that no goroutine waits long for another.
const minReadUnitBytes = 32 << 10

// maxAEADGoroutines bounds the goroutines one request is spread over.
const maxAEADGoroutines = 4

// spinFor is how long a request polls for a helper's unit before it
// sleeps (the sector engine's figure: a sleeping goroutine is woken
// tens of µs late in a VM).
const spinFor = 50 * time.Microsecond

var metaPool = sync.Pool{New: func() any { return new([]byte) }}

// aeadRun is one request of an integrity volume cut into units that the
// caller and helper goroutines take in order (next), as the sector
// engine's batches are shared: a helper that starts late just takes less.
// Reads: a unit is read (data and tags) and decrypted. Writes: a unit is
// encrypted into dst; the caller, writing through the integrity volume,
// waits for the units it needs (readyFn), taking them itself while any are
// left.
type aeadRun struct {
	m      *aeadMap
	read   bool
	dst    []byte // plaintext read, or ciphertext written
	src    []byte // plaintext to write
	meta   []byte // the sectors' metadata
	mp     *[]byte
	off    int64 // byte offset of dst[0] in the volume
	bounds []int // unit i is dst[bounds[i]:bounds[i+1]]
	units  int

	next atomic.Int64  // next unit to take
	done []atomic.Bool // unit i is finished (errs[i] set before)
	errs []error
	// finished has a token after a unit is done, for a caller that stops
	// polling.
	finished chan struct{}
	offered  time.Time // when the helpers were offered the run
}

func (m *aeadMap) newRun(dst, src []byte, start int64) *aeadRun {
	ss := m.a.SectorSize()
	r := &aeadRun{m: m, dst: dst, src: src, off: start}
	r.bounds = append(r.bounds, 0)
	if src != nil {
		unit := max(aeadUnitBytes/ss, 1) * ss
		for at := unit; at < len(dst); at += unit {
			r.bounds = append(r.bounds, at)
		}
	} else {
		workers := min(runtime.GOMAXPROCS(0), maxAEADGoroutines)
		for at := 0; at < len(dst); {
			n := max((len(dst)-at)/(2*workers), minReadUnitBytes)
			n = max(n/ss, 1) * ss
			if at += n; len(dst)-at < minReadUnitBytes {
				break
			}
			r.bounds = append(r.bounds, at)
		}
	}
	r.bounds = append(r.bounds, len(dst))
	r.units = len(r.bounds) - 1
	r.done = make([]atomic.Bool, r.units)
	r.finished = make(chan struct{}, 1)
	r.errs = make([]error, r.units)
	r.mp = metaPool.Get().(*[]byte)
	need := len(dst) / ss * m.a.MetaSize()
	if cap(*r.mp) < need {
		*r.mp = make([]byte, need)
	}
	r.meta = (*r.mp)[:need]
	return r
}

// free returns the metadata buffer; every unit taken must be done.
func (r *aeadRun) free() {
	clear(r.meta)
	metaPool.Put(r.mp)
	r.meta = nil
}

// start offers the run to the helpers: one per extra core, at most one
// per unit after the first. A helper busy with another request is not
// waited for: the caller takes what it leaves.
func (r *aeadRun) start(read bool) {
	r.read = read
	r.offered = time.Now()
	helpers := min(runtime.GOMAXPROCS(0), maxAEADGoroutines, r.units) - 1
	if helpers <= 0 {
		return
	}
	jobs := aeadHelpers()
	for range helpers {
		select {
		case jobs <- r:
		default:
			return
		}
	}
}

var (
	aeadJobsOnce sync.Once
	aeadJobs     chan *aeadRun
)

// aeadHelpers starts the helper goroutines on first use (one per extra
// core, up to maxAEADGoroutines in all; they live as long as the
// process, as the sector engine's workers) and returns their queue.
func aeadHelpers() chan *aeadRun {
	aeadJobsOnce.Do(func() {
		n := min(runtime.GOMAXPROCS(0), maxAEADGoroutines) - 1
		aeadJobs = make(chan *aeadRun, 2*n)
		for range n {
			go aeadHelper(aeadJobs)
		}
	})
	return aeadJobs
}

// aeadHelper takes units of the runs it is offered. After one it polls
// for the next for spinFor before it sleeps, if the last came that soon:
// a stream of requests finds it awake, as the sector engine's workers
// (whose comment has the measurements); requests further apart do not
// keep a core spinning.
func aeadHelper(jobs chan *aeadRun) {
	spin := time.Duration(0)
	for {
		var r *aeadRun
		t0 := time.Now()
		select {
		case r = <-jobs:
		default:
			for r == nil && time.Since(t0) < spin {
				select {
				case r = <-jobs:
				default:
				}
			}
			if r == nil {
				r = <-jobs
			}
		}
		// The gap is measured to when the run was offered, not to when
		// this helper got it: a slow wake-up must not make it park for
		// good.
		if r.offered.Sub(t0) <= spinFor {
			spin = spinFor
		} else {
			spin = 0
		}
		for r.takeAndDo() {
		}
	}
}

// takeAndDo does the next unit, if one is left.
func (r *aeadRun) takeAndDo() bool {
	i := int(r.next.Add(1) - 1)
	if i >= r.units {
		return false
	}
	r.do(i)
	return true
}

func (r *aeadRun) do(i int) {
	a := r.m.a
	ss := int64(a.SectorSize())
	ms := a.MetaSize()
	lo, hi := r.bounds[i], r.bounds[i+1]
	at := r.off + int64(lo)
	meta := r.meta[lo/int(ss)*ms : hi/int(ss)*ms]
	var err error
	if r.read {
		d := r.dst[lo:hi]
		if err = r.m.iv.ReadSectors(d, meta, uint64(at/ss)); err == nil {
			err = a.DecryptSectors(d, d, meta, uint64(at/512))
			var ae *sector.AuthError
			if errors.As(err, &ae) {
				err = &IntegrityError{Sector: ae.Sector, Offset: int64(ae.Sector) * 512}
			}
		}
	} else {
		err = a.EncryptSectors(r.dst[lo:hi], meta, r.src[lo:hi], uint64(at/512))
	}
	r.errs[i] = err
	r.done[i].Store(true)
	select {
	case r.finished <- struct{}{}:
	default:
	}
}

// waitFor returns when units [0, n) are done, doing any still untaken.
func (r *aeadRun) waitFor(n int) {
	for i := 0; i < n; i++ {
		for t0 := time.Now(); !r.done[i].Load(); {
			if r.takeAndDo() {
				continue
			}
			// A helper is on it: its unit is tens of µs of work. Poll
			// (as the sector engine does, for the same wake-up latency),
			// then sleep until a helper finishes a unit: one whose
			// thread lost its core may take milliseconds.
			if time.Since(t0) > spinFor {
				<-r.finished
			}
		}
	}
}

// firstErr is the error of the first failed unit of [0, n).
func (r *aeadRun) firstErr(n int) error {
	for _, err := range r.errs[:n] {
		if err != nil {
			return err
		}
	}
	return nil
}

// readyFn is the write's ready callback: blocks [0, k) are encrypted.
func (r *aeadRun) readyFn(blocks int) error {
	n := min(sort.SearchInts(r.bounds, blocks*r.m.a.SectorSize()), r.units)
	r.waitFor(n)
	return r.firstErr(n)
}

// stop keeps units from being taken and waits for those taken, so that
// the buffers can be reused.
func (r *aeadRun) stop() {
	taken := int(min(r.next.Swap(int64(r.units)+1<<40), int64(r.units)))
	for i := 0; i < taken; i++ {
		for !r.done[i].Load() {
			<-r.finished
		}
	}
}

// integrityDevice stands for the device under an integrity volume in
// Volume.dev: Sync flushes the integrity volume (journal, bitmap) and
// Close closes it and then the device. Reads and writes go through the
// map, never through it.
type integrityDevice struct {
	iv  *integrity.Volume
	dev Device
}

func (d *integrityDevice) ReadAt(p []byte, off int64) (int, error) {
	return 0, errors.New("blkcrypt: raw read of an integrity volume")
}

func (d *integrityDevice) WriteAt(p []byte, off int64) (int, error) {
	return 0, errors.New("blkcrypt: raw write of an integrity volume")
}

func (d *integrityDevice) Sync() error { return d.iv.Flush() }

func (d *integrityDevice) Close() error {
	err := d.iv.Close()
	if cerr := d.dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// aeadVolume opens the payload of a LUKS2 volume whose data segment has
// integrity: the dm-integrity device at the segment's offset, the AEAD
// over it.
func aeadVolume(h luksutil.Header, integrityType string, data Device, devSize int64, key []byte, readOnly bool) (*Volume, error) {
	var ivOff uint64
	if t, ok := h.(interface{ IVTweak() uint64 }); ok {
		ivOff = t.IVTweak()
	}
	a, err := sector.NewAEAD(h.Cipher(), integrityType, key, h.SectorSize(), ivOff)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", luksutil.ErrUnsupported, err)
	}
	off, size := h.DataOffset(), h.DataSize(devSize)
	if size <= 0 || off+size > devSize {
		a.Wipe()
		return nil, fmt.Errorf("%w: the data area (offset %d) does not fit a %d-byte device", luksutil.ErrDeviceTooSmall, off, devSize)
	}
	sec := &integrity.SectionDevice{Dev: data, Offset: off, Length: size}
	iv, err := integrity.Open(sec, integrity.Options{ReadOnly: readOnly, TagSize: a.MetaSize(), SectorSize: a.SectorSize()})
	if err != nil {
		a.Wipe()
		return nil, fmt.Errorf("the integrity device of the data segment: %w", err)
	}
	m := &aeadMap{a: a, iv: iv}
	v, err := newVolume(&integrityDevice{iv: iv, dev: data}, m, 0, iv.Size()/int64(a.SectorSize())*int64(a.SectorSize()), readOnly)
	if err != nil {
		iv.Close()
		a.Wipe()
		return nil, err
	}
	return v, nil
}

// checkFormatCipher checks Format's cipher and key size, and turns
// o.Integrity (cryptsetup's spelling) into the segment's integrity type.
func checkFormatCipher(o *FormatOptions, typ string) error {
	if o.Integrity == "" {
		return luksutil.CheckCipher(o.Cipher, o.KeySize)
	}
	if typ != "luks2" {
		return errors.New("integrity needs LUKS2")
	}
	if o.Header != "" || o.HeaderDevice != nil {
		return errors.New("integrity with a detached header is not supported")
	}
	it, err := luks2.IntegrityType(o.Integrity)
	if err != nil {
		return err
	}
	o.Integrity = it
	a, err := sector.NewAEAD(o.Cipher, it, make([]byte, o.KeySize), 512, 0)
	if err != nil {
		return err
	}
	a.Wipe()
	return nil
}

// formatIntegrity makes the data area of a freshly written LUKS2 header
// with an integrity segment a dm-integrity device, as cryptsetup
// luksFormat --integrity leaves it: the superblock (tags of the AEAD's
// metadata size, the segment's sector size), then every sector written
// with encrypted zeros and its tag (cryptsetup wipes the device through
// dm-crypt so that every sector reads), written directly, without the
// journal, as nothing on the volume can be lost yet.
func formatIntegrity(dev luksutil.Device, h *luks2.Header, key []byte) error {
	devSize, err := dev.Size()
	if err != nil {
		return err
	}
	a, err := sector.NewAEAD(h.Cipher(), h.IntegrityType(), key, h.SectorSize(), h.IVTweak())
	if err != nil {
		return err
	}
	defer a.Wipe()
	off := h.DataOffset()
	sec := &integrity.SectionDevice{Dev: dev, Offset: off, Length: h.DataSize(devSize)}
	if _, err := integrity.Format(sec, integrity.FormatOptions{RawTags: true, TagSize: a.MetaSize(), SectorSize: a.SectorSize(), Force: true}); err != nil {
		return fmt.Errorf("formatting the integrity device: %w", err)
	}
	iv, err := integrity.Open(sec, integrity.Options{Mode: integrity.ModeDirect, TagSize: a.MetaSize(), SectorSize: a.SectorSize()})
	if err != nil {
		return fmt.Errorf("opening the new integrity device: %w", err)
	}
	m := &aeadMap{a: a, iv: iv}
	zero := make([]byte, chunkSize)
	size := iv.Size() / int64(a.SectorSize()) * int64(a.SectorSize())
	for at := int64(0); at < size; at += chunkSize {
		if err := m.writeSectors(zero[:min(chunkSize, size-at)], at); err != nil {
			iv.Close()
			return fmt.Errorf("writing the sectors' tags: %w", err)
		}
	}
	return iv.Close()
}
