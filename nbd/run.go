package nbd

import (
	"context"
	"errors"
	"net"
	"time"
)

// Run serves l until ctx ends or the server fails, then shuts the server
// down: in-flight requests are answered and every backend flushed, within
// grace (connections still open after it are closed, unflushed). It
// returns once Serve has returned, so the backends may be closed then;
// nil for a stop by ctx, else the failure (Serve's, then Shutdown's).
func (s *Server) Run(ctx context.Context, l net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, l) }()
	var err error
	serving := true
	select {
	case err = <-errc:
		serving = false
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	serr := s.Shutdown(sctx)
	l.Close()
	if serving {
		err = <-errc
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return err
	}
	if serr != nil && !errors.Is(serr, context.Canceled) {
		return serr
	}
	return nil
}
