package nbdclient

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/blkcrypt/blkcrypt/nbd/internal/wire"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fake is a scripted NBD server for the replies real servers do not send:
// short, lying, out of range, or none at all.
type fake struct {
	size       uint64
	sizes      atomic.Int64 // when set, the size offered to each new connection grows by it
	structured bool
	noGo       bool // answer NBD_OPT_GO with NBD_REP_ERR_UNSUP, as old servers do
	// reply answers one request; it writes whatever it likes to c.
	reply func(c net.Conn, cmd uint16, handle, off uint64, length uint32, data []byte) error
}

func (f *fake) serve(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.conn(c)
		}
	}()
	return "nbd://" + l.Addr().String() + "/"
}

func (f *fake) conn(c net.Conn) {
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
			if f.structured {
				optReply(opt, wire.RepAck, nil)
			} else {
				optReply(opt, wire.RepErrUnsup, nil)
			}
			continue
		case wire.OptExportName:
			b := make([]byte, 10)
			be.PutUint64(b, f.size)
			be.PutUint16(b[8:], 1|FlagSendFlush)
			c.Write(b)
		case wire.OptGo:
			if f.noGo {
				optReply(opt, wire.RepErrUnsup, nil)
				continue
			}
			info := make([]byte, 12)
			be.PutUint16(info, wire.InfoExport)
			be.PutUint64(info[2:], f.size+uint64(f.sizes.Load()))
			be.PutUint16(info[10:], 1|FlagSendFlush)
			optReply(opt, wire.RepInfo, info)
			optReply(opt, wire.RepAck, nil)
		default:
			optReply(opt, wire.RepErrUnsup, nil)
			continue
		}
		break
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
			io.ReadFull(c, data)
		}
		if cmd == wire.CmdDisc {
			return
		}
		reply := f.reply
		if reply == nil {
			reply = honest
		}
		if reply(&fakeConn{Conn: c, structured: f.structured}, cmd, handle, off, length, data) != nil {
			return
		}
	}
}

func simpleReply(c net.Conn, handle uint64, errno uint32, data []byte) error {
	b := make([]byte, 16+len(data))
	binary.BigEndian.PutUint32(b, wire.SimpleMagic)
	binary.BigEndian.PutUint32(b[4:], errno)
	binary.BigEndian.PutUint64(b[8:], handle)
	copy(b[16:], data)
	_, err := c.Write(b)
	return err
}

func chunk(c net.Conn, flags, typ uint16, handle uint64, payload []byte) error {
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

func dataChunk(off uint64, data []byte) []byte {
	b := make([]byte, 8+len(data))
	binary.BigEndian.PutUint64(b, off)
	copy(b[8:], data)
	return b
}

// fakeConn tells honest which reply form was negotiated.
type fakeConn struct {
	net.Conn
	structured bool
}

// honest answers reads with the byte 0xAA and everything else with success.
func honest(c net.Conn, cmd uint16, handle, off uint64, length uint32, _ []byte) error {
	if fc, ok := c.(*fakeConn); ok && fc.structured && cmd == wire.CmdRead {
		return chunk(c, wire.ReplyFlagDone, wire.ReplyTypeOffsetData, handle, dataChunk(off, filled(int(length), 0xAA)))
	}
	if cmd == wire.CmdRead {
		return simpleReply(c, handle, 0, filled(int(length), 0xAA))
	}
	return simpleReply(c, handle, 0, nil)
}

func filled(n int, b byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = b
	}
	return p
}

func dialErr(uri string, o Options) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Dial(ctx, uri, o)
}

// TestLyingSize: a server that claims 1 MiB and fails reads past 64 KiB is
// caught when connecting (the last byte is read), so nothing is written
// through it; without the probe, the read past what it has fails.
func TestLyingSize(t *testing.T) {
	f := &fake{size: 1 << 20, reply: func(c net.Conn, cmd uint16, handle, off uint64, length uint32, d []byte) error {
		if cmd == wire.CmdRead && off+uint64(length) > 64<<10 {
			return simpleReply(c, handle, uint32(syscall.EIO), nil)
		}
		return honest(c, cmd, handle, off, length, d)
	}}
	uri := f.serve(t)
	_, err := dialErr(uri, Options{})
	var se *ServerError
	if !errors.As(err, &se) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "last byte") {
		t.Fatalf("Dial of a server lying about its size: %v", err)
	}
	c, err := dialErr(uri, Options{NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 8192)
	if _, err := c.ReadAt(buf, 512<<10); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read past what the server has: %v", err)
	}
}

// TestShortAndBadReplies: every way a reply can be short or wrong gives an
// error, never data that is not the server's.
func TestShortAndBadReplies(t *testing.T) {
	cases := []struct {
		name       string
		structured bool
		reply      func(c net.Conn, handle, off uint64, length uint32) error
		want       error
	}{
		{"structured data covering half", true, func(c net.Conn, h, off uint64, n uint32) error {
			chunk(c, 0, wire.ReplyTypeOffsetData, h, dataChunk(off, filled(int(n/2), 1)))
			return chunk(c, wire.ReplyFlagDone, wire.ReplyTypeNone, h, nil)
		}, ErrShortReply},
		{"structured data outside the request", true, func(c net.Conn, h, off uint64, n uint32) error {
			return chunk(c, wire.ReplyFlagDone, wire.ReplyTypeOffsetData, h, dataChunk(off+1, filled(int(n), 1)))
		}, ErrProtocol},
		{"overlapping chunks", true, func(c net.Conn, h, off uint64, n uint32) error {
			chunk(c, 0, wire.ReplyTypeOffsetData, h, dataChunk(off, filled(int(n/2), 1)))
			chunk(c, 0, wire.ReplyTypeOffsetData, h, dataChunk(off, filled(int(n/2), 1)))
			return chunk(c, wire.ReplyFlagDone, wire.ReplyTypeNone, h, nil)
		}, ErrProtocol},
		{"structured error chunk", true, func(c net.Conn, h, off uint64, n uint32) error {
			p := make([]byte, 6+5)
			binary.BigEndian.PutUint32(p, uint32(syscall.EIO))
			binary.BigEndian.PutUint16(p[4:], 5)
			copy(p[6:], "bad\nx")
			return chunk(c, wire.ReplyFlagDone, wire.ReplyTypeError, h, p)
		}, syscall.EIO},
		{"simple reply cut short", false, func(c net.Conn, h, off uint64, n uint32) error {
			b := make([]byte, 16)
			binary.BigEndian.PutUint32(b, wire.SimpleMagic)
			binary.BigEndian.PutUint64(b[8:], h)
			c.Write(append(b, filled(int(n/2), 1)...))
			return io.EOF // and hang up
		}, ErrConnectionLost},
		{"reply to an unknown handle", false, func(c net.Conn, h, off uint64, n uint32) error {
			return simpleReply(c, h+1000, 0, filled(int(n), 1))
		}, ErrProtocol},
		{"bad magic", false, func(c net.Conn, h, off uint64, n uint32) error {
			_, err := c.Write(make([]byte, 16))
			return err
		}, ErrProtocol},
		{"structured reply not negotiated", false, func(c net.Conn, h, off uint64, n uint32) error {
			return chunk(c, wire.ReplyFlagDone, wire.ReplyTypeOffsetData, h, dataChunk(off, filled(int(n), 1)))
		}, ErrProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{size: 1 << 20, structured: tc.structured}
			f.reply = func(c net.Conn, cmd uint16, h, off uint64, n uint32, d []byte) error {
				if cmd == wire.CmdRead && off == 4096 {
					return tc.reply(c, h, off, n)
				}
				return honest(c, cmd, h, off, n, d)
			}
			c, err := dialErr(f.serve(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 4096)
			n, err := c.ReadAt(buf, 4096)
			if !errors.Is(err, tc.want) || n != 0 {
				t.Fatalf("got %d bytes, %v; want 0 and %v", n, err, tc.want)
			}
			if strings.ContainsAny(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

// TestNoReplyTimesOut: a server that never answers does not hang the
// client: the request fails after the timeout with ErrConnectionLost.
func TestNoReplyTimesOut(t *testing.T) {
	f := &fake{size: 1 << 20, reply: func(c net.Conn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd == wire.CmdRead && off == 0 {
			return nil // silence
		}
		return honest(c, cmd, h, off, n, d)
	}}
	c, err := dialErr(f.serve(t), Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("read with no reply: %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the timeout took %v", d)
	}
	// The next request reconnects and works.
	if _, err := c.ReadAt(make([]byte, 512), 8192); err != nil {
		t.Fatalf("read after reconnecting: %v", err)
	}
}

// TestFlushLost: the server hangs up on a flush after acknowledging a
// write. That Sync fails, and so does the next (after reconnecting) with
// ErrUnflushedLost: the write is in doubt until the caller has been told.
func TestFlushLost(t *testing.T) {
	var flushes atomic.Int32
	f := &fake{size: 1 << 20, reply: func(c net.Conn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd == wire.CmdFlush {
			if flushes.Add(1) == 1 {
				return io.EOF
			}
		}
		return honest(c, cmd, h, off, n, d)
	}}
	c, err := dialErr(f.serve(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("flush the server hung up on: %v", err)
	}
	if err := c.Sync(); !errors.Is(err, ErrUnflushedLost) {
		t.Fatalf("the Sync after: %v", err)
	}
	if err := c.Sync(); err != nil {
		t.Fatalf("a third Sync: %v", err)
	}
}

// TestExportNameFallback: a server without NBD_OPT_GO is reached with
// NBD_OPT_EXPORT_NAME and simple replies, with the default block sizes.
func TestExportNameFallback(t *testing.T) {
	f := &fake{size: 1 << 20, noGo: true, structured: true}
	c, err := dialErr(f.serve(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, _ := c.Size(); n != 1<<20 {
		t.Fatalf("size %d", n)
	}
	if mn, pr, mx := c.BlockSizes(); mn != 1 || pr != 4096 || mx != 32<<20 {
		t.Fatalf("block sizes %d/%d/%d", mn, pr, mx)
	}
	b := make([]byte, 777)
	if _, err := c.ReadAt(b, 12345); err != nil || b[0] != 0xAA || b[776] != 0xAA {
		t.Fatalf("read: %v", err)
	}
}

// TestReconnectExportChanged: after a lost connection, a server that now
// offers a different size is refused rather than used.
func TestReconnectExportChanged(t *testing.T) {
	var drop atomic.Bool
	f := &fake{size: 1 << 20}
	f.reply = func(c net.Conn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if drop.Load() {
			return io.EOF
		}
		return honest(c, cmd, h, off, n, d)
	}
	c, err := dialErr(f.serve(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	drop.Store(true)
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("read on a dropped connection: %v", err)
	}
	drop.Store(false)
	f.sizes.Store(4096)
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("read after reconnecting to a changed export: %v", err)
	}
}
