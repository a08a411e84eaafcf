package nbdclient

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd/internal/wire"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

func dialErr(uri string, o Options) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Dial(ctx, uri, o)
}

// TestLyingSize: a server that claims 1 MiB and fails reads past 64 KiB is
// caught when connecting (the last byte is read), so nothing is written
// through it; without the probe, the read past what it has fails.
func TestLyingSize(t *testing.T) {
	f := &nbdtest.Fake{Size: 1 << 20, Reply: func(c *nbdtest.FakeConn, cmd uint16, handle, off uint64, length uint32, d []byte) error {
		if cmd == wire.CmdRead && off+uint64(length) > 64<<10 {
			return nbdtest.SimpleReply(c, handle, uint32(syscall.EIO), nil)
		}
		return nbdtest.Honest(c, cmd, handle, off, length, d)
	}}
	uri := f.Serve(t)
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
			nbdtest.Chunk(c, 0, wire.ReplyTypeOffsetData, h, nbdtest.DataChunk(off, nbdtest.Filled(int(n/2), 1)))
			return nbdtest.Chunk(c, wire.ReplyFlagDone, wire.ReplyTypeNone, h, nil)
		}, ErrShortReply},
		{"structured data outside the request", true, func(c net.Conn, h, off uint64, n uint32) error {
			return nbdtest.Chunk(c, wire.ReplyFlagDone, wire.ReplyTypeOffsetData, h, nbdtest.DataChunk(off+1, nbdtest.Filled(int(n), 1)))
		}, ErrProtocol},
		{"overlapping chunks", true, func(c net.Conn, h, off uint64, n uint32) error {
			nbdtest.Chunk(c, 0, wire.ReplyTypeOffsetData, h, nbdtest.DataChunk(off, nbdtest.Filled(int(n/2), 1)))
			nbdtest.Chunk(c, 0, wire.ReplyTypeOffsetData, h, nbdtest.DataChunk(off, nbdtest.Filled(int(n/2), 1)))
			return nbdtest.Chunk(c, wire.ReplyFlagDone, wire.ReplyTypeNone, h, nil)
		}, ErrProtocol},
		{"structured error chunk", true, func(c net.Conn, h, off uint64, n uint32) error {
			p := make([]byte, 6+5)
			binary.BigEndian.PutUint32(p, uint32(syscall.EIO))
			binary.BigEndian.PutUint16(p[4:], 5)
			copy(p[6:], "bad\nx")
			return nbdtest.Chunk(c, wire.ReplyFlagDone, wire.ReplyTypeError, h, p)
		}, syscall.EIO},
		{"simple reply cut short", false, func(c net.Conn, h, off uint64, n uint32) error {
			b := make([]byte, 16)
			binary.BigEndian.PutUint32(b, wire.SimpleMagic)
			binary.BigEndian.PutUint64(b[8:], h)
			c.Write(append(b, nbdtest.Filled(int(n/2), 1)...))
			return io.EOF // and hang up
		}, ErrConnectionLost},
		{"reply to an unknown handle", false, func(c net.Conn, h, off uint64, n uint32) error {
			return nbdtest.SimpleReply(c, h+1000, 0, nbdtest.Filled(int(n), 1))
		}, ErrProtocol},
		{"bad magic", false, func(c net.Conn, h, off uint64, n uint32) error {
			_, err := c.Write(make([]byte, 16))
			return err
		}, ErrProtocol},
		{"structured reply not negotiated", false, func(c net.Conn, h, off uint64, n uint32) error {
			return nbdtest.Chunk(c, wire.ReplyFlagDone, wire.ReplyTypeOffsetData, h, nbdtest.DataChunk(off, nbdtest.Filled(int(n), 1)))
		}, ErrProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &nbdtest.Fake{Size: 1 << 20, Structured: tc.structured}
			f.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
				if cmd == wire.CmdRead && off == 4096 {
					return tc.reply(c, h, off, n)
				}
				return nbdtest.Honest(c, cmd, h, off, n, d)
			}
			c, err := dialErr(f.Serve(t), Options{})
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
	f := &nbdtest.Fake{Size: 1 << 20, Reply: func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd == wire.CmdRead && off == 0 {
			return nil // silence
		}
		return nbdtest.Honest(c, cmd, h, off, n, d)
	}}
	c, err := dialErr(f.Serve(t), Options{Timeout: 300 * time.Millisecond})
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
	f := &nbdtest.Fake{Size: 1 << 20, Reply: func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd == wire.CmdFlush {
			if flushes.Add(1) == 1 {
				return io.EOF
			}
		}
		return nbdtest.Honest(c, cmd, h, off, n, d)
	}}
	c, err := dialErr(f.Serve(t), Options{})
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
	f := &nbdtest.Fake{Size: 1 << 20, NoGo: true, Structured: true}
	c, err := dialErr(f.Serve(t), Options{})
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
	f := &nbdtest.Fake{Size: 1 << 20}
	f.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if drop.Load() {
			return io.EOF
		}
		return nbdtest.Honest(c, cmd, h, off, n, d)
	}
	c, err := dialErr(f.Serve(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	drop.Store(true)
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("read on a dropped connection: %v", err)
	}
	drop.Store(false)
	f.Sizes.Store(4096)
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("read after reconnecting to a changed export: %v", err)
	}
}
