package luks2_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// failAfter is a device whose reads beyond off fail with a wrapped
// io.EOF, as an NBD client's do when the connection ends mid-reply: an
// I/O error, not the end of the device.
type failAfter struct {
	*luksutil.MemDevice
	off int64
}

func (d failAfter) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > d.off {
		return 0, fmt.Errorf("connection closed: %w", io.EOF)
	}
	return d.MemDevice.ReadAt(p, off)
}

// TestReadShortDevice is issue #25 bug 2 for LUKS2: LUKS2 looks for the
// secondary header at fixed offsets up to 4 MiB, and a device that ends
// before one of them, or inside a header, gave the io.EOF of the read.
// Nothing where a header is looked for is ErrNotLUKS; a header that starts
// and is cut off is ErrDeviceTooSmall.
func TestReadShortDevice(t *testing.T) {
	dir := lukstest.Extract(t, "luks2_valid_hdr.img.xz")
	img, err := os.ReadFile(filepath.Join(dir, "luks2_valid_hdr.img"))
	if err != nil {
		t.Fatal(err)
	}
	const mda = 0x4000 // the fixture's metadata size
	rng := rand.New(rand.NewChaCha8([32]byte{25}))
	random := make([]byte, 4<<20)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	noPrimary := append([]byte(nil), img[:mda+100]...)
	clear(noPrimary[:luks2.BinHeaderSize])
	for _, c := range []struct {
		name string
		dev  []byte
		want error
	}{
		{"empty", []byte{}, luks2.ErrNotLUKS},
		{"511 zeros", make([]byte, 511), luks2.ErrNotLUKS},
		{"1MiB zeros", make([]byte, 1<<20), luks2.ErrNotLUKS},
		{"4MiB random", random, luks2.ErrNotLUKS},
		{"4MiB+4095 zeros", make([]byte, 4<<20+4095), luks2.ErrNotLUKS},
		{"header cut to 511", img[:511], luks2.ErrDeviceTooSmall},
		{"header cut to 4096", img[:4096], luks2.ErrDeviceTooSmall},
		{"header cut in the JSON area", img[:mda-1], luks2.ErrDeviceTooSmall},
		{"header cut in the secondary", img[:mda+100], luks2.ErrDeviceTooSmall},
		{"header cut before the keyslots end", img[:2*mda], luks2.ErrDeviceTooSmall},
		{"secondary alone, cut", noPrimary, luks2.ErrDeviceTooSmall},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := luks2.Read(luksutil.NewMemDevice(0, append([]byte(nil), c.dev...)))
			if !errors.Is(err, c.want) {
				t.Errorf("Read: %v, want %v", err, c.want)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Read: %v is an end-of-file error", err)
			}
		})
	}
	t.Run("io error", func(t *testing.T) {
		// A read that fails is no verdict on the header: the primary's
		// JSON area cannot be read here.
		dev := failAfter{luksutil.NewMemDevice(0, append([]byte(nil), img...)), luks2.BinHeaderSize}
		_, err := luks2.Read(dev)
		if err == nil || errors.Is(err, luks2.ErrNotLUKS) || errors.Is(err, luks2.ErrDeviceTooSmall) || !errors.Is(err, io.EOF) {
			t.Errorf("Read: %v, want the read's own error", err)
		}
	})
}
