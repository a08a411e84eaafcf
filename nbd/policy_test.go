package nbd

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedMem holds reads at gateOff until the gate opens, so a test can keep
// requests in flight for as long as it likes.
type gatedMem struct {
	*memBackend
	mu      sync.Mutex
	gate    chan struct{}
	waiting atomic.Int64
}

const gateOff = 64 << 10

func newGated() *gatedMem {
	return &gatedMem{memBackend: newMem(1<<20, 512), gate: make(chan struct{})}
}

func (g *gatedMem) ReadAt(p []byte, off int64) (int, error) {
	if off == gateOff {
		g.mu.Lock()
		gate := g.gate
		g.mu.Unlock()
		g.waiting.Add(1)
		<-gate
		g.waiting.Add(-1)
	}
	return g.memBackend.ReadAt(p, off)
}

// open lets held reads go and returns a fresh gate for the next ones.
func (g *gatedMem) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// served is the number of connections holding a slot.
func (ts *testServer) served() int {
	ts.s.mu.Lock()
	defer ts.s.mu.Unlock()
	return ts.s.active
}

// settle waits until the server side of cl is past negotiation with
// nothing in flight, so that connections settled one after the other have
// increasing idle-since times whatever the scheduling.
func (ts *testServer) settle(t *testing.T, cl *client) *client {
	t.Helper()
	addr := cl.c.LocalAddr().String()
	waitFor(t, "the connection to settle", func() bool {
		ts.s.mu.Lock()
		defer ts.s.mu.Unlock()
		for c := range ts.s.conns {
			if c.remote == addr {
				c.fmu.Lock()
				ok := c.transmitting && c.inflight == 0
				c.fmu.Unlock()
				return ok
			}
		}
		return false
	})
	return cl
}

func isClosed(cl *client) bool {
	select {
	case <-cl.closed:
		return true
	default:
		return false
	}
}

// refusedAtOnce asserts that the server closes c without a greeting.
func refusedAtOnce(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
		t.Fatalf("connection over the cap: read %d bytes, err %v; want an immediate close", n, err)
	}
}

// TestIdleConnsDoNotLockOut is the fix for the lockout: a full server of
// idle, negotiated connections (the default cap, all from one address)
// still admits new clients, each in place of the longest-idle connection,
// and never serves more than the cap.
func TestIdleConnsDoNotLockOut(t *testing.T) {
	ts := startServer(t, newMem(1<<20, 512), Options{})
	if ts.s.opts.MaxConns != defaultMaxConns || defaultMaxConns < 64 {
		t.Fatalf("default cap %d", ts.s.opts.MaxConns)
	}
	idle := make([]*client, defaultMaxConns)
	for i := range idle {
		idle[i] = ts.settle(t, ts.dial(t, dialOpts{}))
	}
	for i := range 5 {
		// The old server closed this connection at once.
		cl := ts.dial(t, dialOpts{structured: true})
		cl.mustOK(reqArgs{typ: cmdRead, length: 4096})
		ts.settle(t, cl)
		idle[i].waitClosed()
		if n := ts.served(); n > defaultMaxConns {
			t.Fatalf("%d connections served, cap %d", n, defaultMaxConns)
		}
		if isClosed(idle[i+1]) {
			t.Fatalf("newcomer %d closed connection %d too: only the longest-idle one should go", i, i+1)
		}
	}
	// Those that stayed still work.
	idle[len(idle)-1].mustOK(reqArgs{typ: cmdRead, length: 512})
	idle[5].mustOK(reqArgs{typ: cmdWrite, payload: make([]byte, 512)})
}

// TestMaxConnsHonoured: with every slot busy a new client is refused at
// once; once they are idle again it gets the longest-idle one's place.
func TestMaxConnsHonoured(t *testing.T) {
	g := newGated()
	ts := startServer(t, g, Options{MaxConns: 3})
	cls := []*client{ts.dial(t, dialOpts{}), ts.dial(t, dialOpts{}), ts.dial(t, dialOpts{})}
	var calls []*call
	for _, cl := range cls {
		calls = append(calls, cl.start(reqArgs{typ: cmdRead, off: gateOff, length: 512}))
	}
	waitFor(t, "three held reads", func() bool { return g.waiting.Load() == 3 })
	refusedAtOnce(t, ts.conn(t))
	if n := ts.served(); n != 3 {
		t.Fatalf("%d connections served, want 3", n)
	}
	g.open()
	for _, p := range calls {
		if p.wait(t); p.err != nil || p.errno != 0 {
			t.Fatalf("held read: %v %d", p.err, p.errno)
		}
	}
	// They finished together: give them distinct idle times, cls[0] the longest.
	for _, cl := range cls {
		cl.mustOK(reqArgs{typ: cmdRead, length: 512})
		ts.settle(t, cl)
	}
	d := ts.dial(t, dialOpts{})
	d.mustOK(reqArgs{typ: cmdRead, length: 512})
	cls[0].waitClosed()
	if isClosed(cls[1]) || isClosed(cls[2]) || ts.served() != 3 {
		t.Fatalf("eviction closed more than the longest-idle connection")
	}
	// A client that disconnects frees its slot for good.
	cls[1].disconnect()
	waitFor(t, "the slot to be freed", func() bool { return ts.served() == 2 })
	e := ts.dial(t, dialOpts{})
	e.mustOK(reqArgs{typ: cmdRead, length: 512})
	if isClosed(cls[2]) || isClosed(d) {
		t.Fatalf("a free slot was taken by eviction")
	}
}

// TestFairShare: clients from different addresses keep a fair share. An
// address may lose a connection to a newcomer only if it holds more than
// the newcomer's address, or is that address.
func TestFairShare(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 and 127.0.0.3 on the loopback interface, as Linux has")
	}
	g := newGated()
	ts := startServer(t, g, Options{MaxConns: 4})
	from := func(ip string) *client {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cl := dial(t, c, dialOpts{})
		cl.mustOK(reqArgs{typ: cmdRead, length: 512}) // marks it active now
		return ts.settle(t, cl)
	}
	const A, B = "127.0.0.2", "127.0.0.3"
	b1 := from(B) // the longest idle of all
	a1, a2, a3 := from(A), from(A), from(A)

	b2 := from(B) // A holds 3 > B's 1: A's longest-idle goes, not b1
	a1.waitClosed()
	if isClosed(b1) {
		t.Fatal("the newcomer from B evicted B's own connection while A held three")
	}
	a4 := from(A) // A and B hold 2 each: A replaces its own longest-idle
	a2.waitClosed()
	if isClosed(b1) || isClosed(b2) {
		t.Fatal("a newcomer from A squeezed B below A's share")
	}

	// A's two connections busy, B's two idle: a third from A may not
	// take B's place, and has none of its own to take.
	p3 := a3.start(reqArgs{typ: cmdRead, off: gateOff, length: 512})
	p4 := a4.start(reqArgs{typ: cmdRead, off: gateOff, length: 512})
	waitFor(t, "two held reads", func() bool { return g.waiting.Load() == 2 })
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(A)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refusedAtOnce(t, c)
	// B may replace its own idle one.
	from(B)
	b1.waitClosed()
	g.open()
	for _, p := range []*call{p3, p4} {
		if p.wait(t); p.err != nil || p.errno != 0 {
			t.Fatalf("held read: %v %d", p.err, p.errno)
		}
	}
	if isClosed(b2) || isClosed(a3) || isClosed(a4) || ts.served() != 4 {
		t.Fatal("wrong connections closed")
	}
}

// TestIdleTimeout: a negotiated connection with nothing in flight for
// IdleTimeout is closed; one that keeps sending requests, or has a request
// in flight for longer than the timeout, is not; one stalled in the middle
// of a write payload is.
func TestIdleTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	g := newGated()
	ts := startServer(t, g, Options{IdleTimeout: timeout})

	idle := ts.dial(t, dialOpts{})
	start := time.Now()
	busy := ts.dial(t, dialOpts{structured: true})
	held := ts.dial(t, dialOpts{})
	p := held.start(reqArgs{typ: cmdRead, off: gateOff, length: 512})
	stalled := ts.dial(t, dialOpts{})
	h := make([]byte, requestHeaderLen)
	be.PutUint32(h[0:], requestMagic)
	be.PutUint16(h[6:], cmdWrite)
	be.PutUint64(h[8:], 99)
	be.PutUint32(h[24:], 4096)
	stalled.c.Write(append(h, make([]byte, 100)...))

	for time.Since(start) < 3*timeout {
		busy.mustOK(reqArgs{typ: cmdRead, length: 512})
		time.Sleep(timeout / 10)
	}
	if isClosed(busy) || isClosed(held) {
		t.Fatal("a connection that was not idle was closed")
	}
	if !isClosed(idle) || !isClosed(stalled) {
		t.Fatalf("after %v: idle closed %v, stalled writer closed %v; want both", 3*timeout, isClosed(idle), isClosed(stalled))
	}
	g.open()
	if p.wait(t); p.err != nil || p.errno != 0 {
		t.Fatalf("held read: %v %d", p.err, p.errno)
	}
	// Once its request is answered, the held connection is idle too.
	held.waitClosed()
	busy.disconnect()
	waitFor(t, "the connections to go", func() bool { return ts.served() == 0 })

	// Zero means no timeout.
	ts = startServer(t, newMem(1<<20, 512), Options{})
	cl := ts.dial(t, dialOpts{})
	time.Sleep(3 * timeout)
	cl.mustOK(reqArgs{typ: cmdRead, length: 512})
}

// TestUnixPeerShare: on Linux a Unix-socket client's share is its user
// (SO_PEERCRED), so local users do not compete as one address.
func TestUnixPeerShare(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_PEERCRED is Linux-only; elsewhere Unix clients share one address")
	}
	ts := startServer(t, newMem(1<<20, 512), Options{}, "unix")
	cl := ts.dial(t, dialOpts{})
	ts.s.mu.Lock()
	var hosts []string
	for c := range ts.s.conns {
		hosts = append(hosts, c.host)
	}
	ts.s.mu.Unlock()
	if want := fmt.Sprintf("unix:uid=%d", os.Getuid()); len(hosts) != 1 || hosts[0] != want {
		t.Fatalf("Unix client counted as %q, want %q", hosts, want)
	}
	cl.disconnect()
}
