package token

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultDevice is the TPM resource manager device systemd auto-detects.
const DefaultDevice = "/dev/tpmrm0"

// maxResponse bounds a TPM response: TPM 2.0 buffers are at most a few KiB
// (TPM_PT_MAX_RESPONSE_SIZE, 4096 on every TPM seen); a server answering
// with more is broken or hostile.
const maxResponse = 64 << 10

// tpmConn is one open TPM: a transport.TPM whose every exchange is bounded
// by the context it was opened with (set per call by bind).
type tpmConn struct {
	mu   sync.Mutex
	ctx  context.Context
	rw   io.ReadWriteCloser
	conn net.Conn // set for sockets, which take deadlines
	dev  bool     // a character device: one read returns one response
	name string
}

// openTPM opens the TPM named by tcti in systemd's spelling:
// "" or "auto" (/dev/tpmrm0 if present), "device:PATH" or a bare path,
// "swtpm:host=H,port=P" or "swtpm:path=SOCKET" (swtpm's socket protocol:
// raw TPM commands on the server channel). mssim's framing and other
// drivers are refused by name.
func openTPM(ctx context.Context, tcti string) (*tpmConn, error) {
	driver, conf, _ := strings.Cut(tcti, ":")
	switch {
	case tcti == "" || tcti == "auto":
		if _, err := os.Stat(DefaultDevice); err != nil {
			return nil, fmt.Errorf("%w: %s not found (give a TPM2 device)", ErrNoTPM, DefaultDevice)
		}
		return openDevice(DefaultDevice)
	case strings.HasPrefix(tcti, "/"):
		return openDevice(tcti)
	case driver == "device":
		if conf == "" {
			conf = DefaultDevice
		}
		return openDevice(conf)
	case driver == "swtpm":
		host, port, path := "localhost", "2321", ""
		if conf != "" {
			for _, kv := range strings.Split(conf, ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("%w: swtpm configuration %q: want key=value", ErrNoTPM, kv)
				}
				switch k {
				case "host":
					host = v
				case "port":
					if n, err := strconv.Atoi(v); err != nil || n <= 0 || n > 65535 {
						return nil, fmt.Errorf("%w: swtpm port %q", ErrNoTPM, v)
					}
					port = v
				case "path":
					path = v
				default:
					return nil, fmt.Errorf("%w: unknown swtpm configuration key %q", ErrNoTPM, k)
				}
			}
		}
		var d net.Dialer
		network, addr := "tcp", net.JoinHostPort(host, port)
		if path != "" {
			network, addr = "unix", path
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoTPM, err)
		}
		return &tpmConn{rw: c, conn: c, name: tcti}, nil
	default:
		return nil, fmt.Errorf("%w: TPM2 device %q: driver %q is not built in (device:PATH, swtpm:host=H,port=P and swtpm:path=SOCKET are)", ErrNoTPM, tcti, driver)
	}
}

func openDevice(path string) (*tpmConn, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoTPM, err)
	}
	return &tpmConn{rw: f, dev: true, name: path}, nil
}

// bind makes the exchanges that follow honour ctx.
func (t *tpmConn) bind(ctx context.Context) { t.ctx = ctx }

// Send is transport.TPM's one method: one command, one response. A socket
// takes the context's deadline and is closed when the context ends; a
// device read that outlives the context is abandoned (the file is closed,
// which the kernel's TPM driver answers by ending the read).
func (t *tpmConn) Send(cmd []byte) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx := t.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t.conn != nil {
		dl, ok := ctx.Deadline()
		if !ok {
			dl = time.Time{}
		}
		_ = t.conn.SetDeadline(dl)
	}
	// A TPM answers TPM_RC_RETRY, TPM_RC_YIELDED or TPM_RC_TESTING when
	// it could not run the command now (swtpm does while it generates an
	// RSA key): the command is sent again, as the TSS does, until the
	// context ends.
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		rsp, err := t.send(ctx, cmd)
		if err != nil || len(rsp) < 10 {
			return rsp, err
		}
		switch binary.BigEndian.Uint32(rsp[6:10]) {
		case rcRetry, rcYielded, rcTesting:
		default:
			return rsp, nil
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// The warnings after which a command is sent again (TPM 2.0 part 2, 6.6.3).
const (
	rcYielded = 0x908
	rcTesting = 0x90A
	rcRetry   = 0x922
)

func (t *tpmConn) send(ctx context.Context, cmd []byte) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := t.exchange(cmd)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The socket's deadline is the context's, and may fire a moment
		// before the context's own timer: the same end.
		if errors.Is(r.err, os.ErrDeadlineExceeded) {
			return nil, context.DeadlineExceeded
		}
		return r.b, r.err
	case <-ctx.Done():
		_ = t.rw.Close()
		return nil, ctx.Err()
	}
}

func (t *tpmConn) exchange(cmd []byte) ([]byte, error) {
	if _, err := t.rw.Write(cmd); err != nil {
		return nil, fmt.Errorf("sending a TPM command: %w", err)
	}
	if t.dev {
		buf := make([]byte, maxResponse)
		n, err := t.rw.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("reading a TPM response: %w", err)
		}
		return buf[:n], nil
	}
	var hdr [10]byte
	if _, err := io.ReadFull(t.rw, hdr[:]); err != nil {
		return nil, fmt.Errorf("reading a TPM response: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[2:6])
	if size < 10 || size > maxResponse {
		return nil, fmt.Errorf("%w: TPM response of %d bytes", errBadResponse, size)
	}
	out := make([]byte, size)
	copy(out, hdr[:])
	if _, err := io.ReadFull(t.rw, out[10:]); err != nil {
		return nil, fmt.Errorf("reading a TPM response: %w", err)
	}
	return out, nil
}

var errBadResponse = errors.New("malformed TPM response")

func (t *tpmConn) Close() error { return t.rw.Close() }
