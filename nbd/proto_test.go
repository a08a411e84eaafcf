package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type testServer struct {
	s    *Server
	addr string
	net  string
}

// startServer serves b on a loopback TCP port (or a Unix socket when
// network is "unix") until the test ends.
func startServer(t testing.TB, b Backend, o Options, network ...string) *testServer {
	t.Helper()
	nw, addr := "tcp", "127.0.0.1:0"
	if len(network) > 0 && network[0] == "unix" {
		nw, addr = "unix", shortSocketPath(t)
	}
	l, err := net.Listen(nw, addr)
	if err != nil {
		t.Fatal(err)
	}
	if o.Logf == nil {
		o.Logf = func(format string, args ...any) { t.Logf(format, args...) }
	}
	s := NewServer(b, o)
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
	return &testServer{s: s, addr: l.Addr().String(), net: nw}
}

func (ts *testServer) conn(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(ts.net, ts.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (ts *testServer) dial(t testing.TB, o dialOpts) *client {
	t.Helper()
	return dial(t, ts.conn(t), o)
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func TestHandshakeInfo(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		size, bs             int
		opts                 Options
		wantMin, wantPref    uint32
		wantFlags, wantNoFlg uint16
	}{
		{"512", 1 << 20, 512, Options{}, 512, 4096, FlagHasFlags | FlagSendFlush | FlagSendFUA | FlagSendWriteZeroes, FlagReadOnly | FlagSendTrim | FlagCanMultiConn},
		{"4096-ro-multiconn", 1 << 20, 4096, Options{ReadOnly: true, MultiConn: true}, 4096, 4096, FlagHasFlags | FlagReadOnly | FlagSendFlush | FlagCanMultiConn, FlagSendFUA | FlagSendWriteZeroes | FlagSendTrim},
		{"odd-size", 1<<20 + 100, 512, Options{}, 1, 4096, FlagHasFlags, 0},
		{"trim-not-supported", 1 << 20, 512, Options{AllowDiscards: true}, 512, 4096, FlagHasFlags, FlagSendTrim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ExportName = "vol"
			tc.opts.Description = "test volume"
			tc.opts.MaxRequest = 1 << 20
			ts := startServer(t, newMem(tc.size, tc.bs), tc.opts)
			for _, name := range []string{"", "vol"} {
				cl := ts.dial(t, dialOpts{name: name})
				e := cl.info
				if e.size != uint64(tc.size) || e.minB != tc.wantMin || e.prefB != tc.wantPref || e.maxB != 1<<20 {
					t.Errorf("size %d blocks %d/%d/%d", e.size, e.minB, e.prefB, e.maxB)
				}
				if e.name != "vol" || e.description != "test volume" {
					t.Errorf("name %q description %q", e.name, e.description)
				}
				if e.flags&tc.wantFlags != tc.wantFlags || e.flags&tc.wantNoFlg != 0 {
					t.Errorf("flags %#x", e.flags)
				}
				cl.disconnect()
			}
		})
	}
	t.Run("trim", func(t *testing.T) {
		ts := startServer(t, &discardMem{memBackend: newMem(1<<20, 512)}, Options{AllowDiscards: true})
		cl := ts.dial(t, dialOpts{})
		if cl.info.flags&FlagSendTrim == 0 {
			t.Errorf("flags %#x lack SEND_TRIM", cl.info.flags)
		}
		cl.disconnect()
	})
}

func TestExportNameOption(t *testing.T) {
	ts := startServer(t, newMem(1<<20, 512), Options{ExportName: "vol"})
	for _, noZeroes := range []bool{false, true} {
		c := ts.conn(t)
		flags := uint32(flagCFixedNewstyle)
		if noZeroes {
			flags |= flagCNoZeroes
		}
		o := newOptClient(t, c, flags)
		o.send(optExportName, []byte("vol"))
		want := 10
		if !noZeroes {
			want += 124
		}
		buf := make([]byte, want)
		if _, err := io.ReadFull(o.br, buf); err != nil {
			t.Fatal(err)
		}
		if be.Uint64(buf) != 1<<20 || !bytes.Equal(buf[10:], make([]byte, want-10)) {
			t.Fatalf("bad EXPORT_NAME reply %x", buf[:10])
		}
		// The stream is now in transmission phase: a read must work.
		cl := &client{t: t, c: c, br: o.br, pending: map[uint64]*call{}, closed: make(chan struct{}), info: exportInfo{size: 1 << 20}}
		go cl.readLoop()
		cl.mustOK(reqArgs{typ: cmdRead, off: 4096, length: 4096})
		cl.disconnect()
	}
	// Non-fixed newstyle client: EXPORT_NAME works, anything else closes.
	c := ts.conn(t)
	o := newOptClient(t, c, 0)
	o.send(optExportName, nil)
	buf := make([]byte, 134)
	if _, err := io.ReadFull(o.br, buf); err != nil {
		t.Fatal(err)
	}
	c = ts.conn(t)
	o = newOptClient(t, c, 0)
	o.send(optList, nil)
	expectClosed(t, c, o.br)
	// Unknown export name: the server must terminate the session.
	c = ts.conn(t)
	o = newOptClient(t, c, flagCFixedNewstyle)
	o.send(optExportName, []byte("nope"))
	expectClosed(t, c, o.br)
}

func TestOptions(t *testing.T) {
	ts := startServer(t, newMem(1<<20, 512), Options{ExportName: "vol", Description: "d"})
	c := ts.conn(t)
	o := newOptClient(t, c, flagCFixedNewstyle|flagCNoZeroes)

	rs := o.expect(t, optList, nil, repAck)
	if len(rs) != 2 || rs[0].typ != repServer || string(rs[0].data) != "\x00\x00\x00\x03vold" {
		t.Errorf("LIST replies %+v", rs)
	}
	o.expect(t, optList, []byte("x"), repErrInvalid)
	o.expect(t, 42, []byte("some data for an unknown option"), repErrUnsup)
	o.expect(t, 9, goData("vol"), repErrUnsup)                          // LIST_META_CONTEXT
	o.expect(t, 11, nil, repErrUnsup)                                   // EXTENDED_HEADERS
	o.expect(t, 1000, make([]byte, maxOptionDataLen+1000), repErrUnsup) // big unknown option is skipped
	o.expect(t, optGo, make([]byte, maxOptionDataLen+1), repErrTooBig)
	o.expect(t, optStartTLS, nil, repErrPolicy)
	o.expect(t, optStructuredReply, []byte{1}, repErrInvalid)
	o.expect(t, optInfo, goData("other"), repErrUnknown)
	o.expect(t, optInfo, []byte{0, 0, 0}, repErrInvalid)
	o.expect(t, optInfo, []byte{0xff, 0xff, 0xff, 0xff, 0, 0}, repErrInvalid)
	o.expect(t, optInfo, append(goData("vol", infoBlockSize), 0), repErrInvalid)
	e := parseInfos(t, o.expect(t, optInfo, goData("vol"), repAck))
	if e.size != 1<<20 || e.gotName {
		t.Errorf("INFO %+v", e)
	}
	o.expect(t, optStructuredReply, nil, repAck)
	o.expect(t, optGo, goData("vol", infoBlockSize), repAck)
	cl := &client{t: t, c: c, br: o.br, pending: map[uint64]*call{}, closed: make(chan struct{}), structured: true}
	go cl.readLoop()
	cl.mustOK(reqArgs{typ: cmdRead, length: 512})
	cl.disconnect()

	// ABORT is acknowledged, then the server closes.
	c = ts.conn(t)
	o = newOptClient(t, c, flagCFixedNewstyle)
	o.expect(t, optAbort, nil, repAck)
	expectClosed(t, c, o.br)

	// Bad option magic and unknown client flags close the connection.
	c = ts.conn(t)
	o = newOptClient(t, c, flagCFixedNewstyle)
	c.Write(make([]byte, 16))
	expectClosed(t, c, o.br)
	c = ts.conn(t)
	o = newOptClient(t, c, 1<<7)
	expectClosed(t, c, o.br)

	// A truncated option closes the connection when the client goes away.
	c = ts.conn(t)
	o = newOptClient(t, c, flagCFixedNewstyle)
	p := make([]byte, 16, 20)
	be.PutUint64(p, optMagic)
	be.PutUint32(p[8:], optGo)
	be.PutUint32(p[12:], 100)
	c.Write(append(p, 1, 2, 3, 4))
	c.(*net.TCPConn).CloseWrite()
	expectClosed(t, c, o.br)
}

func TestHandshakeTimeout(t *testing.T) {
	ts := startServer(t, newMem(1<<20, 512), Options{HandshakeTimeout: 300 * time.Millisecond})
	c := ts.conn(t)
	start := time.Now()
	o := newOptClient(t, c, flagCFixedNewstyle)
	c.SetDeadline(time.Time{})
	expectClosed(t, c, o.br)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v", d)
	}
	// A stalled greeting reader (nothing sent at all) is closed too.
	c = ts.conn(t)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("expected EOF, got %v", err)
	}
	// The server still serves a well-behaved client.
	ts.dial(t, dialOpts{}).disconnect()
}

func TestReadWrite(t *testing.T) {
	for _, structured := range []bool{false, true} {
		for _, native := range []bool{false, true} {
			name := map[bool]string{false: "simple", true: "structured"}[structured] + map[bool]string{false: "", true: "-native"}[native]
			t.Run(name, func(t *testing.T) {
				m := newMem(4<<20, 512)
				var b Backend = m
				var dm *discardMem
				if native {
					dm = &discardMem{memBackend: m}
					b = dm
				}
				ts := startServer(t, b, Options{AllowDiscards: true})
				cl := ts.dial(t, dialOpts{structured: structured})
				data := randBytes(1, 3<<20)
				cl.mustOK(reqArgs{typ: cmdWrite, off: 1 << 20, payload: data})
				if got := cl.mustOK(reqArgs{typ: cmdRead, off: 1 << 20, length: uint32(len(data))}); !bytes.Equal(got, data) {
					t.Fatalf("read back differs")
				}
				f := m.flushes.Load()
				cl.mustOK(reqArgs{typ: cmdWrite, flags: cmdFlagFUA, off: 0, payload: data[:4096]})
				cl.mustOK(reqArgs{typ: cmdFlush})
				if got := m.flushes.Load() - f; got != 2 {
					t.Errorf("FUA write + FLUSH caused %d flushes, want 2", got)
				}
				// Zero-length requests succeed.
				cl.mustOK(reqArgs{typ: cmdRead, off: 4 << 20, length: 0})
				cl.mustOK(reqArgs{typ: cmdWrite, off: 4 << 20})
				// WRITE_ZEROES (with NO_HOLE and FUA), larger than one zero chunk.
				cl.mustOK(reqArgs{typ: cmdWriteZeroes, flags: cmdFlagNoHole | cmdFlagFUA, off: 1<<20 + 512, length: 2<<20 + 1024})
				want := append([]byte(nil), data...)
				clear(want[512 : 512+2<<20+1024])
				if got := cl.mustOK(reqArgs{typ: cmdRead, off: 1 << 20, length: uint32(len(data))}); !bytes.Equal(got, want) {
					t.Fatalf("WRITE_ZEROES result differs")
				}
				if native {
					if dm.zeroes.Load() != 1 {
						t.Errorf("WriteZeroes not used")
					}
					cl.mustOK(reqArgs{typ: cmdTrim, off: 1 << 20, length: 4096})
					if dm.discards.Load() != 1 {
						t.Errorf("Discard not used")
					}
				} else {
					cl.mustErr(reqArgs{typ: cmdTrim, off: 1 << 20, length: 4096}, nbdEINVAL)
				}
				if !bytes.Equal(m.snapshot()[1<<20+4096:4<<20], want[4096:]) {
					t.Errorf("backend content differs")
				}
				cl.disconnect()
			})
		}
	}
}

func TestBadRequests(t *testing.T) {
	for _, structured := range []bool{false, true} {
		t.Run(map[bool]string{false: "simple", true: "structured"}[structured], func(t *testing.T) {
			const size = 1 << 20
			m := newMem(size, 512)
			ts := startServer(t, m, Options{MaxRequest: 64 << 10})
			cl := ts.dial(t, dialOpts{structured: structured})
			ok := func() { // the connection still works
				t.Helper()
				cl.mustOK(reqArgs{typ: cmdRead, off: 512, length: 512})
			}
			cl.mustErr(reqArgs{typ: cmdRead, off: size - 512, length: 1024}, nbdEINVAL)
			cl.mustErr(reqArgs{typ: cmdRead, off: 1 << 62, length: 512}, nbdEINVAL)
			cl.mustErr(reqArgs{typ: cmdRead, off: ^uint64(0) - 100, length: 512}, nbdEINVAL)
			ok()
			cl.mustErr(reqArgs{typ: cmdRead, length: 128 << 10}, nbdEOVERFLOW)
			cl.mustErr(reqArgs{typ: cmdRead, length: ^uint32(0)}, nbdEOVERFLOW)
			ok()
			// Oversized write: payload discarded, connection kept.
			cl.mustErr(reqArgs{typ: cmdWrite, payload: randBytes(2, 128<<10)}, nbdEINVAL)
			ok()
			// Out-of-range write: nbdENOSPC, payload discarded, backend untouched.
			cl.mustErr(reqArgs{typ: cmdWrite, off: size - 512, payload: randBytes(3, 1024)}, nbdENOSPC)
			cl.mustErr(reqArgs{typ: cmdWriteZeroes, off: size, length: 512}, nbdENOSPC)
			ok()
			if m.writes.Load() != 0 {
				t.Errorf("backend was written")
			}
			for _, typ := range []uint16{cmdCache, cmdBlockStatus, 8, 99, 0xffff} {
				cl.mustErr(reqArgs{typ: typ, length: 512}, nbdEINVAL)
			}
			cl.mustErr(reqArgs{typ: cmdTrim, length: 512}, nbdEINVAL) // not advertised
			cl.mustErr(reqArgs{typ: cmdRead, flags: cmdFlagDF, length: 512}, nbdEINVAL)
			cl.mustErr(reqArgs{typ: cmdWrite, flags: 1 << 9, payload: make([]byte, 512)}, nbdEINVAL)
			cl.mustErr(reqArgs{typ: cmdWriteZeroes, flags: cmdFlagFastZero, length: 512}, nbdEINVAL)
			ok()
			// The client agreed to 512-byte blocks: unaligned requests fail.
			cl.mustErr(reqArgs{typ: cmdRead, off: 1, length: 512}, nbdEINVAL)
			cl.mustErr(reqArgs{typ: cmdWrite, off: 512, payload: make([]byte, 100)}, nbdEINVAL)
			ok()
			if m.writes.Load() != 0 {
				t.Errorf("backend was written")
			}
			cl.disconnect()

			// Clients that did not agree to block sizes may do unaligned I/O.
			for _, o := range []dialOpts{{structured: structured, exportName: true}, {structured: structured, noBlockInfo: true}} {
				cl = ts.dial(t, o)
				cl.mustOK(reqArgs{typ: cmdWrite, off: 3, payload: []byte("hello")})
				if got := cl.mustOK(reqArgs{typ: cmdRead, off: 2, length: 7}); string(got) != "\x00hello\x00" {
					t.Errorf("unaligned read %q", got)
				}
				cl.disconnect()
			}

			// Protocol violations close only the offending connection.
			for _, bad := range []struct {
				name string
				send func(c net.Conn)
			}{
				{"bad magic", func(c net.Conn) {
					p := make([]byte, requestHeaderLen)
					be.PutUint32(p, 0x12345678)
					c.Write(p)
				}},
				{"truncated header", func(c net.Conn) {
					p := make([]byte, 10)
					be.PutUint32(p, requestMagic)
					c.Write(p)
					c.(*net.TCPConn).CloseWrite()
				}},
				{"truncated write", func(c net.Conn) {
					p := make([]byte, requestHeaderLen+100)
					be.PutUint32(p, requestMagic)
					be.PutUint16(p[6:], cmdWrite)
					be.PutUint32(p[24:], 4096)
					c.Write(p)
					c.(*net.TCPConn).CloseWrite()
				}},
			} {
				cl = ts.dial(t, dialOpts{structured: structured})
				bad.send(cl.c)
				cl.waitClosed()
				cl2 := ts.dial(t, dialOpts{structured: structured})
				cl2.mustOK(reqArgs{typ: cmdRead, length: 4096})
				cl2.disconnect()
			}
			// A write whose payload is too large to skip: error, then close.
			cl = ts.dial(t, dialOpts{structured: structured})
			p := cl.start(reqArgs{typ: cmdWrite, length: 1 << 30, rawLen: true}).wait(t)
			if p.err == nil && p.errno != nbdEINVAL {
				t.Errorf("huge write: errno %d", p.errno)
			}
			cl.waitClosed()
		})
	}
}

func TestReadOnly(t *testing.T) {
	m := newMem(1<<20, 4096)
	copy(m.data, randBytes(4, 1<<20))
	orig := m.snapshot()
	ts := startServer(t, m, Options{ReadOnly: true})
	for _, structured := range []bool{false, true} {
		cl := ts.dial(t, dialOpts{structured: structured})
		cl.mustErr(reqArgs{typ: cmdWrite, off: 4096, payload: make([]byte, 8192)}, nbdEPERM)
		cl.mustErr(reqArgs{typ: cmdWriteZeroes, off: 4096, length: 8192}, nbdEPERM)
		cl.mustErr(reqArgs{typ: cmdTrim, off: 4096, length: 8192}, nbdEPERM)
		if got := cl.mustOK(reqArgs{typ: cmdRead, off: 4096, length: 8192}); !bytes.Equal(got, orig[4096:4096+8192]) {
			t.Errorf("read differs")
		}
		cl.mustOK(reqArgs{typ: cmdFlush})
		cl.disconnect()
	}
	if !bytes.Equal(m.snapshot(), orig) || m.writes.Load() != 0 {
		t.Errorf("read-only backend was modified")
	}
}

// errBackend fails or panics on chosen offsets.
type errBackend struct {
	*memBackend
}

func (e errBackend) ReadAt(p []byte, off int64) (int, error) {
	switch off {
	case 4096:
		return 0, syscall.EIO
	case 8192:
		panic("backend bug")
	case 12288:
		return len(p) / 2, nil // short read without error
	}
	return e.memBackend.ReadAt(p, off)
}

func (e errBackend) WriteAt(p []byte, off int64) (int, error) {
	if off == 4096 {
		return 0, &net.OpError{Op: "write", Err: syscall.ENOSPC}
	}
	return e.memBackend.WriteAt(p, off)
}

func TestBackendErrors(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	ts := startServer(t, errBackend{newMem(1<<20, 512)}, Options{Logf: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&logs, f, a...)
	}})
	for _, structured := range []bool{false, true} {
		cl := ts.dial(t, dialOpts{structured: structured})
		cl.mustErr(reqArgs{typ: cmdRead, off: 4096, length: 512}, nbdEIO)
		cl.mustErr(reqArgs{typ: cmdRead, off: 12288, length: 512}, nbdEIO)
		cl.mustErr(reqArgs{typ: cmdWrite, off: 4096, payload: make([]byte, 512)}, nbdENOSPC)
		cl.mustOK(reqArgs{typ: cmdRead, off: 0, length: 512})
		// A panicking backend closes this connection only.
		p := cl.start(reqArgs{typ: cmdRead, off: 8192, length: 512}).wait(t)
		if p.err == nil {
			t.Errorf("panic: got reply errno %d", p.errno)
		}
		cl.waitClosed()
		cl = ts.dial(t, dialOpts{structured: structured})
		cl.mustOK(reqArgs{typ: cmdRead, off: 0, length: 512})
		cl.disconnect()
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "panic") {
		t.Errorf("panic was not logged")
	}
}

// slowMem delays reads so requests are in flight during Shutdown.
type slowMem struct {
	*memBackend
	delay time.Duration
}

func (s slowMem) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(s.delay)
	return s.memBackend.ReadAt(p, off)
}

func TestShutdown(t *testing.T) {
	m := newMem(1<<20, 512)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(slowMem{m, 300 * time.Millisecond}, Options{Logf: t.Logf})
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background(), l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := dial(t, c, dialOpts{structured: true})
	idle := ts0(t, l.Addr().String()) // a connection still negotiating
	calls := []*call{}
	for i := range 8 {
		calls = append(calls, cl.start(reqArgs{typ: cmdRead, off: uint64(i) * 4096, length: 4096}))
	}
	// Requests are decoded in order: once this write is answered, all the
	// slow reads are in flight.
	cl.mustOK(reqArgs{typ: cmdWrite, payload: make([]byte, 512)})
	f := m.flushes.Load()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, p := range calls {
		if p.wait(t); p.err != nil || p.errno != 0 {
			t.Errorf("in-flight read: err %v errno %d", p.err, p.errno)
		}
	}
	if m.flushes.Load() == f {
		t.Errorf("backend not flushed")
	}
	cl.waitClosed()
	expectClosed(t, idle, nil)
	if err := <-errc; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Errorf("listener still accepting")
	}
	if err := s.ServeConn(context.Background(), idle); !errors.Is(err, ErrServerClosed) {
		t.Errorf("ServeConn after Shutdown: %v", err)
	}
}

func ts0(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	newOptClient(t, c, flagCFixedNewstyle)
	return c
}

func TestServeCancel(t *testing.T) {
	m := newMem(1<<20, 512)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(slowMem{m, 200 * time.Millisecond}, Options{Logf: t.Logf})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := dial(t, c, dialOpts{})
	p := cl.start(reqArgs{typ: cmdRead, length: 4096})
	// Requests are decoded in order: once this write is answered, the
	// slow read is in flight.
	cl.mustOK(reqArgs{typ: cmdWrite, off: 8192, payload: make([]byte, 512)})
	cancel()
	if p.wait(t); p.err != nil || p.errno != 0 {
		t.Errorf("in-flight read: %v %d", p.err, p.errno)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	cl.waitClosed()
	if m.flushes.Load() == 0 {
		t.Errorf("backend not flushed")
	}
}

// TestConcurrentClients runs two connections doing random reads and writes
// with many requests in flight, checked against a shadow copy.
func TestConcurrentClients(t *testing.T) {
	const (
		size  = 8 << 20
		block = 4096
		lanes = 6 // per client; each lane owns every (2*lanes)th block
	)
	for _, backend := range []string{"mem", "file"} {
		t.Run(backend, func(t *testing.T) {
			var b Backend
			var read func() []byte
			if backend == "mem" {
				m := newMem(size, 512)
				b, read = m, m.snapshot
			} else {
				fb, err := newFileBackend(t.TempDir()+"/disk.img", size, 4096)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { fb.Close() })
				b = fb
				read = func() []byte {
					p := make([]byte, size)
					fb.ReadAt(p, 0)
					return p
				}
			}
			ts := startServer(t, b, Options{MultiConn: true})
			shadow := make([]byte, size)
			var wg sync.WaitGroup
			clients := []*client{ts.dial(t, dialOpts{structured: true}), ts.dial(t, dialOpts{})}
			for ci, cl := range clients {
				for lane := range lanes {
					wg.Add(1)
					go func() {
						defer wg.Done()
						owner := ci*lanes + lane
						r := rand.New(rand.NewPCG(uint64(owner), 7))
						nblocks := size / block / (2 * lanes)
						for range 150 {
							blk := (r.IntN(nblocks)*(2*lanes) + owner)
							nb := 1
							off := blk * block
							switch r.IntN(3) {
							case 0, 1:
								p := randBytes(r.Uint64(), nb*block)
								if q := cl.do(reqArgs{typ: cmdWrite, off: uint64(off), payload: p}); q.err != nil || q.errno != 0 {
									t.Errorf("write: %v %d", q.err, q.errno)
									return
								}
								copy(shadow[off:], p) // lanes own disjoint blocks
							case 2:
								q := cl.do(reqArgs{typ: cmdRead, off: uint64(off), length: uint32(nb * block)})
								if q.err != nil || q.errno != 0 {
									t.Errorf("read: %v %d", q.err, q.errno)
									return
								}
								if !bytes.Equal(q.data, shadow[off:off+nb*block]) {
									t.Errorf("client %d lane %d: read at %d differs from shadow", ci, lane, off)
									return
								}
							}
						}
					}()
				}
			}
			wg.Wait()
			for _, cl := range clients {
				cl.mustOK(reqArgs{typ: cmdFlush})
				if got := cl.mustOK(reqArgs{typ: cmdRead, length: 1 << 20}); !bytes.Equal(got, shadow[:1<<20]) {
					t.Errorf("final read differs")
				}
				cl.disconnect()
			}
			if !bytes.Equal(read(), shadow) {
				t.Errorf("backend differs from shadow")
			}
		})
	}
}

func TestShutdownTimeout(t *testing.T) {
	m := newMem(1<<20, 512)
	s := NewServer(slowMem{m, 2 * time.Second}, Options{Logf: t.Logf})
	cs, ss := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.ServeConn(context.Background(), ss) }()
	cl := dial(t, cs, dialOpts{})
	p := cl.start(reqArgs{typ: cmdRead, length: 512})
	cl.mustOK(reqArgs{typ: cmdWrite, off: 4096, payload: make([]byte, 512)}) // the read is now in flight
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v", err)
	}
	if p.wait(t); p.err == nil {
		t.Errorf("read answered although the connection was force-closed")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeConn did not return")
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

type failingListener struct{ net.Listener }

func (failingListener) Accept() (net.Conn, error) { return nil, errors.New("accept failed") }

func TestServeListenerError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(newMem(4096, 512), Options{})
	if err := s.Serve(context.Background(), failingListener{l}); err == nil || !strings.Contains(err.Error(), "accept failed") {
		t.Errorf("Serve: %v", err)
	}
}

// countingMem records how many large writes run at once.
type countingMem struct {
	*memBackend
	mu       sync.Mutex
	cur, max int
}

func (c *countingMem) WriteAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	c.cur++
	c.max = max(c.max, c.cur)
	c.mu.Unlock()
	time.Sleep(150 * time.Millisecond)
	defer func() {
		c.mu.Lock()
		c.cur--
		c.mu.Unlock()
	}()
	return c.memBackend.WriteAt(p, off)
}

// TestInflightBudget pipelines many maximum-size writes: the payload
// budget (2*MaxRequest here) bounds how many are buffered at once, and all
// of them complete.
func TestInflightBudget(t *testing.T) {
	const maxReq = 16 << 20
	b := &countingMem{memBackend: newMem(64<<20, 512)}
	ts := startServer(t, b, Options{MaxRequest: maxReq})
	cl := ts.dial(t, dialOpts{structured: true})
	var calls []*call
	var want [][]byte
	for i := range 8 {
		p := randBytes(uint64(100+i), maxReq)
		want = append(want, p)
		calls = append(calls, cl.start(reqArgs{typ: cmdWrite, off: uint64(i%4) * maxReq, payload: p}))
		if i%4 == 3 {
			for _, c := range calls {
				if c.wait(t); c.err != nil || c.errno != 0 {
					t.Fatalf("write: %v %d", c.err, c.errno)
				}
			}
			calls = calls[:0]
		}
	}
	for i := range 4 {
		if got := cl.mustOK(reqArgs{typ: cmdRead, off: uint64(i) * maxReq, length: maxReq}); !bytes.Equal(got, want[4+i]) {
			t.Errorf("block %d differs", i)
		}
	}
	cl.disconnect()
	t.Logf("at most %d large writes in flight", b.max)
	if b.max > 2 {
		t.Errorf("%d writes of MaxRequest bytes were in flight at once; budget allows 2", b.max)
	}
}
