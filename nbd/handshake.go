package nbd

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"time"
)

var be = binary.BigEndian

// handshake runs fixed newstyle negotiation. It reports whether the
// transmission phase was entered; (false, nil) means the client aborted.
func (c *conn) handshake(ctx context.Context) (bool, error) {
	c.setDeadline(time.Now().Add(c.s.opts.HandshakeTimeout))
	var greet [18]byte
	be.PutUint64(greet[0:], nbdMagic)
	be.PutUint64(greet[8:], optMagic)
	be.PutUint16(greet[16:], flagFixedNewstyle|flagNoZeroes)
	if _, err := c.nc.Write(greet[:]); err != nil {
		return false, fmt.Errorf("nbd: writing greeting: %w", err)
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.br, cf[:]); err != nil {
		return false, readErr("client flags", err)
	}
	flags := be.Uint32(cf[:])
	if flags&^(flagCFixedNewstyle|flagCNoZeroes) != 0 {
		return false, fmt.Errorf("nbd: unknown client flags %#x", flags)
	}
	c.fixed = flags&flagCFixedNewstyle != 0
	c.noZeroes = flags&flagCNoZeroes != 0
	if !c.fixed && c.s.opts.TLSConfig != nil {
		return false, errors.New("nbd: client does not speak fixed newstyle but TLS is required")
	}

	var oh [16]byte
	for range maxOptionsPerConn {
		if _, err := io.ReadFull(c.br, oh[:]); err != nil {
			if err == io.EOF {
				return false, errors.New("nbd: client closed during negotiation")
			}
			return false, readErr("option header", err)
		}
		if be.Uint64(oh[0:]) != optMagic {
			return false, errBadOptionMagic
		}
		opt := be.Uint32(oh[8:])
		length := be.Uint32(oh[12:])
		if !c.fixed && opt != optExportName {
			return false, fmt.Errorf("nbd: option %d from a non-fixed-newstyle client", opt)
		}
		tlsRequired := c.s.opts.TLSConfig != nil && !c.tlsUp

		switch opt {
		case optExportName:
			if tlsRequired {
				return false, errors.New("nbd: NBD_OPT_EXPORT_NAME before TLS")
			}
			if length > maxStringLen {
				return false, errors.New("nbd: export name too long")
			}
			name := make([]byte, length)
			if _, err := io.ReadFull(c.br, name); err != nil {
				return false, readErr("export name", err)
			}
			e := c.s.lookup(string(name))
			if e == nil || !c.s.attach(c, e) {
				return false, fmt.Errorf("nbd: unknown export %q", name)
			}
			c.chooseExport(e, false)
			reply := make([]byte, 10, 10+124)
			be.PutUint64(reply[0:], uint64(c.size))
			be.PutUint16(reply[8:], e.tflags)
			if !c.noZeroes {
				reply = reply[:10+124]
			}
			if _, err := c.nc.Write(reply); err != nil {
				return false, err
			}
			c.setDeadline(time.Time{})
			return true, nil

		case optAbort:
			if err := c.discard(length); err != nil {
				return false, err
			}
			// The client may already have gone; a failed ACK is not an error.
			c.optReply(opt, repAck, nil)
			return false, nil
		}

		if tlsRequired && opt != optStartTLS {
			if err := c.discard(length); err != nil {
				return false, err
			}
			if err := c.optReply(opt, repErrTLSReqd, []byte("TLS is required: send NBD_OPT_STARTTLS first")); err != nil {
				return false, err
			}
			continue
		}
		if length > maxOptionDataLen {
			if err := c.discard(length); err != nil {
				return false, err
			}
			typ := uint32(repErrTooBig)
			switch opt {
			case optList, optStartTLS, optInfo, optGo, optStructuredReply:
			default:
				typ = repErrUnsup
			}
			if err := c.optReply(opt, typ, nil); err != nil {
				return false, err
			}
			continue
		}
		data := make([]byte, length)
		if _, err := io.ReadFull(c.br, data); err != nil {
			return false, readErr("option data", err)
		}

		var err error
		switch opt {
		case optList:
			if length != 0 {
				err = c.optReply(opt, repErrInvalid, []byte("NBD_OPT_LIST takes no data"))
				break
			}
			for _, e := range c.s.sortedExports() {
				p := make([]byte, 4, 4+len(e.Name)+len(e.Description))
				be.PutUint32(p, uint32(len(e.Name)))
				p = append(p, e.Name...)
				p = append(p, e.Description...)
				if err = c.optReply(opt, repServer, p); err != nil {
					break
				}
			}
			if err == nil {
				err = c.optReply(opt, repAck, nil)
			}

		case optStartTLS:
			switch {
			case c.s.opts.TLSConfig == nil:
				err = c.optReply(opt, repErrPolicy, []byte("TLS is not configured"))
			case c.tlsUp:
				err = c.optReply(opt, repErrInvalid, []byte("TLS is already active"))
			case length != 0:
				err = c.optReply(opt, repErrInvalid, []byte("NBD_OPT_STARTTLS takes no data"))
			default:
				if err = c.optReply(opt, repAck, nil); err != nil {
					break
				}
				if c.br.Buffered() != 0 {
					return false, errors.New("nbd: client sent data before the TLS handshake")
				}
				tc := tls.Server(c.raw, c.s.opts.TLSConfig)
				if err := tc.HandshakeContext(ctx); err != nil {
					return false, fmt.Errorf("nbd: TLS handshake: %w", err)
				}
				c.nc = tc
				c.br.Reset(tc)
				c.tlsUp = true
				c.structured = false // no negotiation state survives STARTTLS
			}

		case optStructuredReply:
			if length != 0 {
				err = c.optReply(opt, repErrInvalid, []byte("NBD_OPT_STRUCTURED_REPLY takes no data"))
				break
			}
			c.structured = true
			err = c.optReply(opt, repAck, nil)

		case optInfo, optGo:
			var entered bool
			entered, err = c.infoOrGo(opt, data)
			if err == nil && entered {
				c.setDeadline(time.Time{})
				return true, nil
			}

		default:
			err = c.optReply(opt, repErrUnsup, nil)
		}
		if err != nil {
			return false, err
		}
	}
	return false, errors.New("nbd: too many options")
}

// infoOrGo answers NBD_OPT_INFO / NBD_OPT_GO; for GO it reports whether
// the transmission phase starts.
func (c *conn) infoOrGo(opt uint32, data []byte) (bool, error) {
	if len(data) < 6 {
		return false, c.optReply(opt, repErrInvalid, []byte("option data too short"))
	}
	nameLen := be.Uint32(data)
	if nameLen > maxStringLen || uint64(nameLen) > uint64(len(data)-6) {
		return false, c.optReply(opt, repErrInvalid, []byte("bad export name length"))
	}
	name := string(data[4 : 4+nameLen])
	rest := data[4+nameLen:]
	n := int(be.Uint16(rest))
	rest = rest[2:]
	if len(rest) != 2*n {
		return false, c.optReply(opt, repErrInvalid, []byte("bad information request list"))
	}
	var wantName, wantDesc, wantBlock bool
	for i := range n {
		switch be.Uint16(rest[2*i:]) {
		case infoName:
			wantName = true
		case infoDescription:
			wantDesc = true
		case infoBlockSize:
			wantBlock = true
		}
	}
	e := c.s.lookup(name)
	if e == nil || opt == optGo && !c.s.attach(c, e) {
		return false, c.optReply(opt, repErrUnknown, []byte("no such export"))
	}
	size := max(e.Backend.Size(), 0)
	if opt == optGo {
		c.chooseExport(e, wantBlock)
	}

	var info [14]byte
	be.PutUint16(info[0:], infoExport)
	be.PutUint64(info[2:], uint64(size))
	be.PutUint16(info[10:], e.tflags)
	if err := c.optReply(opt, repInfo, info[:12]); err != nil {
		return false, err
	}
	if wantName {
		p := make([]byte, 2, 2+len(e.Name))
		be.PutUint16(p, infoName)
		if err := c.optReply(opt, repInfo, append(p, e.Name...)); err != nil {
			return false, err
		}
	}
	if wantDesc && e.Description != "" {
		p := make([]byte, 2, 2+len(e.Description))
		be.PutUint16(p, infoDescription)
		if err := c.optReply(opt, repInfo, append(p, e.Description...)); err != nil {
			return false, err
		}
	}
	// Block sizes are always sent; clients that did not ask ignore them.
	minB, prefB, maxB := c.s.blockSizes(e.Backend, size)
	be.PutUint16(info[0:], infoBlockSize)
	be.PutUint32(info[2:], minB)
	be.PutUint32(info[6:], prefB)
	be.PutUint32(info[10:], maxB)
	if err := c.optReply(opt, repInfo, info[:14]); err != nil {
		return false, err
	}
	if err := c.optReply(opt, repAck, nil); err != nil {
		return false, err
	}
	return opt == optGo, nil
}

// chooseExport fixes the export parameters for the transmission phase.
func (c *conn) chooseExport(e *export, sizeAgreed bool) {
	c.size = max(e.Backend.Size(), 0)
	c.minBlock, _, _ = c.s.blockSizes(e.Backend, c.size)
	c.sizeAgreed = sizeAgreed
}

// blockSizes returns the advertised minimum, preferred and maximum block
// sizes: the backend's sector size (1 if it does not divide the export
// size or is not a power of two), max(4096, sector), and MaxRequest.
func (s *Server) blockSizes(b Backend, size int64) (uint32, uint32, uint32) {
	minB := uint32(1)
	if bs := b.BlockSize(); bs > 0 && bs <= 1<<16 && bits.OnesCount(uint(bs)) == 1 && size%int64(bs) == 0 {
		minB = uint32(bs)
	}
	return minB, max(4096, minB), uint32(s.maxReq)
}

// optReply sends one option reply.
func (c *conn) optReply(opt, typ uint32, data []byte) error {
	p := make([]byte, 20, 20+len(data))
	be.PutUint64(p[0:], optReplyMagic)
	be.PutUint32(p[8:], opt)
	be.PutUint32(p[12:], typ)
	be.PutUint32(p[16:], uint32(len(data)))
	p = append(p, data...)
	_, err := c.nc.Write(p)
	return err
}

// discard skips n bytes of client data without buffering them.
func (c *conn) discard(n uint32) error {
	if n == 0 {
		return nil
	}
	if _, err := c.br.Discard(int(n)); err != nil {
		return readErr("discarded data", err)
	}
	return nil
}
