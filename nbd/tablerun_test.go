package nbd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExportTableRun: while Run serves, each value on the reload channel
// re-reads the list and applies it (nbdcopy reads the export it added); a
// list that cannot be read keeps the exports served; when ctx ends Run
// returns nil with every device closed once.
func TestExportTableRun(t *testing.T) {
	requireTool(t, "nbdcopy", "libnbd-bin")
	sock := shortSocketPath(t)
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	opened := map[string]*closeCount{}
	open := func(ctx context.Context, e ExportSpec) (Export, io.Closer, error) {
		m := newMem(1<<20, 512)
		copy(m.data, e.String())
		c := &closeCount{}
		opened[e.String()] = c
		return Export{Backend: m}, c, nil
	}
	logs := make(chan string, 100)
	tab := NewExportTable(NewGateway(Options{}), open, func(f string, a ...any) { logs <- fmt.Sprintf(f, a...) })
	waitLog := func(part string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case s := <-logs:
				if strings.Contains(s, part) {
					return
				}
				if strings.Contains(s, "reload") {
					t.Fatalf("log %q, want %q", s, part)
				}
			case <-deadline:
				t.Fatalf("no log line with %q", part)
			}
		}
	}
	list := filepath.Join(t.TempDir(), "exports")
	write := func(s string) {
		if err := os.WriteFile(list, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		out := filepath.Join(t.TempDir(), "out")
		mustRun(t, time.Minute, "nbdcopy", "nbd+unix:///"+name+"?socket="+sock, out)
		b, _ := os.ReadFile(out)
		return strings.TrimRight(string(b), "\x00")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := tab.Apply(ctx, []ExportSpec{{Name: "a", Device: "d1", Options: map[string]string{"key-file": "k"}}}); err != nil {
		t.Fatal(err)
	}
	reload := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- tab.Run(ctx, l, 10*time.Second, reload, func() ([]ExportSpec, error) { return ReadExportsFile(list, testSyntax) })
	}()

	write("a=d1,key-file=k\nb=d2,key-file=k\n")
	reload <- os.Interrupt
	waitLog("reloaded: 2 exports served")
	if got := read("b"); got != "b=d2,key-file=k" {
		t.Errorf("b reads %q after the reload", got)
	}
	write("a=d1,key-file=k\nb=d2,key-file=k,size=x\n")
	reload <- os.Interrupt
	waitLog("keeping the current exports")
	if got := read("b"); got != "b=d2,key-file=k" {
		t.Errorf("b reads %q after a reload of a bad list", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after ctx ended")
	}
	for s, c := range opened {
		if c.n != 1 {
			t.Errorf("%s closed %d times", s, c.n)
		}
	}
	if len(opened) != 2 || len(tab.Names()) != 0 {
		t.Errorf("opened %d devices; %d still in the table", len(opened), len(tab.Names()))
	}
}
