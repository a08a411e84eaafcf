package fvault2

import (
	"bytes"
	"context"
	"fmt"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/sector"
)

func init() {
	volspec.Register(volspec.Format{Name: "fvault2", Detect: Detect, Open: open, Dump: dump})
}

// dump is the dumper blkcrypt.DumpVolume uses: fvault2Dump, with the
// volume key when d.VolumeKey asks (fvault2Dump --dump-volume-key).
func dump(ctx context.Context, r *volspec.Request, d *volspec.DumpRequest) error {
	m, err := Read(r.Dev)
	if err != nil {
		return err
	}
	if !d.VolumeKey {
		return Dump(d.W, m, d.Device, nil)
	}
	key, err := unlockKey(ctx, m, r)
	if err != nil {
		return err
	}
	defer clear(key)
	if d.SaveKey != nil {
		if err := d.SaveKey(key); err != nil {
			return err
		}
	}
	return Dump(d.W, m, d.Device, key)
}

// unlockKey is the volume key: r.VolumeKey, or the one the passphrase
// (r.Passphrase, or r.KeyFiles[0]) unwraps.
func unlockKey(ctx context.Context, m *Metadata, r *volspec.Request) ([]byte, error) {
	if r.VolumeKey != nil {
		return bytes.Clone(r.VolumeKey), nil
	}
	secret := r.Passphrase
	if len(r.KeyFiles) > 0 {
		secret = r.KeyFiles[0]
	}
	// The run keeps its own copy of the secret: the caller wipes its own
	// when Open returns, which may be before an abandoned run ends.
	secret = bytes.Clone(secret)
	return kdf.Run(ctx, func() ([]byte, error) {
		defer clear(secret)
		return m.VolumeKey(secret)
	})
}

// open is the opener blkcrypt.Open uses: the volume key comes from
// r.VolumeKey or from the passphrase (r.Passphrase, or r.KeyFiles[0]).
func open(ctx context.Context, r *volspec.Request) (*volspec.Spec, error) {
	m, err := Read(r.Dev)
	if err != nil {
		return nil, err
	}
	key, err := unlockKey(ctx, m, r)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	return describe(r.DevSize, m, key)
}

// describe maps the decrypted logical volume: LogicalVolumeSize bytes of
// aes-xts-plain64 at LogicalVolumeOffset, sector numbers (XTS tweaks)
// counted in 512-byte units from the start of the logical volume, as
// cryptsetup maps it.
func describe(devSize int64, m *Metadata, key []byte) (*volspec.Spec, error) {
	if len(key) != m.KeySize {
		return nil, fmt.Errorf("%w: fvault2: %s takes a %d-bit volume key, not %d bits", volspec.ErrInvalidOptions, m.CipherSpec(), m.KeySize*8, len(key)*8)
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
		return nil, fmt.Errorf("%w: fvault2: %w", ErrUnsupported, err)
	}
	return &volspec.Spec{Layers: []*sector.Cipher{c}, Offset: int64(off), Size: int64(size)}, nil
}
