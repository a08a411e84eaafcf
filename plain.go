package blkcrypt

import (
	"context"
	"fmt"

	"github.com/blkcrypt/blkcrypt/plain"
	"github.com/blkcrypt/blkcrypt/sector"
)

// PlainOptions are cryptsetup's --type plain parameters.
type PlainOptions struct {
	Cipher string // default aes-xts-plain64
	// Hash hashes a passphrase into the key (default plain.DefaultHash);
	// see package plain. A key file or VolumeKey is used as it is.
	Hash       string
	KeySize    int    // bytes; default plain.DefaultKeySize
	Offset     uint64 // data start on the device, 512-byte sectors (--offset)
	Skip       uint64 // IV offset, 512-byte sectors (--skip)
	Size       uint64 // data size in 512-byte sectors; 0 = to the end (--size)
	SectorSize int    // default 512
	LargeIV    bool   // --iv-large-sectors
}

// plainKey is the key of a plain volume: VolumeKey, the start of
// KeyFiles[0], or the hashed passphrase.
func plainKey(o OpenOptions) ([]byte, error) {
	p := o.Plain
	ks := p.KeySize
	if ks == 0 {
		ks = plain.DefaultKeySize
	}
	if ks < 0 || ks > 512 {
		return nil, fmt.Errorf("%w: plain key size %d bytes", ErrInvalidOptions, ks)
	}
	switch {
	case o.VolumeKey != nil:
		return append([]byte(nil), o.VolumeKey...), nil
	case len(o.KeyFiles) > 0:
		if len(o.KeyFiles[0]) < ks {
			return nil, fmt.Errorf("%w: key file holds %d bytes, the cipher needs %d", ErrInvalidOptions, len(o.KeyFiles[0]), ks)
		}
		return append([]byte(nil), o.KeyFiles[0][:ks]...), nil
	}
	h := p.Hash
	if h == "" {
		h = plain.DefaultHash
	}
	return plain.Key(h, o.Passphrase, ks)
}

func openPlain(dev Device, devSize int64, o OpenOptions) (*Volume, error) {
	p := o.Plain
	if p.Cipher == "" {
		p.Cipher = plain.DefaultCipher
	}
	key, err := plainKey(o)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	c, err := sector.New(p.Cipher, key, sector.Options{SectorSize: p.SectorSize, IVOffset: p.Skip, LargeIV: p.LargeIV})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if p.Offset > 1<<54 || p.Size > 1<<54 {
		c.Wipe()
		return nil, fmt.Errorf("%w: offset or size out of range", ErrInvalidOptions)
	}
	off := int64(p.Offset) * 512
	if off > devSize {
		c.Wipe()
		return nil, fmt.Errorf("%w: device is %d bytes, smaller than the offset of %d sectors", ErrInvalidOptions, devSize, p.Offset)
	}
	size := devSize - off
	if p.Size != 0 {
		if int64(p.Size)*512 > size {
			c.Wipe()
			return nil, fmt.Errorf("%w: the size of %d sectors reaches past the end of the device", ErrInvalidOptions, p.Size)
		}
		size = int64(p.Size) * 512
	}
	size -= size % int64(c.SectorSize())
	if off%int64(c.SectorSize()) != 0 {
		c.Wipe()
		return nil, fmt.Errorf("%w: offset %d is not aligned to the %d-byte sector size", ErrInvalidOptions, p.Offset, c.SectorSize())
	}
	return NewVolume(dev, c, off, size, o.ReadOnly)
}

// OpenPlain opens a plain dm-crypt volume on the file at path, read-write,
// with a raw volume key: Open with Type "plain" and VolumeKey.
func OpenPlain(path string, key []byte, o PlainOptions) (*Volume, error) {
	o.KeySize = len(key)
	return Open(context.Background(), path, OpenOptions{Type: TypePlain, VolumeKey: key, Plain: o})
}
