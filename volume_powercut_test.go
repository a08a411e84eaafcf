package blkcrypt_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/sector"
)

const pcVolSize = 256 << 10

var _ blkcrypt.Device = (*powercut.Device)(nil)

// volumeHistory runs a seeded mix of writes (aligned and not, 1 byte to
// 24 KiB) and flushes on a Volume over dev, and records for every sector
// the plaintext it held after each write that changed it, and for every
// acknowledged flush the device operation count when its Sync returned
// and the write count before it.
type volumeHistory struct {
	states  [][][]byte // per sector: plaintext after write 0, 1, …
	writeAt [][]int    // per sector: index of the write behind states
	flushes []flushMark
	writes  int
}

type flushMark struct {
	ops    int // device operations recorded when the flush returned
	writes int // volume writes acknowledged before it began
}

func runVolume(t *testing.T, v *blkcrypt.Volume, dev *powercut.Device, seed uint64, flush func() error) *volumeHistory {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	plain := make([]byte, pcVolSize)
	nsec := pcVolSize / 512
	h := &volumeHistory{states: make([][][]byte, nsec), writeAt: make([][]int, nsec)}
	for s := range h.states {
		h.states[s] = [][]byte{make([]byte, 512)} // the zero content the volume starts with
		h.writeAt[s] = []int{-1}
	}
	writes := 0
	for i := 0; i < 80; i++ {
		if r.IntN(5) == 0 {
			if err := flush(); err != nil {
				t.Fatal(err)
			}
			h.flushes = append(h.flushes, flushMark{ops: dev.Ops(), writes: writes})
			continue
		}
		n := 1 + r.IntN(24<<10)
		if r.IntN(2) == 0 {
			n = (n + 511) &^ 511
		}
		off := r.Int64N(pcVolSize - int64(n) + 1)
		if r.IntN(2) == 0 {
			off &^= 511
			n = min(n, pcVolSize-int(off))
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		if _, err := v.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(plain[off:], p)
		for s := off / 512; s <= (off+int64(n)-1)/512; s++ {
			h.states[s] = append(h.states[s], append([]byte(nil), plain[s*512:(s+1)*512]...))
			h.writeAt[s] = append(h.writeAt[s], writes)
		}
		writes++
	}
	h.writes = writes
	return h
}

// check decrypts a power-cut image and returns the first sector that
// holds neither what the last acknowledged flush before the cut made
// durable nor anything written after it.
func (h *volumeHistory) check(img []byte, c *sector.Cipher, opsBefore int) error {
	durable := 0 // writes made durable by a flush that completed
	for _, f := range h.flushes {
		if f.ops <= opsBefore {
			durable = f.writes
		}
	}
	pt := make([]byte, len(img))
	if err := c.DecryptSectors(pt, img, 0); err != nil {
		return err
	}
	for s := range h.states {
		// The sector's last version from a durable write, and every later one.
		first := 0
		for j, w := range h.writeAt[s] {
			if w < durable {
				first = j
			}
		}
		got := pt[s*512 : (s+1)*512]
		ok := false
		for _, st := range h.states[s][first:] {
			ok = ok || bytes.Equal(got, st)
		}
		if !ok {
			return fmt.Errorf("sector %d lost what %d flushed writes made durable", s, durable)
		}
	}
	return nil
}

// TestPowerCutVolume: every Volume write acknowledged before an
// acknowledged Flush survives a power cut at any later point, whatever
// the drive keeps of the unsynced writes; and the test is not blind: the
// same run with a Flush that does not reach the device loses data.
func TestPowerCutVolume(t *testing.T) {
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name    string
		noFlush bool
	}{{"flush", false}, {"flush-dropped", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := powercut.New(make([]byte, pcVolSize))
			c, err := sector.New("aes-xts-plain64", key, sector.Options{SectorSize: 512})
			if err != nil {
				t.Fatal(err)
			}
			// Encrypted zeros first, durable, so every sector decrypts to
			// a known state before the workload.
			zero := make([]byte, pcVolSize)
			c.EncryptSectors(zero, zero, 0)
			dev.WriteAt(zero, 0)
			dev.Sync()
			start := dev.Ops()
			v, err := blkcrypt.NewVolume(dev, c, 0, pcVolSize, false)
			if err != nil {
				t.Fatal(err)
			}
			flush := v.Flush
			if tc.noFlush {
				flush = func() error { return nil }
			}
			h := runVolume(t, v, dev, 5, flush)
			judge, err := sector.New("aes-xts-plain64", key, sector.Options{SectorSize: 512})
			if err != nil {
				t.Fatal(err)
			}
			bad, images := 0, 0
			seen := map[[32]byte]bool{}
			for k := start; k <= dev.Ops(); k++ {
				cut := dev.CutAfter(k)
				for _, im := range cut.Images(9, 6) {
					if seen[im.Sum] {
						continue
					}
					seen[im.Sum] = true
					images++
					if err := h.check(im.Bytes(), judge, k); err != nil {
						if !tc.noFlush {
							t.Fatalf("cut after %d of %d ops, survivors %s: %v", k, dev.Ops(), im.Survivors, err)
						}
						bad++
					}
				}
			}
			if tc.noFlush && bad == 0 {
				t.Fatalf("no cut loses data although no flush reached the device (%d images): the check is blind", images)
			}
			t.Logf("%d flushes, %d device ops, %d distinct cut images, %d lose acknowledged data", len(h.flushes), dev.Ops()-start, images, bad)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			if !tc.noFlush {
				// Close flushes: after it nothing acknowledged may be lost.
				h.flushes = append(h.flushes, flushMark{ops: dev.Ops(), writes: h.writes})
				if err := h.check(dev.CutAfter(dev.Ops()).Pick(powercut.KeepNone).Bytes(), judge, dev.Ops()); err != nil {
					t.Fatalf("after Close: %v", err)
				}
			}
		})
	}
}

// TestPowerCutVolumeConcurrent: four writers, each in its own 64 KiB
// regions, race a flusher. A write acknowledged before a Flush began, of
// a Flush acknowledged before the cut, survives the cut.
func TestPowerCutVolumeConcurrent(t *testing.T) {
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(i * 11)
	}
	c, err := sector.New("aes-xts-plain64", key, sector.Options{SectorSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	judge, err := sector.New("aes-xts-plain64", key, sector.Options{SectorSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, pcVolSize)
	c.EncryptSectors(zero, zero, 0)
	dev := powercut.New(zero)
	start := dev.Ops()
	v, err := blkcrypt.NewVolume(dev, c, 0, pcVolSize, false)
	if err != nil {
		t.Fatal(err)
	}
	const writers, region = 4, 64 << 10
	nsec := pcVolSize / 512
	// clock orders acknowledgements and flush starts.
	var clock atomic.Int64
	states := make([][][]byte, nsec)
	acked := make([][]int64, nsec)
	for s := range states {
		states[s] = [][]byte{make([]byte, 512)}
		acked[s] = []int64{-1}
	}
	var wg sync.WaitGroup
	tick := make(chan struct{}, 1) // a write was acknowledged
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			plain := make([]byte, pcVolSize)
			for i := 0; i < 30; i++ {
				// Regions w, w+4, …: this writer's sectors are its own.
				reg := int64(w+writers*r.IntN(pcVolSize/region/writers)) * region
				n := 1 + r.IntN(region/2)
				off := reg + r.Int64N(int64(region-n)+1)
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(r.Uint32())
				}
				if _, err := v.WriteAt(p, off); err != nil {
					t.Error(err)
					return
				}
				seq := clock.Add(1)
				select {
				case tick <- struct{}{}:
				default:
				}
				copy(plain[off:], p)
				for s := off / 512; s <= (off+int64(n)-1)/512; s++ {
					states[s] = append(states[s], append([]byte(nil), plain[s*512:(s+1)*512]...))
					acked[s] = append(acked[s], seq)
				}
			}
		}(w)
	}
	type mark struct{ begin, ops int64 }
	var flushes []mark
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Flush after every few acknowledged writes, concurrently with the
	// writers, and once more after the last.
	for running, n := true, 0; running; {
		select {
		case <-done:
			running = false
		case <-tick:
			if n++; n%3 != 0 {
				continue
			}
		}
		b := clock.Add(1)
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		flushes = append(flushes, mark{b, int64(dev.Ops())})
	}
	if t.Failed() {
		return
	}
	images := 0
	seen := map[[32]byte]bool{}
	pt := make([]byte, pcVolSize)
	for k := start; k <= dev.Ops(); k++ {
		var durable int64 = -1 // writes acknowledged before this clock value
		for _, f := range flushes {
			if f.ops <= int64(k) {
				durable = f.begin
			}
		}
		for _, im := range dev.CutAfter(k).Images(11, 4) {
			if seen[im.Sum] {
				continue
			}
			seen[im.Sum] = true
			images++
			if err := judge.DecryptSectors(pt, im.Bytes(), 0); err != nil {
				t.Fatal(err)
			}
			for s := range states {
				first := 0
				for j, a := range acked[s] {
					if a < durable {
						first = j
					}
				}
				ok := false
				for _, st := range states[s][first:] {
					ok = ok || bytes.Equal(pt[s*512:(s+1)*512], st)
				}
				if !ok {
					t.Fatalf("cut after %d ops, survivors %s: sector %d lost a write acknowledged before an acknowledged flush", k, im.Survivors, s)
				}
			}
		}
	}
	t.Logf("%d writers, %d flushes, %d device ops, %d distinct cut images", writers, len(flushes), dev.Ops()-start, images)
	v.Close()
}
