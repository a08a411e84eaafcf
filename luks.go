package blkcrypt

import (
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Errors re-exported from the LUKS packages.
var (
	// ErrWrongPassphrase means no keyslot opened with the passphrase.
	ErrWrongPassphrase = luksutil.ErrWrongPassphrase
	// ErrNotLUKS means the device has no LUKS header.
	ErrNotLUKS = luksutil.ErrNotLUKS
)

// Header is a LUKS1 or LUKS2 header.
type Header = luksutil.Header

// AnySlot lets Open try every keyslot.
const AnySlot = luksutil.AnySlot

// OpenOptions choose how a LUKS volume is unlocked.
type OpenOptions struct {
	// Slot restricts unlocking to one keyslot; AnySlot (-1) tries all. The
	// zero value means keyslot 0, so set it.
	Slot int
	// VolumeKey, when set, is used instead of a passphrase; it must match
	// the header digest.
	VolumeKey []byte
	// Header is a detached header file; the data stays on the device.
	Header string
	// ReadOnly opens the device read-only.
	ReadOnly bool
}

// headerReaders tries each LUKS version in turn; luks2 registers itself.
var headerReaders = []func(luksutil.Device) (luksutil.Header, error){
	func(d luksutil.Device) (luksutil.Header, error) { return luks1.Read(d) },
	func(d luksutil.Device) (luksutil.Header, error) { return luks2.Read(d) },
}

// ReadHeader reads and validates the LUKS header on dev, whatever its
// version.
func ReadHeader(dev luksutil.Device) (Header, error) {
	var firstErr error
	for _, r := range headerReaders {
		h, err := r(dev)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, luksutil.ErrNotLUKS) || firstErr == nil {
			if firstErr == nil || errors.Is(firstErr, luksutil.ErrNotLUKS) {
				firstErr = err
			}
		}
	}
	return nil, firstErr
}

// Open unlocks the LUKS volume at path with a passphrase (or
// opts.VolumeKey) and returns its decrypted view.
func Open(path string, passphrase []byte, opts OpenOptions) (*Volume, error) {
	flag := os.O_RDWR
	if opts.ReadOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	hdrDev := luksutil.Device(luksutil.File{File: f})
	var hf *os.File
	if opts.Header != "" {
		if hf, err = os.OpenFile(opts.Header, os.O_RDONLY, 0); err != nil {
			f.Close()
			return nil, err
		}
		hdrDev = luksutil.File{File: hf}
	}
	v, err := openLUKS(luksutil.File{File: f}, hdrDev, passphrase, opts)
	if hf != nil {
		hf.Close()
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return v, nil
}

// OpenDevice is Open over devices already open: data holds the payload and
// hdr the header (the same device unless detached).
func OpenDevice(data, hdr luksutil.Device, passphrase []byte, opts OpenOptions) (*Volume, error) {
	return openLUKS(data, hdr, passphrase, opts)
}

type deviceCloser interface {
	luksutil.Device
	Close() error
}

func openLUKS(data, hdrDev luksutil.Device, passphrase []byte, opts OpenOptions) (*Volume, error) {
	h, err := ReadHeader(hdrDev)
	if err != nil {
		return nil, err
	}
	key, err := UnlockKey(h, hdrDev, passphrase, opts)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	return NewLUKSVolume(h, data, key, opts.ReadOnly)
}

// UnlockKey returns the volume key of h from a passphrase or checks a given
// volume key. The caller wipes it.
func UnlockKey(h Header, hdrDev luksutil.Device, passphrase []byte, opts OpenOptions) ([]byte, error) {
	if opts.VolumeKey != nil {
		if !h.VolumeKeyDigestOK(opts.VolumeKey) {
			return nil, luksutil.ErrWrongKey
		}
		return append([]byte(nil), opts.VolumeKey...), nil
	}
	key, _, err := h.Unlock(hdrDev, passphrase, opts.Slot)
	return key, err
}

// NewLUKSVolume makes the decrypted view of a LUKS payload on data.
func NewLUKSVolume(h Header, data luksutil.Device, key []byte, readOnly bool) (*Volume, error) {
	var ivOff uint64
	if t, ok := h.(interface{ IVTweak() uint64 }); ok {
		ivOff = t.IVTweak() // LUKS2 segment iv_tweak, dm-crypt's iv_offset
	}
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize(), IVOffset: ivOff})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", luksutil.ErrUnsupported, err)
	}
	devSize, err := data.Size()
	if err != nil {
		c.Wipe()
		return nil, err
	}
	off, size := h.DataOffset(), h.DataSize(devSize)
	if size <= 0 || off+size > devSize {
		c.Wipe()
		return nil, fmt.Errorf("%w: the data area (offset %d) does not fit a %d-byte device", luksutil.ErrDeviceTooSmall, off, devSize)
	}
	size -= size % int64(c.SectorSize())
	dc, ok := data.(deviceCloser)
	if !ok {
		c.Wipe()
		return nil, fmt.Errorf("device %T cannot be closed", data)
	}
	return NewVolume(dc, c, off, size, readOnly)
}
