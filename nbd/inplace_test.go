package nbd

import (
	"bytes"
	"crypto/rand"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestInPlaceWriter: a backend with WriteAtInPlace gets every write through
// it, not through WriteAt, and what it scribbles over the payload buffers
// never reaches the data, the replies or later requests reusing the
// buffers.
func TestInPlaceWriter(t *testing.T) {
	m := &inPlaceMem{memBackend: newMem(4<<20, 512)}
	ts := startServer(t, m, Options{})
	cl := ts.dial(t, dialOpts{structured: true})
	defer cl.disconnect()
	want := make([]byte, 4<<20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 16 {
				off := uint64((g*16 + i) * 32 << 10)
				b := make([]byte, 32<<10)
				rand.Read(b)
				mu.Lock()
				copy(want[off:], b)
				mu.Unlock()
				cl.mustOK(reqArgs{typ: cmdWrite, off: off, payload: b})
			}
		}()
	}
	wg.Wait()
	if n := m.inPlace.Load(); n != 128 {
		t.Errorf("WriteAtInPlace ran %d times for 128 writes", n)
	}
	if n := m.writes.Load(); n != 128 {
		t.Errorf("the backend stored %d writes, want 128", n)
	}
	if !bytes.Equal(m.snapshot(), want) {
		t.Fatal("the backend's bytes differ from what the client wrote")
	}
	for off := 0; off < len(want); off += 1 << 20 {
		got := cl.mustOK(reqArgs{typ: cmdRead, off: uint64(off), length: 1 << 20})
		if !bytes.Equal(got, want[off:off+1<<20]) {
			t.Fatalf("read at %d differs from what was written", off)
		}
	}
}

// TestWorkersOnDemand: a connection starts workers as its queue grows, so
// one that only ever had a request or two in flight keeps a few goroutines,
// not a queue's worth.
func TestWorkersOnDemand(t *testing.T) {
	m := &depthMem{memBackend: newMem(1<<20, 512), depth: maxInflight}
	ts := startServer(t, m, Options{})
	before := runtime.NumGoroutine()
	cl := ts.dial(t, dialOpts{structured: true})
	defer cl.disconnect()
	for i := range 50 {
		cl.mustOK(reqArgs{typ: cmdRead, off: uint64(i) * 4096, length: 4096})
	}
	if d := runtime.NumGoroutine() - before; d > 12 {
		t.Fatalf("%d more goroutines after 50 requests one at a time (queue depth %d)", d, maxInflight)
	}
}

// depthMem is a memBackend that asks for a queue depth and can hold its
// writes until released, counting how many it holds at once.
type depthMem struct {
	*memBackend
	depth int
	gate  chan struct{} // nil: writes pass
	mu    sync.Mutex
	held  int
	most  int
}

func (d *depthMem) QueueDepth() int { return d.depth }

func (d *depthMem) WriteAt(p []byte, off int64) (int, error) {
	if d.gate != nil {
		d.mu.Lock()
		d.held++
		d.most = max(d.most, d.held)
		d.mu.Unlock()
		<-d.gate
		d.mu.Lock()
		d.held--
		d.mu.Unlock()
	}
	return d.memBackend.WriteAt(p, off)
}

func (d *depthMem) holding() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held
}

// TestQueueDepth: a connection has 16 requests in the backend at most by
// default, what a QueueDepther asks for up to 64, and 64 if it asks for
// more; every request is answered once the backend lets them go.
func TestQueueDepth(t *testing.T) {
	for _, tc := range []struct{ ask, want int }{{0, 16}, {40, 40}, {500, 64}} {
		m := &depthMem{memBackend: newMem(4<<20, 512), depth: tc.ask, gate: make(chan struct{})}
		var b Backend = m
		if tc.ask == 0 {
			b = struct {
				Backend
			}{m} // hides QueueDepth
		}
		ts := startServer(t, b, Options{})
		cl := ts.dial(t, dialOpts{structured: true})
		calls := make([]*call, 100)
		for i := range calls {
			calls[i] = cl.start(reqArgs{typ: cmdWrite, off: uint64(i) * 4096, payload: bytes.Repeat([]byte{byte(i)}, 4096)})
		}
		deadline := time.Now().Add(10 * time.Second)
		for m.holding() < tc.want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // room for any request beyond the depth to arrive
		m.mu.Lock()
		most := m.most
		m.mu.Unlock()
		close(m.gate)
		for i, p := range calls {
			if p.wait(t); p.err != nil || p.errno != 0 {
				t.Fatalf("depth %d: write %d: %v, errno %d", tc.ask, i, p.err, p.errno)
			}
		}
		if most != tc.want {
			t.Errorf("backend asking for %d: %d requests in the backend at once, want %d", tc.ask, most, tc.want)
		}
		got := m.snapshot()
		for i := range calls {
			if !bytes.Equal(got[i*4096:(i+1)*4096], bytes.Repeat([]byte{byte(i)}, 4096)) {
				t.Fatalf("depth %d: write %d did not land", tc.ask, i)
			}
		}
		cl.disconnect()
	}
}
