//go:build linux

package fido2test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// Linux's uhid (include/uapi/linux/uhid.h): a user-space HID device. An
// event is a u32 type and a packed union; struct uhid_event is 4380
// bytes, of which CREATE2 uses the most.
const (
	uhidEventSize      = 4 + 4376
	uhidDestroy        = 1
	uhidOutput         = 6
	uhidGetReport      = 9
	uhidGetReportReply = 10
	uhidCreate2        = 11
	uhidInput2         = 12
	uhidSetReport      = 13
	uhidSetReportReply = 14
	busUSB             = 0x03
)

// ReportDescriptor is FIDO's HID report descriptor (CTAP 2.0 §8.1.8.2):
// usage page 0xF1D0, usage CTAPHID, 64-byte input and output reports
// without report ids.
var ReportDescriptor = []byte{
	0x06, 0xd0, 0xf1, // usage page (FIDO alliance)
	0x09, 0x01, // usage (CTAPHID)
	0xa1, 0x01, // collection (application)
	0x09, 0x20, 0x15, 0x00, 0x26, 0xff, 0x00, 0x75, 0x08, 0x95, 0x40, 0x81, 0x02, // input report data: 64 bytes
	0x09, 0x21, 0x15, 0x00, 0x26, 0xff, 0x00, 0x75, 0x08, 0x95, 0x40, 0x91, 0x02, // output report data: 64 bytes
	0xc0, // end collection
}

// ServeUHID presents a as a USB security key through /dev/uhid (dev,
// opened read-write) until dev fails or is closed: the kernel makes a
// /dev/hidrawN of it, which libfido2, systemd and blkcrypt find by its
// report descriptor. ready, when set, is called once the device exists.
func ServeUHID(dev *os.File, a *Authenticator, ready func()) error {
	ev := make([]byte, uhidEventSize)
	binary.LittleEndian.PutUint32(ev[0:], uhidCreate2)
	copy(ev[4:132], "blkcrypt fido2test")
	copy(ev[132:196], "blkcrypt/fido2test")
	binary.LittleEndian.PutUint16(ev[260:], uint16(len(ReportDescriptor)))
	binary.LittleEndian.PutUint16(ev[262:], busUSB)
	binary.LittleEndian.PutUint32(ev[264:], 0x1209) // pid.codes' vendor id
	binary.LittleEndian.PutUint32(ev[268:], 0xf1d0)
	binary.LittleEndian.PutUint32(ev[272:], 1)
	copy(ev[280:], ReportDescriptor)
	if _, err := dev.Write(ev); err != nil {
		return fmt.Errorf("uhid create: %w", err)
	}
	defer func() {
		clear(ev)
		binary.LittleEndian.PutUint32(ev[0:], uhidDestroy)
		_, _ = dev.Write(ev)
	}()
	if ready != nil {
		ready()
	}
	in := make([]byte, uhidEventSize)
	out := make([]byte, uhidEventSize)
	for {
		n, err := dev.Read(in)
		if err != nil {
			return err
		}
		if n < 4 {
			return errors.New("uhid: short event")
		}
		var report []byte
		switch binary.LittleEndian.Uint32(in[0:]) {
		case uhidOutput:
			size := int(binary.LittleEndian.Uint16(in[4+4096:]))
			report = in[4 : 4+min(size, 4096)]
		case uhidSetReport:
			// hidraw may send output reports as SET_REPORT requests.
			id := binary.LittleEndian.Uint32(in[4:])
			size := int(binary.LittleEndian.Uint16(in[10:]))
			report = in[12 : 12+min(size, 4096)]
			clear(out)
			binary.LittleEndian.PutUint32(out[0:], uhidSetReportReply)
			binary.LittleEndian.PutUint32(out[4:], id)
			if _, err := dev.Write(out); err != nil {
				return err
			}
		case uhidGetReport:
			id := binary.LittleEndian.Uint32(in[4:])
			clear(out)
			binary.LittleEndian.PutUint32(out[0:], uhidGetReportReply)
			binary.LittleEndian.PutUint32(out[4:], id)
			binary.LittleEndian.PutUint16(out[8:], 5) // EIO: no feature reports
			if _, err := dev.Write(out); err != nil {
				return err
			}
			continue
		default:
			continue // start, stop, open, close
		}
		// hidraw passes the report-ID byte 0 of an unnumbered report.
		if len(report) == reportLen+1 && report[0] == 0 {
			report = report[1:]
		}
		for _, r := range a.HandleReport(report) {
			clear(out)
			binary.LittleEndian.PutUint32(out[0:], uhidInput2)
			binary.LittleEndian.PutUint16(out[4:], uint16(len(r)))
			copy(out[6:], r)
			if _, err := dev.Write(out); err != nil {
				return err
			}
		}
	}
}
