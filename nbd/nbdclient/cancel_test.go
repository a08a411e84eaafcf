package nbdclient

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd/internal/wire"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

// How long a wait may last after its context ends: the default grace, and
// room for a loaded machine.
const promptly = defaultCancelGrace + time.Second

// outcome runs f in the background and returns its error, or fails the
// test if f takes longer than limit: on a client that ignored
// cancellation it would block for the 30 s handshake deadline or the
// 2 min request timeout.
func outcome(t *testing.T, limit time.Duration, f func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(limit):
		t.Fatalf("still blocked after %v", limit)
		return nil, 0
	}
}

// TestDialCancelNoGreeting: a server that accepts but never greets holds
// Dial only until its context is cancelled, not until the handshake
// deadline.
func TestDialCancelNoGreeting(t *testing.T) {
	uri := nbdtest.Silent(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	err, took := outcome(t, 5*time.Second, func() error {
		c, err := Dial(ctx, uri, Options{})
		if err == nil {
			c.Close()
		}
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial to a server that never greets, cancelled: %v", err)
	}
	if took > 100*time.Millisecond+time.Second {
		t.Fatalf("Dial returned %v after it started, cancelled at 100 ms", took)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error is not one line: %q", err)
	}
}

// dripErrors answers a read with a structured error chunk every interval
// (as fast as it can with 0), never with NBD_REPLY_FLAG_DONE, until the
// client hangs up; sent counts the bytes it wrote.
func dripErrors(interval time.Duration, sent *atomic.Int64) func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
	return func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd != wire.CmdRead {
			return nbdtest.Honest(c, cmd, h, off, n, d)
		}
		p := nbdtest.ErrorChunk(uint32(syscall.EIO), "still failing, more to come")
		for {
			if err := nbdtest.Chunk(c, 0, wire.ReplyTypeError, h, p); err != nil {
				return err
			}
			sent.Add(int64(20 + len(p)))
			if interval > 0 {
				time.Sleep(interval)
			}
		}
	}
}

// TestEndlessErrorChunks: a server that streams error chunks without the
// done flag as fast as it can gets a protocol error once they pass what a
// reply to the request could hold, long before the request timeout, and
// the client has read a bounded amount of them.
func TestEndlessErrorChunks(t *testing.T) {
	var sent atomic.Int64
	f := &nbdtest.Fake{Size: 1 << 20, Structured: true, Reply: dripErrors(0, &sent)}
	c, err := dialErr(f.ServeUnix(t), Options{NoProbe: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err, _ = outcome(t, 10*time.Second, func() error {
		_, err := c.ReadAt(make([]byte, 4096), 0)
		return err
	})
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "reply chunks") {
		t.Fatalf("read answered by endless error chunks: %v", err)
	}
	// What the client took is its budget; the rest of what was sent sat
	// in socket buffers.
	if n := sent.Load(); n > 8<<20 {
		t.Fatalf("the server got %d bytes of chunks in before the client gave up", n)
	}
}

// TestDialCancelDuringProbe: Dial's read of the last byte is answered by
// a trickle of error chunks that never ends; cancelling Dial's context
// ends it at once.
func TestDialCancelDuringProbe(t *testing.T) {
	var sent atomic.Int64
	f := &nbdtest.Fake{Size: 1 << 20, Structured: true, Reply: dripErrors(20*time.Millisecond, &sent)}
	uri := f.ServeUnix(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(200*time.Millisecond, cancel)
	err, took := outcome(t, 5*time.Second, func() error {
		c, err := Dial(ctx, uri, Options{})
		if err == nil {
			c.Close()
		}
		return err
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "last byte") {
		t.Fatalf("Dial cancelled during its probe: %v", err)
	}
	if took > 200*time.Millisecond+time.Second {
		t.Fatalf("Dial returned %v after it started, cancelled at 200 ms", took)
	}
	if sent.Load() == 0 {
		t.Fatal("the server sent no chunk: the test did not test the probe")
	}
}

// TestContextEndsRead: with Options.Context, a read answered by a trickle
// of error chunks (slow enough never to reach the budget) fails with the
// context's error within the grace of its end, and the client makes no
// new connection after.
func TestContextEndsRead(t *testing.T) {
	var sent atomic.Int64
	f := &nbdtest.Fake{Size: 1 << 20, Structured: true, Reply: dripErrors(20*time.Millisecond, &sent)}
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := dialErr(f.ServeUnix(t), Options{NoProbe: true, Context: life})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(200*time.Millisecond, cancel)
	buf := make([]byte, 4096)
	err, took := outcome(t, 10*time.Second, func() error {
		_, err := c.ReadAt(buf, 0)
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("read after the context ended: %v", err)
	}
	if took > 200*time.Millisecond+promptly {
		t.Fatalf("the read returned %v after it started, its context ended at 200 ms", took)
	}
	if sent.Load() == 0 {
		t.Fatal("the server sent no chunk")
	}
	// The connection is gone and no other is made.
	err, took = outcome(t, 5*time.Second, func() error {
		_, err := c.ReadAt(buf, 0)
		return err
	})
	if !errors.Is(err, context.Canceled) || took > promptly {
		t.Fatalf("a read after: %v after %v", err, took)
	}
}

// TestContextEndsStalledReply: a server that stops mid-reply (a data
// chunk, or a simple reply, cut short) is given up on within the grace of
// the context's end, and the caller gets no data.
func TestContextEndsStalledReply(t *testing.T) {
	for _, structured := range []bool{true, false} {
		name := map[bool]string{true: "structured", false: "simple"}[structured]
		t.Run(name, func(t *testing.T) {
			f := &nbdtest.Fake{Size: 1 << 20, Structured: structured}
			f.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
				if cmd != wire.CmdRead || off != 0 {
					return nbdtest.Honest(c, cmd, h, off, n, d)
				}
				// The header promises n bytes; a tenth of them follow.
				full := nbdtest.Filled(int(n), 0xAA)
				var b []byte
				if structured {
					b = make([]byte, 20)
					hdr := b
					binary.BigEndian.PutUint32(hdr, wire.StructuredMagic)
					binary.BigEndian.PutUint16(hdr[4:], wire.ReplyFlagDone)
					binary.BigEndian.PutUint16(hdr[6:], wire.ReplyTypeOffsetData)
					binary.BigEndian.PutUint64(hdr[8:], h)
					binary.BigEndian.PutUint32(hdr[16:], 8+n)
					b = append(b, nbdtest.DataChunk(off, full[:n/10])...)
				} else {
					b = make([]byte, 16)
					binary.BigEndian.PutUint32(b, wire.SimpleMagic)
					binary.BigEndian.PutUint64(b[8:], h)
					b = append(b, full[:n/10]...)
				}
				_, err := c.Write(b)
				return err // then silence
			}
			life, cancel := context.WithCancel(context.Background())
			defer cancel()
			c, err := dialErr(f.ServeUnix(t), Options{Context: life})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			time.AfterFunc(200*time.Millisecond, cancel)
			buf := make([]byte, 8192)
			var n int
			err, took := outcome(t, 10*time.Second, func() error {
				var err error
				n, err = c.ReadAt(buf, 0)
				return err
			})
			if !errors.Is(err, context.Canceled) || n != 0 {
				t.Fatalf("read cut short, then the context ended: %d bytes, %v", n, err)
			}
			if took > 200*time.Millisecond+promptly {
				t.Fatalf("the read returned %v after it started, its context ended at 200 ms", took)
			}
		})
	}
}

// TestContextEndsBlockedWrite: a server that stops reading blocks the
// client's write in the kernel; the context's end wakes it.
func TestContextEndsBlockedWrite(t *testing.T) {
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	f := &nbdtest.Fake{Size: 1 << 30}
	f.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd == wire.CmdWrite {
			<-stall // and read nothing more
		}
		return nbdtest.Honest(c, cmd, h, off, n, d)
	}
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := dialErr(f.ServeUnix(t), Options{Context: life, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(300*time.Millisecond, cancel)
	// Two requests of the 32 MiB maximum: the server takes the first and
	// stops; the second fills the socket buffers and blocks.
	err, took := outcome(t, 10*time.Second, func() error {
		_, err := c.WriteAt(make([]byte, 64<<20), 0)
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("write to a server that stopped reading, cancelled: %v", err)
	}
	if took > 300*time.Millisecond+promptly {
		t.Fatalf("the write returned %v after it started, its context ended at 300 ms", took)
	}
}

// TestContextEndedHealthyServer: after the context ends, a server that
// answers still gets a process's last requests and flush (the grace is
// per request, not a deadline for the whole client).
func TestContextEndedHealthyServer(t *testing.T) {
	disk := nbdtest.NewDisk(make([]byte, 1<<20))
	f := &nbdtest.Fake{Size: 1 << 20, Reply: disk.Reply}
	life, cancel := context.WithCancel(context.Background())
	c, err := dialErr(f.ServeUnix(t), Options{Context: life})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(2 * defaultCancelGrace)
	if _, err := c.WriteAt(nbdtest.Filled(4096, 7), 8192); err != nil {
		t.Fatalf("write after the context ended, to a server that answers: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close (flush) after the context ended: %v", err)
	}
	if disk.Bytes()[8192] != 7 {
		t.Fatal("the write did not reach the server")
	}
}

// TestManyTinyChunks: a read answered by one-byte data chunks in reverse
// order is assembled; overlapping ones that add up to the length are
// refused (found when the last chunk comes, no longer as each arrives).
func TestManyTinyChunks(t *testing.T) {
	const size = 4096
	for _, overlap := range []bool{false, true} {
		f := &nbdtest.Fake{Size: 1 << 20, Structured: true}
		f.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
			if cmd != wire.CmdRead || n != size {
				return nbdtest.Honest(c, cmd, h, off, n, d)
			}
			var b []byte
			for i := int(n) - 1; i >= 0; i-- {
				at := uint64(i)
				if overlap && i == 1 {
					at = 2 // byte 1 never comes, byte 2 twice
				}
				var hdr [20]byte
				binary.BigEndian.PutUint32(hdr[:], wire.StructuredMagic)
				binary.BigEndian.PutUint16(hdr[6:], wire.ReplyTypeOffsetData)
				binary.BigEndian.PutUint64(hdr[8:], h)
				binary.BigEndian.PutUint32(hdr[16:], 9)
				b = append(b, hdr[:]...)
				b = append(b, nbdtest.DataChunk(off+at, []byte{byte(at)})...)
			}
			if _, err := c.Write(b); err != nil {
				return err
			}
			return nbdtest.Chunk(c, wire.ReplyFlagDone, wire.ReplyTypeNone, h, nil)
		}
		c, err := dialErr(f.ServeUnix(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size)
		_, err = c.ReadAt(buf, 0)
		c.Close()
		if overlap {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("overlapping one-byte chunks: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("one-byte chunks: %v", err)
		}
		for i, v := range buf {
			if v != byte(i) {
				t.Fatalf("byte %d is %d", i, v)
			}
		}
	}
}

// TestEndlessInfoReplies: a server that answers NBD_OPT_GO with an endless
// stream of NBD_REP_INFO, never the final ack, gets a protocol error at
// once rather than holding Dial until the handshake deadline.
func TestEndlessInfoReplies(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "info.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
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
		reply := func(opt, typ uint32, data []byte) error {
			b := make([]byte, 20+len(data))
			be.PutUint64(b, wire.OptReplyMagic)
			be.PutUint32(b[8:], opt)
			be.PutUint32(b[12:], typ)
			be.PutUint32(b[16:], uint32(len(data)))
			copy(b[20:], data)
			_, err := c.Write(b)
			return err
		}
		for {
			var h [16]byte
			if _, err := io.ReadFull(c, h[:]); err != nil {
				return
			}
			opt := be.Uint32(h[8:])
			if _, err := io.ReadFull(c, make([]byte, be.Uint32(h[12:]))); err != nil {
				return
			}
			if opt != wire.OptGo {
				reply(opt, wire.RepErrUnsup, nil)
				continue
			}
			info := make([]byte, 12)
			be.PutUint16(info, wire.InfoExport)
			be.PutUint64(info[2:], 1<<20)
			be.PutUint16(info[10:], wire.FlagHasFlags)
			for reply(opt, wire.RepInfo, info) == nil {
			}
			return
		}
	}()
	err, _ = outcome(t, 5*time.Second, func() error {
		c, err := Dial(context.Background(), "nbd+unix:///?socket="+sock, Options{})
		if err == nil {
			c.Close()
		}
		return err
	})
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "NBD_OPT_GO") {
		t.Fatalf("Dial to a server with endless NBD_REP_INFO: %v", err)
	}
}
