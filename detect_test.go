package blkcrypt_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/blkcrypt/blkcrypt"
)

// failingReader returns the device's bytes up to failAt, then err.
type failingReader struct {
	data   []byte
	failAt int64
	err    error
}

func (r failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.failAt {
		n := max(0, int(r.failAt-off))
		copy(p, r.data[off:off+int64(n)])
		return n, r.err
	}
	return copy(p, r.data[off:]), nil
}

// TestDetectErr: a header read that fails is an error, never "no
// signature" (Open would then report a missing header for an I/O error);
// the end of a device shorter than the 64 KiB Detect reads is not.
func TestDetectErr(t *testing.T) {
	luks := append([]byte("LUKS\xba\xbe\x00\x02"), make([]byte, 8<<10)...)
	for _, tc := range []struct {
		name    string
		r       io.ReaderAt
		typ     string
		wantErr error
	}{
		{"short device", bytes.NewReader(luks), blkcrypt.TypeLUKS2, nil},
		{"short device, no signature", bytes.NewReader(make([]byte, 4096)), "", nil},
		{"EIO after the magic", failingReader{luks, 4096, syscall.EIO}, "", syscall.EIO},
		{"a wrapped EOF is a cause", failingReader{luks, 512, fmt.Errorf("connection lost: %w", io.ErrUnexpectedEOF)}, "", io.ErrUnexpectedEOF},
	} {
		typ, err := blkcrypt.DetectErr(tc.r)
		if typ != tc.typ || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, typ, err, tc.typ, tc.wantErr)
		}
		if got := blkcrypt.Detect(tc.r); got != tc.typ {
			t.Errorf("%s: Detect = %q, want %q", tc.name, got, tc.typ)
		}
	}
}
