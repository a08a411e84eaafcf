package blkcrypt

import (
	"bytes"
	"crypto/rand"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/sector"
)

// slowDev is an in-memory device with slow reads, writes, syncs and Close,
// like a network or cloud device. It models durability: Sync keeps a copy
// of what had been written when it began, and that copy is all a reopen
// sees. It counts every write that landed after the last Sync began or
// after Close, which a correct Volume never lets happen.
type slowDev struct {
	mu       sync.Mutex
	data     []byte
	durable  []byte
	syncs    int  // Syncs begun
	closed   bool // Close began
	lastSync int  // syncs when the latest write landed (for diagnostics)

	writeSyncs []int // for each completed write, the Syncs begun by then
	afterClose int   // writes or reads that arrived after Close began

	rw, sync, close time.Duration
	rnd             atomic.Uint64
}

func newSlowDev(size int) *slowDev {
	return &slowDev{data: make([]byte, size), durable: make([]byte, size),
		rw: 200 * time.Microsecond, sync: time.Millisecond, close: 20 * time.Millisecond}
}

// pause sleeps for up to d, differently on each call, so requests overlap
// Close at every stage.
func (d *slowDev) pause(max time.Duration) {
	if max > 0 {
		time.Sleep(time.Duration(d.rnd.Add(0x9e3779b97f4a7c15)>>33) % max)
	}
}

func (d *slowDev) ReadAt(p []byte, off int64) (int, error) {
	d.pause(d.rw)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.afterClose++
		return 0, errors.New("slowdev: closed")
	}
	return copy(p, d.data[off:]), nil
}

func (d *slowDev) WriteAt(p []byte, off int64) (int, error) {
	d.pause(d.rw)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.afterClose++
		return 0, errors.New("slowdev: closed")
	}
	copy(d.data[off:], p)
	d.writeSyncs = append(d.writeSyncs, d.syncs)
	d.lastSync = d.syncs
	return len(p), nil
}

func (d *slowDev) Sync() error {
	d.mu.Lock()
	d.syncs++
	copy(d.durable, d.data)
	d.mu.Unlock()
	d.pause(d.sync)
	return nil
}

func (d *slowDev) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	time.Sleep(d.close)
	return nil
}

// TestCloseRacingWriters: in many rounds, writers, readers and flushers run
// while Close is called at a random moment, on a device whose Close, reads
// and writes are slow. Each writer owns a region and remembers what it was
// told was written. Afterwards the durable copy, reopened with the same key
// through a new Volume, holds every acknowledged write; every refused
// request got ErrClosed; no write landed after the final flush began; and
// every read that succeeded saw the writer's own data (never the output of
// a wiped key).
func TestCloseRacingWriters(t *testing.T) {
	const (
		writers = 6
		region  = 48 << 10
		size    = writers * region
	)
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	key := make([]byte, 64)
	rand.Read(key)
	newCipher := func() *sector.Cipher {
		c, err := sector.New("aes-xts-plain64", bytes.Clone(key), sector.Options{SectorSize: 512})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var acked, refused, inFlightAtClose atomic.Int64
	for round := range rounds {
		dev := newSlowDev(size)
		v, err := NewVolume(dev, newCipher(), 0, size, false)
		if err != nil {
			t.Fatal(err)
		}
		// Zeros on the device decrypt to noise: start from encrypted zeros.
		if err := v.WriteZeroes(0, size); err != nil {
			t.Fatal(err)
		}
		shadow := make([]byte, size)
		var wg sync.WaitGroup
		var started sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			started.Add(1)
			go func() {
				defer wg.Done()
				r := mrand.New(mrand.NewPCG(uint64(round), uint64(w)))
				base := int64(w * region)
				mine := shadow[base : base+region]
				buf := make([]byte, region)
				once := false
				for {
					if !once {
						started.Done()
						once = true
					}
					var err error
					switch k := r.IntN(10); {
					case k < 6: // unaligned write: read-modify-write of its ends
						off := r.Int64N(region - 1)
						n := 1 + r.Int64N(min(region-off, 6000))
						p := buf[:n]
						for i := range p {
							p[i] = byte(r.Uint32())
						}
						if _, err = v.WriteAt(p, base+off); err == nil {
							copy(mine[off:], p)
							acked.Add(1)
						}
					case k < 8: // aligned multi-sector write
						off := r.Int64N(region/512) * 512
						n := (1 + r.Int64N(min((region-off)/512, 16))) * 512
						p := buf[:n]
						for i := range p {
							p[i] = byte(r.Uint32())
						}
						if _, err = v.WriteAt(p, base+off); err == nil {
							copy(mine[off:], p)
							acked.Add(1)
						}
					case k < 9: // read back own region
						off := r.Int64N(region - 1)
						n := 1 + r.Int64N(min(region-off, 8000))
						p := buf[:n]
						if _, err = v.ReadAt(p, base+off); err == nil && !bytes.Equal(p, mine[off:off+n]) {
							t.Errorf("round %d writer %d: read of %d at %d differs from what was written", round, w, n, off)
							return
						}
					default:
						err = v.Flush()
					}
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("round %d writer %d: refused with %v, want ErrClosed", round, w, err)
						}
						refused.Add(1)
						return
					}
				}
			}()
		}
		started.Wait()
		time.Sleep(time.Duration(mrand.IntN(3000)) * time.Microsecond)
		if n := v.state.Load(); n > 0 {
			inFlightAtClose.Add(n)
		}
		if err := v.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		wg.Wait()
		if err := v.Close(); !errors.Is(err, ErrClosed) {
			t.Errorf("second Close: %v, want ErrClosed", err)
		}

		dev.mu.Lock()
		final := dev.syncs
		late := 0
		for _, s := range dev.writeSyncs {
			if s >= final {
				late++
			}
		}
		if late > 0 || dev.afterClose > 0 {
			t.Errorf("round %d: %d writes landed after the final flush began, %d requests after Close", round, late, dev.afterClose)
		}
		durable := bytes.Clone(dev.durable)
		dev.mu.Unlock()

		re, err := NewVolume(&slowDev{data: durable, durable: bytes.Clone(durable)}, newCipher(), 0, size, false)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if _, err := re.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		for w := range writers {
			lo, hi := w*region, (w+1)*region
			if !bytes.Equal(got[lo:hi], shadow[lo:hi]) {
				bad := 0
				for s := lo; s < hi; s += 512 {
					if !bytes.Equal(got[s:s+512], shadow[s:s+512]) {
						bad++
					}
				}
				t.Errorf("round %d writer %d: %d of %d sectors lost acknowledged writes after reopening", round, w, bad, region/512)
			}
		}
		re.Close()
		if t.Failed() {
			return
		}
	}
	t.Logf("%d writes acknowledged, %d requests refused, %d in flight when Close was called", acked.Load(), refused.Load(), inFlightAtClose.Load())
	if acked.Load() == 0 || refused.Load() != int64(rounds*writers) || inFlightAtClose.Load() == 0 {
		t.Errorf("the race was not exercised: %d acknowledged, %d refused, %d in flight at Close", acked.Load(), refused.Load(), inFlightAtClose.Load())
	}
}

// TestClosedVolumeRefusesEverything: after Close every request, whatever
// its range, is ErrClosed, and nothing reaches the device.
func TestClosedVolumeRefusesEverything(t *testing.T) {
	c, err := sector.New("aes-xts-plain64", make([]byte, 64), sector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev := newSlowDev(64 << 10)
	dev.rw, dev.sync, dev.close = 0, 0, 0
	v, err := NewVolume(dev, c, 0, 64<<10, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4096)
	for name, err := range map[string]error{
		"ReadAt":          func() error { _, err := v.ReadAt(p, 0); return err }(),
		"ReadAt past end": func() error { _, err := v.ReadAt(p, 1<<20); return err }(),
		"WriteAt":         func() error { _, err := v.WriteAt(p, 100); return err }(),
		"WriteZeroes":     v.WriteZeroes(0, 8192),
		"Discard":         v.Discard(0, 8192),
		"Flush":           v.Flush(),
		"Close":           v.Close(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if dev.afterClose != 0 {
		t.Errorf("%d requests reached the device after Close", dev.afterClose)
	}
}
