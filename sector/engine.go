package sector

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/aes"
)

// Engine dispatches sector batches. A batch smaller than the break-even size
// runs inline in the caller's goroutine; a larger one is split across a pool
// of workers, one per core, like dm-crypt's kcryptd workqueue. The
// break-even size is measured per driver and sector size on first use,
// because handing work to another core costs more than small work itself
// (the lesson of the qce driver's 512-byte software fallback).
type Engine struct {
	workers int
	jobs    chan *batch
	free    chan *batch // recycled batches: any goroutine may return one

	override  atomic.Int64 // bytes; 0 = measure
	mu        sync.Mutex
	threshold map[string]int64 // by driver/sector size; -1 = never parallel
	measuring sync.Mutex
}

// EnvThreshold names the environment variable that overrides the measured
// break-even size, in bytes, for the default engine. 0 or unset measures;
// a negative value never goes parallel.
const EnvThreshold = "BLKCRYPT_PARALLEL_THRESHOLD"

var (
	defaultEngine     *Engine
	defaultEngineOnce sync.Once
)

// DefaultEngine returns the process-wide engine with GOMAXPROCS workers.
func DefaultEngine() *Engine {
	defaultEngineOnce.Do(func() {
		defaultEngine = NewEngine(runtime.GOMAXPROCS(0))
		if v, err := strconv.ParseInt(os.Getenv(EnvThreshold), 10, 64); err == nil && v != 0 {
			defaultEngine.SetThreshold(v)
		}
	})
	return defaultEngine
}

// NewEngine starts an engine with the given number of workers (the caller
// counts as one of them). Workers live as long as the process.
func NewEngine(workers int) *Engine {
	if workers < 1 {
		workers = 1
	}
	e := &Engine{workers: workers, threshold: map[string]int64{}, jobs: make(chan *batch, 4*workers), free: make(chan *batch, 4*workers)}
	for i := 1; i < workers; i++ {
		go e.worker()
	}
	return e
}

// Workers is the number of cores a batch can be spread over.
func (e *Engine) Workers() int { return e.workers }

// SetThreshold fixes the break-even size in bytes: batches of at least n
// bytes go parallel. n < 0 disables the parallel path; 0 goes back to
// measuring.
func (e *Engine) SetThreshold(n int64) { e.override.Store(n) }

// Threshold returns the break-even size used for c, measuring it first if
// needed. -1 means batches always run inline.
func (e *Engine) Threshold(c *Cipher) int64 {
	if o := e.override.Load(); o != 0 {
		return max(o, -1)
	}
	if e.workers < 2 {
		return -1
	}
	// The cipher caches its measured value: the hot path reads one atomic.
	if t := c.threshold.Load(); t != 0 {
		return t
	}
	t := e.measured(c)
	c.threshold.Store(t)
	return t
}

func (e *Engine) measured(c *Cipher) int64 {
	e.mu.Lock()
	key := c.Driver() + "/" + strconv.Itoa(c.opts.SectorSize)
	t, ok := e.threshold[key]
	e.mu.Unlock()
	if ok {
		return t
	}
	e.measuring.Lock()
	defer e.measuring.Unlock()
	e.mu.Lock()
	t, ok = e.threshold[key]
	e.mu.Unlock()
	if !ok {
		t = e.Measure(c)
		e.mu.Lock()
		e.threshold[key] = t
		e.mu.Unlock()
	}
	return t
}

// Measure finds the smallest batch, from 4 KiB to 1 MiB, that the parallel
// path encrypts clearly faster than inline, by timing both. It takes a few
// milliseconds. It returns -1 if the parallel path never wins.
func (e *Engine) Measure(c *Cipher) int64 {
	if e.workers < 2 {
		return -1
	}
	const maxSize = 1 << 20
	buf := make([]byte, maxSize)
	timed := func(f func()) time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}
	for size := max(4096, c.opts.SectorSize); size <= maxSize; size *= 2 {
		b := buf[:size]
		// Best of five, alternating, after one untimed parallel run so
		// that the workers are awake, as they are in a stream of batches.
		_ = e.parallel(c, b, b, 0, true)
		inline, par := time.Duration(1<<62), time.Duration(1<<62)
		for range 5 {
			inline = min(inline, timed(func() { _ = c.crypt(b, b, 0, true) }))
			par = min(par, timed(func() { _ = e.parallel(c, b, b, 0, true) }))
		}
		// Parallel must win by a margin, so that noise does not pull the
		// threshold down into sizes where it loses on average.
		if par*10 < inline*8 {
			return int64(size)
		}
	}
	return -1
}

// batch is one parallel request. The caller takes sectors from the front
// and helpers from the back, so in steady state each core keeps working on
// the same part of a buffer (and of its own cache), while a helper that
// starts late, or a core that runs slow, just takes less instead of holding
// up the request. Each take claims a share of what is left (guided
// self-scheduling): long kernel calls at first, and short ones where the
// two ends meet, so that no core finishes long before the other.
type batch struct {
	c        *Cipher
	dst, src []byte
	first    uint64
	enc      bool
	ss       int // sector size
	share    int // a take claims 1/share of the sectors left...
	minTake  int // ...but at least this many...
	gran     int // ...in a multiple of this many, and all if little would be left

	ends    atomic.Uint64  // next front sector << 32 | end of the back sectors
	left    atomic.Int64   // sectors not yet done
	done    sync.WaitGroup // the same count, for a caller that stops spinning
	refs    atomic.Int32   // goroutines still holding the batch
	offered time.Time      // when the caller offered it to the workers
	err     atomic.Pointer[error]
}

const (
	batchFront = 1 << 32
	// maxBatchSectors keeps sector indexes within the 32-bit halves of
	// batch.ends; larger requests are cut into batches of this size.
	maxBatchSectors = 1 << 24
	// minTakeBytes keeps every kernel call a multi-sector one.
	minTakeBytes = 16 << 10
)

// take claims sectors [i, i+n) from the front or the back; n == 0 when none
// is left.
func (b *batch) take(front bool) (i, n int) {
	for {
		v := b.ends.Load()
		lo, hi := int(v>>32), int(uint32(v))
		if lo >= hi {
			return 0, 0
		}
		n = max(b.minTake, (hi-lo)/b.share)
		n = (n + b.gran - 1) / b.gran * b.gran
		if hi-lo-n < b.minTake {
			n = hi - lo
		}
		next := v + uint64(n)<<32
		i = lo
		if !front {
			next, i = v-uint64(n), hi-n
		}
		if b.ends.CompareAndSwap(v, next) {
			return i, n
		}
	}
}

// work does sectors until none is left.
func (b *batch) work(front bool) {
	for {
		i, n := b.take(front)
		if n == 0 {
			return
		}
		o, end := i*b.ss, (i+n)*b.ss
		if err := b.c.crypt(b.dst[o:end], b.src[o:end], b.first+uint64(o/512), b.enc); err != nil {
			saved := err // only this branch allocates
			b.err.CompareAndSwap(nil, &saved)
		}
		b.left.Add(-int64(n))
		b.done.Add(-n)
	}
}

// wait returns when every sector is done. It polls first, for the same
// reason idle workers do: a parked caller is woken late, and the helper's
// last take is usually a microsecond away.
func (b *batch) wait() {
	for t0 := time.Now(); b.left.Load() > 0; {
		if time.Since(t0) > spinFor {
			b.done.Wait()
			return
		}
	}
	b.done.Wait() // pairs with every Done: returns at once
}

// release drops one hold on b; the last one recycles it.
func (e *Engine) release(b *batch) {
	if b.refs.Add(-1) == 0 {
		b.c, b.dst, b.src = nil, nil, nil
		select {
		case e.free <- b:
		default:
		}
	}
}

// spinFor is how long an idle worker keeps polling for the next batch
// before it parks, when the last batch came that soon. Waking a parked
// worker goes through the scheduler and, in a VM, an idle vCPU's wake-up:
// tens of microseconds, as long as the work it was woken for. Back-to-back
// batches (a sequential stream) find the worker still awake; workers whose
// batches come further apart park at once (see worker).
//
// The polls do not yield (runtime.Gosched). A yield puts the goroutine on
// the global run queue, where the other P may take it, or its own P may
// find nothing else and go idle: either way a vCPU can halt, and a halted
// vCPU here took 1-5 ms to run again. With yields, 1-3% of the back-to-back
// 1 MiB batches of bench/report's scaling table found the "spinning"
// worker not running, and the worker did 33-41% of the sectors; without
// them, 0.2-1%, and 44-48% (2-core/1-core went from 1.32x to 1.74x for
// AES-XTS and from 1.05x to 1.80x for CBC-ESSIV). A poll holds its P for at
// most spinFor; other Ps still steal what is queued on it.
const spinFor = 50 * time.Microsecond

func (e *Engine) worker() {
	spin := spinFor
	for {
		t0 := time.Now()
		b, ok := e.nextBatch(spin)
		if !ok {
			return
		}
		// Spin next time only if it would have paid this time: in a
		// stream of back-to-back batches the gap is microseconds, but a
		// server that encrypts one request every few hundred µs would
		// burn 50 µs of a core per request, a core its clients want.
		// The gap is measured to when the batch was offered, not to when
		// this worker got it: a parked worker's wake-up latency must not
		// count, or one slow wake-up would keep it parking for good.
		if b.offered.Sub(t0) <= spinFor {
			spin = spinFor
		} else {
			spin = 0
		}
		b.work(false)
		e.release(b)
	}
}

func (e *Engine) nextBatch(spin time.Duration) (*batch, bool) {
	select {
	case b, ok := <-e.jobs:
		return b, ok
	default:
	}
	for t0 := time.Now(); time.Since(t0) < spin; {
		select {
		case b, ok := <-e.jobs:
			return b, ok
		default:
		}
	}
	b, ok := <-e.jobs
	return b, ok
}

func (e *Engine) run(c *Cipher, dst, src []byte, first uint64, enc bool) error {
	if t := e.Threshold(c); t < 0 || int64(len(src)) < t {
		return c.crypt(dst, src, first, enc)
	}
	return e.parallel(c, dst, src, first, enc)
}

// parallel offers a batch to every worker and works on it too; it returns
// when every sector is done, without waiting for helpers that never got any.
func (e *Engine) parallel(c *Cipher, dst, src []byte, first uint64, enc bool) error {
	ss := c.opts.SectorSize
	for len(src) > maxBatchSectors*ss {
		k := maxBatchSectors * ss
		if err := e.parallel(c, dst[:k], src[:k], first, enc); err != nil {
			return err
		}
		dst, src, first = dst[k:], src[k:], first+uint64(k/512)
	}
	n := len(src) / ss
	gran := 1
	if enc {
		gran = c.encGroup
		if gran > 1 { // the AES kernels' group may be wider (32 sectors on Zen 5)
			gran = max(gran, aes.CBCEncryptGroup())
		}
	}
	minTake := (max(1, minTakeBytes/ss) + gran - 1) / gran * gran
	if e.workers < 2 || n < 2*minTake {
		return c.crypt(dst, src, first, enc)
	}
	var b *batch
	select {
	case b = <-e.free:
	default:
		b = new(batch)
	}
	helpers := min(e.workers-1, n/minTake-1)
	b.c, b.dst, b.src, b.first, b.enc, b.ss = c, dst, src, first, enc, ss
	// A quarter of an even split per take: the first takes are long, and
	// the last ones short enough that the ends meet within a few µs.
	b.share, b.minTake, b.gran = 4*(helpers+1), minTake, gran
	b.err.Store(nil)
	b.ends.Store(uint64(n))
	b.left.Store(int64(n))
	b.done.Add(n)
	b.refs.Store(int32(helpers + 1))
	b.offered = time.Now()
	for range helpers {
		select {
		case e.jobs <- b:
		default:
			// Every worker is behind on other batches: this one is
			// better done here than queued behind them.
			b.refs.Add(-1)
		}
	}
	b.work(true)
	b.wait()
	var err error
	if p := b.err.Load(); p != nil {
		err = *p
	}
	e.release(b)
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
