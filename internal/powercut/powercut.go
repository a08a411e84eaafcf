// Package powercut is a test model of a disk with a volatile write cache,
// for proving that header updates survive a power cut.
//
// Every WriteAt lands in the cache (reads see it at once) and is recorded;
// Sync makes everything written before it durable. A power cut after the
// k-th operation (a write or a sync) keeps the durable content plus an
// arbitrary part of the writes issued since the last Sync: each 512-byte
// sector those writes touched ends up holding what the cache held for it
// after any one of them, or what was durable before them. So unsynced
// writes may be lost, reordered (a later one kept, an earlier one lost) or
// torn at sector boundaries, as a drive that reorders its queue and loses
// power mid-transfer would leave them. A sector write itself is atomic,
// which is what drives promise.
//
// The model records one run of an operation and then replays any prefix
// of it: the operation's reads up to the cut are the same as they would be
// if power had failed there, so "stop after k operations" need not rerun
// the operation (nor its KDF) for every k.
package powercut

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
)

// SectorSize is the granularity of a torn write.
const SectorSize = 512

// ErrClosed is returned by I/O on a closed Device.
var ErrClosed = errors.New("powercut: device is closed")

// Op is one recorded operation: a write of Data at Off, or a Sync.
type Op struct {
	Sync bool
	Off  int64
	Data []byte
}

// Device is an in-memory disk of fixed size with a volatile write cache.
// It implements luksutil.Device and blkcrypt.Device (Close is a no-op
// apart from refusing later I/O). It is safe for concurrent use.
type Device struct {
	mu     sync.Mutex
	base   []byte // durable content when recording began
	cur    []byte // what reads see: base plus every write so far
	trace  []Op
	closed bool
}

// New returns a device holding a copy of img, all of it durable.
func New(img []byte) *Device {
	return &Device{base: append([]byte(nil), img...), cur: append([]byte(nil), img...)}
}

// ReadAt reads from the cache (the latest writes), as the OS would.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	if off < 0 || off > int64(len(d.cur)) {
		return 0, io.EOF
	}
	n := copy(p, d.cur[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes into the cache and records the write; it never grows
// the device.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	if off < 0 || off+int64(len(p)) > int64(len(d.cur)) {
		return 0, fmt.Errorf("powercut: write of %d bytes at %d beyond the %d-byte device", len(p), off, len(d.cur))
	}
	if len(p) == 0 {
		return 0, nil
	}
	copy(d.cur[off:], p)
	d.trace = append(d.trace, Op{Off: off, Data: append([]byte(nil), p...)})
	return len(p), nil
}

// Sync records a durability barrier.
func (d *Device) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	d.trace = append(d.trace, Op{Sync: true})
	return nil
}

// Size returns the device size.
func (d *Device) Size() (int64, error) { return int64(len(d.base)), nil }

// Close refuses further I/O; the recording stays available.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

// Ops returns the number of operations recorded (writes and syncs).
func (d *Device) Ops() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.trace)
}

// Trace returns the recorded operations (shared, do not modify).
func (d *Device) Trace() []Op {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.trace[:len(d.trace):len(d.trace)]
}

// Current returns a copy of what reads see now (everything kept).
func (d *Device) Current() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.cur...)
}

// Cut is the state of the device when power fails right after its first
// k recorded operations.
type Cut struct {
	K       int
	durable []byte
	pending []Op
	// sectors the pending writes touched, ascending, and for each the
	// cache content after every pending write that touched it, in order.
	sectors []int64
	states  [][][]byte
	writers [][]int // index into pending of the write behind states[i][j]
}

// CutAfter returns the power-cut state after the first k operations
// (0 ≤ k ≤ Ops()).
func (d *Device) CutAfter(k int) *Cut {
	d.mu.Lock()
	defer d.mu.Unlock()
	if k < 0 || k > len(d.trace) {
		panic(fmt.Sprintf("powercut: cut after %d of %d operations", k, len(d.trace)))
	}
	lastSync := -1
	for i := 0; i < k; i++ {
		if d.trace[i].Sync {
			lastSync = i
		}
	}
	c := &Cut{K: k, durable: append([]byte(nil), d.base...)}
	for i := 0; i <= lastSync; i++ {
		if op := d.trace[i]; !op.Sync {
			copy(c.durable[op.Off:], op.Data)
		}
	}
	for i := lastSync + 1; i < k; i++ {
		if !d.trace[i].Sync {
			c.pending = append(c.pending, d.trace[i])
		}
	}
	c.index()
	return c
}

func (c *Cut) index() {
	if len(c.pending) == 0 {
		return
	}
	cache := map[int64][]byte{} // sector → current cache content
	pos := map[int64]int{}
	for wi, op := range c.pending {
		first := op.Off / SectorSize
		last := (op.Off + int64(len(op.Data)) - 1) / SectorSize
		for s := first; s <= last; s++ {
			sec, ok := cache[s]
			if !ok {
				sec = append([]byte(nil), c.durable[s*SectorSize:min((s+1)*SectorSize, int64(len(c.durable)))]...)
				pos[s] = len(c.sectors)
				c.sectors = append(c.sectors, s)
				c.states = append(c.states, nil)
				c.writers = append(c.writers, nil)
			}
			lo := max(op.Off, s*SectorSize)
			hi := min(op.Off+int64(len(op.Data)), (s+1)*SectorSize)
			sec = append([]byte(nil), sec...)
			copy(sec[lo-s*SectorSize:], op.Data[lo-op.Off:hi-op.Off])
			cache[s] = sec
			i := pos[s]
			c.states[i] = append(c.states[i], sec)
			c.writers[i] = append(c.writers[i], wi)
		}
	}
	// Keep the sectors ascending so images are built in one pass.
	idx := make([]int, len(c.sectors))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return c.sectors[idx[a]] < c.sectors[idx[b]] })
	s2, st2, w2 := make([]int64, len(idx)), make([][][]byte, len(idx)), make([][]int, len(idx))
	for i, j := range idx {
		s2[i], st2[i], w2[i] = c.sectors[j], c.states[j], c.writers[j]
	}
	c.sectors, c.states, c.writers = s2, st2, w2
}

// Pending returns how many unsynced writes the cut can keep or lose.
func (c *Cut) Pending() int { return len(c.pending) }

// choice gives, per touched sector, 0 for the durable content or j+1 for
// the cache content after its j-th pending write.
type choice []int

// Survivors is one way of deciding what survives a cut.
type Survivors struct {
	Name string
	pick func(c *Cut, r *rand.Rand) choice
}

// KeepNone loses every unsynced write.
var KeepNone = Survivors{"keep-none", func(c *Cut, _ *rand.Rand) choice { return make(choice, len(c.sectors)) }}

// KeepAll keeps every unsynced write (the state reads saw).
var KeepAll = Survivors{"keep-all", func(c *Cut, _ *rand.Rand) choice {
	ch := make(choice, len(c.sectors))
	for i := range ch {
		ch[i] = len(c.states[i])
	}
	return ch
}}

// The random policies. Each is a different shape of damage, because a
// per-sector coin alone almost never keeps a whole 16 KiB header copy.
var randomPolicies = []Survivors{
	// Every sector independently holds any of its versions.
	{"sectors", func(c *Cut, r *rand.Rand) choice {
		ch := make(choice, len(c.sectors))
		for i := range ch {
			ch[i] = r.IntN(len(c.states[i]) + 1)
		}
		return ch
	}},
	// Every write is kept or lost whole; a sector holds the last kept one.
	{"writes", func(c *Cut, r *rand.Rand) choice {
		kept := make([]bool, len(c.pending))
		for i := range kept {
			kept[i] = r.IntN(2) == 0
		}
		return c.lastKept(func(w int, _ int64) bool { return kept[w] })
	}},
	// The cache drains in order: writes before a random point are kept,
	// the one at it is torn at a random sector, the rest are lost.
	{"fifo-torn", func(c *Cut, r *rand.Rand) choice {
		stop := r.IntN(len(c.pending))
		op := c.pending[stop]
		first := op.Off / SectorSize
		n := (op.Off+int64(len(op.Data))-1)/SectorSize - first + 1
		tear := first + r.Int64N(n+1)
		return c.lastKept(func(w int, s int64) bool { return w < stop || w == stop && s < tear })
	}},
	// The cache drains newest first: writes after a random point are
	// kept, the one at it keeps only its tail, earlier ones are lost.
	{"lifo-torn", func(c *Cut, r *rand.Rand) choice {
		stop := r.IntN(len(c.pending))
		op := c.pending[stop]
		first := op.Off / SectorSize
		n := (op.Off+int64(len(op.Data))-1)/SectorSize - first + 1
		tear := first + r.Int64N(n+1)
		return c.lastKept(func(w int, s int64) bool { return w > stop || w == stop && s >= tear })
	}},
	// Every write keeps a random subset of its sectors; a sector holds the
	// last kept version.
	{"torn-writes", func(c *Cut, r *rand.Rand) choice {
		p := make([]int, len(c.pending))
		for i := range p {
			p[i] = r.IntN(5) // keep-probability in quarters: 0 … 1
		}
		return c.lastKept(func(w int, _ int64) bool { return r.IntN(4) < p[w] })
	}},
}

func (c *Cut) lastKept(kept func(w int, sector int64) bool) choice {
	ch := make(choice, len(c.sectors))
	for i, ws := range c.writers {
		for j, w := range ws {
			if kept(w, c.sectors[i]) {
				ch[i] = j + 1
			}
		}
	}
	return ch
}

// Random returns the n-th seeded random survivor policy; n picks the
// shape (rotating through all of them) and seeds the choices.
func Random(seed uint64, n int) Survivors {
	p := randomPolicies[n%len(randomPolicies)]
	return Survivors{fmt.Sprintf("%s#%d/%d", p.Name, seed, n), func(c *Cut, _ *rand.Rand) choice {
		// Hash the seed, the set and the cut point into the generator's
		// key: nearby PCG seeds give correlated first outputs, which made
		// sector 0 survive in every "random" set of a cut.
		var b [24]byte
		binary.LittleEndian.PutUint64(b[0:], seed)
		binary.LittleEndian.PutUint64(b[8:], uint64(n))
		binary.LittleEndian.PutUint64(b[16:], uint64(c.K))
		return p.pick(c, rand.New(rand.NewChaCha8(sha256.Sum256(b[:]))))
	}}
}

// Image is one possible device content after the cut.
type Image struct {
	Survivors string
	// Sum identifies the content, to skip images already judged.
	Sum [32]byte
	cut *Cut
	ch  choice
}

// Pick applies a survivor policy.
func (c *Cut) Pick(s Survivors) Image {
	ch := s.pick(c, nil)
	h := sha256.New()
	h.Write(c.durableSum())
	var b [8]byte
	for i, j := range ch {
		if j == 0 {
			continue // the durable content is in durableSum
		}
		s := c.sectors[i]
		for k := range b {
			b[k] = byte(s >> (8 * k))
		}
		h.Write(b[:])
		h.Write(c.states[i][j-1])
	}
	img := Image{Survivors: s.Name, cut: c, ch: ch}
	h.Sum(img.Sum[:0])
	return img
}

func (c *Cut) durableSum() []byte {
	s := sha256.Sum256(c.durable)
	return s[:]
}

// Bytes returns the image content (a fresh copy).
func (im Image) Bytes() []byte {
	out := append([]byte(nil), im.cut.durable...)
	im.Apply(out)
	return out
}

// Apply writes the image's surviving sectors over buf, which must hold
// the cut's durable content (see Durable).
func (im Image) Apply(buf []byte) {
	for i, j := range im.ch {
		if j > 0 {
			copy(buf[im.cut.sectors[i]*SectorSize:], im.cut.states[i][j-1])
		}
	}
}

// Durable returns the content that survives every cut at this point.
func (c *Cut) Durable() []byte { return c.durable }

// Images returns the two extremes (keep nothing, keep everything) and n
// seeded random survivor sets, without duplicates of content. A cut with
// nothing pending has one image.
func (c *Cut) Images(seed uint64, n int) []Image {
	var out []Image
	seen := map[[32]byte]bool{}
	add := func(s Survivors) {
		im := c.Pick(s)
		if !seen[im.Sum] {
			seen[im.Sum] = true
			out = append(out, im)
		}
	}
	add(KeepNone)
	add(KeepAll)
	if len(c.pending) > 0 {
		for i := 0; i < n; i++ {
			add(Random(seed, i))
		}
	}
	return out
}
