package blkcrypt

import (
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt/internal/kdf"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// PBKDFOptions choose a keyslot's KDF: type ("pbkdf2", "argon2i",
// "argon2id"), hash, unlock time, or forced cost.
type PBKDFOptions = kdf.Options

// FormatOptions configure Format. Zero values give cryptsetup 2.7's
// defaults: LUKS2, aes-xts-plain64 with a 512-bit key, argon2id for 2 s.
type FormatOptions struct {
	Type       string // "luks2" (default) or "luks1"
	Cipher     string // default aes-xts-plain64
	KeySize    int    // volume key bytes; default 64
	SectorSize int    // LUKS2 only; 0 picks 4096 where the data area allows
	UUID       string
	Label      string // LUKS2 only
	// Size creates or extends the image file to this many bytes.
	Size  int64
	PBKDF PBKDFOptions
}

// Format creates a LUKS volume on the file at path with a random volume key
// and one keyslot for passphrase.
func Format(path string, passphrase []byte, o FormatOptions) error {
	if o.Cipher == "" {
		o.Cipher = luks1.DefaultCipher
	}
	if o.KeySize == 0 {
		o.KeySize = 64
	}
	if err := luksutil.CheckCipher(o.Cipher, o.KeySize); err != nil {
		return err
	}
	key := make([]byte, o.KeySize)
	defer clear(key)
	if err := luksutil.Random(key); err != nil {
		return err
	}
	flag := os.O_RDWR
	if o.Size > 0 {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.Size > 0 {
		if st, err := f.Stat(); err == nil && st.Size() < o.Size {
			if err := f.Truncate(o.Size); err != nil {
				return err
			}
		}
	}
	ks := luksutil.KeyslotOptions{Slot: AnySlot, PBKDF: o.PBKDF}
	dev := luksutil.File{File: f}
	switch o.Type {
	case "", "luks2":
		_, err = luks2.Format(dev, key, passphrase, luks2.FormatOptions{Cipher: o.Cipher, SectorSize: o.SectorSize, UUID: o.UUID, Label: o.Label, Keyslot: ks})
	case "luks1", "luks":
		if o.SectorSize != 0 && o.SectorSize != 512 {
			return fmt.Errorf("%w: LUKS1 has 512-byte sectors only", luksutil.ErrInvalidOptions)
		}
		_, err = luks1.Format(dev, key, passphrase, luks1.FormatOptions{Cipher: o.Cipher, UUID: o.UUID, Keyslot: ks})
	default:
		return fmt.Errorf("%w: unknown type %q", luksutil.ErrInvalidOptions, o.Type)
	}
	return err
}

// withHeader opens path read-write and reads its LUKS header.
func withHeader(path string, f func(dev luksutil.Device, h Header) error) error {
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fd.Close()
	dev := luksutil.File{File: fd}
	h, err := ReadHeader(dev)
	if err != nil {
		return err
	}
	return f(dev, h)
}

// AddKey adds a keyslot for newPassphrase, authorised by any existing
// passphrase, and returns its number.
func AddKey(path string, passphrase, newPassphrase []byte, pbkdf PBKDFOptions) (int, error) {
	slot := -1
	err := withHeader(path, func(dev luksutil.Device, h Header) error {
		key, _, err := h.Unlock(dev, passphrase, AnySlot)
		if err != nil {
			return err
		}
		defer clear(key)
		slot, err = h.AddKey(dev, key, newPassphrase, luksutil.KeyslotOptions{Slot: AnySlot, PBKDF: pbkdf})
		return err
	})
	return slot, err
}

// RemoveKey removes the keyslot that passphrase opens and returns its
// number.
func RemoveKey(path string, passphrase []byte) (int, error) {
	slot := -1
	err := withHeader(path, func(dev luksutil.Device, h Header) error {
		key, s, err := h.Unlock(dev, passphrase, AnySlot)
		if err != nil {
			return err
		}
		clear(key)
		slot = s
		return h.RemoveKey(dev, s)
	})
	return slot, err
}

// ChangeKey replaces the passphrase of the keyslot oldPassphrase opens.
func ChangeKey(path string, oldPassphrase, newPassphrase []byte, pbkdf PBKDFOptions) (int, error) {
	slot := -1
	err := withHeader(path, func(dev luksutil.Device, h Header) error {
		var err error
		slot, err = h.ChangeKey(dev, oldPassphrase, newPassphrase, AnySlot, luksutil.KeyslotOptions{Slot: AnySlot, PBKDF: pbkdf})
		return err
	})
	return slot, err
}
