package sector

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Engine dispatches sector batches. A batch smaller than the break-even size
// runs inline in the caller's goroutine; a larger one is split across a pool
// of workers, one per core, like dm-crypt's kcryptd workqueue. The
// break-even size is measured per driver and sector size on first use,
// because handing work to another core costs more than small work itself
// (the lesson of the qce driver's 512-byte software fallback).
type Engine struct {
	workers int
	jobs    chan *job

	batches sync.Pool

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
	e := &Engine{workers: workers, threshold: map[string]int64{}, jobs: make(chan *job, 4*workers)}
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
	best := func(f func()) time.Duration {
		m := time.Duration(1 << 62)
		for r := 0; r < 5; r++ {
			t0 := time.Now()
			f()
			if d := time.Since(t0); d < m {
				m = d
			}
		}
		return m
	}
	for size := max(4096, c.opts.SectorSize); size <= maxSize; size *= 2 {
		b := buf[:size]
		inline := best(func() { _ = c.crypt(b, b, 0, true) })
		par := best(func() { _ = e.parallel(c, b, b, 0, true) })
		// Parallel must win by a margin, so that noise does not pull the
		// threshold down into sizes where it loses on average.
		if par*10 < inline*8 {
			return int64(size)
		}
	}
	return -1
}

type job struct {
	c        *Cipher
	dst, src []byte
	first    uint64
	enc      bool
	b        *batch
}

// batch carries the jobs of one parallel request. It is taken from and
// returned to the pool by the submitting goroutine only: workers never touch
// the pool, so sync.Pool's per-P caches stay balanced and steady state
// allocates nothing.
type batch struct {
	wg   sync.WaitGroup
	err  atomic.Pointer[error]
	jobs []job
}

func (e *Engine) worker() {
	for j := range e.jobs {
		if err := j.c.crypt(j.dst, j.src, j.first, j.enc); err != nil {
			saved := err // only this branch allocates
			j.b.err.CompareAndSwap(nil, &saved)
		}
		j.b.wg.Done()
	}
}

func (e *Engine) run(c *Cipher, dst, src []byte, first uint64, enc bool) error {
	if t := e.Threshold(c); t < 0 || int64(len(src)) < t {
		return c.crypt(dst, src, first, enc)
	}
	return e.parallel(c, dst, src, first, enc)
}

// parallel splits a batch into one contiguous part per worker, keeps the
// first part for the calling goroutine and waits for the rest.
func (e *Engine) parallel(c *Cipher, dst, src []byte, first uint64, enc bool) error {
	ss := c.opts.SectorSize
	n := len(src) / ss
	parts := min(e.workers, n)
	if parts < 2 {
		return c.crypt(dst, src, first, enc)
	}
	b, _ := e.batches.Get().(*batch)
	if b == nil {
		b = &batch{jobs: make([]job, e.workers)}
	}
	b.err.Store(nil)
	per := n / parts
	rest := n % parts
	off := per + boolInt(rest > 0) // the caller's part
	b.wg.Add(parts - 1)
	for p, start := 1, off; p < parts; p++ {
		cnt := per + boolInt(p < rest)
		j := &b.jobs[p]
		*j = job{c: c, dst: dst[start*ss : (start+cnt)*ss], src: src[start*ss : (start+cnt)*ss],
			first: first + uint64(start*ss/512), enc: enc, b: b}
		e.jobs <- j
		start += cnt
	}
	err := c.crypt(dst[:off*ss], src[:off*ss], first, enc)
	b.wg.Wait()
	if p := b.err.Load(); p != nil && err == nil {
		err = *p
	}
	clear(b.jobs)
	e.batches.Put(b)
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
