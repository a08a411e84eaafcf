package token

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// CTAPHID (CTAP 2.0 §8.1): messages cut into 64-byte HID reports. An
// initialisation packet is CID(4) CMD(1, high bit set) BCNT(2) DATA(57);
// a continuation packet is CID(4) SEQ(1, 0..127) DATA(59).
const (
	hidReportLen   = 64
	hidInitData    = hidReportLen - 7
	hidContData    = hidReportLen - 5
	hidMaxMessage  = hidInitData + 128*hidContData
	hidBroadcastID = 0xffffffff

	hidPing      = 0x81
	hidMsg       = 0x83
	hidInit      = 0x86
	hidWink      = 0x88
	hidCBOR      = 0x90
	hidCancel    = 0x91
	hidKeepalive = 0xbb
	hidError     = 0xbf

	hidCapCBOR = 0x04
)

// ErrFIDO2Device: the FIDO2 security key is absent, answered outside the
// protocol or failed.
var ErrFIDO2Device = errors.New("FIDO2 device")

// fido2Timeout bounds one CTAPHID exchange when the context has no
// deadline: a key waiting for a touch sends keepalives meanwhile, and
// CTAP's own user-presence timeout is 30 s.
const fido2Timeout = 45 * time.Second

// maxStrayReports bounds the reports of other channels (or keepalives)
// read while waiting for an answer, so that a babbling device cannot hold
// the exchange beyond the deadline's checks.
const maxStrayReports = 1 << 16

// hidConn is one CTAPHID channel over rw, which reads and writes whole
// 64-byte reports (the hidraw framing's report-ID byte is the device's
// business, see hidrawDevice).
type hidConn struct {
	rw   io.ReadWriter
	cid  uint32
	caps byte
}

// deadliner is what an *os.File opened on a hidraw node offers.
type deadliner interface {
	SetReadDeadline(time.Time) error
}

// newHIDConn opens a channel with CTAPHID_INIT (a fresh nonce, which the
// answer must echo).
func newHIDConn(ctx context.Context, rw io.ReadWriter) (*hidConn, error) {
	c := &hidConn{rw: rw, cid: hidBroadcastID}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	resp, err := c.transact(ctx, hidInit, nonce[:], func(cmd byte, data []byte) bool {
		// Answers to someone else's INIT on the broadcast channel carry
		// another nonce: not ours, keep reading.
		return cmd == hidInit && (len(data) < 8 || [8]byte(data[:8]) != nonce)
	})
	if err != nil {
		return nil, err
	}
	if len(resp) < 17 {
		return nil, fmt.Errorf("%w: CTAPHID_INIT answer of %d bytes", ErrFIDO2Device, len(resp))
	}
	c.cid = binary.BigEndian.Uint32(resp[8:12])
	if c.cid == 0 || c.cid == hidBroadcastID {
		return nil, fmt.Errorf("%w: CTAPHID_INIT assigned channel %#x", ErrFIDO2Device, c.cid)
	}
	c.caps = resp[16]
	if c.caps&hidCapCBOR == 0 {
		return nil, fmt.Errorf("%w: not a FIDO2 (CTAP2) device: no CBOR capability", ErrFIDO2Device)
	}
	return c, nil
}

// transact sends one message and returns the answer's data. skip, when
// set, names answers of the right command that are not for us.
func (c *hidConn) transact(ctx context.Context, cmd byte, data []byte, skip func(byte, []byte) bool) ([]byte, error) {
	if len(data) > hidMaxMessage {
		return nil, fmt.Errorf("%w: message of %d bytes exceeds CTAPHID's %d", ErrFIDO2Device, len(data), hidMaxMessage)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := c.bound(ctx)
	defer stop()
	if err := c.send(cmd, data); err != nil {
		return nil, c.ctxErr(ctx, err)
	}
	for range maxStrayReports {
		rcmd, rdata, err := c.receive(ctx)
		if err != nil {
			return nil, c.ctxErr(ctx, err)
		}
		switch {
		case rcmd == hidKeepalive:
			continue
		case rcmd == hidError:
			code := byte(0)
			if len(rdata) > 0 {
				code = rdata[0]
			}
			return nil, fmt.Errorf("%w: CTAPHID error %#02x", ErrFIDO2Device, code)
		case rcmd != cmd:
			return nil, fmt.Errorf("%w: CTAPHID answer %#02x to command %#02x", ErrFIDO2Device, rcmd, cmd)
		case skip != nil && skip(rcmd, rdata):
			continue
		}
		return rdata, nil
	}
	return nil, fmt.Errorf("%w: no answer among %d reports", ErrFIDO2Device, maxStrayReports)
}

// bound makes reads return when ctx ends or fido2Timeout passes, when rw
// can be given a deadline.
func (c *hidConn) bound(ctx context.Context) func() {
	d, ok := c.rw.(deadliner)
	if !ok {
		return func() {}
	}
	dl, has := ctx.Deadline()
	if !has || time.Until(dl) > fido2Timeout {
		dl = time.Now().Add(fido2Timeout)
	}
	_ = d.SetReadDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = d.SetReadDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = d.SetReadDeadline(time.Time{})
	}
}

func (c *hidConn) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrFIDO2Device, ctx.Err())
	}
	if errors.Is(err, ErrFIDO2Device) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrFIDO2Device, err)
}

func (c *hidConn) send(cmd byte, data []byte) error {
	var pkt [hidReportLen]byte
	binary.BigEndian.PutUint32(pkt[0:4], c.cid)
	pkt[4] = cmd
	binary.BigEndian.PutUint16(pkt[5:7], uint16(len(data)))
	n := copy(pkt[7:], data)
	if _, err := c.rw.Write(pkt[:]); err != nil {
		return err
	}
	for seq := byte(0); n < len(data); seq++ {
		clear(pkt[:])
		binary.BigEndian.PutUint32(pkt[0:4], c.cid)
		pkt[4] = seq
		n += copy(pkt[5:], data[n:])
		if _, err := c.rw.Write(pkt[:]); err != nil {
			return err
		}
	}
	return nil
}

// readReport reads one report: exactly 64 bytes, or an error.
func (c *hidConn) readReport(buf []byte) error {
	n, err := c.rw.Read(buf)
	if err != nil {
		return err
	}
	if n != hidReportLen {
		return fmt.Errorf("%w: HID report of %d bytes, want %d", ErrFIDO2Device, n, hidReportLen)
	}
	return nil
}

// receive reads one message addressed to our channel.
func (c *hidConn) receive(ctx context.Context) (cmd byte, data []byte, err error) {
	var pkt [hidReportLen]byte
	for range maxStrayReports {
		if err := ctx.Err(); err != nil {
			return 0, nil, err
		}
		if err := c.readReport(pkt[:]); err != nil {
			return 0, nil, err
		}
		if binary.BigEndian.Uint32(pkt[0:4]) != c.cid {
			continue // another channel's traffic
		}
		if pkt[4]&0x80 == 0 {
			return 0, nil, fmt.Errorf("%w: continuation packet where a message starts", ErrFIDO2Device)
		}
		cmd = pkt[4]
		total := int(binary.BigEndian.Uint16(pkt[5:7]))
		if total > hidMaxMessage {
			return 0, nil, fmt.Errorf("%w: CTAPHID message of %d bytes", ErrFIDO2Device, total)
		}
		data = make([]byte, 0, total)
		data = append(data, pkt[7:7+min(total, hidInitData)]...)
		strays := 0
		for seq := byte(0); len(data) < total; {
			if err := ctx.Err(); err != nil {
				return 0, nil, err
			}
			if err := c.readReport(pkt[:]); err != nil {
				return 0, nil, err
			}
			if binary.BigEndian.Uint32(pkt[0:4]) != c.cid {
				// Another channel's packet: not ours, not counted.
				if strays++; strays > maxStrayReports {
					return 0, nil, fmt.Errorf("%w: message for channel %#x never completed", ErrFIDO2Device, c.cid)
				}
				continue
			}
			if pkt[4] != seq {
				return 0, nil, fmt.Errorf("%w: CTAPHID sequence %d, want %d", ErrFIDO2Device, pkt[4], seq)
			}
			data = append(data, pkt[5:5+min(total-len(data), hidContData)]...)
			seq++
		}
		return cmd, data, nil
	}
	return 0, nil, fmt.Errorf("%w: no packet for channel %#x among %d reports", ErrFIDO2Device, c.cid, maxStrayReports)
}
