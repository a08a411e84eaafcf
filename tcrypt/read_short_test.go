package tcrypt

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// TestReadShortDevice (issue #25 bug 2): a device too small to hold a
// header sector where one is looked for is ErrDeviceTooSmall, not a bad
// option (ErrInvalid) and not the io.EOF of the read.
func TestReadShortDevice(t *testing.T) {
	for _, n := range []int{0, 100, SectorLen - 1} {
		for _, o := range []Options{{}, {Hidden: true}, {Backup: true}, {System: true}} {
			o.Passphrase = []byte("pw")
			dev := bytes.NewReader(make([]byte, n))
			_, err := Read(dev, int64(n), &o)
			if !errors.Is(err, volspec.ErrDeviceTooSmall) || errors.Is(err, ErrInvalid) || errors.Is(err, io.EOF) {
				t.Errorf("%d bytes, hidden %v backup %v system %v: %v, want ErrDeviceTooSmall", n, o.Hidden, o.Backup, o.System, err)
			}
		}
	}
}
