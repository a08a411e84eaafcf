package fvault2

import (
	"fmt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"os"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Open opens the decrypted logical volume on dev (devSize bytes) with the
// volume key: LogicalVolumeSize bytes of aes-xts-plain64 at
// LogicalVolumeOffset, sector numbers (XTS tweaks) counted in 512-byte
// units from the start of the logical volume, as cryptsetup maps it. The
// Volume owns dev and closes it.
func Open(dev blkcrypt.Device, devSize int64, m *Metadata, key []byte, readOnly bool) (*blkcrypt.Volume, error) {
	if len(key) != m.KeySize {
		return nil, fmt.Errorf("fvault2: %s takes a %d-bit volume key, not %d bits", m.CipherSpec(), m.KeySize*8, len(key)*8)
	}
	off, size := m.LogicalVolumeOffset, m.LogicalVolumeSize/512*512
	if off%512 != 0 || off > 1<<62 || size > 1<<62 {
		return nil, fmt.Errorf("%w: logical volume at %d, %d bytes", ErrCorrupt, off, size)
	}
	if devSize >= 0 && uint64(devSize) < off+size {
		return nil, fmt.Errorf("%w: the logical volume (%d bytes at %d) reaches past the end of the %d-byte device", ErrCorrupt, size, off, devSize)
	}
	c, err := sector.New(m.CipherSpec(), key, sector.Options{})
	if err != nil {
		return nil, fmt.Errorf("fvault2: %w", err)
	}
	v, err := blkcrypt.NewVolume(dev, c, int64(off), int64(size), readOnly)
	if err != nil {
		c.Wipe()
		return nil, err
	}
	return v, nil
}

// OpenFile opens the FileVault 2 volume in the file or block device at
// path with its passphrase.
func OpenFile(path string, passphrase []byte, readOnly bool) (*blkcrypt.Volume, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	v, err := func() (*blkcrypt.Volume, error) {
		m, err := Read(f)
		if err != nil {
			return nil, err
		}
		key, err := m.VolumeKey(passphrase)
		if err != nil {
			return nil, err
		}
		defer clear(key)
		size, err := DeviceSize(f)
		if err != nil {
			return nil, err
		}
		return Open(f, size, m, key, readOnly)
	}()
	if err != nil {
		f.Close()
		return nil, err
	}
	return v, nil
}

// DeviceSize is the size of a regular file or block device (the LUKS
// packages' rule, shared).
func DeviceSize(f *os.File) (int64, error) { return luksutil.File{File: f}.Size() }
