package nbd

import (
	"bytes"
	"slices"
	"sync"
	"testing"
)

// startBatch sends requests with one write, so that the server finds each
// header waiting behind the payload before it, as it does behind a client
// that keeps many requests in flight.
func (cl *client) startBatch(args []reqArgs) []*call {
	var out []byte
	calls := make([]*call, len(args))
	cl.mu.Lock()
	for i, a := range args {
		if a.typ == cmdWrite {
			a.length = uint32(len(a.payload))
		}
		cl.next++
		p := &call{typ: a.typ, len: a.length, off: a.off, done: make(chan struct{})}
		cl.pending[cl.next] = p
		calls[i] = p
		h := make([]byte, requestHeaderLen)
		be.PutUint32(h[0:], requestMagic)
		be.PutUint16(h[4:], a.flags)
		be.PutUint16(h[6:], a.typ)
		be.PutUint64(h[8:], cl.next)
		be.PutUint64(h[16:], a.off)
		be.PutUint32(h[24:], a.length)
		out = append(append(out, h...), a.payload...)
	}
	cl.mu.Unlock()
	cl.wmu.Lock()
	_, err := cl.c.Write(out)
	cl.wmu.Unlock()
	if err != nil {
		cl.fail(err)
	}
	return calls
}

// startLog records the writes an asyncMem accepted.
type startLog struct {
	*asyncMem
	mu     sync.Mutex
	starts [][2]int64 // offset, length
}

func (l *startLog) StartWriteAt(p []byte, off int64, done func(error)) bool {
	ok := l.asyncMem.StartWriteAt(p, off, done)
	if ok {
		l.mu.Lock()
		l.starts = append(l.starts, [2]int64{off, int64(len(p))})
		l.mu.Unlock()
	}
	return ok
}

// TestMergedWrites: writes that follow one another on the export and in
// the stream, without FUA and already sent, reach an AsyncWriter backend
// as one write, up to a 1 MiB boundary; everything else stops a merge. A
// merged write the backend refuses runs on a worker, and one that fails
// fails each of its requests. Every request gets its own reply.
func TestMergedWrites(t *testing.T) {
	const u = 8 << 10
	const mib = 1 << 20
	m := &startLog{asyncMem: &asyncMem{
		inPlaceMem: &inPlaceMem{memBackend: newMem(32<<20, 512)},
		gate:       make(chan struct{}),
		failOff:    17 * mib,
		depth:      64,
	}}
	ts := startServer(t, m, Options{MaxRequest: 8 << 20}, "unix")
	cl := ts.dial(t, dialOpts{structured: true})
	want := make([]byte, 32<<20)

	// Two held writes of 8 MiB fill the connection's 16 MiB budget, so the
	// batch below is all in the socket before the server reads on.
	b := int64(17*mib - 3*u)
	var first []*call
	for i, off := range []int64{b - 16*mib, b - 8*mib} {
		p := randBytes(uint64(100+i), 8<<20)
		copy(want[off:], p)
		first = append(first, cl.start(reqArgs{typ: cmdWrite, off: uint64(off), payload: p}))
	}
	type w struct {
		off   int64
		n     int
		flags uint16
		read  bool
	}
	batch := []w{
		{off: b, n: u}, {off: b + u, n: u}, {off: b + 2*u, n: u}, // merged, up to the 1 MiB boundary
		{off: 17 * mib, n: u}, {off: 17*mib + u, n: u}, {off: 17*mib + 2*u, n: u}, // merged; fails
		{off: 17*mib + 3*u, n: u, flags: cmdFlagFUA},         // FUA: a worker's
		{off: 17*mib + 4*u, n: u}, {off: 17*mib + 5*u, n: u}, // merged; refused (32 KiB past 64 KiB)
		{read: true},
		{off: 17*mib + 6*u, n: u}, // next is not adjacent
		{off: 17*mib + 8*u, n: u}, // not where the last write ended
	}
	var args []reqArgs
	for i, x := range batch {
		if x.read {
			args = append(args, reqArgs{typ: cmdRead, off: 0, length: 4096})
			continue
		}
		p := randBytes(uint64(i), x.n)
		if x.off < 17*mib || x.off >= 17*mib+3*u {
			copy(want[x.off:], p)
		}
		args = append(args, reqArgs{typ: cmdWrite, flags: x.flags, off: uint64(x.off), payload: p})
	}
	calls := cl.startBatch(args)
	close(m.gate)

	for i, c := range first {
		if c.wait(t); c.err != nil || c.errno != 0 {
			t.Fatalf("held write %d: %v, errno %d", i, c.err, c.errno)
		}
	}
	for i, c := range calls {
		c.wait(t)
		fails := !batch[i].read && batch[i].off >= 17*mib && batch[i].off < 17*mib+3*u
		switch {
		case c.err != nil:
			t.Fatalf("request %d: %v", i, c.err)
		case fails && c.errno != nbdEIO:
			t.Errorf("request %d: errno %d, want EIO from its failed merged write", i, c.errno)
		case !fails && c.errno != 0:
			t.Errorf("request %d: errno %d", i, c.errno)
		}
	}
	m.pending.Wait()
	wantStarts := [][2]int64{
		{b - 16*mib, 8 << 20}, {b - 8*mib, 8 << 20},
		{b, 3 * u}, {17 * mib, 3 * u}, {17*mib + 6*u, u}, {17*mib + 8*u, u},
	}
	m.mu.Lock()
	got := slices.Clone(m.starts)
	m.mu.Unlock()
	slices.SortFunc(got, func(x, y [2]int64) int { return int(x[0] - y[0]) })
	if !slices.Equal(got, wantStarts) {
		t.Errorf("the backend started writes (offset, length) %v, want %v", got, wantStarts)
	}
	if n := m.inPlace.Load(); n != 2 {
		t.Errorf("WriteAtInPlace ran %d times, want 2 (the FUA write, the refused merged one)", n)
	}
	for off := b - 16*mib; off < b+12*u; off += 4 << 20 {
		n := min(4<<20, b+12*u-off)
		if data := cl.mustOK(reqArgs{typ: cmdRead, off: uint64(off), length: uint32(n)}); !bytes.Equal(data, want[off:off+n]) {
			t.Fatalf("the bytes read at %d differ from what the client wrote", off)
		}
	}
}
