package nbd

import (
	"bytes"
	"crypto/rand"
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
