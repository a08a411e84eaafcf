package kdf

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"
)

// Defaults, as cryptsetup is built by default (meson_options.txt).
const (
	DefaultIterTime      = 2000 * time.Millisecond
	DefaultHash          = "sha256"
	DefaultMemoryKiB     = 1024 * 1024
	DefaultParallel      = 4
	DigestIterTime       = 125 * time.Millisecond // LUKS_MKD_ITERATIONS_MS
	MinDigestIterations  = 1000
	pbkdf2BenchTarget    = 1000 // ms; PBKDF2 is measured for 1 s and scaled
	benchMinMS           = 250
	benchMinMSFast       = 10
	benchPercentAtLeast  = 95
	benchPercentAtMost   = 110
	benchSamplesFast     = 3
	benchSamplesSlow     = 1
	pbkdf2BenchStartIter = 1 << 15
)

// Options choose the KDF of a new keyslot, the way cryptsetup's --pbkdf,
// --hash, --iter-time, --pbkdf-force-iterations, --pbkdf-memory and
// --pbkdf-parallel do.
type Options struct {
	// Type is PBKDF2, Argon2i or Argon2id; empty means the format's default.
	Type string
	// Hash is the PBKDF2 hash (also the AF and digest hash); empty means
	// sha256.
	Hash string
	// IterTime is the unlock time to aim for; zero means 2 s.
	IterTime time.Duration
	// Iterations, when non-zero, forces the PBKDF2 iteration count or the
	// Argon2 time cost and skips the benchmark.
	Iterations uint32
	// MemoryKiB is the Argon2 memory cost: the maximum the benchmark may
	// use, or the exact cost when Iterations is forced. Zero means 1 GiB,
	// limited to half of the physical memory when benchmarking.
	MemoryKiB uint32
	// Parallel is the Argon2 thread count; zero means 4, limited to the
	// number of CPUs when benchmarking.
	Parallel uint32
	// Progress, when set, is called after each benchmark measurement.
	Progress func(elapsed time.Duration)
}

// Forced reports whether the options skip the benchmark.
func (o Options) Forced() bool { return o.Iterations != 0 }

func (o Options) withDefaults(defType string) Options {
	if o.Type == "" {
		o.Type = defType
	}
	if o.Hash == "" {
		o.Hash = DefaultHash
	}
	if o.IterTime == 0 {
		o.IterTime = DefaultIterTime
	}
	return o
}

// Check validates the options the way cryptsetup's verify_pbkdf_params
// does, with defType filling an empty Type.
func (o Options) Check(defType string) error {
	o = o.withDefaults(defType)
	if o.IterTime < 0 {
		return fmt.Errorf("%w: negative iteration time", ErrInvalid)
	}
	if _, err := HashFunc(o.Hash); err != nil {
		return err
	}
	switch o.Type {
	case PBKDF2:
		if o.MemoryKiB != 0 || o.Parallel != 0 {
			return fmt.Errorf("%w: PBKDF max memory or parallel threads must not be set with pbkdf2", ErrInvalid)
		}
		if o.Forced() && o.Iterations < MinPBKDF2Iterations {
			return fmt.Errorf("%w: forced iteration count is too low for pbkdf2 (minimum is %d)", ErrInvalid, MinPBKDF2Iterations)
		}
	case Argon2i, Argon2id:
		if o.Forced() && o.Iterations < MinArgon2Time {
			return fmt.Errorf("%w: forced iteration count is too low for %s (minimum is %d)", ErrInvalid, o.Type, MinArgon2Time)
		}
		if o.MemoryKiB != 0 && o.MemoryKiB < MinArgon2MemoryKiB {
			return fmt.Errorf("%w: memory cost is too low for %s (minimum is %d kilobytes)", ErrInvalid, o.Type, MinArgon2MemoryKiB)
		}
		if o.MemoryKiB > MaxArgon2MemoryKiB {
			return fmt.Errorf("%w: maximum PBKDF memory cost is too high (maximum is %d kilobytes)", ErrInvalid, MaxArgon2MemoryKiB)
		}
		if o.Parallel > MaxArgon2Parallel {
			return fmt.Errorf("%w: PBKDF parallel cost is too high (maximum is %d)", ErrInvalid, MaxArgon2Parallel)
		}
	default:
		return fmt.Errorf("%w: unknown PBKDF type %q", ErrUnsupported, o.Type)
	}
	return nil
}

// Resolve turns options into the parameters of a new keyslot that derives
// keyLen bytes: forced values as given, otherwise the benchmark's result.
// defType fills an empty Type.
func Resolve(o Options, defType string, keyLen int) (Params, error) {
	return ResolveContext(context.Background(), o, defType, keyLen)
}

// ResolveContext is Resolve whose benchmark stops, with ctx's error in the
// chain, when ctx ends: a benchmarked Argon2 runs for seconds.
func ResolveContext(ctx context.Context, o Options, defType string, keyLen int) (Params, error) {
	if err := ctx.Err(); err != nil {
		return Params{}, err
	}
	if err := o.Check(defType); err != nil {
		return Params{}, err
	}
	o = o.withDefaults(defType)
	p := Params{Type: o.Type}
	if o.Type == PBKDF2 {
		p.Hash = o.Hash
	}
	if o.Forced() {
		p.Iterations = o.Iterations
		if o.Type != PBKDF2 {
			p.MemoryKiB, p.Parallel = o.MemoryKiB, o.Parallel
			if p.MemoryKiB == 0 {
				p.MemoryKiB = DefaultMemoryKiB
			}
			if p.Parallel == 0 {
				p.Parallel = DefaultParallel
			}
		}
		return p, nil
	}
	if o.Type == PBKDF2 {
		perSec, err := benchmarkPBKDF2(ctx, o.Hash, keyLen, o.Progress)
		if err != nil {
			return Params{}, err
		}
		it := float64(perSec) * float64(o.IterTime.Milliseconds()) / 1000
		if it > math.MaxUint32 {
			return Params{}, fmt.Errorf("%w: iteration count overflows", ErrInvalid)
		}
		p.Iterations = max(uint32(it), MinPBKDF2Iterations)
		return p, nil
	}
	maxMem := o.MemoryKiB
	if maxMem == 0 {
		maxMem = DefaultMemoryKiB
	}
	maxMem = min(maxMem, AdjustedPhysMemoryKiB())
	par := o.Parallel
	if par == 0 {
		par = DefaultParallel
	}
	par = max(1, min(par, uint32(runtime.NumCPU())))
	target := uint32(max(1, o.IterTime.Milliseconds()))
	t, m, err := benchmarkArgon2(ctx, o.Type, keyLen, maxMem, par, target, o.Progress)
	if err != nil {
		return Params{}, err
	}
	p.Iterations, p.MemoryKiB, p.Parallel = t, m, par
	return p, nil
}

// DigestIterations returns the PBKDF2 iteration count for a volume key
// digest: 1000 when the keyslot KDF was forced, otherwise what the hash
// computes in 125 ms (LUKS_MKD_ITERATIONS_MS), at least 1000.
func DigestIterations(o Options, hashName string, keyLen int) (uint32, error) {
	return DigestIterationsContext(context.Background(), o, hashName, keyLen)
}

// DigestIterationsContext is DigestIterations whose benchmark stops when
// ctx ends.
func DigestIterationsContext(ctx context.Context, o Options, hashName string, keyLen int) (uint32, error) {
	if o.Forced() {
		return MinDigestIterations, nil
	}
	perSec, err := benchmarkPBKDF2(ctx, hashName, keyLen, o.Progress)
	if err != nil {
		return 0, err
	}
	it := float64(perSec) * float64(DigestIterTime.Milliseconds()) / 1000
	if it > math.MaxUint32 {
		return 0, fmt.Errorf("%w: iteration count overflows", ErrInvalid)
	}
	return max(uint32(it), MinDigestIterations), nil
}

// benchmarkPBKDF2 returns PBKDF2 iterations per second of CPU time, as
// crypt_pbkdf_check measures them: grow the iteration count until one run
// takes more than 500 ms of CPU time, then scale.
func benchmarkPBKDF2(ctx context.Context, hashName string, keyLen int, progress func(time.Duration)) (uint32, error) {
	h, err := HashFunc(hashName)
	if err != nil {
		return 0, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pass, salt := []byte("foobarfo"), []byte("01234567890abcdef")[:16]
	iter := uint32(pbkdf2BenchStartIter)
	var perSec uint32
	for step := 0; ; step++ {
		start := threadCPUTime()
		k, err := PBKDF2KeyContext(ctx, h, pass, salt, int(iter), keyLen)
		if err != nil {
			return 0, err
		}
		clear(k)
		ms := (threadCPUTime() - start).Milliseconds()
		if ms > 0 {
			v := float64(iter) * pbkdf2BenchTarget / float64(ms)
			if v > math.MaxUint32 {
				return 0, fmt.Errorf("%w: pbkdf2 benchmark overflow", ErrInvalid)
			}
			perSec = uint32(v)
		}
		if progress != nil {
			progress(time.Duration(ms) * time.Millisecond)
		}
		if ms > 500 {
			break
		}
		switch {
		case ms <= 62:
			iter <<= 4
		case ms <= 125:
			iter <<= 3
		case ms <= 250:
			iter <<= 2
		default:
			iter <<= 1
		}
		if step >= 10 || iter == 0 {
			return 0, fmt.Errorf("%w: pbkdf2 benchmark did not converge", ErrInvalid)
		}
	}
	return perSec, nil
}

// measureArgon2 runs Argon2 up to samples times and returns the fastest
// wall-clock time in ms, stopping early when a run is below atLeast ms.
func measureArgon2(ctx context.Context, typ string, keyLen int, t, m, par uint32, samples int, atLeast int64) (int64, error) {
	pass, salt := []byte("foobarfo"), []byte("0123456789abcdef0123456789abcdef")
	best := int64(math.MaxInt64)
	for i := 0; i < samples; i++ {
		start := time.Now()
		k, err := DeriveContext(ctx, Params{Type: typ, Iterations: t, MemoryKiB: m, Parallel: par}, pass, salt, keyLen)
		clear(k)
		if err != nil {
			return 0, err
		}
		ms := time.Since(start).Milliseconds()
		if ms < atLeast {
			return ms, nil
		}
		best = min(best, ms)
	}
	return best, nil
}

// nextArgon2 moves (t, m) towards target ms from a measurement of ms;
// it reports true when the search is over.
func nextArgon2(t, m *uint32, minT, minM, maxM uint32, ms int64, target uint32) bool {
	oldT, oldM := *t, *m
	if uint32(ms) > target {
		newT := uint32(uint64(*t) * uint64(target) / uint64(ms))
		if newT < minT {
			nm := uint64(*t) * uint64(*m) * uint64(target) / (uint64(minT) * uint64(ms))
			*t = minT
			*m = uint32(nm)
			if *m < minM {
				*m = minM
				return true
			}
		} else {
			*t = newT
		}
	} else {
		newM := uint32(uint64(*m) * uint64(target) / uint64(max(ms, 1)))
		switch {
		case newM > maxM:
			nt := uint64(*t) * uint64(*m) * uint64(target) / (uint64(maxM) * uint64(max(ms, 1)))
			*t = uint32(nt)
			*m = maxM
			if *t <= minT {
				*t = minT
				return true
			}
		case newM < minM:
			*m = minM
			return true
		default:
			*m = newM
		}
	}
	return oldT == *t && oldM == *m
}

// benchmarkArgon2 follows crypt_argon2_check: find small parameters that
// take at least 250 ms, extrapolate to the target, then refine until a run
// lands within 95–110 % of it.
func benchmarkArgon2(ctx context.Context, typ string, keyLen int, maxM, par, target uint32, progress func(time.Duration)) (uint32, uint32, error) {
	minT := uint32(MinArgon2Time)
	minM := min(uint32(minBenchMemoryKiB), maxM)
	if minM < par*8 {
		minM = par * 8
	}
	if maxM < minM {
		return 0, 0, fmt.Errorf("%w: argon2 memory limit %d KiB is below the %d KiB minimum", ErrInvalid, maxM, minM)
	}
	atLeast := int64(target) * benchPercentAtLeast / 100
	atMost := int64(target) * benchPercentAtMost / 100
	t, m := minT, minM
	var ms int64
	var err error
	for {
		if ms, err = measureArgon2(ctx, typ, keyLen, t, m, par, benchSamplesFast, benchMinMS); err != nil {
			return 0, 0, err
		}
		if progress != nil {
			progress(time.Duration(ms) * time.Millisecond)
		}
		if ms >= benchMinMS {
			break
		}
		if m == maxM {
			if ms < benchMinMSFast {
				t *= 16
			} else {
				n := uint32(uint64(t) * benchMinMS / uint64(ms))
				if n == t {
					break
				}
				t = n
			}
		} else {
			if ms < benchMinMSFast {
				m *= 16
			} else {
				n := uint32(uint64(m) * benchMinMS / uint64(ms))
				if n == m {
					break
				}
				m = n
			}
			m = min(m, maxM)
		}
	}
	for {
		if nextArgon2(&t, &m, minT, minM, maxM, ms, target) {
			break
		}
		if ms, err = measureArgon2(ctx, typ, keyLen, t, m, par, benchSamplesSlow, atLeast); err != nil {
			return 0, 0, err
		}
		if progress != nil {
			progress(time.Duration(ms) * time.Millisecond)
		}
		if ms >= atLeast && ms <= atMost {
			break
		}
	}
	return t, m, nil
}

// AdjustedPhysMemoryKiB is the Argon2 memory ceiling cryptsetup applies
// when benchmarking (pbkdf_adjusted_phys_memory_kb): half of the physical
// memory; on machines under 4 GiB without swap, half of the free memory
// when that is smaller (and above 64 MiB); 1 GiB when memory is unknown.
func AdjustedPhysMemoryKiB() uint32 {
	total, free, swap, ok := memInfoKiB()
	if !ok || total < 128*1024 || total > math.MaxUint32 {
		return DefaultMemoryKiB
	}
	mem := total / 2
	if mem < 2*1024*1024 && swap == 0 {
		f := free / 2
		if f > 64*1024 && f < mem {
			return uint32(f)
		}
	}
	return uint32(mem)
}
