package blkcrypt

import (
	"fmt"

	"github.com/blkcrypt/blkcrypt/sector"
)

// sectorMap is all a Volume knows of a format: how a run of whole sectors
// of ciphertext becomes plaintext and back. A Volume is format-neutral:
// it reads, locks, orders, does read-modify-write and flushes; its map
// does the cryptography. The maps are one cipher (LUKS, plain, BitLocker,
// …), a cascade of ciphers (TrueCrypt/VeraCrypt), and a LUKS2
// reencryption in progress, which sends each sector to the old or the new
// key by the reencryption boundary (reencrypt_online.go). Sectors with
// per-sector metadata (LUKS2 --integrity over dm-integrity) are a map that
// also does its own I/O, sectorIO (volume_aead.go).
//
// start is the byte offset of the run in the volume, a multiple of the
// sector size; split says the run may be shared with the sector engine's
// workers (the Volume has no other request in flight). dst and src may be
// the same slice.
type sectorMap interface {
	decrypt(dst, src []byte, start int64, split bool) error
	encrypt(dst, src []byte, start int64, split bool) error
	// layers lists the ciphers, the one applied to the ciphertext first.
	layers() []*sector.Cipher
	wipe()
}

// oneCipher is a volume under one sector cipher.
type oneCipher struct{ c *sector.Cipher }

func (m oneCipher) decrypt(dst, src []byte, start int64, split bool) error {
	return decryptWith(m.c, split, dst, src, start)
}

func (m oneCipher) encrypt(dst, src []byte, start int64, split bool) error {
	return encryptWith(m.c, split, dst, src, start)
}

func (m oneCipher) layers() []*sector.Cipher { return []*sector.Cipher{m.c} }
func (m oneCipher) wipe()                    { m.c.Wipe() }

// cascade is a chain of sector ciphers over the same sectors, as dm-crypt
// stacks one device per cipher for a TrueCrypt cascade: decryption runs
// l[0] (the cipher on the device) first, encryption the reverse.
type cascade struct{ l []*sector.Cipher }

func newCascade(l []*sector.Cipher) (sectorMap, error) {
	switch len(l) {
	case 0:
		return nil, fmt.Errorf("%w: a volume without a cipher", ErrUnsupported)
	case 1:
		return oneCipher{l[0]}, nil
	}
	for _, c := range l[1:] {
		if c.SectorSize() != l[0].SectorSize() {
			return nil, fmt.Errorf("%w: a cascade of %d- and %d-byte sectors", ErrUnsupported, l[0].SectorSize(), c.SectorSize())
		}
	}
	return cascade{l}, nil
}

func (m cascade) decrypt(dst, src []byte, start int64, split bool) error {
	for _, c := range m.l {
		if err := decryptWith(c, split, dst, src, start); err != nil {
			return err
		}
		src = dst
	}
	return nil
}

func (m cascade) encrypt(dst, src []byte, start int64, split bool) error {
	for i := len(m.l) - 1; i >= 0; i-- {
		if err := encryptWith(m.l[i], split, dst, src, start); err != nil {
			return err
		}
		src = dst
	}
	return nil
}

func (m cascade) layers() []*sector.Cipher { return m.l }

func (m cascade) wipe() {
	for _, c := range m.l {
		c.Wipe()
	}
}

func encryptWith(c *sector.Cipher, split bool, dst, src []byte, start int64) error {
	if split {
		return c.EncryptSectors(dst, src, uint64(start/512))
	}
	return c.EncryptSectorsInline(dst, src, uint64(start/512))
}

func decryptWith(c *sector.Cipher, split bool, dst, src []byte, start int64) error {
	if split {
		return c.DecryptSectors(dst, src, uint64(start/512))
	}
	return c.DecryptSectorsInline(dst, src, uint64(start/512))
}
