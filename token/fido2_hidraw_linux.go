//go:build linux

package token

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// hidrawDevice is a /dev/hidrawN node: it writes each 64-byte report
// after the report-ID byte 0 hidraw wants for a device without numbered
// reports, and reads reports as they come. Opened by os.OpenFile, the
// node is in Go's poller, so read deadlines bound each exchange.
type hidrawDevice struct {
	*os.File
	buf [1 + hidReportLen]byte
}

func (d *hidrawDevice) Write(p []byte) (int, error) {
	if len(p) != hidReportLen {
		return 0, fmt.Errorf("%w: report of %d bytes", ErrFIDO2Device, len(p))
	}
	d.buf[0] = 0
	copy(d.buf[1:], p)
	n, err := d.File.Write(d.buf[:])
	if err != nil {
		return 0, err
	}
	if n != len(d.buf) {
		return 0, fmt.Errorf("%w: short write to %s", ErrFIDO2Device, d.Name())
	}
	return len(p), nil
}

// openFIDO2Device opens the security key at path, or the only one
// present when path is "" or "auto".
func openFIDO2Device(path string) (*hidrawDevice, error) {
	if path == "" || path == "auto" {
		paths, err := FIDO2Devices()
		if err != nil {
			return nil, err
		}
		if len(paths) != 1 {
			return nil, fmt.Errorf("%w: %d FIDO2 security keys present, want exactly one (name one)", ErrFIDO2Device, len(paths))
		}
		path = paths[0]
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFIDO2Device, err)
	}
	return &hidrawDevice{File: f}, nil
}

// FIDO2Devices lists the FIDO2 security keys present: the /dev/hidrawN
// nodes whose report descriptor (in /sys/class/hidraw) is FIDO's.
func FIDO2Devices() ([]string, error) {
	ents, err := os.ReadDir("/sys/class/hidraw")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFIDO2Device, err)
	}
	var out []string
	for _, e := range ents {
		rd, err := os.ReadFile(filepath.Join("/sys/class/hidraw", e.Name(), "device", "report_descriptor"))
		if err != nil {
			continue
		}
		if ok, _ := hidDescriptorIsFIDO(rd); ok {
			out = append(out, "/dev/"+e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}
