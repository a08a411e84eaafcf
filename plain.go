package blkcrypt

import (
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt/sector"
)

// PlainOptions are cryptsetup's --type plain parameters.
type PlainOptions struct {
	Cipher     string // default aes-xts-plain64
	Offset     uint64 // data start on the device, 512-byte sectors (--offset)
	Skip       uint64 // IV offset, 512-byte sectors (--skip)
	Size       uint64 // data size in 512-byte sectors; 0 = to the end (--size)
	SectorSize int    // default 512
	LargeIV    bool   // --iv-large-sectors
	ReadOnly   bool
}

// OpenPlain opens a plain dm-crypt volume on the file at path with a raw
// volume key (already hashed from a passphrase if need be; see package
// plain).
func OpenPlain(path string, key []byte, o PlainOptions) (*Volume, error) {
	flag := os.O_RDWR
	if o.ReadOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	v, err := NewPlainVolume(f, key, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	return v, nil
}

// NewPlainVolume is OpenPlain over an open device.
func NewPlainVolume(dev Device, key []byte, o PlainOptions) (*Volume, error) {
	if o.Cipher == "" {
		o.Cipher = "aes-xts-plain64"
	}
	c, err := sector.New(o.Cipher, key, sector.Options{SectorSize: o.SectorSize, IVOffset: o.Skip, LargeIV: o.LargeIV})
	if err != nil {
		return nil, err
	}
	devSize, err := deviceSize(dev)
	if err != nil {
		c.Wipe()
		return nil, err
	}
	off := int64(o.Offset) * 512
	if off > devSize {
		c.Wipe()
		return nil, fmt.Errorf("device is %d bytes, smaller than the --offset of %d sectors", devSize, o.Offset)
	}
	size := devSize - off
	if o.Size != 0 {
		if int64(o.Size)*512 > size {
			c.Wipe()
			return nil, fmt.Errorf("--size of %d sectors reaches past the end of the device", o.Size)
		}
		size = int64(o.Size) * 512
	}
	size -= size % int64(c.SectorSize())
	if off%int64(c.SectorSize()) != 0 {
		c.Wipe()
		return nil, fmt.Errorf("--offset %d is not aligned to the %d-byte sector size", o.Offset, c.SectorSize())
	}
	return NewVolume(dev, c, off, size, o.ReadOnly)
}

// deviceSize finds a device's size by seeking to its end, which works for
// files and block devices alike.
func deviceSize(dev Device) (int64, error) {
	type sizer interface{ Size() (int64, error) }
	if s, ok := dev.(sizer); ok {
		return s.Size()
	}
	if f, ok := dev.(*os.File); ok {
		return f.Seek(0, 2)
	}
	return 0, fmt.Errorf("cannot tell the size of %T", dev)
}
