package nbd

import (
	"bytes"
	"crypto/rand"
	"runtime"
	"sync"
	"testing"
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
// not maxInflight; and a deep queue still gets them all at once.
func TestWorkersOnDemand(t *testing.T) {
	m := newMem(1<<20, 512)
	ts := startServer(t, m, Options{})
	before := runtime.NumGoroutine()
	cl := ts.dial(t, dialOpts{structured: true})
	defer cl.disconnect()
	for i := range 50 {
		cl.mustOK(reqArgs{typ: cmdRead, off: uint64(i) * 4096, length: 4096})
	}
	if d := runtime.NumGoroutine() - before; d > 12 {
		t.Fatalf("%d more goroutines after 50 requests one at a time (maxInflight %d)", d, maxInflight)
	}
	// A full queue: every request in flight at once, all answered.
	calls := make([]*call, 3*maxInflight)
	for i := range calls {
		calls[i] = cl.start(reqArgs{typ: cmdWrite, off: uint64(i) * 4096, payload: bytes.Repeat([]byte{byte(i)}, 4096)})
	}
	for i, p := range calls {
		if p.wait(t); p.err != nil || p.errno != 0 {
			t.Fatalf("write %d: %v, errno %d", i, p.err, p.errno)
		}
	}
	got := m.snapshot()
	for i := range calls {
		if !bytes.Equal(got[i*4096:(i+1)*4096], bytes.Repeat([]byte{byte(i)}, 4096)) {
			t.Fatalf("write %d did not land", i)
		}
	}
}
