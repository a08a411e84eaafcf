package nbd

import (
	"bytes"
	"crypto/rand"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
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

// asyncMem adds StartWriteAt to inPlaceMem: writes at offsets that are
// 32 KiB past a 64 KiB boundary are refused (the server must run them
// through WriteAtInPlace), the rest complete on goroutines of their own
// once gate lets them, failing at failOff.
type asyncMem struct {
	*inPlaceMem
	gate     chan struct{}
	failOff  int64
	started  atomic.Int64
	returned atomic.Int64 // done calls that returned
	pending  sync.WaitGroup
	depth    int
}

func (m *asyncMem) QueueDepth() int { return m.depth }

func (m *asyncMem) StartWriteAt(p []byte, off int64, done func(error)) bool {
	if off%(64<<10) == 32<<10 {
		return false
	}
	m.started.Add(1)
	m.pending.Add(1)
	go func() {
		defer m.pending.Done()
		<-m.gate
		if off == m.failOff {
			done(errors.New("backend failed"))
			return
		}
		m.memBackend.WriteAt(p, off)
		for i := range p {
			p[i] ^= 0x5a
		}
		done(nil)
		m.returned.Add(1)
	}()
	return true
}

// TestAsyncWriter: a backend with StartWriteAt gets every write it can
// start that way except those with FUA; each is answered only once its done
// is called, with the backend's error if it failed; the writes it refuses
// and the FUA ones go through WriteAtInPlace on a worker and are answered
// meanwhile. What the backend scribbles on the buffers never shows, and a
// client that disconnects with writes in flight leaves nothing behind.
func TestAsyncWriter(t *testing.T) {
	m := &asyncMem{inPlaceMem: &inPlaceMem{memBackend: newMem(4<<20, 512)}, gate: make(chan struct{}), failOff: 5 << 16}
	ts := startServer(t, m, Options{})
	cl := ts.dial(t, dialOpts{structured: true})
	want := make([]byte, 4<<20)
	type sent struct {
		c        *call
		off      int
		async    bool
		fails    bool
		gotReply bool
	}
	var calls []sent
	for i := range 24 {
		off := i * 32 << 10
		b := randBytes(uint64(i), 16<<10)
		var flags uint16
		if i%8 == 4 {
			flags = cmdFlagFUA
		}
		s := sent{off: off, async: off%(64<<10) == 0 && flags == 0, fails: off == 5<<16}
		s.c = cl.start(reqArgs{typ: cmdWrite, flags: flags, off: uint64(off), payload: b})
		if !s.fails {
			copy(want[off:], b)
		}
		calls = append(calls, s)
	}
	for i, s := range calls {
		if !s.async {
			if s.c.wait(t); s.c.err != nil || s.c.errno != 0 {
				t.Fatalf("write %d (synchronous): %v, errno %d", i, s.c.err, s.c.errno)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	for i, s := range calls {
		if s.async {
			select {
			case <-s.c.done:
				t.Fatalf("write %d was answered before the backend called done", i)
			default:
			}
		}
	}
	if n := m.started.Load(); n != 9 {
		t.Errorf("the backend started %d writes, want 9 (the aligned ones without FUA)", n)
	}
	if n := m.inPlace.Load(); n != 15 {
		t.Errorf("WriteAtInPlace ran %d times, want 15 (the refused and the FUA writes)", n)
	}
	close(m.gate)
	for i, s := range calls {
		s.c.wait(t)
		switch {
		case s.fails && s.c.errno != nbdEIO:
			t.Errorf("write %d: errno %d, want EIO from the failed backend write", i, s.c.errno)
		case !s.fails && (s.c.err != nil || s.c.errno != 0):
			t.Errorf("write %d: %v, errno %d", i, s.c.err, s.c.errno)
		}
	}
	got := cl.mustOK(reqArgs{typ: cmdRead, off: 0, length: 1 << 20})
	if !bytes.Equal(got, want[:1<<20]) {
		t.Fatal("the bytes read differ from what the client wrote")
	}

	// Writes in flight at a disconnect: the server closes the connection
	// only once the backend is done with them.
	m.gate = make(chan struct{})
	for i := range 4 {
		cl.start(reqArgs{typ: cmdWrite, off: uint64(i) << 16, payload: make([]byte, 4096)})
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.started.Load() < 13 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	var opened atomic.Bool
	go func() {
		time.Sleep(100 * time.Millisecond)
		opened.Store(true)
		close(m.gate)
	}()
	cl.disconnect() // returns when the server has closed the connection
	if !opened.Load() {
		t.Error("the server closed the connection with writes still in the backend")
	}
	m.pending.Wait()
	if n := m.started.Load(); n != 13 {
		t.Errorf("the backend started %d writes in all, want 13", n)
	}
}

// TestAsyncWriterStuckClient: a client that stops reading its replies
// does not hold up the backend's completions (for librbd, its own threads,
// which every client of the export shares): done returns while the reply
// cannot be sent, and another client's writes go on being answered.
func TestAsyncWriterStuckClient(t *testing.T) {
	gate := make(chan struct{})
	close(gate)
	m := &asyncMem{inPlaceMem: &inPlaceMem{memBackend: newMem(64<<20, 512)}, gate: gate, failOff: -1, depth: 64}
	ts := startServer(t, m, Options{})
	stuck := ts.conn(t)
	oc := newOptClient(t, stuck, flagCFixedNewstyle|flagCNoZeroes)
	oc.expect(t, optGo, goData("", infoBlockSize), repAck)
	stuck.SetDeadline(time.Time{})
	// Reads whose replies overfill the socket, then writes, none of whose
	// replies are read.
	var reqs []byte
	for i := range 8 {
		reqs = append(reqs, reqBytes(cmdRead, 0, uint64(i), uint64(i)<<22, 4<<20, nil)...)
	}
	for i := range 8 {
		reqs = append(reqs, reqBytes(cmdWrite, 0, uint64(100+i), uint64(i)<<16, 4096, make([]byte, 4096))...)
	}
	if _, err := stuck.Write(reqs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.returned.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := m.returned.Load(); n != 8 {
		t.Fatalf("%d of 8 done calls returned while their client was not reading", n)
	}
	cl := ts.dial(t, dialOpts{structured: true})
	defer cl.disconnect()
	for i := range 16 {
		cl.mustOK(reqArgs{typ: cmdWrite, off: 32<<20 + uint64(i)<<16, payload: make([]byte, 4096)})
	}
	stuck.Close()
}
