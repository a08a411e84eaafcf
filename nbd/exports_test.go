package nbd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

var testSyntax = ExportSyntax{
	Options: map[string]OptionKind{"key-file": OptionString, "size": OptionInt, "read-only": OptionFlag},
	Check: func(e ExportSpec) error {
		if e.Options["key-file"] == "" {
			return fmt.Errorf("export %s: needs key-file", e.Name)
		}
		return nil
	},
}

func TestParseExports(t *testing.T) {
	specs, err := ParseExports(strings.NewReader("# gateway\n\n  a=/dev/sdb,read-only,key-file=/k  \nb=img,key-file=k,size=0x1000\n"), "list", testSyntax)
	if err != nil || len(specs) != 2 {
		t.Fatalf("%v %v", specs, err)
	}
	if s := specs[0].String(); s != "a=/dev/sdb,key-file=/k,read-only=true" {
		t.Errorf("canonical form %q", s)
	}
	for _, c := range []struct{ in, says string }{
		{"x", "is not NAME=DEVICE"},
		{"=d,key-file=k", "export name"},
		{"x y=d,key-file=k", "export name"},
		{"x=,key-file=k", "no DEVICE"},
		{"x=d,colour=red,key-file=k", `unknown option "colour"`},
		{"x=d,key-file=k,read-only=yes", "takes no value"},
		{"x=d,key-file=", "needs a value"},
		{"x=d,key-file=k,size=big", "not a whole number"},
		{"x=d,key-file=k,key-file=j", "given twice"},
		{"x=d", "needs key-file"},
		{"x=d,key-file=k\nx=e,key-file=k", "defined twice"},
		{"ok=d,key-file=k\n\nbad", "list:3:"},
	} {
		if _, err := ParseExports(strings.NewReader(c.in), "list", testSyntax); err == nil || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", c.in, err, c.says)
		}
	}
	if _, err := ParseExports(strings.NewReader(strings.Repeat("#", maxExportsSize+1)), "big", testSyntax); err == nil {
		t.Errorf("a list over 1 MiB was read")
	}
}

// FuzzParseExports: any list is parsed into specs that print back (in
// canonical form) to lines that parse to the same specs, or refused in
// one line; never a panic.
func FuzzParseExports(f *testing.F) {
	f.Add("a=/dev/sdb,read-only,key-file=/k\n# c\nb=x,key-file=k,size=7\n")
	f.Add("x=d,key-file=k,key-file=j")
	f.Add(`q=d,key-file="a,read-only=true",read-only`)
	f.Add(`q=d,key-file="unclosed`)
	f.Fuzz(func(t *testing.T, in string) {
		specs, err := ParseExports(strings.NewReader(in), "f", testSyntax)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("a multi-line error: %q", err)
			}
			return
		}
		var b strings.Builder
		for _, s := range specs {
			// The line as written: flags bare, values with commas quoted.
			b.WriteString(s.Name + "=" + s.Device)
			keys := make([]string, 0, len(s.Options))
			for k := range s.Options {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				switch v := s.Options[k]; {
				case testSyntax.Options[k] == OptionFlag:
					b.WriteString("," + k)
				case strings.Contains(v, ","):
					b.WriteString("," + k + `="` + v + `"`)
				default:
					b.WriteString("," + k + "=" + v)
				}
			}
			b.WriteString("\n")
		}
		again, err := ParseExports(strings.NewReader(b.String()), "f", testSyntax)
		if err != nil || len(again) != len(specs) {
			t.Fatalf("%q printed as %q parses to %v, %v", in, b.String(), again, err)
		}
		for i := range specs {
			if again[i].String() != specs[i].String() {
				t.Fatalf("%q became %q", specs[i], again[i])
			}
		}
	})
}

// TestExportTable: Apply serves, reopens and removes as the list changes,
// judged by nbdinfo and nbdcopy; an export that cannot be opened is
// reported and the others served; Close closes every device.
func TestExportTable(t *testing.T) {
	requireTool(t, "nbdcopy", "libnbd-bin")
	sock := shortSocketPath(t)
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewGateway(Options{})
	opened := map[string]*closeCount{}
	open := func(ctx context.Context, e ExportSpec) (Export, io.Closer, error) {
		if e.Device == "missing" {
			return Export{}, nil, errors.New("no such device")
		}
		m := newMem(1<<20, 512)
		copy(m.data, e.String())
		c := &closeCount{}
		opened[e.String()] = c
		return Export{Backend: m, Description: e.Device}, c, nil
	}
	var log strings.Builder
	tab := NewExportTable(srv, open, func(f string, a ...any) { fmt.Fprintf(&log, f+"\n", a...) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	parse := func(s string) []ExportSpec {
		specs, err := ParseExports(strings.NewReader(s), "list", testSyntax)
		if err != nil {
			t.Fatal(err)
		}
		return specs
	}
	read := func(name string) string {
		out := filepath.Join(t.TempDir(), "out")
		mustRun(t, time.Minute, "nbdcopy", "nbd+unix:///"+name+"?socket="+sock, out)
		b, _ := os.ReadFile(out)
		return strings.TrimRight(string(b), "\x00")
	}
	if err := tab.Apply(ctx, parse("a=d1,key-file=k\nb=d2,key-file=k\nc=missing,key-file=k\n")); err == nil {
		t.Errorf("Apply with a missing device: no error")
	}
	if got := strings.Join(tab.Names(), ","); got != "a,b" || read("a") != "a=d1,key-file=k" || !strings.Contains(log.String(), "export c: not served: no such device") {
		t.Fatalf("served %s; a reads %q; log %s", got, read("a"), log.String())
	}
	// b changes, a stays (not reopened), c still fails, d comes.
	aCloser := opened["a=d1,key-file=k"]
	tab.Apply(ctx, parse("a=d1,key-file=k\nb=d2,key-file=k,read-only\nd=d4,key-file=k\n"))
	if got := strings.Join(tab.Names(), ","); got != "a,b,d" || read("b") != "b=d2,key-file=k,read-only=true" || aCloser.n != 0 || opened["b=d2,key-file=k"].n != 1 {
		t.Errorf("after reload: served %s, b reads %q, a closed %d times", got, read("b"), aCloser.n)
	}
	tab.Apply(ctx, parse("d=d4,key-file=k\n"))
	if got := strings.Join(tab.Names(), ","); got != "d" || aCloser.n != 1 || !strings.Contains(log.String(), "export a: removed") {
		t.Errorf("after removing a and b: served %s, a closed %d times", got, aCloser.n)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve: %v", err)
	}
	if err := tab.Close(); err != nil || opened["d=d4,key-file=k"].n != 1 || len(tab.Names()) != 0 {
		t.Errorf("Close: %v", err)
	}
}

type closeCount struct{ n int }

func (c *closeCount) Close() error { c.n++; return nil }

// TestListenUnixStale: a socket nobody accepts on is replaced; a file, a
// live socket and a symlink are left alone and reported busy.
func TestListenUnixStale(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "s")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l2, err := ListenUnix(stale)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	defer l2.Close()
	if _, err := ListenUnix(stale); !errors.Is(err, ErrSocketBusy) || !strings.Contains(err.Error(), "another server") {
		t.Errorf("a live socket: %v", err)
	}
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("precious"), 0o600)
	link := filepath.Join(dir, "l")
	os.Symlink(stale, link)
	for p, says := range map[string]string{file: "a regular file", link: "a symlink", dir: "a directory"} {
		if _, err := ListenUnix(p); !errors.Is(err, ErrSocketBusy) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want busy and %q", p, err, says)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "precious" {
		t.Errorf("the file was changed")
	}
	if _, loop, err := Listen("unix:" + filepath.Join(dir, "t")); err != nil || !loop {
		t.Errorf("Listen unix: loopback %v, %v", loop, err)
	}
	ll, loop, err := Listen("127.0.0.1:0")
	if err != nil || !loop {
		t.Errorf("Listen 127.0.0.1: loopback %v, %v", loop, err)
	} else {
		ll.Close()
	}
}
