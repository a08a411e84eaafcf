// Package voltest reads and writes a volspec.Spec one sector at a time, for
// the format packages' own tests: they cannot import the root package
// (which imports them), and a deliberately simple reader is also an
// independent check of the batched root Volume.
package voltest

import (
	"fmt"
	"io"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// Volume is the decrypted view of a Spec over a device.
type Volume struct {
	dev      volspec.Device
	s        *volspec.Spec
	ss       int64
	readOnly bool
}

// Open builds the view; Close wipes the keys and closes dev.
func Open(dev volspec.Device, s *volspec.Spec, readOnly bool) *Volume {
	if s.Wrap != nil {
		dev = s.Wrap(dev)
	}
	return &Volume{dev: dev, s: s, ss: int64(s.Layers[0].SectorSize()), readOnly: readOnly || s.ReadOnly}
}

// Size is the decrypted size in bytes.
func (v *Volume) Size() int64 { return v.s.Size }

func (v *Volume) sector(i int64, buf []byte) error {
	if _, err := v.dev.ReadAt(buf, v.s.Offset+i*v.ss); err != nil && err != io.EOF {
		return err
	}
	for _, c := range v.s.Layers {
		if err := c.DecryptSectors(buf, buf, uint64(i*v.ss/512)); err != nil {
			return err
		}
	}
	return nil
}

// ReadAt reads decrypted bytes.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > v.s.Size {
		return 0, fmt.Errorf("voltest: offset %d outside the volume", off)
	}
	var eof error
	if int64(len(p)) > v.s.Size-off {
		p, eof = p[:v.s.Size-off], io.EOF
	}
	buf := make([]byte, v.ss)
	for done := 0; done < len(p); {
		pos := off + int64(done)
		if err := v.sector(pos/v.ss, buf); err != nil {
			return done, err
		}
		done += copy(p[done:], buf[pos%v.ss:])
	}
	return len(p), eof
}

// WriteAt encrypts p into the volume, read-modify-write per sector.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	if v.readOnly {
		return 0, volspec.ErrReadOnly
	}
	if off < 0 || off+int64(len(p)) > v.s.Size {
		return 0, fmt.Errorf("voltest: %d bytes at %d outside the volume", len(p), off)
	}
	buf := make([]byte, v.ss)
	for done := 0; done < len(p); {
		pos := off + int64(done)
		i := pos / v.ss
		if err := v.sector(i, buf); err != nil {
			return done, err
		}
		n := copy(buf[pos%v.ss:], p[done:])
		for j := len(v.s.Layers) - 1; j >= 0; j-- {
			if err := v.s.Layers[j].EncryptSectors(buf, buf, uint64(i*v.ss/512)); err != nil {
				return done, err
			}
		}
		if _, err := v.dev.WriteAt(buf, v.s.Offset+i*v.ss); err != nil {
			return done, err
		}
		done += n
	}
	return len(p), nil
}

// Close wipes the keys and closes the device.
func (v *Volume) Close() error {
	v.s.Wipe()
	return v.dev.Close()
}
