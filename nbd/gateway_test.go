package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startGateway serves a NewGateway server with exports on loopback TCP.
func startGateway(t testing.TB, exports ...Export) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewGateway(Options{Logf: func(format string, args ...any) { t.Logf(format, args...) }})
	for _, e := range exports {
		if err := s.AddExport(e); err != nil {
			t.Fatalf("AddExport(%q): %v", e.Name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(40 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
	})
	return &testServer{s: s, addr: l.Addr().String(), net: "tcp"}
}

// listExports runs NBD_OPT_LIST and returns name -> description, in order.
func listExports(t *testing.T, ts *testServer) ([]string, map[string]string) {
	t.Helper()
	oc := newOptClient(t, ts.conn(t), flagCFixedNewstyle|flagCNoZeroes)
	var names []string
	desc := map[string]string{}
	for _, r := range oc.expect(t, optList, nil, repAck) {
		if r.typ != repServer {
			continue
		}
		n := be.Uint32(r.data)
		name := string(r.data[4 : 4+n])
		names = append(names, name)
		desc[name] = string(r.data[4+n:])
	}
	return names, desc
}

// TestGatewayExports: NBD_OPT_LIST lists every export with its
// description, GO and EXPORT_NAME reach each by name with its own size,
// flags and data, and "" or an unknown name reaches none.
func TestGatewayExports(t *testing.T) {
	a, b, c := newMem(1<<20, 512), newMem(2<<20, 4096), newMem(3<<20, 512)
	copy(a.data, randBytes(1, 1<<20))
	copy(b.data, randBytes(2, 2<<20))
	copy(c.data, randBytes(3, 3<<20))
	ts := startGateway(t,
		Export{Name: "beta", Description: "second", Backend: b, MultiConn: true},
		Export{Name: "alpha", Description: "first", Backend: a},
		Export{Name: "gamma", Description: "third", Backend: c, ReadOnly: true},
	)
	names, desc := listExports(t, ts)
	if strings.Join(names, ",") != "alpha,beta,gamma" || desc["alpha"] != "first" || desc["gamma"] != "third" {
		t.Fatalf("NBD_OPT_LIST = %v %v", names, desc)
	}
	for _, tc := range []struct {
		name    string
		m       *memBackend
		bs      uint32
		ro, mcn bool
	}{{"alpha", a, 512, false, false}, {"beta", b, 4096, false, true}, {"gamma", c, 512, true, false}} {
		cl := ts.dial(t, dialOpts{name: tc.name, structured: true})
		if cl.info.size != uint64(len(tc.m.data)) || cl.info.name != tc.name || cl.info.minB != tc.bs {
			t.Errorf("%s: info %+v", tc.name, cl.info)
		}
		if (cl.info.flags&FlagReadOnly != 0) != tc.ro || (cl.info.flags&FlagCanMultiConn != 0) != tc.mcn {
			t.Errorf("%s: flags %#x", tc.name, cl.info.flags)
		}
		got := cl.mustOK(reqArgs{typ: cmdRead, off: 4096, length: 8192})
		if !bytes.Equal(got, tc.m.data[4096:4096+8192]) {
			t.Errorf("%s: read returned another export's data", tc.name)
		}
		if tc.ro {
			cl.mustErr(reqArgs{typ: cmdWrite, off: 0, payload: make([]byte, 512)}, nbdEPERM)
		} else {
			cl.mustOK(reqArgs{typ: cmdWrite, off: 0, payload: bytes.Repeat([]byte{7}, 4096)})
			if tc.m.snapshot()[0] != 7 {
				t.Errorf("%s: write did not reach its backend", tc.name)
			}
		}
		cl.disconnect()
		old := ts.dial(t, dialOpts{name: tc.name, exportName: true})
		if old.info.size != uint64(len(tc.m.data)) {
			t.Errorf("%s: EXPORT_NAME size %d", tc.name, old.info.size)
		}
		old.disconnect()
	}
	for _, name := range []string{"", "delta", "alph"} {
		oc := newOptClient(t, ts.conn(t), flagCFixedNewstyle|flagCNoZeroes)
		oc.expect(t, optGo, goData(name), repErrUnknown)
		oc.expect(t, optInfo, goData(name), repErrUnknown)
		c := ts.conn(t)
		oc = newOptClient(t, c, flagCFixedNewstyle|flagCNoZeroes)
		oc.send(optExportName, []byte(name))
		expectClosed(t, c, oc.br)
	}
}

// TestGatewayAddRemoveErrors: the sentinel errors of AddExport and
// RemoveExport, and that Shutdown flushes every export.
func TestGatewayAddRemoveErrors(t *testing.T) {
	a, b := newMem(1<<20, 512), newMem(1<<20, 512)
	s := NewGateway(Options{})
	if err := s.AddExport(Export{Name: "a", Backend: a}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddExport(Export{Name: "a", Backend: b}); !errors.Is(err, ErrExportExists) {
		t.Errorf("duplicate AddExport: %v", err)
	}
	if err := s.AddExport(Export{Name: "b"}); err == nil {
		t.Errorf("AddExport without a backend succeeded")
	}
	if err := s.AddExport(Export{Name: strings.Repeat("x", 5000), Backend: b}); err == nil {
		t.Errorf("AddExport with a 5000-byte name succeeded")
	}
	if err := s.RemoveExport(context.Background(), "zz"); !errors.Is(err, ErrUnknownExport) {
		t.Errorf("RemoveExport of an unknown name: %v", err)
	}
	if err := s.AddExport(Export{Name: "b", Backend: b}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Exports(), ","); got != "a,b" {
		t.Errorf("Exports() = %s", got)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.flushes.Load() != 1 || b.flushes.Load() != 1 {
		t.Errorf("Shutdown flushed a %d and b %d times, want once each", a.flushes.Load(), b.flushes.Load())
	}
	if err := s.AddExport(Export{Name: "c", Backend: b}); !errors.Is(err, ErrServerClosed) {
		t.Errorf("AddExport after Shutdown: %v", err)
	}
}

// holdWrites holds writes until its gate is opened, and records whether a
// flush came after every write it acknowledged.
type holdWrites struct {
	*memBackend
	gate       chan struct{}
	entered    chan struct{}
	done       atomic.Int64 // writes completed
	flushAfter atomic.Int64 // writes completed when the last flush began
}

func (g *holdWrites) WriteAt(p []byte, off int64) (int, error) {
	g.entered <- struct{}{}
	<-g.gate
	n, err := g.memBackend.WriteAt(p, off)
	g.done.Add(1)
	return n, err
}

func (g *holdWrites) Flush() error {
	g.flushAfter.Store(g.done.Load())
	return g.memBackend.Flush()
}

// TestGatewayRemoveExport: removing an export answers its in-flight write,
// flushes its backend after that write, then closes its connections, and
// forgets the name; a client of another export keeps working throughout.
func TestGatewayRemoveExport(t *testing.T) {
	g := &holdWrites{memBackend: newMem(1<<20, 512), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	other := newMem(1<<20, 512)
	ts := startGateway(t, Export{Name: "old", Backend: g}, Export{Name: "stay", Backend: other})
	stay := ts.dial(t, dialOpts{name: "stay", structured: true})
	gone := ts.dial(t, dialOpts{name: "old", structured: true})
	gone2 := ts.dial(t, dialOpts{name: "old"})

	w := gone.start(reqArgs{typ: cmdWrite, off: 512, payload: bytes.Repeat([]byte{9}, 512)})
	<-g.entered
	removed := make(chan error, 1)
	go func() { removed <- ts.s.RemoveExport(context.Background(), "old") }()
	// While the removal waits for the write, the other export serves.
	stay.mustOK(reqArgs{typ: cmdWrite, off: 0, payload: bytes.Repeat([]byte{5}, 4096)})
	select {
	case err := <-removed:
		t.Fatalf("RemoveExport returned before the in-flight write finished: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.gate)
	if p := w.wait(t); p.err != nil || p.errno != 0 {
		t.Fatalf("in-flight write on the removed export: err=%v errno=%d", p.err, p.errno)
	}
	if err := <-removed; err != nil {
		t.Fatalf("RemoveExport: %v", err)
	}
	if g.flushes.Load() != 1 || g.flushAfter.Load() != 1 {
		t.Errorf("removed export flushed %d times, after %d of 1 writes", g.flushes.Load(), g.flushAfter.Load())
	}
	gone.waitClosed()
	gone2.waitClosed()
	if got := other.flushes.Load(); got != 0 {
		t.Errorf("removing one export flushed another %d times", got)
	}
	if !bytes.Equal(stay.mustOK(reqArgs{typ: cmdRead, off: 0, length: 4096}), bytes.Repeat([]byte{5}, 4096)) {
		t.Errorf("the staying export lost its write")
	}
	names, _ := listExports(t, ts)
	if strings.Join(names, ",") != "stay" {
		t.Errorf("NBD_OPT_LIST after removal = %v", names)
	}
	oc := newOptClient(t, ts.conn(t), flagCFixedNewstyle|flagCNoZeroes)
	oc.expect(t, optGo, goData("old"), repErrUnknown)
	// The name may be served again, by a new backend.
	fresh := newMem(1<<20, 512)
	fresh.data[0] = 42
	if err := ts.s.AddExport(Export{Name: "old", Backend: fresh}); err != nil {
		t.Fatal(err)
	}
	again := ts.dial(t, dialOpts{name: "old"})
	if got := again.mustOK(reqArgs{typ: cmdRead, off: 0, length: 512}); got[0] != 42 {
		t.Errorf("re-added export serves the old backend")
	}
	again.disconnect()
	stay.disconnect()
}

// failingMem fails every read and write with EIO while broken is set, as
// a backend whose device went away.
type failingMem struct {
	*memBackend
	broken atomic.Bool
}

func (f *failingMem) ReadAt(p []byte, off int64) (int, error) {
	if f.broken.Load() {
		return 0, syscall.EIO
	}
	return f.memBackend.ReadAt(p, off)
}

func (f *failingMem) WriteAt(p []byte, off int64) (int, error) {
	if f.broken.Load() {
		return 0, syscall.EIO
	}
	return f.memBackend.WriteAt(p, off)
}

// TestGatewayBackendFailureIsolated: I/O errors of one export's backend
// fail that export's requests only; the failing export is left out of
// NBD_OPT_LIST (and logged, once for many failures) until one of its
// requests succeeds again.
func TestGatewayBackendFailureIsolated(t *testing.T) {
	good := newMem(1<<20, 512)
	copy(good.data, randBytes(4, 1<<20))
	fm := &failingMem{memBackend: newMem(1<<20, 512)}
	var logMu sync.Mutex
	var logs []string
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewGateway(Options{Logf: func(format string, args ...any) {
		logMu.Lock()
		logs = append(logs, fmt.Sprintf(format, args...))
		logMu.Unlock()
	}})
	s.AddExport(Export{Name: "bad", Backend: fm})
	s.AddExport(Export{Name: "good", Backend: good})
	go s.Serve(context.Background(), l)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	ts := &testServer{s: s, addr: l.Addr().String(), net: "tcp"}

	bad := ts.dial(t, dialOpts{name: "bad", structured: true})
	ok := ts.dial(t, dialOpts{name: "good", structured: true})
	fm.broken.Store(true)
	for i := range 20 {
		bad.mustErr(reqArgs{typ: cmdRead, off: uint64(i) * 512, length: 512}, nbdEIO)
		bad.mustErr(reqArgs{typ: cmdWrite, off: uint64(i) * 512, payload: make([]byte, 512)}, nbdEIO)
		if got := ok.mustOK(reqArgs{typ: cmdRead, off: uint64(i) * 512, length: 512}); !bytes.Equal(got, good.data[i*512:(i+1)*512]) {
			t.Fatalf("good export read wrong data")
		}
	}
	if names, _ := listExports(t, ts); strings.Join(names, ",") != "good" {
		t.Errorf("NBD_OPT_LIST with a failing export = %v, want only good", names)
	}
	logMu.Lock()
	var failLogs int
	for _, m := range logs {
		if strings.Contains(m, `export "bad"`) {
			failLogs++
		}
	}
	logMu.Unlock()
	if failLogs != 1 {
		t.Errorf("40 failed requests logged %d times, want once: %q", failLogs, logs)
	}
	fm.broken.Store(false)
	bad.mustOK(reqArgs{typ: cmdRead, off: 0, length: 512})
	if names, _ := listExports(t, ts); strings.Join(names, ",") != "bad,good" {
		t.Errorf("NBD_OPT_LIST after recovery = %v", names)
	}
	bad.disconnect()
	ok.disconnect()
}

// TestGatewayNbdinfoList: libnbd's nbdinfo --list sees every export.
func TestGatewayNbdinfoList(t *testing.T) {
	requireTool(t, "nbdinfo", "libnbd-bin")
	ts := startGateway(t,
		Export{Name: "one", Description: "first volume", Backend: newMem(1<<20, 512)},
		Export{Name: "two", Description: "second volume", Backend: newMem(2<<20, 512)},
	)
	out := mustRun(t, time.Minute, "nbdinfo", "--list", "--json", ts.uri())
	for _, want := range []string{`"export-name": "one"`, `"export-name": "two"`, "first volume", "second volume", "2097152"} {
		if !strings.Contains(out, want) {
			t.Errorf("nbdinfo --list lacks %s:\n%s", want, out)
		}
	}
	checkFields(t, nbdinfoJSON(t, ts.uri()+"/two"), map[string]any{"export-size": int64(2 << 20), "description": "second volume"})
}
