package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blkcrypt/blkcrypt/capi"
)

// The scaling probe answers "how much can a second worker add on this
// machine at all?" with work that shares nothing: each goroutine, locked to
// its own OS thread, loops over its own L1-resident buffer (no memory
// traffic, no locks, no engine). If two vCPUs are two hyperthreads of one
// physical core, work bound by the AES units barely scales, while latency-
// bound scalar work still nearly doubles; on two real cores both double.

// probeRate runs work on w threads for d and returns the total rate in
// units per second (work returns the units it did).
func probeRate(w int, d time.Duration, newWork func() func() int) float64 {
	var total atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	start := make(chan struct{})
	wg.Add(w)
	ready.Add(w)
	for range w {
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f := newWork()
			ready.Done()
			<-start
			n := 0
			for !stop.Load() {
				n += f()
			}
			total.Add(int64(n))
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return float64(total.Load()) / time.Since(t0).Seconds()
}

// aesProbe encrypts a private buffer of size bytes with the best xts(aes)
// driver: 8 KiB stays in L1, larger sizes show what the cores share.
func aesProbe(size int) func() func() int {
	return func() func() int {
		t, err := capi.NewSkcipher("xts(aes)", make([]byte, 64))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		buf := make([]byte, size)
		iv := make([]byte, 16)
		return func() int {
			for o := 0; o < size; o += 8 << 10 {
				t.Encrypt(buf[o:o+8<<10], buf[o:o+8<<10], iv)
			}
			return size
		}
	}
}

// chainProbe is latency-bound scalar work: one long dependent chain of
// multiply-adds, which leaves most of a core's execution units idle.
func chainProbe() func() int {
	x := uint64(1)
	return func() int {
		for range 4096 {
			x = x*0x9e3779b97f4a7c15 + 1
		}
		if x == 0 { // keep x live
			fmt.Print("")
		}
		return 4096
	}
}

// portProbe is throughput-bound scalar work: eight independent chains of
// cheap ALU operations in registers, enough to keep one core's integer
// ports busy (two hyperthreads of one core would share them).
func portProbe() func() int {
	var state [8]uint64
	for i := range state {
		state[i] = uint64(i + 1)
	}
	return func() int {
		a0, a1, a2, a3, a4, a5, a6, a7 := state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7]
		for range 1024 {
			a0 = a0<<1 ^ a0>>3 + 7
			a1 = a1<<1 ^ a1>>3 + 7
			a2 = a2<<1 ^ a2>>3 + 7
			a3 = a3<<1 ^ a3>>3 + 7
			a4 = a4<<1 ^ a4>>3 + 7
			a5 = a5<<1 ^ a5>>3 + 7
			a6 = a6<<1 ^ a6>>3 + 7
			a7 = a7<<1 ^ a7>>3 + 7
		}
		state = [8]uint64{a0, a1, a2, a3, a4, a5, a6, a7}
		return 1024
	}
}

func scalingProbe() {
	w := runtime.GOMAXPROCS(0)
	d := time.Duration(*sec * float64(time.Second))
	fmt.Fprintf(out, "### The machine's own ceiling: independent threads, nothing shared (%d vs 1)\n\n", w)
	fmt.Fprintln(out, "| probe | 1 thread | all threads | scaling |")
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, p := range []struct {
		name string
		f    func() func() int
		unit string
	}{
		{"xts(aes) on a private 8 KiB buffer (L1: AES units only)", aesProbe(8 << 10), "MB/s"},
		{"xts(aes) on a private 256 KiB buffer (L2)", aesProbe(256 << 10), "MB/s"},
		{"xts(aes) on a private 512 KiB buffer (half of a 1 MiB batch)", aesProbe(512 << 10), "MB/s"},
		{"xts(aes) on a private 4 MiB buffer (L3)", aesProbe(4 << 20), "MB/s"},
		{"scalar dependent multiply chain (latency-bound)", chainProbe, "Mop/s"},
		{"eight independent shift/xor/add chains (ALU-port-bound)", portProbe, "Mop/s"},
	} {
		r1 := probeRate(1, d, p.f)
		rw := probeRate(w, d, p.f)
		fmt.Fprintf(out, "| %s | %.0f %s | %.0f %s | %s |\n", p.name, r1/1e6, p.unit, rw/1e6, p.unit, ratio(rw, r1))
	}
	fmt.Fprintln(out)
}
