package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// conn is the server side of one client connection.
type conn struct {
	s      *Server
	e      *export  // chosen in negotiation (NBD_OPT_GO, EXPORT_NAME); guarded by s.mu until then
	raw    net.Conn // the accepted connection
	nc     net.Conn // raw, or the TLS connection on top of it
	br     *bufio.Reader
	remote string

	mu       sync.Mutex // guards stopping and deadline changes
	stopping bool

	// Negotiated state (handshake goroutine only, read-only afterwards).
	fixed      bool
	noZeroes   bool
	tlsUp      bool
	structured bool
	sizeAgreed bool // client asked for NBD_INFO_BLOCK_SIZE in NBD_OPT_GO
	size       int64
	minBlock   uint32

	hdr  [requestHeaderLen]byte // reader goroutine's request header
	rbuf [128]byte              // reader goroutine's scratch for error replies

	// Write merging (readLoop only; see merge).
	rc     syscall.RawConn // for headerReady's peek; nil under TLS
	seqEnd uint64          // where the last write ended

	wmu  sync.Mutex // serialises replies
	werr error      // first write error; guarded by wmu

	// Replies to asynchronous writes, for the replier goroutine, which
	// runs while replying is set (writeDone).
	pmu      sync.Mutex
	pending  []*request
	replying bool
	replyBuf []byte // the replier's own

	host    string // IP without the port, or Unix peer uid: whose share of MaxConns this is
	evicted bool   // made way for a newer client; guarded by s.mu

	fmu           sync.Mutex // guards inflight accounting and the activity fields
	fcond         sync.Cond
	inflight      int
	inflightBytes int64
	transmitting  bool        // negotiation is over
	reading       atomic.Bool // the reader is reading a write payload (counted in inflight)
	lastActive    int64       // Server.now() when a request last arrived or finished
	work          chan *request
	workers       int // started by dispatch; only the read loop touches it
	wg            sync.WaitGroup

	drainOnce sync.Once
	drained   chan struct{} // closed when no request is in flight any more and none will be read
	done      chan struct{} // closed when ServeConn returns
}

func newConn(s *Server, c net.Conn) *conn {
	cn := &conn{
		s:   s,
		raw: c,
		nc:  c,
		// Small enough that a write payload is mostly read straight into
		// its buffer (bufio copies only what it read ahead with the
		// header), large enough for 146 request headers per read.
		br:      bufio.NewReaderSize(c, 4<<10),
		drained: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if a := c.RemoteAddr(); a != nil {
		cn.remote = a.String()
		cn.host = a.Network() + ":" + cn.remote
		if h, _, err := net.SplitHostPort(cn.remote); err == nil {
			cn.host = a.Network() + ":" + h
		}
	}
	if id, ok := unixPeer(c); ok {
		cn.host = id
	}
	cn.fcond.L = &cn.fmu
	cn.lastActive = s.now()
	return cn
}

func (c *conn) logf(format string, args ...any) {
	if c.s.opts.Logf != nil {
		c.s.opts.Logf("nbd: client %s: %s", c.remote, fmt.Sprintf(format, args...))
	}
}

// stop makes the reader give up: pending and future reads fail at once.
// Replies still being written get drainTimeout to complete.
func (c *conn) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	c.stopping = true
	c.raw.SetReadDeadline(time.Unix(1, 0))
	c.raw.SetWriteDeadline(time.Now().Add(drainTimeout))
}

// idleSince reports whether the connection has no request in flight, and
// since when. With timeout set it considers only connections past
// negotiation (the handshake has its own timeout) and treats a write
// payload the client stopped sending as idle, so a stalled client cannot
// hold its slot forever; without, for eviction, it is strict.
func (c *conn) idleSince(timeout bool) (int64, bool) {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	busy := c.inflight
	if timeout {
		if !c.transmitting {
			return 0, false
		}
		if c.reading.Load() {
			busy--
		}
	}
	return c.lastActive, busy == 0
}

func (c *conn) isStopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping
}

// setDeadline changes the connection deadline unless the connection is
// being stopped (whose deadlines must stay in force).
func (c *conn) setDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopping {
		c.raw.SetDeadline(t)
	}
}

func (c *conn) serve(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.logf("panic: %v\n%s", p, debug.Stack())
			err = fmt.Errorf("nbd: internal error: %v", p)
		}
		c.finish()
	}()
	entered, err := c.handshake(ctx)
	if err != nil || !entered {
		return c.quiet(err)
	}
	return c.quiet(c.transmit())
}

// finish reports the connection drained, waits for the backend flush if a
// Shutdown is under way, and closes the connection.
func (c *conn) finish() {
	c.drainOnce.Do(func() { close(c.drained) })
	if c.isStopping() {
		if ch := c.flushWait(); ch != nil {
			<-ch
		}
		c.closeGently()
	}
	if c.nc != c.raw {
		c.nc.Close() // sends the TLS close_notify
	}
	c.raw.Close()
}

// closeGently ends a connection the server chose to end (Shutdown, an
// eviction, an idle timeout) so that the replies already sent reach the
// client. Closing a TCP socket with unread requests in its receive buffer
// sends a reset, and a reset makes the client's kernel drop replies it has
// not read yet: an answered write would look failed. So the write side is
// shut first (after TLS close_notify), and what the client still sends is
// read and discarded until it closes, or for at most lingerTimeout.
func (c *conn) closeGently() {
	c.wmu.Lock()
	ok := c.werr == nil
	c.wmu.Unlock()
	cw, isCW := c.raw.(interface{ CloseWrite() error })
	if !ok || !isCW {
		return
	}
	if tc, isTLS := c.nc.(*tls.Conn); isTLS {
		if tc.CloseWrite() != nil {
			return
		}
	}
	if cw.CloseWrite() != nil {
		return
	}
	c.raw.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.Copy(io.Discard, c.raw)
}

// quiet maps errors caused by a requested stop or an orderly client close
// to nil.
func (c *conn) quiet(err error) error {
	if err == nil {
		return nil
	}
	if c.isStopping() {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
	}
	return err
}

// writeFull writes one complete reply under the write lock. After the first
// failure the connection is closed and later replies are dropped.
func (c *conn) writeFull(p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if _, err := c.nc.Write(p); err != nil {
		c.werr = err
		c.raw.Close() // unblocks the reader
		return err
	}
	return nil
}

// errno maps a backend error to an NBD error value.
func errno(err error) uint32 {
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.EPERM, syscall.EACCES, syscall.EROFS:
			return nbdEPERM
		case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
			return nbdENOSPC
		case syscall.EINVAL:
			return nbdEINVAL
		case syscall.ENOMEM:
			return nbdENOMEM
		case syscall.EOVERFLOW:
			return nbdEOVERFLOW
		case syscall.ESHUTDOWN:
			return nbdESHUTDOWN
		}
	}
	if errors.Is(err, os.ErrPermission) {
		return nbdEPERM
	}
	return nbdEIO
}

var errBadOptionMagic = errors.New("nbd: bad option magic")

// readErr annotates an error from reading the client stream.
func readErr(what string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("nbd: truncated %s", what)
	}
	return fmt.Errorf("nbd: reading %s: %w", what, err)
}
