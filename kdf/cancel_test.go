package kdf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// residentBytes is the process's resident set from /proc/self/statm, or
// 0 where there is none: kdf maps Argon2's memory outside the Go heap on
// Linux, so HeapInuse alone would not see it.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	n, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return n * uint64(os.Getpagesize())
}

// TestArgon2CancelReleases is bug 7 (issue #25): a cancelled Argon2 must
// stop, not run on in the background holding its memory. The derivation
// (256 MiB, far more passes than 50 ms allow) is cancelled after 50 ms; it
// must return ctx's error within 100 ms of the cancel, and right after it
// returns its goroutines must be gone and its memory no longer in use
// (neither Go heap nor resident memory 32 MiB above where it started).
func TestArgon2CancelReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 256 MiB")
	}
	salt := bytes.Repeat([]byte{7}, 32)
	for _, p := range []Params{
		{Type: Argon2id, Iterations: 1000, MemoryKiB: 256 << 10, Parallel: 4},
		{Type: Argon2i, Iterations: 1000, MemoryKiB: 256 << 10, Parallel: 1},
	} {
		t.Run(fmt.Sprintf("%s-%d", p.Type, p.Parallel), func(t *testing.T) {
			baseG := runtime.NumGoroutine()
			baseHeap, baseRSS := heapInUse(), residentBytes()
			ctx, cancel := context.WithCancel(context.Background())
			var cancelled time.Time
			timer := time.AfterFunc(50*time.Millisecond, func() {
				cancelled = time.Now()
				cancel()
			})
			defer timer.Stop()
			k, err := DeriveContext(ctx, p, []byte("pw"), salt, 32)
			returned := time.Now()
			if !errors.Is(err, context.Canceled) || k != nil {
				t.Fatalf("%s: err %v, key %v; want context.Canceled and no key", p, err, k != nil)
			}
			d := returned.Sub(cancelled)
			if d > 100*time.Millisecond {
				t.Errorf("%s: returned %v after the cancel", p, d)
			}
			t.Logf("returned %v after the cancel", d)
			// Allow the runtime a moment to retire exiting goroutines, but
			// far less than the abandoned derivation would take.
			deadline := time.Now().Add(200 * time.Millisecond)
			for {
				g, h, r := runtime.NumGoroutine(), heapInUse(), residentBytes()
				if g <= baseG && h < baseHeap+32<<20 && r < baseRSS+32<<20 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: 200 ms after return, %d goroutines (baseline %d), %d MiB of heap in use (baseline %d MiB), %d MiB resident (baseline %d MiB)",
						p, g, baseG, h>>20, baseHeap>>20, r>>20, baseRSS>>20)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestArgon2DeadlineLarge: a context that ends before the derivation
// starts, or early in the first pass of a large one, gives ctx's error
// promptly.
func TestArgon2DeadlineLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 1 GiB")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := DeriveContext(ctx, Params{Type: Argon2id, Iterations: 4, MemoryKiB: 1 << 20, Parallel: 4}, []byte("pw"), make([]byte, 32), 32); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	// 1 GiB with 4 lanes: each segment is 64 Mi of blocks per lane, too long
	// to check only between segments.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := DeriveContext(ctx, Params{Type: Argon2id, Iterations: 4, MemoryKiB: 1 << 20, Parallel: 4}, []byte("pw"), make([]byte, 32), 32)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	d := time.Since(start)
	if d > 30*time.Millisecond+100*time.Millisecond {
		t.Errorf("1 GiB, 4 lanes: returned after %v for a 30 ms deadline", d)
	}
	t.Logf("1 GiB, 4 lanes: returned after %v for a 30 ms deadline", d)
}

// TestPBKDF2Cancel: PBKDF2 returns within 100 ms of a cancel, for a fast
// hash and for the slowest ones tcrypt uses (whirlpool, streebog).
func TestPBKDF2Cancel(t *testing.T) {
	for _, h := range []string{"sha256", "whirlpool", "ripemd160", "stribog512"} {
		hf, err := HashFunc(h)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var cancelled time.Time
		timer := time.AfterFunc(20*time.Millisecond, func() {
			cancelled = time.Now()
			cancel()
		})
		k, err := PBKDF2KeyContext(ctx, hf, []byte("pw"), []byte("salt"), 1<<30, 64)
		returned := time.Now()
		timer.Stop()
		if !errors.Is(err, context.Canceled) || k != nil {
			t.Fatalf("%s: err %v, key %v; want context.Canceled", h, err, k != nil)
		}
		d := returned.Sub(cancelled)
		if d > 100*time.Millisecond {
			t.Errorf("%s: returned %v after the cancel", h, d)
		}
		t.Logf("%s: returned %v after the cancel", h, d)
	}
}

// lateTimer is a context whose deadline has passed but whose timer has
// not fired yet, as on a machine too busy to schedule it.
type lateTimer struct {
	context.Context
	done chan struct{}
}

func (c lateTimer) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (c lateTimer) Done() <-chan struct{}       { return c.done }
func (c lateTimer) Err() error                  { return nil }

// TestStopAtDeadline: Argon2 and PBKDF2 stop at the deadline by the clock,
// with DeadlineExceeded, without waiting for Done.
func TestStopAtDeadline(t *testing.T) {
	ctx := lateTimer{context.Background(), make(chan struct{})}
	start := time.Now()
	_, err := DeriveContext(ctx, Params{Type: Argon2id, Iterations: 1000, MemoryKiB: 1024, Parallel: 2}, []byte("pw"), make([]byte, 32), 32)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("argon2: %v", err)
	}
	_, err = DeriveContext(ctx, Params{Type: PBKDF2, Hash: "sha256", Iterations: 1 << 30}, []byte("pw"), make([]byte, 32), 32)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("pbkdf2: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
}
