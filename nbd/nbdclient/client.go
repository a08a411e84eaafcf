// Package nbdclient is a pure-Go client of the Network Block Device
// protocol (the NBD project's doc/proto.md), so that an NBD export can be
// the device of a blkcrypt volume: Dial returns a *Client that is an
// io.ReaderAt and io.WriterAt with Sync, Size, Discard and Close.
//
// It speaks fixed newstyle negotiation only, with NBD_OPT_GO (falling back
// to NBD_OPT_EXPORT_NAME on servers without it), asks for
// NBD_INFO_BLOCK_SIZE and honours it (requests are aligned to the minimum,
// with read-modify-write for an unaligned write, and split at the maximum),
// and uses structured replies when the server offers them (data, hole and
// error chunks; a read is complete only when every byte was covered
// exactly once). Requests are pipelined: a ReadAt or WriteAt larger than the
// maximum sends all its pieces before waiting, concurrent callers share
// the connection, and one reader goroutine per connection matches replies
// by handle. When the server offers NBD_FLAG_CAN_MULTI_CONN, up to
// Options.Conns connections are opened (as they are first needed) and the
// requests spread over them; Sync flushes every one.
//
// Cancellation: the context given to Dial bounds connecting, the handshake
// and the probe of the last byte; once Dial returns, it no longer matters
// (as with net.Dialer.DialContext). The context that bounds the client's
// life, since io.ReaderAt and io.WriterAt take none, is Options.Context:
// when it ends, a request in flight or made later fails with its error
// unless the server answers within Options.CancelGrace, a blocked write
// gives up as soon, and no connection is made again. The grace lets a
// process that was told to stop still flush through a server that
// answers, while one that stalls holds it for no longer.
//
// Failure: a lost connection fails every request in flight on it with
// ErrConnectionLost, never with partial data. The next request reconnects
// (three tries, 100 ms, 300 ms, then 1 s apart), and refuses an export
// whose size or flags changed. If the lost connection carried writes that
// were not yet flushed, the next Sync reports ErrUnflushedLost, since those
// writes may never have reached the server's disk.
//
// Importing this package registers the nbd, nbds, nbd+unix and nbds+unix
// URI schemes with the root package (blkcrypt.RegisterURIScheme, in
// register.go), so blkcrypt.Open, Format and the key tools take NBD URIs
// as devices; the root does not import this package.
package nbdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/blkcrypt/blkcrypt/nbd/internal/wire"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors; every error the client returns wraps one of these, a
// *ServerError, or a context error.
var (
	// ErrConnectionLost: the connection failed; requests in flight on it
	// failed with it and were not (or not known to be) carried out.
	ErrConnectionLost = errors.New("nbd: connection lost")
	// ErrConnect: the server could not be reached.
	ErrConnect = errors.New("nbd: cannot connect")
	// ErrProtocol: the server broke the protocol.
	ErrProtocol = errors.New("nbd: protocol error")
	// ErrShortReply: the server answered a read with fewer bytes than
	// asked, as a server that claims more than it has does.
	ErrShortReply = errors.New("nbd: short reply")
	// ErrUnknownExport: the server has no export of that name.
	ErrUnknownExport = errors.New("nbd: unknown export")
	// ErrTLS: TLS was required, refused or failed.
	ErrTLS = errors.New("nbd: tls")
	// ErrReadOnly: a write to a read-only export or client.
	ErrReadOnly = errors.New("nbd: read-only export")
	// ErrUnsupported: the server does not offer the command (TRIM, FUA).
	// It matches errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("nbd: not supported by the server: %w", errors.ErrUnsupported)
	// ErrOutOfRange: a write or discard past the end of the export.
	ErrOutOfRange = errors.New("nbd: out of range")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("nbd: client closed")
	// ErrUnflushedLost: a connection was lost with writes not yet flushed.
	ErrUnflushedLost = errors.New("nbd: connection lost with unflushed writes; they may not have reached the server")
)

// Options tune a Client. The zero value is ready to use.
type Options struct {
	// Conns is the most connections to open when the server offers
	// multi-conn; 0 means 4.
	Conns int
	// ReadOnly refuses writes locally, whatever the export allows.
	ReadOnly bool
	// TLSConfig replaces the configuration built from the URI.
	TLSConfig *tls.Config
	// Timeout bounds each request; a request that takes longer fails and
	// takes its connection down. 0 means 2 minutes, negative none.
	Timeout time.Duration
	// Dial replaces net.Dialer.DialContext (for tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// NoProbe skips the read of the last byte that Dial does to catch a
	// server claiming a size it does not have.
	NoProbe bool
	// Context, when set, bounds the client's life (see the package
	// documentation): the client keeps it, as its requests take no
	// context of their own. Nil means none.
	Context context.Context
	// CancelGrace is how long after Context ends a request may still be
	// answered; 0 means 500 ms, negative none.
	CancelGrace time.Duration
}

// defaultCancelGrace leaves a server that answers time to, after a signal,
// take a process's last writes and flush, and is short enough that a user
// who pressed Ctrl-C does not wait on one that stalls.
const defaultCancelGrace = 500 * time.Millisecond

// Client is an open NBD export. Its methods are safe for concurrent use.
type Client struct {
	t      *Target
	o      Options
	cfg    connConfig
	tcfg   *tls.Config
	e      export
	maxReq int64 // largest request sent: the maximum block size, at most 32 MiB

	slots []*slot
	rr    atomic.Uint64

	closed    atomic.Bool
	lostDirty atomic.Bool
	// rmw: an unaligned write (read-modify-write of whole minimum blocks)
	// runs alone, so no other write to its blocks can land between its
	// read and its write and be undone; aligned writes share it.
	rmw        sync.RWMutex
	retryDelay []time.Duration
}

// slot is one connection place; a broken connection is redialled there.
type slot struct {
	mu sync.Mutex
	c  *conn
}

// Dial connects to the export a URI names (see ParseURI).
func Dial(ctx context.Context, uri string, o Options) (*Client, error) {
	t, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	return DialTarget(ctx, t, o)
}

// DialTarget connects to a parsed target.
func DialTarget(ctx context.Context, t *Target, o Options) (*Client, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Conns <= 0 {
		o.Conns = 4
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.CancelGrace == 0 {
		o.CancelGrace = defaultCancelGrace
	}
	life := o.Context
	if life == nil {
		life = context.Background()
	}
	var err error
	c := &Client{t: t, o: o, cfg: connConfig{life: life, timeout: o.Timeout, grace: max(o.CancelGrace, 0)},
		retryDelay: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second}}
	if t.TLS {
		if o.TLSConfig != nil {
			c.tcfg = o.TLSConfig.Clone()
		} else if c.tcfg, err = tlsConfig(t); err != nil {
			return nil, err
		}
	}
	first, e, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.e = *e
	c.maxReq = 32 << 20
	if int64(e.max) < c.maxReq {
		c.maxReq = int64(e.max)
	}
	// Pieces are whole preferred blocks where they can be, so a split
	// request never leaves the server a partial preferred block to
	// read-modify-write; the minimum always binds.
	if int64(e.pref) <= c.maxReq {
		c.maxReq -= c.maxReq % int64(e.pref)
	} else {
		c.maxReq -= c.maxReq % int64(e.min)
	}
	n := 1
	if e.flags&FlagCanMultiConn != 0 {
		n = o.Conns
	}
	c.slots = make([]*slot, n)
	for i := range c.slots {
		c.slots[i] = &slot{}
	}
	c.slots[0].c = first
	if !o.NoProbe && e.size > 0 {
		// A server that claims more than it has is caught here, before
		// anything is written through it.
		var b [1]byte
		if _, err := c.readAt(bound{ctx: ctx}, b[:], e.size-1); err != nil {
			// Nothing was written: no flush, which could only wait on a
			// server that just failed us.
			c.shutdown()
			return nil, fmt.Errorf("%s: reading the last byte of the %d-byte export: %w", t, e.size, err)
		}
	}
	return c, nil
}

// Transmission flags the client looks at (the server's names).
const (
	FlagReadOnly     = 1 << 1
	FlagSendFlush    = 1 << 2
	FlagSendFUA      = 1 << 3
	FlagSendTrim     = 1 << 5
	FlagCanMultiConn = 1 << 8
)

func (c *Client) dial(ctx context.Context) (*conn, *export, error) {
	dial := c.o.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, c.t.Network, c.t.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w to %s: %w", ErrConnect, c.t, err)
	}
	// The handshake's reads block in the kernel, where only closing the
	// socket reaches them when ctx ends (its deadline is only a backstop).
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	tc, e, err := handshake(ctx, nc, c.t, c.tcfg)
	if !stop() {
		nc.Close()
		return nil, nil, fmt.Errorf("nbd: %s: handshake abandoned: %w", c.t, ctx.Err())
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", c.t, err)
	}
	return newConn(tc, nc, e.structured, c.cfg, c.lost), e, nil
}

func (c *Client) lost(dirty bool) {
	if dirty {
		c.lostDirty.Store(true)
	}
}

// conn returns a live connection, spreading calls over the slots and
// reconnecting a broken one with bounded backoff.
func (c *Client) conn() (*conn, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	s := c.slots[int(c.rr.Add(1)%uint64(len(c.slots)))]
	s.mu.Lock()
	if s.c != nil && !s.c.broken() {
		cn := s.c
		s.mu.Unlock()
		return cn, nil
	}
	life := c.cfg.life
	if err := life.Err(); err != nil {
		s.mu.Unlock()
		// No new connection after the context ended: a server that
		// stalls would get a fresh handshake each time. One still up
		// may serve.
		if l := c.live(); len(l) > 0 {
			return l[0], nil
		}
		return nil, fmt.Errorf("%w: %s: not reconnecting: %w", ErrConnectionLost, c.t, err)
	}
	defer s.mu.Unlock()
	var last error
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(life, 30*time.Second)
		nc, e, err := c.dial(ctx)
		cancel()
		if err == nil {
			if e.size != c.e.size || e.flags != c.e.flags || e.min != c.e.min || e.max != c.e.max || e.structured != c.e.structured {
				nc.close()
				return nil, fmt.Errorf("%w: %s: the export changed on reconnection (size %d → %d, flags %#x → %#x)", ErrConnectionLost, c.t, c.e.size, e.size, c.e.flags, e.flags)
			}
			s.c = nc
			return nc, nil
		}
		last = err
		if i >= len(c.retryDelay) || life.Err() != nil || !errors.Is(err, ErrConnect) && !errors.Is(err, ErrConnectionLost) {
			break
		}
		t := time.NewTimer(c.retryDelay[i])
		select {
		case <-t.C:
		case <-life.Done():
			t.Stop()
		}
		if c.closed.Load() {
			return nil, ErrClosed
		}
	}
	return nil, fmt.Errorf("%w; reconnecting failed: %w", ErrConnectionLost, last)
}

// live returns the slots' connections that are up.
func (c *Client) live() []*conn {
	var out []*conn
	for _, s := range c.slots {
		s.mu.Lock()
		if s.c != nil && !s.c.broken() {
			out = append(out, s.c)
		}
		s.mu.Unlock()
	}
	return out
}

// bound is what, besides the timeout, ends a wait for a reply: ctx
// ending, and grace after that.
type bound struct {
	ctx   context.Context
	grace time.Duration
	life  bool // ctx is the connections' life, whose end they note
}

// life is the bound of every request but Dial's.
func (c *Client) life() bound { return bound{c.cfg.life, c.cfg.grace, true} }

// wait waits for k, bounding it by the timeout and by b. A wait given up
// takes the connection down: the reply would come in the middle of the
// next one's, and closing the socket is what stops the reader.
func (c *Client) wait(b bound, cn *conn, k *call) error {
	var timeout <-chan time.Time
	if c.o.Timeout > 0 {
		t := time.NewTimer(c.o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	timedOut := func() error {
		return abandon(cn, k, fmt.Errorf("%w: no reply from %s within %v", ErrConnectionLost, c.t, c.o.Timeout))
	}
	select {
	case <-k.done:
		return k.err
	case <-timeout:
		return timedOut()
	case <-b.ctx.Done():
	}
	// The grace runs from when the context ended, or from the request if
	// it was made after (pieces of one transfer share it).
	from := time.Now()
	if at := cn.cancelAt.Load(); at != 0 && b.life {
		from = time.Unix(0, max(at, k.sent.UnixNano()))
	}
	g := time.NewTimer(time.Until(from.Add(b.grace)))
	defer g.Stop()
	select {
	case <-k.done:
		return k.err
	case <-timeout:
		return timedOut()
	case <-g.C:
		return abandon(cn, k, fmt.Errorf("nbd: %s: request abandoned: %w", c.t, b.ctx.Err()))
	}
}

// abandon fails cn with err and returns k's outcome: its reply if that
// came first, else err.
func abandon(cn *conn, k *call, err error) error {
	cn.fail(err)
	<-k.done
	return k.err
}

// Size returns the export size in bytes.
func (c *Client) Size() (int64, error) { return c.e.size, nil }

// BlockSizes returns the minimum, preferred and maximum block sizes.
func (c *Client) BlockSizes() (min, pref, max uint32) { return c.e.min, c.e.pref, c.e.max }

// Flags returns the export's transmission flags.
func (c *Client) Flags() uint16 { return c.e.flags }

// Target returns the parsed URI.
func (c *Client) Target() *Target { return c.t }

// piece is one request of a larger transfer.
type piece struct {
	cn *conn
	k  *call
}

// transfer sends [off, off+len(p)) as requests of at most maxReq bytes,
// all before waiting for any, and waits for all. off and len(p) are
// aligned to the minimum block size.
func (c *Client) transfer(b bound, cmd, flags uint16, p []byte, off int64) error {
	var ps []piece
	var first error
	for done := int64(0); done < int64(len(p)); {
		n := min(int64(len(p))-done, c.maxReq)
		cn, err := c.conn()
		if err != nil {
			first = err
			break
		}
		q := p[done : done+n]
		var k *call
		if cmd == wire.CmdRead {
			k, err = cn.start(cmd, flags, uint64(off+done), uint32(n), nil, q)
		} else {
			k, err = cn.start(cmd, flags, uint64(off+done), uint32(n), q, nil)
		}
		if err != nil {
			first = err
			break
		}
		ps = append(ps, piece{cn, k})
		done += n
	}
	for _, q := range ps {
		if err := c.wait(b, q.cn, q.k); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Client) aligned(off, n int64) bool {
	m := int64(c.e.min)
	return off%m == 0 && n%m == 0
}

// ReadAt reads len(p) bytes at off. A read that runs past the end of the
// export returns what it has and io.EOF.
func (c *Client) ReadAt(p []byte, off int64) (int, error) { return c.readAt(c.life(), p, off) }

func (c *Client) readAt(b bound, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", ErrOutOfRange)
	}
	if off >= c.e.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := p
	if rest := c.e.size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	if err := c.read(b, p, off); err != nil {
		return 0, err
	}
	if len(p) < len(want) {
		return len(p), io.EOF
	}
	return len(p), nil
}

// read reads within the export, widening an unaligned range to whole
// minimum blocks through a bounce buffer.
func (c *Client) read(b bound, p []byte, off int64) error {
	if c.aligned(off, int64(len(p))) {
		return c.transfer(b, wire.CmdRead, 0, p, off)
	}
	m := int64(c.e.min)
	start := off / m * m
	end := min((off+int64(len(p))+m-1)/m*m, c.e.size)
	buf := make([]byte, end-start)
	if err := c.transfer(b, wire.CmdRead, 0, buf, start); err != nil {
		return err
	}
	copy(p, buf[off-start:])
	return nil
}

func (c *Client) writable() error {
	if c.o.ReadOnly || c.e.flags&FlagReadOnly != 0 {
		return fmt.Errorf("%w: %s", ErrReadOnly, c.t)
	}
	return nil
}

// WriteAt writes p at off. A write past the end of the export is refused
// whole.
func (c *Client) WriteAt(p []byte, off int64) (int, error) {
	return c.write(p, off, 0)
}

// WriteAtFUA writes p at off with NBD_CMD_FLAG_FUA: the server has it on
// stable storage when it answers. Without FUA from the server it is a write
// followed by a flush.
func (c *Client) WriteAtFUA(p []byte, off int64) (int, error) {
	if c.e.flags&FlagSendFUA == 0 {
		n, err := c.write(p, off, 0)
		if err == nil {
			err = c.Sync()
		}
		return n, err
	}
	return c.write(p, off, wire.CmdFlagFUA)
}

func (c *Client) write(p []byte, off int64, flags uint16) (int, error) {
	if err := c.writable(); err != nil {
		return 0, err
	}
	if off < 0 || off > c.e.size || int64(len(p)) > c.e.size-off {
		return 0, fmt.Errorf("%w: write of %d bytes at %d on a %d-byte export", ErrOutOfRange, len(p), off, c.e.size)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if c.aligned(off, int64(len(p))) {
		c.rmw.RLock()
		defer c.rmw.RUnlock()
		if err := c.transfer(c.life(), wire.CmdWrite, flags, p, off); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	c.rmw.Lock()
	defer c.rmw.Unlock()
	m := int64(c.e.min)
	start := off / m * m
	end := min((off+int64(len(p))+m-1)/m*m, c.e.size)
	b := make([]byte, end-start)
	if err := c.transfer(c.life(), wire.CmdRead, 0, b, start); err != nil {
		return 0, err
	}
	copy(b[off-start:], p)
	if err := c.transfer(c.life(), wire.CmdWrite, flags, b, start); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Sync sends NBD_CMD_FLUSH on every open connection (in parallel) and
// waits for all. It reports ErrUnflushedLost once after a connection was
// lost with unflushed writes.
func (c *Client) Sync() error {
	if c.closed.Load() {
		return ErrClosed
	}
	if c.writable() != nil {
		return nil
	}
	var first error
	if c.e.flags&FlagSendFlush != 0 {
		conns := c.live()
		if len(conns) == 0 {
			cn, err := c.conn()
			if err != nil {
				return err
			}
			conns = []*conn{cn}
		}
		var ps []piece
		var dirty []bool
		for _, cn := range conns {
			d := cn.dirty.Swap(false)
			k, err := cn.start(wire.CmdFlush, 0, 0, 0, nil, nil)
			if err != nil {
				if d {
					c.lostDirty.Store(true)
				}
				if first == nil {
					first = fmt.Errorf("flush: %w", err)
				}
				continue
			}
			ps = append(ps, piece{cn, k})
			dirty = append(dirty, d)
		}
		for i, q := range ps {
			if err := c.wait(c.life(), q.cn, q.k); err != nil {
				// The writes this flush was for are in doubt until a
				// later Sync reports them.
				if dirty[i] {
					c.lostDirty.Store(true)
				}
				if first == nil {
					first = fmt.Errorf("flush: %w", err)
				}
			}
		}
	}
	if first == nil && c.lostDirty.Swap(false) {
		first = ErrUnflushedLost
	}
	return first
}

// Discard sends NBD_CMD_TRIM for [off, off+n): the server may forget the
// data there. It is ErrUnsupported when the server does not offer TRIM.
func (c *Client) Discard(off, n int64) error {
	if err := c.writable(); err != nil {
		return err
	}
	if c.e.flags&FlagSendTrim == 0 {
		return fmt.Errorf("%w: TRIM on %s", ErrUnsupported, c.t)
	}
	if off < 0 || n < 0 || off > c.e.size || n > c.e.size-off {
		return fmt.Errorf("%w: discard of %d bytes at %d", ErrOutOfRange, n, off)
	}
	// Only whole minimum blocks inside the range are trimmed.
	m := int64(c.e.min)
	start, end := (off+m-1)/m*m, (off+n)/m*m
	for start < end {
		l := min(end-start, c.maxReq)
		cn, err := c.conn()
		if err != nil {
			return err
		}
		k, err := cn.start(wire.CmdTrim, 0, uint64(start), uint32(l), nil, nil)
		if err != nil {
			return err
		}
		if err := c.wait(c.life(), cn, k); err != nil {
			return fmt.Errorf("trim: %w", err)
		}
		start += l
	}
	return nil
}

// Close flushes (when writable), says goodbye on every connection and
// closes them. Requests still in flight fail with ErrClosed.
func (c *Client) Close() error {
	if c.closed.Load() {
		return ErrClosed
	}
	err := c.Sync()
	if !c.shutdown() {
		return ErrClosed
	}
	return err
}

// shutdown closes the connections without flushing; false if the client
// was closed already.
func (c *Client) shutdown() bool {
	if !c.closed.CompareAndSwap(false, true) {
		return false
	}
	for _, s := range c.slots {
		s.mu.Lock()
		if s.c != nil {
			s.c.close()
		}
		s.mu.Unlock()
	}
	return true
}
