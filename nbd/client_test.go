package nbd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// A small NBD client for tests: option haggling helpers plus a multiplexing
// transmission-phase client that matches replies to requests by cookie.

type optClient struct {
	c  net.Conn
	br *bufio.Reader
}

// newOptClient reads the greeting and sends the client flags.
func newOptClient(t testing.TB, c net.Conn, clientFlags uint32) *optClient {
	t.Helper()
	o := &optClient{c: c, br: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var g [18]byte
	if _, err := io.ReadFull(o.br, g[:]); err != nil {
		t.Fatalf("reading greeting: %v", err)
	}
	if be.Uint64(g[0:]) != nbdMagic || be.Uint64(g[8:]) != optMagic {
		t.Fatalf("bad greeting %x", g)
	}
	if f := be.Uint16(g[16:]); f != flagFixedNewstyle|flagNoZeroes {
		t.Fatalf("handshake flags = %#x", f)
	}
	var cf [4]byte
	be.PutUint32(cf[:], clientFlags)
	if _, err := c.Write(cf[:]); err != nil {
		t.Fatal(err)
	}
	return o
}

func (o *optClient) send(opt uint32, data []byte) error {
	p := make([]byte, 16, 16+len(data))
	be.PutUint64(p, optMagic)
	be.PutUint32(p[8:], opt)
	be.PutUint32(p[12:], uint32(len(data)))
	_, err := o.c.Write(append(p, data...))
	return err
}

type optReply struct {
	opt, typ uint32
	data     []byte
}

func (o *optClient) read() (optReply, error) {
	var h [20]byte
	if _, err := io.ReadFull(o.br, h[:]); err != nil {
		return optReply{}, err
	}
	if be.Uint64(h[:]) != optReplyMagic {
		return optReply{}, fmt.Errorf("bad option reply magic %x", h[:8])
	}
	r := optReply{opt: be.Uint32(h[8:]), typ: be.Uint32(h[12:])}
	n := be.Uint32(h[16:])
	if n > 1<<20 {
		return r, fmt.Errorf("option reply too long: %d", n)
	}
	r.data = make([]byte, n)
	_, err := io.ReadFull(o.br, r.data)
	return r, err
}

// expect sends an option and checks the reply type of its final reply;
// it returns all replies.
func (o *optClient) expect(t testing.TB, opt uint32, data []byte, final uint32) []optReply {
	t.Helper()
	if err := o.send(opt, data); err != nil {
		t.Fatalf("sending option %d: %v", opt, err)
	}
	var rs []optReply
	for range 100 {
		r, err := o.read()
		if err != nil {
			t.Fatalf("option %d: reading reply: %v", opt, err)
		}
		if r.opt != opt {
			t.Fatalf("reply for option %d, want %d", r.opt, opt)
		}
		rs = append(rs, r)
		if r.typ != repServer && r.typ != repInfo {
			if r.typ != final {
				t.Fatalf("option %d: reply type %#x (%q), want %#x", opt, r.typ, r.data, final)
			}
			return rs
		}
	}
	t.Fatalf("option %d: too many replies", opt)
	return nil
}

// expectClosed asserts the server closes the connection (EOF or reset).
func expectClosed(t testing.TB, c net.Conn, r io.Reader) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r == nil {
		r = c
	}
	buf := make([]byte, 4096)
	for range 1000 {
		_, err := r.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("server did not close the connection")
		}
		return
	}
	t.Fatalf("server kept sending data instead of closing")
}

func goData(name string, infos ...uint16) []byte {
	p := make([]byte, 4, 4+len(name)+2+2*len(infos))
	be.PutUint32(p, uint32(len(name)))
	p = append(p, name...)
	p = binary.BigEndian.AppendUint16(p, uint16(len(infos)))
	for _, i := range infos {
		p = binary.BigEndian.AppendUint16(p, i)
	}
	return p
}

type exportInfo struct {
	size               uint64
	flags              uint16
	minB, prefB, maxB  uint32
	name, description  string
	gotName, gotBlocks bool
}

func parseInfos(t testing.TB, rs []optReply) exportInfo {
	t.Helper()
	var e exportInfo
	gotExport := false
	for _, r := range rs {
		if r.typ != repInfo {
			continue
		}
		if len(r.data) < 2 {
			t.Fatalf("short NBD_REP_INFO")
		}
		switch be.Uint16(r.data) {
		case infoExport:
			if len(r.data) != 12 {
				t.Fatalf("NBD_INFO_EXPORT length %d", len(r.data))
			}
			e.size = be.Uint64(r.data[2:])
			e.flags = be.Uint16(r.data[10:])
			gotExport = true
		case infoName:
			e.name = string(r.data[2:])
			e.gotName = true
		case infoDescription:
			e.description = string(r.data[2:])
		case infoBlockSize:
			if len(r.data) != 14 {
				t.Fatalf("NBD_INFO_BLOCK_SIZE length %d", len(r.data))
			}
			e.minB, e.prefB, e.maxB = be.Uint32(r.data[2:]), be.Uint32(r.data[6:]), be.Uint32(r.data[10:])
			e.gotBlocks = true
		}
	}
	if !gotExport {
		t.Fatalf("no NBD_INFO_EXPORT")
	}
	return e
}

// client is a transmission-phase client.
type client struct {
	t          testing.TB
	c          net.Conn
	br         *bufio.Reader
	structured bool
	info       exportInfo

	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[uint64]*call
	next    uint64
	err     error
	closed  chan struct{}
}

type call struct {
	typ   uint16
	len   uint32
	off   uint64
	done  chan struct{}
	errno uint32
	msg   string
	data  []byte
	err   error
}

type dialOpts struct {
	name        string
	structured  bool
	exportName  bool // use NBD_OPT_EXPORT_NAME instead of GO
	noBlockInfo bool // GO without NBD_INFO_BLOCK_SIZE
}

// dial performs the handshake on c and starts the reply reader.
func dial(t testing.TB, c net.Conn, o dialOpts) *client {
	t.Helper()
	oc := newOptClient(t, c, flagCFixedNewstyle|flagCNoZeroes)
	cl := &client{t: t, c: c, br: oc.br, pending: map[uint64]*call{}, closed: make(chan struct{})}
	if o.structured {
		oc.expect(t, optStructuredReply, nil, repAck)
		cl.structured = true
	}
	if o.exportName {
		if err := oc.send(optExportName, []byte(o.name)); err != nil {
			t.Fatal(err)
		}
		var r [10]byte
		if _, err := io.ReadFull(oc.br, r[:]); err != nil {
			t.Fatalf("NBD_OPT_EXPORT_NAME reply: %v", err)
		}
		cl.info.size, cl.info.flags = be.Uint64(r[:]), be.Uint16(r[8:])
	} else {
		infos := []uint16{infoName, infoDescription, infoBlockSize}
		if o.noBlockInfo {
			infos = infos[:2]
		}
		cl.info = parseInfos(t, oc.expect(t, optGo, goData(o.name, infos...), repAck))
	}
	c.SetDeadline(time.Time{})
	go cl.readLoop()
	return cl
}

func (cl *client) fail(err error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.err != nil {
		return
	}
	cl.err = err
	for k, p := range cl.pending {
		p.err = err
		close(p.done)
		delete(cl.pending, k)
	}
	close(cl.closed)
}

func (cl *client) readLoop() {
	for {
		if err := cl.readReply(); err != nil {
			cl.fail(err)
			return
		}
	}
}

func (cl *client) take(cookie uint64) (*call, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	p := cl.pending[cookie]
	if p == nil {
		return nil, fmt.Errorf("reply for unknown cookie %d", cookie)
	}
	return p, nil
}

func (cl *client) finish(cookie uint64) {
	cl.mu.Lock()
	p := cl.pending[cookie]
	delete(cl.pending, cookie)
	cl.mu.Unlock()
	close(p.done)
}

func (cl *client) readReply() error {
	var m [4]byte
	if _, err := io.ReadFull(cl.br, m[:]); err != nil {
		return err
	}
	switch be.Uint32(m[:]) {
	case simpleMagic:
		var h [12]byte
		if _, err := io.ReadFull(cl.br, h[:]); err != nil {
			return err
		}
		cookie := be.Uint64(h[4:])
		p, err := cl.take(cookie)
		if err != nil {
			return err
		}
		p.errno = be.Uint32(h[:])
		if p.typ == cmdRead && p.errno == 0 {
			if cl.structured {
				return errors.New("simple reply to a read after structured replies were negotiated")
			}
			p.data = make([]byte, p.len)
			if _, err := io.ReadFull(cl.br, p.data); err != nil {
				return err
			}
		}
		cl.finish(cookie)
		return nil
	case structuredMagic:
		if !cl.structured {
			return errors.New("structured reply without negotiation")
		}
		var h [16]byte
		if _, err := io.ReadFull(cl.br, h[:]); err != nil {
			return err
		}
		flags, typ, cookie, n := be.Uint16(h[0:]), be.Uint16(h[2:]), be.Uint64(h[4:]), be.Uint32(h[12:])
		p, err := cl.take(cookie)
		if err != nil {
			return err
		}
		if n > 64<<20 {
			return fmt.Errorf("chunk too long: %d", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(cl.br, payload); err != nil {
			return err
		}
		switch typ {
		case replyTypeNone:
			if n != 0 || flags&replyFlagDone == 0 {
				return errors.New("bad NONE chunk")
			}
		case replyTypeOffsetData:
			if p.typ != cmdRead || n < 9 {
				return errors.New("bad OFFSET_DATA chunk")
			}
			if p.data == nil {
				p.data = make([]byte, p.len)
			}
			off := be.Uint64(payload) - p.dataOff()
			if off+uint64(n-8) > uint64(p.len) {
				return errors.New("OFFSET_DATA outside the request")
			}
			copy(p.data[off:], payload[8:])
		case replyTypeError:
			if n < 6 {
				return errors.New("short error chunk")
			}
			p.errno = be.Uint32(payload)
			ml := int(be.Uint16(payload[4:]))
			if ml > int(n)-6 {
				return errors.New("bad error message length")
			}
			p.msg = string(payload[6 : 6+ml])
			if p.errno == 0 {
				return errors.New("error chunk with zero error")
			}
		default:
			return fmt.Errorf("unexpected chunk type %d", typ)
		}
		if flags&replyFlagDone != 0 {
			cl.finish(cookie)
		}
		return nil
	default:
		return fmt.Errorf("bad reply magic %x", m)
	}
}

// dataOff is the request offset, remembered for OFFSET_DATA chunks.
func (p *call) dataOff() uint64 { return p.off }

type reqArgs struct {
	typ, flags uint16
	off        uint64
	length     uint32
	payload    []byte // for writes; length defaults to len(payload)
	rawLen     bool   // send length as given even for writes with payload
}

// start sends a request and returns the pending call.
func (cl *client) start(a reqArgs) *call {
	if a.typ == cmdWrite && !a.rawLen {
		a.length = uint32(len(a.payload))
	}
	cl.mu.Lock()
	if cl.err != nil {
		cl.mu.Unlock()
		return &call{err: cl.err, done: closedChan}
	}
	cl.next++
	cookie := cl.next
	p := &call{typ: a.typ, len: a.length, off: a.off, done: make(chan struct{})}
	if a.typ != cmdDisc {
		cl.pending[cookie] = p
	}
	cl.mu.Unlock()
	h := make([]byte, requestHeaderLen, requestHeaderLen+len(a.payload))
	be.PutUint32(h[0:], requestMagic)
	be.PutUint16(h[4:], a.flags)
	be.PutUint16(h[6:], a.typ)
	be.PutUint64(h[8:], cookie)
	be.PutUint64(h[16:], a.off)
	be.PutUint32(h[24:], a.length)
	cl.wmu.Lock()
	_, err := cl.c.Write(append(h, a.payload...))
	cl.wmu.Unlock()
	if err != nil {
		cl.fail(err)
	}
	return p
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (p *call) wait(t testing.TB) *call {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("no reply within 30s")
	}
	return p
}

func (cl *client) do(a reqArgs) *call { return cl.start(a).wait(cl.t) }

// mustOK runs a request and fails the test unless it succeeded.
func (cl *client) mustOK(a reqArgs) []byte {
	cl.t.Helper()
	p := cl.do(a)
	if p.err != nil || p.errno != 0 {
		cl.t.Fatalf("command %d at %d+%d: err=%v errno=%d %s", a.typ, a.off, a.length, p.err, p.errno, p.msg)
	}
	return p.data
}

// mustErr runs a request and checks the NBD error it got.
func (cl *client) mustErr(a reqArgs, want uint32) {
	cl.t.Helper()
	p := cl.do(a)
	if p.err != nil {
		cl.t.Fatalf("command %d: %v", a.typ, p.err)
	}
	if p.errno != want {
		cl.t.Fatalf("command %d at %d+%d: errno %d, want %d", a.typ, a.off, a.length, p.errno, want)
	}
	if cl.structured && p.msg == "" {
		cl.t.Fatalf("command %d: structured error without message", a.typ)
	}
}

func (cl *client) disconnect() {
	cl.start(reqArgs{typ: cmdDisc})
	select {
	case <-cl.closed:
	case <-time.After(10 * time.Second):
		cl.t.Errorf("server did not close after NBD_CMD_DISC")
	}
	cl.c.Close()
}

// waitClosed asserts that the server closed the connection.
func (cl *client) waitClosed() {
	cl.t.Helper()
	select {
	case <-cl.closed:
	case <-time.After(10 * time.Second):
		cl.t.Fatalf("server did not close the connection")
	}
}
