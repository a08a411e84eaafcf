package luks1_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// eofDevice is a device whose reads fail with a wrapped io.EOF, as an NBD
// client's do when the connection ends mid-reply: that is an I/O error,
// not the end of the device.
type eofDevice struct{ *luksutil.MemDevice }

func (eofDevice) ReadAt([]byte, int64) (int, error) {
	return 0, fmt.Errorf("connection closed: %w", io.EOF)
}

// TestReadShortDevice is issue #25 bug 2 for LUKS1: a device shorter than
// the 592-byte header gives ErrNotLUKS when what is there has no LUKS1
// magic and ErrDeviceTooSmall when a LUKS1 header starts and is cut off,
// never the io.EOF of the read.
func TestReadShortDevice(t *testing.T) {
	luks1Start := append([]byte("LUKS\xba\xbe\x00\x01"), make([]byte, 300)...)
	luks2Start := append([]byte("LUKS\xba\xbe\x00\x02"), make([]byte, 300)...)
	reencStart := append([]byte("LUKS\xde\xad\x00\x01"), make([]byte, 300)...)
	for _, c := range []struct {
		name string
		dev  []byte
		want error
	}{
		{"empty", []byte{}, luks1.ErrNotLUKS},
		{"5 bytes of the magic", []byte("LUKS\xba"), luks1.ErrNotLUKS},
		{"511 zeros", make([]byte, 511), luks1.ErrNotLUKS},
		{"591 zeros", make([]byte, luks1.PhdrSize-1), luks1.ErrNotLUKS},
		{"the magic alone", []byte("LUKS\xba\xbe"), luks1.ErrDeviceTooSmall},
		{"a LUKS1 header cut to 308 bytes", luks1Start, luks1.ErrDeviceTooSmall},
		{"a marked LUKS1 header cut to 308 bytes", reencStart, luks1.ErrDeviceTooSmall},
		{"a LUKS2 header cut to 308 bytes", luks2Start, luks1.ErrNotLUKS},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := luks1.Read(luksutil.NewMemDevice(0, c.dev))
			if !errors.Is(err, c.want) {
				t.Errorf("Read: %v, want %v", err, c.want)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Read: %v is an end-of-file error", err)
			}
		})
	}
	t.Run("io error", func(t *testing.T) {
		// A read that fails is no verdict on the header.
		_, err := luks1.Read(eofDevice{luksutil.NewMemDevice(4096, nil)})
		if err == nil || errors.Is(err, luks1.ErrNotLUKS) || errors.Is(err, luks1.ErrDeviceTooSmall) || !errors.Is(err, io.EOF) {
			t.Errorf("Read: %v, want the read's own error", err)
		}
	})
}
