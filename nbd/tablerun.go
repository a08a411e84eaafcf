package nbd

import (
	"context"
	"net"
	"os"
	"time"
)

// Run serves the table's exports on l as Server.Run does (grace bounds
// the drain at the end), and while it serves re-reads the exports list
// with read and applies it each time reload receives (a channel given to
// signal.Notify for SIGHUP, as the blkcrypt command's gateway does; nil
// for never). A list that cannot be read is logged and the current
// exports kept; exports that fail to open are logged by Apply. The table
// is closed after the server stopped: Run returns Server.Run's error,
// else Close's.
func (t *ExportTable) Run(ctx context.Context, l net.Listener, grace time.Duration, reload <-chan os.Signal, read func() ([]ExportSpec, error)) error {
	// The table is reloaded by this goroutine while serving, and closed
	// only after Server.Run and the goroutine ended.
	reloaded := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(reloaded)
		for {
			select {
			case <-sctx.Done():
				return
			case <-reload:
				if specs, err := read(); err != nil {
					t.logf("reload: %v; keeping the current exports", err)
				} else {
					t.Apply(sctx, specs)
					t.logf("reloaded: %d exports served", len(t.Names()))
				}
			}
		}
	}()
	err := t.srv.Run(ctx, l, grace)
	stop()
	<-reloaded
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	return err
}
