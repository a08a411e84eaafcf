package cli

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// nbdExportName connects to the Unix socket and negotiates with
// NBD_OPT_EXPORT_NAME, the shortest way into the transmission phase.
func nbdExportName(t *testing.T, sock string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	var greet [18]byte
	if _, err := io.ReadFull(br, greet[:]); err != nil {
		t.Fatalf("reading the NBD greeting: %v", err)
	}
	if binary.BigEndian.Uint64(greet[:]) != 0x4e42444d41474943 {
		t.Fatalf("not an NBD greeting: %x", greet)
	}
	be := binary.BigEndian
	msg := be.AppendUint32(nil, 1|2) // fixed newstyle, no zeroes
	msg = be.AppendUint64(msg, 0x49484156454f5054)
	msg = be.AppendUint32(msg, 1) // NBD_OPT_EXPORT_NAME
	msg = be.AppendUint32(msg, 0) // the default export
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var reply [10]byte
	if _, err := io.ReadFull(br, reply[:]); err != nil {
		t.Fatalf("reading the export reply: %v", err)
	}
	c.SetDeadline(time.Time{})
	return c, br
}

// closedWithin asserts the server closes c within d, without sending
// anything, and returns how long it took.
func closedWithin(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	_, err := br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server did not close the connection within %v", d)
	}
	if err == nil {
		t.Fatalf("the server sent data to an idle client")
	}
	return time.Since(start)
}

// TestServeConnectionPolicy: --idle-timeout closes an idle negotiated
// connection, and --max-connections is the cap at which a new client
// takes an idle one's place (the default, 64, would not).
func TestServeConnectionPolicy(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(1<<20))
	vkf := writeFile(t, dir, "vk", randBytes(64))
	vol := []string{img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512"}

	sock, stop := serveInBackground(t, append(vol, "--idle-timeout", "300ms")...)
	c, br := nbdExportName(t, sock)
	if took := closedWithin(t, c, br, 10*time.Second); took < 150*time.Millisecond {
		t.Errorf("an idle connection was closed after %v, before --idle-timeout 300ms", took)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}

	sock, stop = serveInBackground(t, append(vol, "--max-connections", "1")...)
	a, abr := nbdExportName(t, sock)
	time.Sleep(20 * time.Millisecond) // a settles, idle
	nbdExportName(t, sock)            // takes a's place
	closedWithin(t, a, abr, 10*time.Second)
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}
}

// TestServeConnectionFlagsRefused: bad values are usage errors (exit 1)
// named in one line, before the volume is opened or anything listens.
func TestServeConnectionFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(1<<20))
	vkf := writeFile(t, dir, "vk", randBytes(64))
	sock := dir + "/s"
	for _, bad := range [][]string{
		{"--max-connections", "0"},
		{"--max-connections", "-3"},
		{"--max-connections", "100000"},
		{"--max-connections", "many"},
		{"--idle-timeout", "-5s"},
		{"--idle-timeout", "soon"},
		{"--idle-timeout", "-1"},
	} {
		args := append([]string{"serve", img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512", "--listen", "unix:" + sock}, bad...)
		code, _, stderr := run(t, nil, args...)
		if code != 1 || !strings.Contains(stderr, bad[0]) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("serve %s %s: exit %d, stderr %q; want exit 1 and one line naming the option", bad[0], bad[1], code, stderr)
		}
		if _, err := os.Stat(sock); err == nil {
			t.Fatalf("serve %s %s listened before refusing", bad[0], bad[1])
		}
	}
}
