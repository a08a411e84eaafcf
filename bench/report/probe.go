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

// aesProbe encrypts a private 8 KiB buffer with the best xts(aes) driver.
func aesProbe() func() int {
	t, err := capi.NewSkcipher("xts(aes)", make([]byte, 64))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buf := make([]byte, 8<<10)
	iv := make([]byte, 16)
	return func() int {
		t.Encrypt(buf, buf, iv)
		return len(buf)
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
// cheap ALU operations, enough to keep one core's integer ports busy.
func portProbe() func() int {
	var a [8]uint64
	for i := range a {
		a[i] = uint64(i + 1)
	}
	return func() int {
		for range 1024 {
			a[0] = a[0]<<1 ^ a[0]>>3 + 7
			a[1] = a[1]<<1 ^ a[1]>>3 + 7
			a[2] = a[2]<<1 ^ a[2]>>3 + 7
			a[3] = a[3]<<1 ^ a[3]>>3 + 7
			a[4] = a[4]<<1 ^ a[4]>>3 + 7
			a[5] = a[5]<<1 ^ a[5]>>3 + 7
			a[6] = a[6]<<1 ^ a[6]>>3 + 7
			a[7] = a[7]<<1 ^ a[7]>>3 + 7
		}
		if a[0]^a[1]^a[2]^a[3]^a[4]^a[5]^a[6]^a[7] == 0 {
			fmt.Print("")
		}
		return 1024
	}
}

func scalingProbe() {
	w := runtime.GOMAXPROCS(0)
	d := time.Duration(*sec * float64(time.Second))
	fmt.Printf("### The machine's own ceiling: independent threads, nothing shared (%d vs 1)\n\n", w)
	fmt.Println("| probe | 1 thread | all threads | scaling |")
	fmt.Println("|---|---|---|---|")
	for _, p := range []struct {
		name string
		f    func() func() int
		unit string
	}{
		{"xts(aes) on a private 8 KiB buffer (AES units)", aesProbe, "MB/s"},
		{"scalar dependent multiply chain (latency-bound)", chainProbe, "Mop/s"},
		{"eight independent shift/xor/add chains (ALU-port-bound)", portProbe, "Mop/s"},
	} {
		r1 := probeRate(1, d, p.f)
		rw := probeRate(w, d, p.f)
		fmt.Printf("| %s | %.0f %s | %.0f %s | %s |\n", p.name, r1/1e6, p.unit, rw/1e6, p.unit, ratio(rw, r1))
	}
	fmt.Println()
}
