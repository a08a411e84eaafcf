package nbd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRun: a write by nbdcopy is flushed to the backend before Run
// returns after ctx ends, and Run returns nil for that stop.
func TestRun(t *testing.T) {
	requireTool(t, "nbdcopy", "libnbd-bin")
	sock := shortSocketPath(t)
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	m := newMem(1<<20, 512)
	srv := NewServer(m, Options{MultiConn: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, l, 30*time.Second) }()
	in := filepath.Join(t.TempDir(), "in")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	os.WriteFile(in, data, 0o600)
	mustRun(t, time.Minute, "nbdcopy", in, "nbd+unix:///?socket="+sock)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if string(m.snapshot()) != string(data) || m.flushes.Load() == 0 {
		t.Errorf("the backend after Run: differs or never flushed (%d flushes)", m.flushes.Load())
	}
	if _, err := os.Stat(sock); err == nil {
		t.Errorf("the socket is still there after Run")
	}
}
