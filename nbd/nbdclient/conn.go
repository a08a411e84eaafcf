package nbdclient

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd/internal/wire"
)

// replyTypeErrorFlag marks the error chunk types (wire.ReplyTypeError,
// wire.ReplyTypeErrorOff, and any the client does not know).
const replyTypeErrorFlag = 1 << 15

// ServerError is an error the server reported for one request. It
// unwraps to the matching syscall.Errno, so errors.Is(err, syscall.ENOSPC)
// works.
type ServerError struct {
	Errno   syscall.Errno
	Message string // the server's text from a structured error chunk, if any
}

func (e *ServerError) Error() string {
	s := "nbd server: " + e.Errno.Error()
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *ServerError) Unwrap() error { return e.Errno }

// call is one request in flight.
type call struct {
	cmd    uint16
	off    uint64
	length uint32
	buf    []byte // read destination (length bytes)
	sent   time.Time
	spans  [][2]uint64
	got    uint64
	seen   uint64 // bytes of reply chunks (headers and payloads) so far
	err    error
	done   chan struct{}
}

// Bounds on one request's structured reply, so that a server streaming
// chunks without NBD_REPLY_FLAG_DONE neither makes us buffer nor keeps the
// request alive for ever. A read may carry its data, one offset header per
// chunk (an eighth of the length covers alternating 512-byte data and hole
// chunks) and a few error chunks; anything else only a few error chunks.
const (
	chunkHeader     = 20
	chunkAllowance  = 128 << 10 // at least one error chunk of the largest size taken
	maxErrorPayload = 1<<16 + 16
)

func (k *call) replyBudget() uint64 {
	b := uint64(chunkAllowance)
	if k.cmd == wire.CmdRead {
		b += uint64(k.length) + uint64(k.length)/8
	}
	return b
}

// conn is one transmission-phase connection: requests are written under
// wmu, and one reader goroutine matches replies to calls by handle.
type conn struct {
	nc         net.Conn
	raw        net.Conn // under nc (TLS): closed to stop the reader at once
	structured bool
	wmu        sync.Mutex
	// timeout bounds each request's write (Options.Timeout); after life
	// ends, grace does.
	timeout, grace time.Duration
	life           context.Context
	stopWatch      func() bool
	cancelAt       atomic.Int64 // when life ended (Unix ns), 0 before
	readerDone     chan struct{}

	mu      sync.Mutex
	pending map[uint64]*call
	next    uint64
	err     error // set once: the connection is unusable
	dead    chan struct{}

	// dirty: writes were acknowledged on this connection since its last
	// flush. If it is lost while dirty, those writes may be lost too.
	dirty atomic.Bool
	// onLost runs once when the connection breaks, with its dirty state.
	onLost func(dirty bool)
}

// connConfig is what a connection needs to know of the client's options.
type connConfig struct {
	life           context.Context // Options.Context, or Background
	timeout, grace time.Duration
}

func newConn(nc, raw net.Conn, structured bool, cfg connConfig, onLost func(bool)) *conn {
	c := &conn{nc: nc, raw: raw, structured: structured, timeout: cfg.timeout, grace: cfg.grace, life: cfg.life,
		pending: map[uint64]*call{}, dead: make(chan struct{}), readerDone: make(chan struct{}), onLost: onLost}
	// A write blocked on a server that stopped reading holds wmu; only a
	// deadline wakes it. Waits for replies watch life themselves (see
	// Client.wait), so an idle connection stays usable after it ends.
	c.stopWatch = context.AfterFunc(c.life, func() {
		now := time.Now()
		c.cancelAt.Store(now.UnixNano())
		c.raw.SetWriteDeadline(now.Add(max(c.grace, 0)))
	})
	go c.readLoop()
	return c
}

// setWriteDeadline bounds the write about to be made (wmu held): by the
// timeout, or by the grace once life has ended.
func (c *conn) setWriteDeadline() {
	grace := max(c.grace, 0)
	if c.life.Err() != nil {
		c.raw.SetWriteDeadline(time.Now().Add(grace))
		return
	}
	if c.timeout < 0 {
		c.raw.SetWriteDeadline(time.Time{})
	} else {
		c.raw.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	// life may have ended since the check, and its watcher set the shorter
	// deadline before we set ours: set it again.
	if c.life.Err() != nil {
		c.raw.SetWriteDeadline(time.Now().Add(grace))
	}
}

// broken reports whether the connection has failed.
func (c *conn) broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// fail marks the connection lost, fails every call in flight with err and
// closes the socket. Only the first error counts.
func (c *conn) fail(err error) { c.shut(err, false) }

// shut is fail; inReader says the reader goroutine calls it. Any other
// caller waits for the reader to stop before it fails the calls: until
// then the reader may still be copying into their buffers, which the
// callers get back with the error.
func (c *conn) shut(err error, inReader bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	onLost := c.onLost
	c.mu.Unlock()
	c.stopWatch()
	// The raw socket, not a TLS one: tls.Conn.Close would first try to
	// send close_notify to a server that may not be reading.
	c.raw.Close()
	if !inReader {
		<-c.readerDone
	}
	c.mu.Lock()
	calls := c.pending
	c.pending = nil
	c.mu.Unlock()
	close(c.dead)
	for _, k := range calls {
		k.err = err
		close(k.done)
	}
	if onLost != nil {
		onLost(c.dirty.Load())
	}
}

// start registers and sends one request; the reply arrives on k.done.
func (c *conn) start(cmd, flags uint16, off uint64, length uint32, data, buf []byte) (*call, error) {
	k := &call{cmd: cmd, off: off, length: length, buf: buf, sent: time.Now(), done: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	h := c.next
	c.next++
	c.pending[h] = k
	if cmd == wire.CmdWrite || cmd == wire.CmdTrim {
		// Dirty from the moment it is sent: a write the server may have
		// applied is unflushed whether or not its reply arrives.
		c.dirty.Store(true)
	}
	c.mu.Unlock()

	var hdr [28]byte
	binary.BigEndian.PutUint32(hdr[0:], wire.RequestMagic)
	binary.BigEndian.PutUint16(hdr[4:], flags)
	binary.BigEndian.PutUint16(hdr[6:], cmd)
	binary.BigEndian.PutUint64(hdr[8:], h)
	binary.BigEndian.PutUint64(hdr[16:], off)
	binary.BigEndian.PutUint32(hdr[24:], length)
	c.wmu.Lock()
	c.setWriteDeadline()
	var err error
	if len(data) > 0 {
		bufs := net.Buffers{hdr[:], data}
		_, err = bufs.WriteTo(c.nc)
	} else {
		_, err = c.nc.Write(hdr[:])
	}
	c.wmu.Unlock()
	if err != nil {
		// A request half written leaves the stream unusable.
		if cerr := c.life.Err(); cerr != nil {
			err = fmt.Errorf("%w: %w", err, cerr)
		}
		c.fail(fmt.Errorf("%w: sending a request: %w", ErrConnectionLost, err))
	}
	return k, nil
}

// readLoop reads replies until the connection fails.
func (c *conn) readLoop() {
	defer close(c.readerDone)
	err := c.readReplies()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isNetErr(err) {
		err = fmt.Errorf("%w: %w", ErrConnectionLost, err)
	}
	c.shut(err, true)
}

func isNetErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// cause is why a read on the connection failed: the reason it was shut,
// when someone shut it (a timeout, the context ending), else err.
func (c *conn) cause(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return err
}

func (c *conn) take(h uint64, remove bool) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.pending[h]
	if remove && k != nil {
		delete(c.pending, h)
	}
	return k
}

func complete(k *call) { close(k.done) }

// acked marks the connection dirty again for a write answered after a
// flush swapped the flag: the flush did not cover it.
func (c *conn) acked(k *call) {
	if k.err == nil && (k.cmd == wire.CmdWrite || k.cmd == wire.CmdTrim) {
		c.dirty.Store(true)
	}
}

func (c *conn) readReplies() error {
	var hdr [20]byte
	for {
		if _, err := io.ReadFull(c.nc, hdr[:4]); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("the server closed the connection: %w", io.ErrUnexpectedEOF)
			}
			return err
		}
		switch binary.BigEndian.Uint32(hdr[:]) {
		case wire.SimpleMagic:
			if _, err := io.ReadFull(c.nc, hdr[4:16]); err != nil {
				return err
			}
			errno := binary.BigEndian.Uint32(hdr[4:])
			h := binary.BigEndian.Uint64(hdr[8:])
			k := c.take(h, true)
			if k == nil {
				return fmt.Errorf("%w: reply to unknown handle %d", ErrProtocol, h)
			}
			if errno != 0 {
				k.err = &ServerError{Errno: syscall.Errno(errno)}
			} else if k.cmd == wire.CmdRead {
				if c.structured {
					// Structured replies were negotiated: data comes in chunks.
					k.err = fmt.Errorf("%w: simple reply to a read after structured replies were negotiated", ErrProtocol)
					complete(k)
					return k.err
				}
				if _, err := io.ReadFull(c.nc, k.buf); err != nil {
					k.err = c.cause(fmt.Errorf("%w: short read reply: %w", ErrConnectionLost, err))
					complete(k)
					return err
				}
			}
			c.acked(k)
			complete(k)
		case wire.StructuredMagic:
			if !c.structured {
				return fmt.Errorf("%w: structured reply that was not negotiated", ErrProtocol)
			}
			if _, err := io.ReadFull(c.nc, hdr[4:20]); err != nil {
				return err
			}
			if err := c.chunk(hdr[:]); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: bad reply magic %#x", ErrProtocol, binary.BigEndian.Uint32(hdr[:]))
		}
	}
}

// chunk reads one structured reply chunk.
func (c *conn) chunk(hdr []byte) error {
	flags := binary.BigEndian.Uint16(hdr[4:])
	typ := binary.BigEndian.Uint16(hdr[6:])
	h := binary.BigEndian.Uint64(hdr[8:])
	n := binary.BigEndian.Uint32(hdr[16:])
	k := c.take(h, flags&wire.ReplyFlagDone != 0)
	if k == nil {
		return fmt.Errorf("%w: reply to unknown handle %d", ErrProtocol, h)
	}
	fail := func(err error) error {
		// The call may still be pending: shut will finish it.
		if flags&wire.ReplyFlagDone != 0 {
			k.err = c.cause(err)
			complete(k)
		}
		return err
	}
	k.seen += chunkHeader + uint64(n)
	if b := k.replyBudget(); k.seen > b {
		return fail(fmt.Errorf("%w: more than %d bytes of reply chunks to a %d-byte request without the last one", ErrProtocol, b, k.length))
	}
	switch typ {
	case wire.ReplyTypeNone:
		if n != 0 || flags&wire.ReplyFlagDone == 0 {
			return fail(fmt.Errorf("%w: bad NBD_REPLY_TYPE_NONE", ErrProtocol))
		}
	case wire.ReplyTypeOffsetData, wire.ReplyTypeOffsetHole:
		if k.cmd != wire.CmdRead || n < 8 || (typ == wire.ReplyTypeOffsetHole && n != 12) {
			return fail(fmt.Errorf("%w: bad data chunk", ErrProtocol))
		}
		var b [12]byte
		if _, err := io.ReadFull(c.nc, b[:8]); err != nil {
			return fail(err)
		}
		off := binary.BigEndian.Uint64(b[:])
		var size uint64
		if typ == wire.ReplyTypeOffsetHole {
			if _, err := io.ReadFull(c.nc, b[8:12]); err != nil {
				return fail(err)
			}
			size = uint64(binary.BigEndian.Uint32(b[8:]))
		} else {
			size = uint64(n - 8)
		}
		if off < k.off || size == 0 || off-k.off > uint64(k.length) || size > uint64(k.length)-(off-k.off) {
			return fail(fmt.Errorf("%w: data chunk [%d, +%d) outside the request [%d, +%d)", ErrProtocol, off, size, k.off, k.length))
		}
		// More bytes than asked for must overlap; an overlap that fits is
		// found at the last chunk (covered), in O(n log n) rather than by
		// comparing every pair of chunks, which a server sending a million
		// tiny ones would turn into hours of work.
		if size > uint64(k.length)-k.got {
			return fail(fmt.Errorf("%w: overlapping data chunks", ErrProtocol))
		}
		rel := off - k.off
		k.spans = append(k.spans, [2]uint64{rel, rel + size})
		k.got += size
		dst := k.buf[rel : rel+size]
		if typ == wire.ReplyTypeOffsetHole {
			clear(dst)
		} else if _, err := io.ReadFull(c.nc, dst); err != nil {
			return fail(err)
		}
	default:
		if typ&replyTypeErrorFlag == 0 {
			return fail(fmt.Errorf("%w: unknown reply chunk type %d", ErrProtocol, typ))
		}
		if n < 6 || n > maxErrorPayload {
			return fail(fmt.Errorf("%w: bad error chunk of %d bytes", ErrProtocol, n))
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(c.nc, b); err != nil {
			return fail(err)
		}
		errno := binary.BigEndian.Uint32(b)
		ml := int(binary.BigEndian.Uint16(b[4:]))
		if 6+ml > len(b) || errno == 0 {
			return fail(fmt.Errorf("%w: bad error chunk", ErrProtocol))
		}
		if k.err == nil {
			k.err = &ServerError{Errno: syscall.Errno(errno), Message: printable(b[6 : 6+ml])}
		}
	}
	if flags&wire.ReplyFlagDone != 0 {
		if k.err == nil && k.cmd == wire.CmdRead {
			if k.got != uint64(k.length) {
				k.err = fmt.Errorf("%w: short read reply: %d of %d bytes at offset %d", ErrShortReply, k.got, k.length, k.off)
			} else if !covered(k.spans) {
				// As many bytes as asked for, but some twice: some are missing.
				k.err = fmt.Errorf("%w: overlapping data chunks", ErrProtocol)
				complete(k)
				return k.err
			}
		}
		c.acked(k)
		complete(k)
	}
	return nil
}

// covered reports whether spans, whose sizes add up to the request's
// length, tile it: sorted, each starts where the one before ends.
func covered(spans [][2]uint64) bool {
	slices.SortFunc(spans, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	var at uint64
	for _, s := range spans {
		if s[0] != at {
			return false
		}
		at = s[1]
	}
	return true
}

// close says goodbye (NBD_CMD_DISC) and closes the socket.
func (c *conn) close() {
	if !c.broken() {
		var hdr [28]byte
		binary.BigEndian.PutUint32(hdr[0:], wire.RequestMagic)
		binary.BigEndian.PutUint16(hdr[6:], wire.CmdDisc)
		c.wmu.Lock()
		// A goodbye is a courtesy: a server that does not take it within
		// a second is hung up on anyway.
		c.raw.SetWriteDeadline(time.Now().Add(time.Second))
		c.nc.Write(hdr[:])
		c.wmu.Unlock()
	}
	c.mu.Lock()
	c.onLost = nil
	c.mu.Unlock()
	c.fail(fmt.Errorf("%w: connection closed", ErrClosed))
}
