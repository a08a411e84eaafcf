package nbd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Backend is the device being exported. ReadAt and WriteAt take byte
// offsets and may be called concurrently from many goroutines; the backend
// orders overlapping writes itself. The server calls them only with ranges
// inside [0, Size()).
type Backend interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Size() int64
	Flush() error
	// BlockSize is the volume's sector size (512..4096). It is advertised
	// as the minimum block size and (at least 4096) as the preferred one.
	BlockSize() int
}

// Discarder is implemented by backends that can discard (TRIM) a range.
// It is used only when Options.AllowDiscards is set.
type Discarder interface {
	Discard(off, length int64) error
}

// ZeroWriter is implemented by backends that can zero a range without a
// data buffer. Without it the server writes zero-filled buffers via WriteAt.
type ZeroWriter interface {
	WriteZeroes(off, length int64) error
}

// InPlaceWriter is implemented by backends that can write from a buffer
// they may overwrite (a blkcrypt Volume encrypts in it). The server's
// write payloads are its own, so it uses WriteAtInPlace when it can.
type InPlaceWriter interface {
	WriteAtInPlace(p []byte, off int64) (int, error)
}

// AsyncWriter is implemented by backends that can start a write and report
// its end later (a blkcrypt Volume over an rbd: device). The server starts
// each write it can that way from the goroutine that read the request and
// replies from done, so no worker waits for the write and none is woken to
// reply. StartWriteAt returns false, having done nothing, for a write it
// cannot start so; the server then runs it on a worker through WriteAt or
// WriteAtInPlace. It must not block. Like WriteAtInPlace, it may overwrite
// p, the server's own buffer, which it must leave alone once done is
// called. Writes with FUA always go to a worker.
type AsyncWriter interface {
	StartWriteAt(p []byte, off int64, done func(error)) bool
}

// QueueDepther is implemented by backends that want a queue per connection
// other than the default 16 requests (at most 64): one over a network
// block store, whose round trips a deeper queue hides. Values below 1 mean
// the default.
type QueueDepther interface {
	QueueDepth() int
}

// Options configures a Server. The zero value is usable.
type Options struct {
	// ExportName is the name of the single export. Clients may ask for
	// it by this name or by the default name "".
	ExportName string
	// Description is sent in NBD_INFO_DESCRIPTION and NBD_OPT_LIST replies.
	Description string
	// ReadOnly exports the device read-only: writes fail with nbdEPERM.
	ReadOnly bool
	// AllowDiscards advertises TRIM when the backend is a Discarder.
	AllowDiscards bool
	// MultiConn advertises NBD_FLAG_CAN_MULTI_CONN. This is correct when
	// the backend's Flush makes every completed write durable, whichever
	// connection it came from.
	MultiConn bool
	// MaxConns caps the connections served at once (default 64). At the
	// cap a new client takes the place of an idle connection chosen by
	// the fair-share policy in the package doc; if there is none it is
	// closed at once.
	MaxConns int
	// IdleTimeout closes a connection in the transmission phase that has
	// had no request in flight for this long (a client stalled in the
	// middle of a write payload counts as idle). Zero, the default, never
	// closes an idle connection: NBD has no keepalive, and the kernel
	// client and qemu do not reconnect by default, so a timer would break
	// an idle mounted device, while the fair-share policy already frees a
	// slot when one is needed.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the whole negotiation phase, including a
	// TLS handshake (default 10s).
	HandshakeTimeout time.Duration
	// MaxRequest is the largest READ/WRITE payload accepted (default and
	// advertised maximum block size: 32 MiB; clamped to [64 KiB, 256 MiB]).
	MaxRequest int
	// TLSConfig, if non-nil, makes TLS mandatory (FORCEDTLS mode): every
	// option other than NBD_OPT_STARTTLS and NBD_OPT_ABORT is refused with
	// NBD_REP_ERR_TLS_REQD until TLS is up.
	TLSConfig *tls.Config
	// Logf receives connection-level events; it is called from several
	// goroutines at once. It may be nil. Payload data is never logged.
	Logf func(format string, args ...any)
}

// Errors returned by Serve and ServeConn.
var (
	// ErrServerClosed: Shutdown was called.
	ErrServerClosed = errors.New("nbd: server closed")
	// ErrTooManyConns: MaxConns connections are being served and none of
	// them may make way for this one (see Connection policy in the
	// package doc); the connection was closed at once.
	ErrTooManyConns = errors.New("nbd: too many connections")
)

const (
	defaultMaxConns         = 64
	defaultHandshakeTimeout = 10 * time.Second
	defaultMaxRequest       = 32 << 20
	minMaxRequest           = 64 << 10
	maxMaxRequest           = 256 << 20
	// defaultQueueDepth is the requests in flight per connection, unless
	// the backend asks for another depth (QueueDepther), up to
	// maxInflight (nbdcopy's queue, --requests=64). 16 is qemu-nbd's
	// depth; on a tmpfs image nbdcopy's reads were 10% slower with 64,
	// whose buffers no longer stay in the cache (docs/scaling.md).
	defaultQueueDepth = 16
	maxInflight       = 64
	minInflightBudget = 16 << 20 // payload bytes in flight per connection (at least)
	zeroChunk         = 1 << 20  // buffer size for WRITE_ZEROES emulation
	drainTimeout      = 30 * time.Second
	lingerTimeout     = time.Second // for a stopped client to read its last replies and close
	dosLimit          = 32 << 20    // payloads up to this are discarded, never treated as abuse
)

// Server exports one Backend (NewServer) or several (NewGateway) over NBD.
type Server struct {
	opts     Options
	gateway  bool    // made by NewGateway: "" is not an alias for a lone export
	single   *export // NewServer's export, for TransmissionFlags
	maxReq   int
	budget   int64
	classes  []int
	bufPools []sync.Pool
	reqPool  sync.Pool

	epoch time.Time // origin of conn.lastActive, on the monotonic clock

	mu        sync.Mutex
	conns     map[*conn]struct{} // every connection not yet closed, evicted ones included
	active    int                // connections in conns that were not evicted
	janitor   bool               // the idle-timeout goroutine is running
	listeners map[net.Listener]struct{}
	exports   map[string]*export
	closing   bool
	flushed   chan struct{} // closed by Shutdown once the backends were flushed
}

// NewServer returns a server exporting b, named Options.ExportName.
func NewServer(b Backend, opts Options) *Server {
	s := newServer(opts)
	e := newExport(Export{
		Name:          opts.ExportName,
		Description:   opts.Description,
		Backend:       b,
		ReadOnly:      opts.ReadOnly,
		AllowDiscards: opts.AllowDiscards,
		MultiConn:     opts.MultiConn,
	})
	s.exports[e.Name] = e
	s.single = e
	return s
}

func newServer(opts Options) *Server {
	if opts.MaxConns <= 0 {
		opts.MaxConns = defaultMaxConns
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = defaultHandshakeTimeout
	}
	if opts.MaxRequest <= 0 {
		opts.MaxRequest = defaultMaxRequest
	}
	opts.MaxRequest = min(max(opts.MaxRequest, minMaxRequest), maxMaxRequest)
	if opts.IdleTimeout < 0 {
		opts.IdleTimeout = 0
	}
	s := &Server{
		epoch:     time.Now(),
		opts:      opts,
		maxReq:    opts.MaxRequest,
		budget:    max(2*int64(opts.MaxRequest), minInflightBudget),
		conns:     make(map[*conn]struct{}),
		listeners: make(map[net.Listener]struct{}),
		exports:   make(map[string]*export),
		flushed:   make(chan struct{}),
	}
	for sz := 4096; ; sz <<= 1 {
		if sz >= s.maxReq {
			s.classes = append(s.classes, s.maxReq)
			break
		}
		s.classes = append(s.classes, sz)
	}
	s.bufPools = make([]sync.Pool, len(s.classes))
	s.reqPool.New = func() any { return new(request) }
	return s
}

// TransmissionFlags returns the transmission flags advertised for the
// export of a NewServer server (0 for a gateway).
func (s *Server) TransmissionFlags() uint16 {
	if s.single == nil {
		return 0
	}
	return s.single.tflags
}

// backends returns the backends of the exports served now.
func (s *Server) backends() []Backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := make([]Backend, 0, len(s.exports))
	for _, e := range s.exports {
		bs = append(bs, e.Backend)
	}
	return bs
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// Serve accepts connections on l and serves each in its own goroutine
// until ctx is cancelled, Shutdown is called, or l fails. When ctx is
// cancelled it closes l, lets every connection it started finish its
// in-flight requests, flushes the backend and returns ctx.Err(). After
// Shutdown it returns ErrServerClosed. If l fails, the error is returned
// and connections already accepted keep running (Shutdown ends them).
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	stopAfter := context.AfterFunc(ctx, func() { l.Close() })
	defer stopAfter()

	var wg sync.WaitGroup
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				wg.Wait()
				for _, b := range s.backends() {
					if ferr := b.Flush(); ferr != nil {
						s.logf("nbd: flush after cancel: %v", ferr)
					}
				}
				return ctx.Err()
			}
			if s.isClosing() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logf("nbd: accept: %v; retrying in %v", err, backoff)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				continue
			}
			l.Close()
			return err
		}
		backoff = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.ServeConn(ctx, c); err != nil && !errors.Is(err, ErrServerClosed) {
				s.logf("nbd: client %s: %s", c.RemoteAddr(), strings.TrimPrefix(err.Error(), "nbd: "))
			}
		}()
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// ServeConn runs the NBD protocol on c until the client disconnects, a
// protocol violation occurs, ctx is cancelled or Shutdown is called. It
// closes c before returning. A clean client disconnect (NBD_CMD_DISC,
// NBD_OPT_ABORT, or EOF between requests), a requested stop, an idle
// timeout and an eviction return nil. When MaxConns connections are being
// served and none may make way for c, c is closed and ErrTooManyConns
// returned.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) (err error) {
	cn := newConn(s, c)
	var victim *conn
	s.mu.Lock()
	switch {
	case s.closing:
		err = ErrServerClosed
	case s.active >= s.opts.MaxConns:
		if victim = s.victimFor(cn.host); victim == nil {
			err = ErrTooManyConns
		} else {
			// The newcomer takes the victim's slot now, so two
			// newcomers cannot both take the same one.
			victim.evicted = true
			s.active--
		}
	}
	if err == nil {
		s.conns[cn] = struct{}{}
		s.active++
		if s.opts.IdleTimeout > 0 && !s.janitor {
			s.janitor = true
			go s.reapIdle()
		}
	}
	s.mu.Unlock()
	if err != nil {
		c.Close()
		return err
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, cn)
		cn.detachLocked()
		if !cn.evicted {
			s.active--
		}
		s.mu.Unlock()
		close(cn.done)
	}()
	stopAfter := context.AfterFunc(ctx, cn.stop)
	defer stopAfter()
	if victim != nil {
		victim.logf("connection limit of %d reached; closing this idle connection for %s", s.opts.MaxConns, cn.remote)
		victim.stop()
		// Serve no more than MaxConns at once: start once the victim has
		// finished its requests (an idle one has none, but one may have
		// raced in). Its drained, not its done, so that a Shutdown that
		// stops both cannot deadlock on the final flush.
		t := time.NewTimer(s.opts.HandshakeTimeout)
		select {
		case <-victim.drained:
		case <-t.C:
		case <-ctx.Done(): // cn was stopped too: serve fails at once
		}
		t.Stop()
	}
	return cn.serve(ctx)
}

// victimFor chooses the connection a new client from host replaces when
// the server is full, or nil. Only connections with no request in flight
// qualify. A host may lose a connection only if it holds more than host
// does (or is host itself), so no client is squeezed below the share of
// the one arriving; among those, the host with the most connections loses
// its longest-idle one. Connections still negotiating count as idle since
// they were accepted. s.mu must be held.
func (s *Server) victimFor(host string) *conn {
	counts := make(map[string]int)
	for c := range s.conns {
		if !c.evicted {
			counts[c.host]++
		}
	}
	mine := counts[host]
	var best *conn
	var bestCount int
	var bestSince int64
	for c := range s.conns {
		if c.evicted {
			continue
		}
		k := counts[c.host]
		if c.host != host && k <= mine {
			continue
		}
		since, ok := c.idleSince(false)
		if !ok {
			continue
		}
		if best == nil || k > bestCount || k == bestCount && since < bestSince {
			best, bestCount, bestSince = c, k, since
		}
	}
	return best
}

// reapIdle stops connections idle for longer than IdleTimeout. It runs
// while the server has connections, checking a few times per timeout.
func (s *Server) reapIdle() {
	timeout := s.opts.IdleTimeout
	tick := time.NewTicker(min(max(timeout/8, 5*time.Millisecond), time.Second))
	defer tick.Stop()
	var idle []*conn
	for range tick.C {
		idle = idle[:0]
		s.mu.Lock()
		if len(s.conns) == 0 || s.closing {
			s.janitor = false
			s.mu.Unlock()
			return
		}
		now := s.now()
		for c := range s.conns {
			if since, ok := c.idleSince(true); ok && now-since >= int64(timeout) {
				idle = append(idle, c)
			}
		}
		s.mu.Unlock()
		for _, c := range idle {
			if !c.isStopping() {
				c.logf("idle for %v; closing", timeout)
				c.stop()
			}
		}
	}
}

// now is the time on the monotonic clock, in nanoseconds since the server
// was made.
func (s *Server) now() int64 { return int64(time.Since(s.epoch)) }

// Shutdown stops accepting connections, stops reading new requests, waits
// for in-flight requests to be answered, flushes the backend and closes all
// connections. If ctx expires first, connections are closed forcibly, the
// backend is not flushed and ctx.Err() is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		select {
		case <-s.flushed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	backends := make([]Backend, 0, len(s.exports))
	for _, e := range s.exports {
		backends = append(backends, e.Backend)
	}
	s.mu.Unlock()
	if err := drainAndFlush(ctx, conns, backends, s.flushed); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("nbd: %w", err)
	}
	return nil
}
