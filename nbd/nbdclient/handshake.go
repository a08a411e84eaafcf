package nbdclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd/internal/wire"
)

// oldstyleMagic is the second word an oldstyle server sends; it is not
// spoken here, but named so the error says what the server is.
const oldstyleMagic = 0x00420281861253

// maxOptionReply bounds what one option reply may make us buffer.
const maxOptionReply = 1 << 20

// maxGoReplies bounds the NBD_REP_INFO replies taken before the answer to
// NBD_OPT_GO.
const maxGoReplies = 64

// export is what the handshake learnt about the export.
type export struct {
	size                  int64
	flags                 uint16
	min, pref, max        uint32
	structured, blockInfo bool
}

// handshake runs fixed newstyle negotiation on c and returns the connection
// to use for transmission (a TLS one for nbds) and the export parameters.
func handshake(ctx context.Context, c net.Conn, t *Target, tcfg *tls.Config) (net.Conn, *export, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	var hello [18]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return nil, nil, fmt.Errorf("%w: reading the server greeting: %w", ErrProtocol, err)
	}
	if binary.BigEndian.Uint64(hello[0:]) != wire.NbdMagic {
		return nil, nil, fmt.Errorf("%w: not an NBD server (bad greeting magic)", ErrProtocol)
	}
	switch binary.BigEndian.Uint64(hello[8:]) {
	case wire.OptMagic:
	case oldstyleMagic:
		return nil, nil, fmt.Errorf("%w: the server speaks oldstyle negotiation, which is not supported", ErrProtocol)
	default:
		return nil, nil, fmt.Errorf("%w: bad negotiation magic", ErrProtocol)
	}
	sflags := binary.BigEndian.Uint16(hello[16:])
	if sflags&wire.FlagFixedNewstyle == 0 {
		return nil, nil, fmt.Errorf("%w: the server does not speak fixed newstyle negotiation", ErrProtocol)
	}
	cflags := uint32(wire.FlagCFixedNewstyle)
	noZeroes := sflags&wire.FlagNoZeroes != 0
	if noZeroes {
		cflags |= wire.FlagCNoZeroes
	}
	if err := binary.Write(c, binary.BigEndian, cflags); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrConnectionLost, err)
	}
	h := &negotiator{c: c}
	if t.TLS {
		typ, data, err := h.option(wire.OptStartTLS, nil)
		if err != nil {
			return nil, nil, err
		}
		if typ != wire.RepAck {
			return nil, nil, fmt.Errorf("%w: the server refused STARTTLS (%s): it may not offer TLS; try nbd://", ErrTLS, repErrText(typ, data))
		}
		tc := tls.Client(c, tcfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrTLS, err)
		}
		c, h.c = tc, tc
	}
	e := &export{}
	typ, data, err := h.option(wire.OptStructuredReply, nil)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case typ == wire.RepAck:
		e.structured = true
	case typ == wire.RepErrTLSReqd:
		return nil, nil, fmt.Errorf("%w: the server requires TLS: use nbds:// (or nbds+unix://)", ErrTLS)
	case typ&wire.RepErr == 0:
		return nil, nil, fmt.Errorf("%w: unexpected reply %d to STRUCTURED_REPLY", ErrProtocol, typ)
	}
	_ = data

	// NBD_OPT_GO: the export name, then one information request.
	name := []byte(t.Export)
	goData := make([]byte, 4+len(name)+2+2)
	binary.BigEndian.PutUint32(goData, uint32(len(name)))
	copy(goData[4:], name)
	binary.BigEndian.PutUint16(goData[4+len(name):], 1)
	binary.BigEndian.PutUint16(goData[6+len(name):], wire.InfoBlockSize)
	if err := h.send(wire.OptGo, goData); err != nil {
		return nil, nil, err
	}
	gotExport := false
	for replies := 0; ; replies++ {
		// We ask for one information type; a server may send a few it was
		// not asked for, but not an endless stream of them.
		if replies > maxGoReplies {
			return nil, nil, fmt.Errorf("%w: more than %d replies to NBD_OPT_GO", ErrProtocol, maxGoReplies)
		}
		typ, data, err := h.reply(wire.OptGo)
		if err != nil {
			return nil, nil, err
		}
		switch typ {
		case wire.RepInfo:
			if len(data) < 2 {
				return nil, nil, fmt.Errorf("%w: empty NBD_REP_INFO", ErrProtocol)
			}
			switch binary.BigEndian.Uint16(data) {
			case wire.InfoExport:
				if len(data) != 12 {
					return nil, nil, fmt.Errorf("%w: NBD_INFO_EXPORT of %d bytes", ErrProtocol, len(data))
				}
				e.size = int64(binary.BigEndian.Uint64(data[2:]))
				e.flags = binary.BigEndian.Uint16(data[10:])
				gotExport = true
			case wire.InfoBlockSize:
				if len(data) != 14 {
					return nil, nil, fmt.Errorf("%w: NBD_INFO_BLOCK_SIZE of %d bytes", ErrProtocol, len(data))
				}
				e.min = binary.BigEndian.Uint32(data[2:])
				e.pref = binary.BigEndian.Uint32(data[6:])
				e.max = binary.BigEndian.Uint32(data[10:])
				e.blockInfo = true
			}
			continue
		case wire.RepAck:
			if !gotExport {
				return nil, nil, fmt.Errorf("%w: NBD_OPT_GO acknowledged without NBD_INFO_EXPORT", ErrProtocol)
			}
		case wire.RepErrUnsup:
			// An old server: NBD_OPT_EXPORT_NAME cannot report errors, it
			// just closes the connection on an unknown export.
			if err := h.send(wire.OptExportName, name); err != nil {
				return nil, nil, err
			}
			n := 10
			if !noZeroes {
				n += 124
			}
			buf := make([]byte, n)
			if _, err := io.ReadFull(c, buf); err != nil {
				return nil, nil, fmt.Errorf("%w: export %q: the server closed the connection (unknown export?)", ErrUnknownExport, t.Export)
			}
			e.size = int64(binary.BigEndian.Uint64(buf))
			e.flags = binary.BigEndian.Uint16(buf[8:])
		case wire.RepErrUnknown:
			return nil, nil, fmt.Errorf("%w: %q%s", ErrUnknownExport, t.Export, msgSuffix(data))
		case wire.RepErrTLSReqd:
			return nil, nil, fmt.Errorf("%w: the server requires TLS: use nbds:// (or nbds+unix://)", ErrTLS)
		default:
			if typ&wire.RepErr != 0 {
				return nil, nil, fmt.Errorf("%w: the server refused export %q: %s", ErrProtocol, t.Export, repErrText(typ, data))
			}
			return nil, nil, fmt.Errorf("%w: unexpected reply type %#x to NBD_OPT_GO", ErrProtocol, typ)
		}
		break
	}
	if err := e.check(); err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Time{})
	return c, e, nil
}

// check validates the export parameters and fills in the defaults the
// protocol gives a client that got no block sizes.
func (e *export) check() error {
	if e.size < 0 {
		return fmt.Errorf("%w: export size %d out of range", ErrProtocol, uint64(e.size))
	}
	if e.flags&1 == 0 { // NBD_FLAG_HAS_FLAGS
		return fmt.Errorf("%w: transmission flags without NBD_FLAG_HAS_FLAGS", ErrProtocol)
	}
	if !e.blockInfo {
		e.min, e.pref, e.max = 1, 4096, 32<<20
		return nil
	}
	pow2 := func(x uint32) bool { return x != 0 && x&(x-1) == 0 }
	if !pow2(e.min) || e.min > 64<<10 || !pow2(e.pref) || e.pref < e.min ||
		(e.max != 0xffffffff && (e.max < e.pref || e.max%e.min != 0)) {
		return fmt.Errorf("%w: bad block sizes (minimum %d, preferred %d, maximum %d)", ErrProtocol, e.min, e.pref, e.max)
	}
	return nil
}

func msgSuffix(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	return ": " + printable(data)
}

// printable keeps a server's message to one safe line.
func printable(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	out := make([]rune, 0, len(b))
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f {
			r = '?'
		}
		out = append(out, r)
	}
	return string(out)
}

func repErrText(typ uint32, data []byte) string {
	names := map[uint32]string{
		wire.RepErrUnsup: "unsupported", wire.RepErrPolicy: "refused by policy", wire.RepErrInvalid: "invalid",
		wire.RepErrUnknown: "unknown export", wire.RepErrTLSReqd: "TLS required", wire.RepErrShutdown: "server shutting down",
	}
	s, ok := names[typ]
	if !ok {
		s = fmt.Sprintf("error %#x", typ)
	}
	return s + msgSuffix(data)
}

// negotiator sends options and reads their replies.
type negotiator struct{ c net.Conn }

func (h *negotiator) send(opt uint32, data []byte) error {
	b := make([]byte, 16+len(data))
	binary.BigEndian.PutUint64(b, wire.OptMagic)
	binary.BigEndian.PutUint32(b[8:], opt)
	binary.BigEndian.PutUint32(b[12:], uint32(len(data)))
	copy(b[16:], data)
	if _, err := h.c.Write(b); err != nil {
		return fmt.Errorf("%w: during negotiation: %w", ErrConnectionLost, err)
	}
	return nil
}

func (h *negotiator) reply(opt uint32) (uint32, []byte, error) {
	var hdr [20]byte
	if _, err := io.ReadFull(h.c, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("%w: the server closed the connection during negotiation: %w", ErrConnectionLost, err)
	}
	if binary.BigEndian.Uint64(hdr[:]) != wire.OptReplyMagic || binary.BigEndian.Uint32(hdr[8:]) != opt {
		return 0, nil, fmt.Errorf("%w: bad option reply", ErrProtocol)
	}
	typ := binary.BigEndian.Uint32(hdr[12:])
	n := binary.BigEndian.Uint32(hdr[16:])
	if n > maxOptionReply {
		return 0, nil, fmt.Errorf("%w: option reply of %d bytes", ErrProtocol, n)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(h.c, data); err != nil {
		return 0, nil, fmt.Errorf("%w: during negotiation: %w", ErrConnectionLost, err)
	}
	return typ, data, nil
}

// option sends opt and reads its one reply.
func (h *negotiator) option(opt uint32, data []byte) (uint32, []byte, error) {
	if err := h.send(opt, data); err != nil {
		return 0, nil, err
	}
	return h.reply(opt)
}

// tlsConfig builds the client TLS configuration for t: the CA (and a
// client certificate, when present) from t.CertDir as libnbd lays them out,
// else the system roots.
func tlsConfig(t *Target) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.NoVerify}
	if t.CertDir == "" {
		return cfg, nil
	}
	ca, err := os.ReadFile(filepath.Join(t.CertDir, "ca-cert.pem"))
	switch {
	case err == nil:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrTLS, filepath.Join(t.CertDir, "ca-cert.pem"))
		}
		cfg.RootCAs = pool
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	certFile, keyFile := filepath.Join(t.CertDir, "client-cert.pem"), filepath.Join(t.CertDir, "client-key.pem")
	if _, err := os.Stat(certFile); err == nil {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			// The key's contents never reach the message: only the files.
			return nil, fmt.Errorf("%w: cannot load the client certificate %s / %s", ErrTLS, certFile, keyFile)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
