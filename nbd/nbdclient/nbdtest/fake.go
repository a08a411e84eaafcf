package nbdtest

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/blkcrypt/blkcrypt/nbd/internal/wire"
)

// Fake is a scripted NBD server for the replies real servers do not send:
// short, lying, out of range, or none at all. It speaks the fixed newstyle
// handshake (NBD_OPT_GO, or NBD_OPT_EXPORT_NAME only with NoGo) and hands
// every transmission request to Reply.
type Fake struct {
	Size       uint64
	Sizes      atomic.Int64 // when set, the size offered to each new connection grows by it
	Structured bool         // accept NBD_OPT_STRUCTURED_REPLY
	NoGo       bool         // answer NBD_OPT_GO with NBD_REP_ERR_UNSUP, as old servers do
	// Reply answers one request; it writes whatever it likes to c. An
	// error hangs up the connection. Nil is Honest.
	Reply func(c *FakeConn, cmd uint16, handle, off uint64, length uint32, data []byte) error
}

// FakeConn is one connection of a Fake, after its handshake.
type FakeConn struct {
	net.Conn
	Structured bool // structured replies were negotiated
}

// Serve listens on a loopback TCP port until the test ends and returns
// the server's nbd:// URI.
func (f *Fake) Serve(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.serveOn(t, l)
	return "nbd://" + l.Addr().String() + "/"
}

// ServeUnix is Serve on a Unix socket in a temporary directory; it returns
// the nbd+unix:// URI.
func (f *Fake) ServeUnix(t testing.TB) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f.serveOn(t, l)
	return "nbd+unix:///?socket=" + sock
}

// serveOn accepts on l until the test ends, then hangs up on every
// connection, so that no test leaves a client waiting on its server.
func (f *Fake) serveOn(t testing.TB, l net.Listener) {
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go f.conn(c)
		}
	}()
}

func (f *Fake) conn(c net.Conn) {
	defer c.Close()
	be := binary.BigEndian
	hello := make([]byte, 18)
	be.PutUint64(hello, wire.NbdMagic)
	be.PutUint64(hello[8:], wire.OptMagic)
	be.PutUint16(hello[16:], wire.FlagFixedNewstyle|wire.FlagNoZeroes)
	c.Write(hello)
	var cf [4]byte
	if _, err := io.ReadFull(c, cf[:]); err != nil {
		return
	}
	optReply := func(opt, typ uint32, data []byte) {
		b := make([]byte, 20+len(data))
		be.PutUint64(b, wire.OptReplyMagic)
		be.PutUint32(b[8:], opt)
		be.PutUint32(b[12:], typ)
		be.PutUint32(b[16:], uint32(len(data)))
		copy(b[20:], data)
		c.Write(b)
	}
	structured := false
	for {
		var h [16]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		opt, n := be.Uint32(h[8:]), be.Uint32(h[12:])
		data := make([]byte, n)
		if _, err := io.ReadFull(c, data); err != nil {
			return
		}
		switch opt {
		case wire.OptStructuredReply:
			if f.Structured {
				structured = true
				optReply(opt, wire.RepAck, nil)
			} else {
				optReply(opt, wire.RepErrUnsup, nil)
			}
			continue
		case wire.OptExportName:
			b := make([]byte, 10)
			be.PutUint64(b, f.Size)
			be.PutUint16(b[8:], wire.FlagHasFlags|wire.FlagSendFlush)
			c.Write(b)
		case wire.OptGo:
			if f.NoGo {
				optReply(opt, wire.RepErrUnsup, nil)
				continue
			}
			info := make([]byte, 12)
			be.PutUint16(info, wire.InfoExport)
			be.PutUint64(info[2:], f.Size+uint64(f.Sizes.Load()))
			be.PutUint16(info[10:], wire.FlagHasFlags|wire.FlagSendFlush)
			optReply(opt, wire.RepInfo, info)
			optReply(opt, wire.RepAck, nil)
		default:
			optReply(opt, wire.RepErrUnsup, nil)
			continue
		}
		break
	}
	fc := &FakeConn{Conn: c, Structured: structured}
	reply := f.Reply
	if reply == nil {
		reply = Honest
	}
	for {
		var r [28]byte
		if _, err := io.ReadFull(c, r[:]); err != nil {
			return
		}
		cmd, handle, off, length := be.Uint16(r[6:]), be.Uint64(r[8:]), be.Uint64(r[16:]), be.Uint32(r[24:])
		var data []byte
		if cmd == wire.CmdWrite {
			data = make([]byte, length)
			if _, err := io.ReadFull(c, data); err != nil {
				return
			}
		}
		if cmd == wire.CmdDisc {
			return
		}
		if reply(fc, cmd, handle, off, length, data) != nil {
			return
		}
	}
}

// Honest answers reads with the byte 0xAA and everything else with success.
func Honest(c *FakeConn, cmd uint16, handle, off uint64, length uint32, _ []byte) error {
	if cmd == wire.CmdRead {
		return c.ReadReply(handle, off, Filled(int(length), 0xAA))
	}
	return SimpleReply(c, handle, 0, nil)
}

// ReadReply answers a read with data, in the form negotiated: one
// OFFSET_DATA chunk with the done flag, or a simple reply.
func (c *FakeConn) ReadReply(handle, off uint64, data []byte) error {
	if c.Structured {
		return Chunk(c, wire.ReplyFlagDone, wire.ReplyTypeOffsetData, handle, DataChunk(off, data))
	}
	return SimpleReply(c, handle, 0, data)
}

// SimpleReply writes a simple reply with errno and data.
func SimpleReply(c net.Conn, handle uint64, errno uint32, data []byte) error {
	b := make([]byte, 16+len(data))
	binary.BigEndian.PutUint32(b, wire.SimpleMagic)
	binary.BigEndian.PutUint32(b[4:], errno)
	binary.BigEndian.PutUint64(b[8:], handle)
	copy(b[16:], data)
	_, err := c.Write(b)
	return err
}

// Chunk writes one structured reply chunk.
func Chunk(c net.Conn, flags, typ uint16, handle uint64, payload []byte) error {
	b := make([]byte, 20+len(payload))
	binary.BigEndian.PutUint32(b, wire.StructuredMagic)
	binary.BigEndian.PutUint16(b[4:], flags)
	binary.BigEndian.PutUint16(b[6:], typ)
	binary.BigEndian.PutUint64(b[8:], handle)
	binary.BigEndian.PutUint32(b[16:], uint32(len(payload)))
	copy(b[20:], payload)
	_, err := c.Write(b)
	return err
}

// DataChunk is the payload of an OFFSET_DATA chunk.
func DataChunk(off uint64, data []byte) []byte {
	b := make([]byte, 8+len(data))
	binary.BigEndian.PutUint64(b, off)
	copy(b[8:], data)
	return b
}

// Filled is n bytes of b.
func Filled(n int, b byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = b
	}
	return p
}

// The request types a Reply sees, for tests outside package nbd.
const (
	CmdRead  = wire.CmdRead
	CmdWrite = wire.CmdWrite
	CmdFlush = wire.CmdFlush
	CmdTrim  = wire.CmdTrim

	ReplyFlagDone       = wire.ReplyFlagDone
	ReplyTypeNone       = wire.ReplyTypeNone
	ReplyTypeOffsetData = wire.ReplyTypeOffsetData
	ReplyTypeError      = wire.ReplyTypeError
	SimpleMagic         = wire.SimpleMagic
)

// ErrorChunk is the payload of an NBD_REPLY_TYPE_ERROR chunk.
func ErrorChunk(errno uint32, msg string) []byte {
	b := make([]byte, 6+len(msg))
	binary.BigEndian.PutUint32(b, errno)
	binary.BigEndian.PutUint16(b[4:], uint16(len(msg)))
	copy(b[6:], msg)
	return b
}

// Disk is the honest part of a Fake over an image in memory: reads get its
// bytes, writes change it, every other request succeeds. Writes counts the
// writes that reached it.
type Disk struct {
	mu     sync.Mutex
	data   []byte
	Writes atomic.Int64
}

// NewDisk serves a copy of data.
func NewDisk(data []byte) *Disk { return &Disk{data: append([]byte(nil), data...)} }

// Bytes returns a copy of the image.
func (d *Disk) Bytes() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.data...)
}

// Reply answers one request from the image; a request outside it gets EIO.
func (d *Disk) Reply(c *FakeConn, cmd uint16, handle, off uint64, length uint32, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off+uint64(length) > uint64(len(d.data)) {
		return SimpleReply(c, handle, 5, nil) // EIO
	}
	switch cmd {
	case wire.CmdRead:
		return c.ReadReply(handle, off, append([]byte(nil), d.data[off:off+uint64(length)]...))
	case wire.CmdWrite:
		d.Writes.Add(1)
		copy(d.data[off:], data)
	}
	return SimpleReply(c, handle, 0, nil)
}

// Silent listens on a Unix socket in a temporary directory, accepts
// connections and never says a word (a server that stalls before its
// greeting); it returns the nbd+unix:// URI. The connections are closed
// when the test ends.
func Silent(t testing.TB) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "silent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return "nbd+unix:///?socket=" + sock
}
