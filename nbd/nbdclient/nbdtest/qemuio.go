package nbdtest

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// LockedBuffer is a bytes.Buffer safe for concurrent writers (a server's
// goroutines logging while the test reads).
type LockedBuffer = lockedBuffer

// QemuIO is an interactive qemu-io on one NBD URI: one client (qemu's own
// NBD driver) that stays connected across commands.
type QemuIO struct {
	t   testing.TB
	in  io.WriteCloser
	out *bufio.Reader
}

// StartQemuIO runs `qemu-io -f raw URI` and waits for its first prompt;
// the test's cleanup ends it.
func StartQemuIO(t testing.TB, uri string) *QemuIO {
	t.Helper()
	bin := NeedTool(t, "qemu-io", "qemu-utils")
	cmd := exec.Command(bin, "-f", "raw", uri)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	q := &QemuIO{t: t, in: in, out: bufio.NewReader(out)}
	q.Next()
	return q
}

// Next returns what qemu-io printed up to its next prompt (or its end).
func (q *QemuIO) Next() string {
	const prompt = "qemu-io> "
	got := make(chan string, 1)
	go func() {
		var sb strings.Builder
		for !strings.HasSuffix(sb.String(), prompt) {
			b, err := q.out.ReadByte()
			if err != nil {
				break
			}
			sb.WriteByte(b)
		}
		got <- strings.TrimSuffix(sb.String(), prompt)
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(2 * time.Minute):
		q.t.Fatal("qemu-io did not answer within 2 minutes")
		return ""
	}
}

// Do runs one command; its output must hold want and no failure.
func (q *QemuIO) Do(cmd, want string) {
	q.t.Helper()
	if _, err := fmt.Fprintln(q.in, cmd); err != nil {
		q.t.Fatalf("qemu-io %q: %v", cmd, err)
	}
	out := q.Next()
	if !strings.Contains(out, want) || strings.Contains(out, "failed") || strings.Contains(out, "error") {
		q.t.Fatalf("qemu-io %q: %q, want %q", cmd, out, want)
	}
}
