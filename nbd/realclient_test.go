package nbd

// Interoperability tests with real NBD clients: nbdinfo and nbdcopy (Debian
// package libnbd-bin), qemu-img (qemu-utils) and openssl (openssl). These
// tools are installed by the project's `make test`; a missing tool fails the
// test with the package to install, it never skips.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func requireTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: install the Debian package %s (apt-get install -y %s; `make test` installs it)", name, pkg, pkg)
	}
	return p
}

// run runs a command with a timeout and returns its stdout.
func run(t testing.TB, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\nstderr: %s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String(), err
}

func mustRun(t testing.TB, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := run(t, timeout, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (ts *testServer) uri() string {
	if ts.net == "unix" {
		return "nbd+unix:///?socket=" + ts.addr
	}
	return "nbd://" + ts.addr
}

func nbdinfoJSON(t testing.TB, uri string) map[string]any {
	t.Helper()
	out := mustRun(t, time.Minute, requireTool(t, "nbdinfo", "libnbd-bin"), "--json", uri)
	var v struct {
		Protocol string           `json:"protocol"`
		TLS      bool             `json:"TLS"`
		Exports  []map[string]any `json:"exports"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("nbdinfo output: %v\n%s", err, out)
	}
	if v.Protocol != "newstyle-fixed" || len(v.Exports) != 1 {
		t.Fatalf("nbdinfo: %s", out)
	}
	e := v.Exports[0]
	e["TLS"] = v.TLS
	return e
}

func checkFields(t testing.TB, got map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("nbdinfo: no %q in %v", k, got)
			continue
		}
		if f, ok := g.(float64); ok {
			g = int64(f)
		}
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("nbdinfo %s = %v, want %v", k, g, w)
		}
	}
}

func TestNbdinfo(t *testing.T) {
	ts := startServer(t, &discardMem{memBackend: newMem(64<<20, 4096)}, Options{
		ExportName: "vol", Description: "a test volume", AllowDiscards: true, MultiConn: true, MaxRequest: 8 << 20,
	})
	for _, uri := range []string{ts.uri(), ts.uri() + "/vol"} {
		e := nbdinfoJSON(t, uri)
		checkFields(t, e, map[string]any{
			"export-size": int64(64 << 20), "is_read_only": false, "can_flush": true, "can_fua": true,
			"can_multi_conn": true, "can_trim": true, "can_zero": true, "can_cache": false, "can_df": false,
			"block_size_minimum": 4096, "block_size_preferred": 4096, "block_size_maximum": 8 << 20,
			"description": "a test volume", "export-name": "vol", "TLS": false,
		})
	}
	ro := startServer(t, newMem(1<<20, 512), Options{ReadOnly: true})
	checkFields(t, nbdinfoJSON(t, ro.uri()), map[string]any{
		"export-size": int64(1 << 20), "is_read_only": true, "can_flush": true, "can_fua": false,
		"can_multi_conn": false, "can_trim": false, "can_zero": false,
		"block_size_minimum": 512, "block_size_preferred": 4096, "block_size_maximum": 32 << 20,
	})
	// An unknown export name is refused.
	if out, err := run(t, time.Minute, "nbdinfo", ts.uri()+"/other"); err == nil {
		t.Errorf("nbdinfo accepted an unknown export: %s", out)
	}
	// nbdinfo --list sees the single export.
	if out := mustRun(t, time.Minute, "nbdinfo", "--list", ts.uri()); !strings.Contains(out, "vol") {
		t.Errorf("nbdinfo --list: %s", out)
	}
}

func writeRandomFile(t testing.TB, path string, n int) []byte {
	t.Helper()
	p := randBytes(uint64(n), n)
	if err := os.WriteFile(path, p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sameFile(t testing.TB, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the source (%d vs %d bytes)", path, len(got), len(want))
	}
}

// TestNbdcopy copies 64 MiB of random data into the export and back, over
// TCP with multi-conn and over a Unix socket.
func TestNbdcopy(t *testing.T) {
	nbdcopy := requireTool(t, "nbdcopy", "libnbd-bin")
	const size = 64 << 20
	for _, tc := range []struct {
		name    string
		network string
		bs      int
		file    bool
		opts    Options
	}{
		{"tcp-file-4096-multiconn", "tcp", 4096, true, Options{MultiConn: true}},
		{"tcp-mem-512", "tcp", 512, false, Options{}},
		{"unix-mem-4096", "unix", 4096, false, Options{MultiConn: true, AllowDiscards: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src.img")
			data := writeRandomFile(t, src, size)
			var b Backend
			var content func() []byte
			if tc.file {
				fb, err := newFileBackend(filepath.Join(dir, "backend.img"), size, tc.bs)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { fb.Close() })
				b = fb
				content = func() []byte { p, _ := os.ReadFile(filepath.Join(dir, "backend.img")); return p }
			} else {
				m := newMem(size, tc.bs)
				b, content = &discardMem{memBackend: m}, m.snapshot
			}
			ts := startServer(t, b, tc.opts, tc.network)
			mustRun(t, 2*time.Minute, nbdcopy, "--flush", src, ts.uri())
			if !bytes.Equal(content(), data) {
				t.Fatalf("backend differs after nbdcopy in")
			}
			out := filepath.Join(dir, "out.img")
			if err := os.WriteFile(out, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			mustRun(t, 2*time.Minute, nbdcopy, ts.uri(), out)
			sameFile(t, out, data)
			// Zeroes are copied too (nbdcopy uses WRITE_ZEROES for them).
			zero := filepath.Join(dir, "zero.img")
			if err := os.Truncate(zero, size); err != nil {
				if err := os.WriteFile(zero, make([]byte, size), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			mustRun(t, 2*time.Minute, nbdcopy, zero, ts.uri())
			if !bytes.Equal(content(), make([]byte, size)) {
				t.Fatalf("backend not zeroed")
			}
		})
	}
}

func TestQemuImg(t *testing.T) {
	qemuImg := requireTool(t, "qemu-img", "qemu-utils")
	const size = 32 << 20
	dir := t.TempDir()
	src := filepath.Join(dir, "src.img")
	data := writeRandomFile(t, src, size)
	for _, bs := range []int{512, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			m := newMem(size, bs)
			ts := startServer(t, m, Options{})
			// Into the export (-n: the target exists), then back out.
			mustRun(t, 2*time.Minute, qemuImg, "convert", "-n", "-f", "raw", "-O", "raw", src, ts.uri())
			if !bytes.Equal(m.snapshot(), data) {
				t.Fatalf("backend differs after qemu-img convert in")
			}
			out := filepath.Join(dir, fmt.Sprintf("out%d.img", bs))
			mustRun(t, 2*time.Minute, qemuImg, "convert", "-f", "raw", "-O", "raw", ts.uri(), out)
			mustRun(t, time.Minute, qemuImg, "compare", "-f", "raw", "-F", "raw", out, src)
			mustRun(t, time.Minute, qemuImg, "compare", "-f", "raw", "-F", "raw", ts.uri(), src)
			info := mustRun(t, time.Minute, qemuImg, "info", "--output=json", ts.uri())
			if !strings.Contains(info, fmt.Sprintf(`"virtual-size": %d`, size)) {
				t.Errorf("qemu-img info: %s", info)
			}
		})
	}
}

func TestReadOnlyRealClients(t *testing.T) {
	nbdcopy := requireTool(t, "nbdcopy", "libnbd-bin")
	qemuImg := requireTool(t, "qemu-img", "qemu-utils")
	const size = 4 << 20
	m := newMem(size, 512)
	copy(m.data, randBytes(9, size))
	orig := m.snapshot()
	ts := startServer(t, m, Options{ReadOnly: true})
	dir := t.TempDir()
	src := filepath.Join(dir, "src.img")
	writeRandomFile(t, src, size)
	if _, err := run(t, time.Minute, nbdcopy, src, ts.uri()); err == nil {
		t.Errorf("nbdcopy into a read-only export succeeded")
	}
	if _, err := run(t, time.Minute, qemuImg, "convert", "-n", "-f", "raw", "-O", "raw", src, ts.uri()); err == nil {
		t.Errorf("qemu-img convert into a read-only export succeeded")
	}
	if !bytes.Equal(m.snapshot(), orig) || m.writes.Load() != 0 {
		t.Fatalf("read-only backend was modified")
	}
	out := filepath.Join(dir, "out.img")
	os.WriteFile(out, nil, 0o600)
	mustRun(t, time.Minute, nbdcopy, ts.uri(), out)
	sameFile(t, out, orig)
}

func TestUnixSocketNbdinfo(t *testing.T) {
	ts := startServer(t, newMem(8<<20, 512), Options{}, "unix")
	checkFields(t, nbdinfoJSON(t, ts.uri()), map[string]any{"export-size": int64(8 << 20), "is_read_only": false})
}
