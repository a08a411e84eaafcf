package blkcrypt

import (
	"fmt"

	"github.com/blkcrypt/blkcrypt/integrity"
)

// What integritysetup refuses in its options before it touches a device,
// checked the same way for Open (OpenOptions.Integrity) and
// FormatIntegrity, so that a program and the command line get the same
// one-line ErrInvalidOptions.

// Check reports what is wrong with o as integritysetup open's options,
// before any device is read: the write mode, a tag or sector size no
// dm-integrity volume has, a journal key without its algorithm, a
// journal algorithm without its key. Errors are ErrInvalidOptions. Open
// checks its OpenOptions.Integrity so when the volume is a dm-integrity
// one.
func (o IntegrityOptions) Check() error {
	if o.Mode != integrity.ModeJournal && o.Mode != integrity.ModeBitmap && o.Mode != integrity.ModeDirect {
		return fmt.Errorf("%w: integrity mode %d", ErrInvalidOptions, o.Mode)
	}
	return checkIntegrityKeys(o.TagSize, o.SectorSize, o.JournalIntegrity, o.JournalIntegrityKey, o.JournalCrypt, o.JournalCryptKey)
}

// checkIntegrityKeys is what IntegrityOptions and FormatIntegrityOptions
// share: sizes (0 leaves them to the superblock or the defaults) and the
// journal's algorithms with their keys.
func checkIntegrityKeys(tagSize, sectorSize int, journalMAC string, journalMACKey []byte, journalCrypt string, journalCryptKey []byte) error {
	if tagSize < 0 || tagSize > integrity.MaxTagSize {
		return fmt.Errorf("%w: tag size %d is not between 1 and %d", ErrInvalidOptions, tagSize, integrity.MaxTagSize)
	}
	switch sectorSize {
	case 0, 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("%w: sector size %d: an integrity sector is 512, 1024, 2048 or 4096 bytes", ErrInvalidOptions, sectorSize)
	}
	for _, k := range []struct {
		what, alg string
		key       []byte
	}{
		{"journal-integrity", journalMAC, journalMACKey},
		{"journal-crypt", journalCrypt, journalCryptKey},
	} {
		switch {
		case k.key != nil && k.alg == "":
			return fmt.Errorf("%w: a %s key without a %s algorithm", ErrInvalidOptions, k.what, k.what)
		case k.alg != "" && k.key == nil:
			return fmt.Errorf("%w: %s %s needs a key", ErrInvalidOptions, k.what, k.alg)
		}
	}
	return nil
}

// Check reports what is wrong with o as integritysetup format's options,
// before the device is opened: IntegrityOptions' rules, a journal smaller
// than 4096 bytes, an interleave that is not a power of 2 from 8 to 2^31
// sectors. Errors are ErrInvalidOptions; FormatIntegrity checks o so.
func (o FormatIntegrityOptions) Check() error {
	if err := checkIntegrityKeys(o.TagSize, o.SectorSize, o.JournalIntegrity, o.JournalIntegrityKey, o.JournalCrypt, o.JournalCryptKey); err != nil {
		return err
	}
	switch {
	case o.JournalSize < 0:
		return fmt.Errorf("%w: negative journal size", ErrInvalidOptions)
	case o.JournalSize > 0 && o.JournalSize < 4096:
		return fmt.Errorf("%w: journal size %d is too small", ErrInvalidOptions, o.JournalSize)
	}
	if il := o.InterleaveSectors; il != 0 && (il < 8 || il > 1<<31 || il&(il-1) != 0) {
		return fmt.Errorf("%w: interleave %d is not a power of 2 from 8 to 2^31 sectors", ErrInvalidOptions, il)
	}
	return nil
}

// FormatOptions are the options of FormatIntegrity that make a volume o
// opens: its algorithms, keys and sizes (the write mode is not recorded
// on disk). The other fields keep their defaults.
func (o IntegrityOptions) FormatOptions() FormatIntegrityOptions {
	return FormatIntegrityOptions{
		Algorithm: o.Algorithm, Key: o.Key, TagSize: o.TagSize, SectorSize: o.SectorSize,
		JournalIntegrity: o.JournalIntegrity, JournalIntegrityKey: o.JournalIntegrityKey,
		JournalCrypt: o.JournalCrypt, JournalCryptKey: o.JournalCryptKey,
	}
}
