// Package luksutil holds what the luks1 and luks2 packages share: the
// Device they read and write, their sentinel errors, the Header interface
// both implement (for the volume layer), keyslot options, random UUIDs and
// the keyslot-area crypto (KDF → sector cipher → AF merge).
package luksutil

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/af"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Device is what a LUKS header lives on: random-access reads and writes,
// a durability barrier and a size. *os.File works through File. Every
// write goes through WriteAt and is followed by Sync at the points where
// ordering matters for crash safety.
//
// It is an alias of an unnamed interface type, which luks1.Device and
// luks2.Device spell out too: the same type under every name, with no
// internal package in the public signatures.
type Device = interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Size() (int64, error)
}

// File adapts an *os.File (regular file or block device) to Device.
type File struct{ *os.File }

// Size returns the file size, or the block device size.
func (f File) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Mode().IsRegular() {
		return st.Size(), nil
	}
	return f.Seek(0, io.SeekEnd)
}

// Sentinel errors shared by luks1 and luks2 (each package re-exports
// them). Error messages never contain passphrases or keys.
var (
	// ErrNotLUKS means the device has no LUKS header of the expected
	// version (wrong magic or version field).
	ErrNotLUKS = volspec.Sub("not a LUKS device", volspec.ErrNoHeader)
	// ErrCorruptHeader means a header that is damaged or fails validation.
	ErrCorruptHeader = volspec.Sub("corrupt LUKS header", volspec.ErrCorrupt)
	// ErrUnsupported means a valid header that uses something this
	// implementation cannot do (an unavailable cipher or hash, a KDF type,
	// reencryption in progress).
	ErrUnsupported = volspec.Sub("unsupported LUKS feature", volspec.ErrUnsupported)
	// ErrWrongPassphrase means no keyslot could be unlocked with the
	// passphrase.
	ErrWrongPassphrase = volspec.ErrWrongPassphrase
	// ErrNoFreeSlot means every keyslot (or all keyslot area space) is
	// used. It and the other keyslot errors match ErrInvalidOptions.
	ErrNoFreeSlot = volspec.Sub("no free keyslot", volspec.ErrInvalidOptions)
	// ErrInvalidSlot means a keyslot number out of range.
	ErrInvalidSlot = volspec.Sub("invalid keyslot number", volspec.ErrInvalidOptions)
	// ErrSlotInactive means the keyslot is not in use.
	ErrSlotInactive = volspec.Sub("keyslot is not active", volspec.ErrInvalidOptions)
	// ErrSlotInUse means the requested keyslot is already active.
	ErrSlotInUse = volspec.Sub("keyslot is already in use", volspec.ErrInvalidOptions)
	// ErrWrongKey means a volume key that does not match the header digest.
	ErrWrongKey = volspec.Sub("volume key does not match the header digest", volspec.ErrWrongPassphrase)
	// ErrReadOnly means the header may be read but not modified (unknown
	// mandatory requirements).
	ErrReadOnly = volspec.Sub("LUKS header is read-only", volspec.ErrReadOnly)
	// ErrDeviceTooSmall means the device cannot hold the header or data.
	ErrDeviceTooSmall = volspec.ErrDeviceTooSmall
	// ErrInvalidOptions means bad format or keyslot options.
	ErrInvalidOptions = volspec.Sub("invalid LUKS options", volspec.ErrInvalidOptions)
)

// AnySlot asks for any keyslot: the first that unlocks, or the first free.
const AnySlot = keyslot.AnySlot

// KeyslotOptions configure a new keyslot; see keyslot.Options.
type KeyslotOptions = keyslot.Options

// Priority of a LUKS2 keyslot; see keyslot.Priority.
type Priority = keyslot.Priority

// Priorities; see keyslot.PriorityUnset and the others.
const (
	PriorityUnset  = keyslot.PriorityUnset
	PriorityIgnore = keyslot.PriorityIgnore
	PriorityNormal = keyslot.PriorityNormal
	PriorityPrefer = keyslot.PriorityPrefer
)

// PriorityFromDisk maps a stored number to a Priority (ok false if bogus).
func PriorityFromDisk(v int) (Priority, bool) { return keyslot.PriorityFromDisk(v) }

// Header is what both *luks1.Header and *luks2.Header implement, for code
// that handles either version. Offsets and sizes are in bytes.
type Header interface {
	Version() int
	UUID() string
	// Cipher is the data cipher in cryptsetup form, "aes-xts-plain64".
	Cipher() string
	// KeySize is the volume key size in bytes.
	KeySize() int
	// SectorSize is the data encryption unit (512 for LUKS1).
	SectorSize() int
	// DataOffset is where the encrypted payload starts.
	DataOffset() int64
	// DataSize is the payload size on a device of devSize bytes.
	DataSize(devSize int64) int64
	// ActiveKeyslots lists the keyslots in use, ascending.
	ActiveKeyslots() []int
	// Unlock derives the volume key from a passphrase, trying slot only
	// or every usable keyslot when slot is AnySlot. It returns the key and
	// the slot that opened, or ErrWrongPassphrase.
	Unlock(dev Device, passphrase []byte, slot int) ([]byte, int, error)
	// UnlockContext is Unlock that returns with ctx's error (in the chain)
	// when ctx ends during a key derivation or between keyslots.
	UnlockContext(ctx context.Context, dev Device, passphrase []byte, slot int) ([]byte, int, error)
	// VolumeKeyDigestOK reports whether key is this volume's key.
	VolumeKeyDigestOK(key []byte) bool
	// AddKey stores volumeKey under a new passphrase and returns the slot.
	AddKey(dev Device, volumeKey, passphrase []byte, opts KeyslotOptions) (int, error)
	// AddKeyContext is AddKey whose KDF stops, writing nothing, when ctx
	// ends.
	AddKeyContext(ctx context.Context, dev Device, volumeKey, passphrase []byte, opts KeyslotOptions) (int, error)
	// ChangeKey replaces the passphrase of the keyslot that oldPassphrase
	// opens (only slot, unless AnySlot) and returns the new slot number.
	ChangeKey(dev Device, oldPassphrase, newPassphrase []byte, slot int, opts KeyslotOptions) (int, error)
	// ChangeKeyContext is ChangeKey whose KDFs stop, writing nothing, when
	// ctx ends.
	ChangeKeyContext(ctx context.Context, dev Device, oldPassphrase, newPassphrase []byte, slot int, opts KeyslotOptions) (int, error)
	// RemoveKey disables a keyslot and wipes its key material.
	RemoveKey(dev Device, slot int) error
}

// NewUUID returns a random (version 4) UUID in lowercase text form.
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// CheckUUID validates a UUID given by the user and returns it lowercased.
func CheckUUID(u string) (string, error) {
	if !uuidRE.MatchString(u) {
		return "", fmt.Errorf("%w: wrong LUKS UUID format provided", ErrInvalidOptions)
	}
	return strings.ToLower(u), nil
}

// ConstantTimeEqual compares two digests without leaking where they differ.
func ConstantTimeEqual(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }

// Random fills b from the system CSPRNG.
func Random(b []byte) error {
	_, err := rand.Read(b)
	return err
}

// CheckCipher verifies that a cipher spec with a key of keyLen bytes can be
// built (the cipher, mode, IV generator and hash all exist).
func CheckCipher(spec string, keyLen int) error {
	key := make([]byte, keyLen)
	c, err := sector.New(spec, key, sector.Options{SectorSize: 512})
	if err != nil {
		return err
	}
	c.Wipe()
	return nil
}

// AreaSpec describes one keyslot's stored material.
type AreaSpec struct {
	Cipher  string // keyslot area cipher spec
	KeySize int    // area key size (the KDF output length)
	Offset  int64  // byte offset of the area on the device
	KeyLen  int    // length of the stored (volume) key
	Stripes int
	AFHash  string
}

// MaterialLen is the on-disk length of the split key, in whole sectors.
func (a AreaSpec) MaterialLen() int { return af.Sectors(a.KeyLen, a.Stripes) * 512 }

// OpenArea derives the area key from passphrase with p, reads and decrypts
// the area and merges the stripes. It returns the candidate key (to be
// checked against a digest by the caller). Errors wrap ErrUnsupported for
// missing algorithms.
func OpenArea(dev Device, a AreaSpec, p kdf.Params, salt, passphrase []byte) ([]byte, error) {
	return OpenAreaContext(context.Background(), dev, a, p, salt, passphrase)
}

// OpenAreaContext is OpenArea that returns with ctx's error (in the chain)
// when ctx ends during the key derivation.
func OpenAreaContext(ctx context.Context, dev Device, a AreaSpec, p kdf.Params, salt, passphrase []byte) ([]byte, error) {
	h, err := kdf.HashFunc(a.AFHash)
	if err != nil {
		return nil, fmt.Errorf("%w: AF hash: %w", ErrUnsupported, err)
	}
	if a.Stripes < 1 || a.KeyLen < 1 || a.KeyLen > 4096 || a.Stripes > 1<<20 {
		return nil, fmt.Errorf("%w: keyslot with %d stripes of %d bytes", ErrCorruptHeader, a.Stripes, a.KeyLen)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	dk, err := kdf.DeriveContext(ctx, p, passphrase, salt, a.KeySize)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	defer clear(dk)
	c, err := sector.New(a.Cipher, dk, sector.Options{SectorSize: 512})
	if err != nil {
		return nil, fmt.Errorf("%w: keyslot cipher %s: %w", ErrUnsupported, a.Cipher, err)
	}
	defer c.Wipe()
	buf := make([]byte, a.MaterialLen())
	defer clear(buf)
	if _, err := dev.ReadAt(buf, a.Offset); err != nil {
		return nil, fmt.Errorf("reading keyslot area at %d: %w", a.Offset, err)
	}
	if err := c.DecryptSectors(buf, buf, 0); err != nil {
		return nil, fmt.Errorf("%w: keyslot cipher %s: %w", ErrUnsupported, a.Cipher, err)
	}
	key := make([]byte, a.KeyLen)
	if err := af.Merge(key, buf, a.Stripes, h); err != nil {
		return nil, err
	}
	return key, nil
}

// SealArea derives the area key from passphrase, splits key into stripes,
// encrypts the material and returns it, ready to be written at a.Offset.
func SealArea(a AreaSpec, p kdf.Params, salt, passphrase, key []byte) ([]byte, error) {
	return SealAreaContext(context.Background(), a, p, salt, passphrase, key)
}

// SealAreaContext is SealArea whose key derivation stops, with ctx's error
// in the chain, when ctx ends.
func SealAreaContext(ctx context.Context, a AreaSpec, p kdf.Params, salt, passphrase, key []byte) ([]byte, error) {
	h, err := kdf.HashFunc(a.AFHash)
	if err != nil {
		return nil, fmt.Errorf("%w: AF hash: %w", ErrUnsupported, err)
	}
	dk, err := kdf.DeriveContext(ctx, p, passphrase, salt, a.KeySize)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	defer clear(dk)
	c, err := sector.New(a.Cipher, dk, sector.Options{SectorSize: 512})
	if err != nil {
		return nil, fmt.Errorf("%w: keyslot cipher %s: %w", ErrUnsupported, a.Cipher, err)
	}
	defer c.Wipe()
	buf := make([]byte, a.MaterialLen())
	if err := af.Split(buf, key, a.Stripes, h, nil); err != nil {
		clear(buf)
		return nil, err
	}
	if err := c.EncryptSectors(buf, buf, 0); err != nil {
		clear(buf)
		return nil, fmt.Errorf("%w: keyslot cipher %s: %w", ErrUnsupported, a.Cipher, err)
	}
	return buf, nil
}

// WriteSync writes b at off and syncs the device.
func WriteSync(dev Device, b []byte, off int64) error {
	if _, err := dev.WriteAt(b, off); err != nil {
		return err
	}
	return dev.Sync()
}

// WipeArea overwrites n bytes at off with random data and syncs, as
// cryptsetup does for a destroyed keyslot.
//
// The bytes are an AES-256-CTR keystream under a key and IV from the
// system CSPRNG: as unpredictable, and many times faster than getrandom
// (or ChaCha8 from math/rand) for the 16 MiB area a finished
// reencryption wipes, 30 ms of its profile before.
func WipeArea(dev Device, off int64, n int) error {
	var seed [32 + aes.BlockSize]byte
	if err := Random(seed[:]); err != nil {
		return err
	}
	blk, err := aes.NewCipher(seed[:32])
	if err != nil {
		return err
	}
	stream := cipher.NewCTR(blk, seed[32:])
	clear(seed[:])
	buf := make([]byte, min(n, 1<<20))
	for done := 0; done < n; {
		k := min(len(buf), n-done)
		clear(buf[:k])
		stream.XORKeyStream(buf[:k], buf[:k])
		if _, err := dev.WriteAt(buf[:k], off+int64(done)); err != nil {
			return err
		}
		done += k
	}
	return dev.Sync()
}
