package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Header is a LUKS1 or LUKS2 header (*luks1.Header or *luks2.Header): what
// both versions answer. Use the version's own type for the rest (adding
// keys, tokens, labels).
type Header interface {
	Version() int
	UUID() string
	// Cipher is the data cipher in cryptsetup form, "aes-xts-plain64".
	Cipher() string
	KeySize() int    // volume key bytes
	SectorSize() int // data encryption unit (512 for LUKS1)
	// DataOffset is where the encrypted payload starts, in bytes; DataSize
	// its size on a device of devSize bytes.
	DataOffset() int64
	DataSize(devSize int64) int64
	// ActiveKeyslots lists the keyslots in use, ascending.
	ActiveKeyslots() []int
	// Unlock and UnlockContext derive the volume key from a passphrase,
	// trying slot only or every usable keyslot when slot is -1; they
	// return the key (wipe it) and the keyslot that opened.
	Unlock(dev HeaderDevice, passphrase []byte, slot int) ([]byte, int, error)
	UnlockContext(ctx context.Context, dev HeaderDevice, passphrase []byte, slot int) ([]byte, int, error)
	// VolumeKeyDigestOK reports whether key is this volume's key.
	VolumeKeyDigestOK(key []byte) bool
	// RemoveKey disables a keyslot and wipes its key material.
	RemoveKey(dev HeaderDevice, slot int) error
}

// HeaderDevice is what a LUKS header lives on (luks1.Device, luks2.Device).
type HeaderDevice = luks1.Device

// ReadHeader reads and validates the LUKS header on dev, whatever its
// version: any io.ReaderAt whose size DeviceSize finds (a read-only file
// or memory will do). A device with no LUKS header gives ErrNotLUKS, one
// too small to hold the header it starts ErrDeviceTooSmall.
func ReadHeader(dev io.ReaderAt) (Header, error) {
	return ReadHeaderContext(context.Background(), dev)
}

// ReadHeaderContext is ReadHeader that stops parsing, with ctx's error in
// the chain, when ctx ends: a hostile LUKS2 header may hold megabytes of
// JSON.
func ReadHeaderContext(ctx context.Context, dev io.ReaderAt) (Header, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: a nil device", ErrInvalidOptions)
	}
	hd, err := headerDevice(dev)
	if err != nil {
		return nil, err
	}
	h, err := readHeader(ctx, hd)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func readHeader(ctx context.Context, dev HeaderDevice) (luksutil.Header, error) {
	h1, err1 := luks1.Read(dev)
	if err1 == nil {
		return h1, nil
	}
	h2, err2 := luks2.ReadContext(ctx, dev)
	if err2 == nil {
		return h2, nil
	}
	if !errors.Is(err1, luksutil.ErrNotLUKS) {
		return nil, err1
	}
	return nil, err2
}

// readerDevice gives a read-only io.ReaderAt of known size the
// HeaderDevice methods.
type readerDevice struct {
	io.ReaderAt
	size int64
}

func (d readerDevice) WriteAt([]byte, int64) (int, error) { return 0, ErrReadOnly }
func (d readerDevice) Sync() error                        { return nil }
func (d readerDevice) Size() (int64, error)               { return d.size, nil }

func keyslotArg(k *int) int {
	if k == nil {
		return luksutil.AnySlot
	}
	return *k
}

// unlockLUKS returns the volume key of h from o (VolumeKey, KeyFiles[0] or
// Passphrase) and the keyslot that opened (-1 for a volume key).
func unlockLUKS(ctx context.Context, h luksutil.Header, hdr HeaderDevice, o OpenOptions) ([]byte, int, error) {
	if o.VolumeKey != nil {
		if !h.VolumeKeyDigestOK(o.VolumeKey) {
			return nil, -1, luksutil.ErrWrongKey
		}
		return append([]byte(nil), o.VolumeKey...), -1, nil
	}
	pass := o.Passphrase
	if len(o.KeyFiles) > 0 {
		pass = o.KeyFiles[0]
	}
	return h.UnlockContext(ctx, hdr, pass, keyslotArg(o.Keyslot))
}

func openLUKS(ctx context.Context, dev Device, size int64, typ string, o OpenOptions) (*Volume, error) {
	var hdr HeaderDevice = readerDevice{dev, size}
	if o.HeaderDevice != nil {
		hsize, err := DeviceSize(o.HeaderDevice)
		if err != nil {
			return nil, err
		}
		hdr = readerDevice{o.HeaderDevice, hsize}
	}
	h, err := readHeader(ctx, hdr)
	if err != nil {
		return nil, err
	}
	if got := fmt.Sprintf("luks%d", h.Version()); typ != "luks" && typ != got {
		return nil, fmt.Errorf("%w: the device holds %s, not %s", ErrNotLUKS, got, typ)
	}
	if h2, ok := h.(*luks2.Header); ok && (o.Reencrypt != nil || h2.ReencryptionStatus() != nil) {
		return openLUKS2Online(ctx, h2, dev, size, o)
	}
	if o.Reencrypt != nil {
		return nil, fmt.Errorf("%w: reencryption is for LUKS2 volumes", ErrUnsupported)
	}
	key, _, err := unlockLUKS(ctx, h, hdr, o)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	v, err := luksVolume(h, dev, size, key, o.ReadOnly)
	if err != nil {
		return nil, err
	}
	v.typ = fmt.Sprintf("luks%d", h.Version())
	return v, nil
}

// luksVolume makes the decrypted view of a LUKS payload on data.
func luksVolume(h luksutil.Header, data Device, devSize int64, key []byte, readOnly bool) (*Volume, error) {
	if it, ok := h.(interface{ IntegrityType() string }); ok && it.IntegrityType() != "" {
		return aeadVolume(h, it.IntegrityType(), data, devSize, key, readOnly) // volume_aead.go
	}
	var ivOff uint64
	if t, ok := h.(interface{ IVTweak() uint64 }); ok {
		ivOff = t.IVTweak() // LUKS2 segment iv_tweak, dm-crypt's iv_offset
	}
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize(), IVOffset: ivOff})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", luksutil.ErrUnsupported, err)
	}
	off, size := h.DataOffset(), h.DataSize(devSize)
	if size <= 0 || off+size > devSize {
		c.Wipe()
		return nil, fmt.Errorf("%w: the data area (offset %d) does not fit a %d-byte device", luksutil.ErrDeviceTooSmall, off, devSize)
	}
	size -= size % int64(c.SectorSize())
	return NewVolume(data, c, off, size, readOnly)
}
