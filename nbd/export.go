package nbd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Export is one named device served by a Server. A server made with
// NewServer has exactly one, built from its Options; one made with
// NewGateway has those added with AddExport.
type Export struct {
	// Name is what clients ask for (at most 4096 bytes).
	Name string
	// Description is sent in NBD_INFO_DESCRIPTION and NBD_OPT_LIST replies.
	Description string
	Backend     Backend
	// ReadOnly, AllowDiscards and MultiConn mean what the Options fields
	// of the same names mean, for this export only.
	ReadOnly      bool
	AllowDiscards bool
	MultiConn     bool
}

// Errors returned by AddExport and RemoveExport.
var (
	// ErrExportExists: AddExport was given a name already served.
	ErrExportExists = errors.New("nbd: export already exists")
	// ErrUnknownExport: RemoveExport was given a name not served.
	ErrUnknownExport = errors.New("nbd: no such export")
)

// export is an Export with what the server derives from it.
type export struct {
	Export
	discard Discarder     // nil unless discards are allowed and supported
	zero    ZeroWriter    // nil if the backend cannot zero natively
	inPlace InPlaceWriter // nil if the backend only has WriteAt
	async   AsyncWriter   // nil if the backend has no StartWriteAt
	depth   int           // requests in flight per connection
	tflags  uint16

	// Guarded by Server.mu.
	conns   map[*conn]struct{} // connections in the transmission phase on this export
	removed bool

	flushed chan struct{} // closed by RemoveExport once the backend was flushed

	failing    atomic.Bool // the last backend request failed: hidden from NBD_OPT_LIST
	errMu      sync.Mutex  // guards the backend-error log throttle
	lastErrLog time.Time
	suppressed int
}

// backendLogEvery spaces the backend errors logged per export: a device
// that went away fails every request, and a busy client must not turn
// that into a log flood.
const backendLogEvery = 10 * time.Second

// logBackendErr logs a failed request of c's export. The first failure
// after a success marks the export failing (left out of NBD_OPT_LIST) and
// is always logged; later ones at most once per backendLogEvery, with the
// number of failures left unlogged since.
func (c *conn) logBackendErr(r *request, err error) {
	e := c.e
	e.errMu.Lock()
	now := time.Now()
	first := e.failing.CompareAndSwap(false, true)
	if !first && now.Sub(e.lastErrLog) < backendLogEvery {
		e.suppressed++
		e.errMu.Unlock()
		return
	}
	n := e.suppressed
	e.lastErrLog, e.suppressed = now, 0
	e.errMu.Unlock()
	more := ""
	if n > 0 {
		more = fmt.Sprintf(" (%d more failed requests not logged)", n)
	}
	if first {
		more += "; not listed until a request succeeds"
	}
	c.logf("export %q: command %d at %d+%d: %v%s", e.Name, r.typ, r.off, r.span(), err, more)
}

// backendOK clears the failing mark after a request the backend served.
// The common case is one atomic load.
func (c *conn) backendOK() {
	if c.e.failing.Load() && c.e.failing.CompareAndSwap(true, false) {
		c.logf("export %q: backend answering again; listed", c.e.Name)
	}
}

func newExport(e Export) *export {
	x := &export{Export: e, conns: make(map[*conn]struct{}), flushed: make(chan struct{})}
	if d, ok := e.Backend.(Discarder); ok && e.AllowDiscards && !e.ReadOnly {
		x.discard = d
	}
	if z, ok := e.Backend.(ZeroWriter); ok {
		x.zero = z
	}
	if w, ok := e.Backend.(InPlaceWriter); ok {
		x.inPlace = w
	}
	if w, ok := e.Backend.(AsyncWriter); ok && !e.ReadOnly {
		x.async = w
	}
	x.depth = defaultQueueDepth
	if q, ok := e.Backend.(QueueDepther); ok && q.QueueDepth() > 0 {
		x.depth = min(q.QueueDepth(), maxInflight)
	}
	f := uint16(FlagHasFlags | FlagSendFlush)
	if e.ReadOnly {
		f |= FlagReadOnly
	} else {
		f |= FlagSendFUA | FlagSendWriteZeroes
		if x.discard != nil {
			f |= FlagSendTrim
		}
	}
	if e.MultiConn {
		f |= FlagCanMultiConn
	}
	x.tflags = f
	return x
}

// NewGateway returns a server with no exports, for serving several
// volumes; add them with AddExport. The per-export fields of opts
// (ExportName, Description, ReadOnly, AllowDiscards, MultiConn) are
// ignored. Unlike a NewServer server, the default name "" reaches only an
// export named "" (as with qemu-nbd and nbdkit serving several exports),
// so a client that names nothing never lands on a volume by chance.
func NewGateway(opts Options) *Server {
	s := newServer(opts)
	s.gateway = true
	return s
}

// AddExport starts serving e to new connections. It fails with
// ErrExportExists if the name is taken, ErrServerClosed after Shutdown.
func (s *Server) AddExport(e Export) error {
	if len(e.Name) > maxStringLen {
		return errors.New("nbd: export name longer than 4096 bytes")
	}
	if len(e.Description) > maxStringLen {
		return errors.New("nbd: export description longer than 4096 bytes")
	}
	if e.Backend == nil {
		return errors.New("nbd: export without a backend")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return ErrServerClosed
	}
	if _, ok := s.exports[e.Name]; ok {
		return fmt.Errorf("%w: %q", ErrExportExists, e.Name)
	}
	s.exports[e.Name] = newExport(e)
	return nil
}

// RemoveExport stops serving the named export: it is no longer listed or
// found, its connections stop reading requests, their in-flight requests
// are answered, its backend is flushed, and then they are closed, as
// Shutdown does for the whole server. Connections to other exports are
// not touched. The backend is not closed; that is the caller's, once
// RemoveExport returned. If ctx expires first, its connections are closed
// forcibly, the backend is not flushed and ctx.Err() is returned.
func (s *Server) RemoveExport(ctx context.Context, name string) error {
	s.mu.Lock()
	e, ok := s.exports[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownExport, name)
	}
	delete(s.exports, name)
	e.removed = true
	conns := make([]*conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := drainAndFlush(ctx, conns, []Backend{e.Backend}, e.flushed)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("nbd: export %q: %w", name, err)
	}
	return err
}

// Exports returns the names served, sorted.
func (s *Server) Exports() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.exports))
	for n := range s.exports {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// sortedExports returns the exports to list, in name order: all but
// those whose backend is failing, so a listing shows what works. A failing
// export can still be reached by name, and is listed again once one of
// its requests succeeds.
func (s *Server) sortedExports() []*export {
	s.mu.Lock()
	defer s.mu.Unlock()
	xs := make([]*export, 0, len(s.exports))
	for _, e := range s.exports {
		if !e.failing.Load() {
			xs = append(xs, e)
		}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
	return xs
}

// lookup finds the export a client named. A single-export server also
// answers to "" (as qemu-nbd does); a gateway does not.
func (s *Server) lookup(name string) *export {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookupLocked(name)
}

func (s *Server) lookupLocked(name string) *export {
	if e, ok := s.exports[name]; ok {
		return e
	}
	if name == "" && !s.gateway && len(s.exports) == 1 {
		for _, e := range s.exports {
			return e
		}
	}
	return nil
}

// attach binds c to the export it chose for the transmission phase, so
// that RemoveExport finds it. It fails if the export was removed since
// the lookup (or the server is closing).
func (s *Server) attach(c *conn, e *export) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.removed || s.closing {
		return false
	}
	e.conns[c] = struct{}{}
	c.e = e
	return true
}

// detach undoes attach; s.mu must be held.
func (c *conn) detachLocked() {
	if c.e != nil {
		delete(c.e.conns, c)
	}
}

// flushWait is the channel a stopped connection waits on before closing,
// so that no reply follows the final flush of its backend: its export's
// when the export is being removed, else the server's during Shutdown;
// nil if neither.
func (c *conn) flushWait() <-chan struct{} {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.e != nil && c.e.removed {
		return c.e.flushed
	}
	if s.closing {
		return s.flushed
	}
	return nil
}

// drainAndFlush stops conns, waits until none has a request in flight,
// flushes the backends, closes flushed (which lets the connections close),
// and waits until they are closed. If ctx expires first the connections
// are closed forcibly and nothing is flushed.
func drainAndFlush(ctx context.Context, conns []*conn, backends []Backend, flushed chan struct{}) error {
	for _, c := range conns {
		c.stop()
	}
	for _, c := range conns {
		select {
		case <-c.drained:
		case <-ctx.Done():
			for _, c := range conns {
				c.raw.Close()
			}
			close(flushed)
			return ctx.Err()
		}
	}
	var ferr error
	for _, b := range backends {
		if err := b.Flush(); err != nil && ferr == nil {
			ferr = err
		}
	}
	close(flushed)
	for _, c := range conns {
		select {
		case <-c.done:
		case <-ctx.Done():
			for _, c := range conns {
				c.raw.Close()
			}
			return ctx.Err()
		}
	}
	if ferr != nil {
		return fmt.Errorf("flush: %w", ferr)
	}
	return nil
}
