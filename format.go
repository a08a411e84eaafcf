package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// PBKDFOptions choose a new keyslot's KDF and its cost, as cryptsetup's
// --pbkdf options do: package kdf's Options, under the name the root's
// option structs use. Zero values are cryptsetup's defaults: the type's
// default (argon2id for LUKS2, pbkdf2 for LUKS1), sha256, and a benchmark
// aiming at 2 s of unlock time.
type PBKDFOptions = kdf.Options

// FormatOptions configure Format: every option of `blkcrypt format`. Zero
// values give cryptsetup's defaults: LUKS2, aes-xts-plain64 with a 512-bit
// key, argon2id benchmarked for 2 s, any free keyslot.
type FormatOptions struct {
	Type    string // "luks2" (default) or "luks1" ("luks" too)
	Cipher  string // default aes-xts-plain64
	KeySize int    // volume key bytes; default 64
	// Hash is the LUKS1 header hash, and the PBKDF2/AF hash of either
	// version (PBKDF.Hash when that is set).
	Hash       string
	SectorSize int // LUKS2 only; 0 picks 4096 where the data area allows
	// Offset is the data offset in 512-byte sectors (cryptsetup's
	// --offset); Align the alignment of the default offset in 512-byte
	// sectors (--align-payload). 0 means the default.
	Offset, Align uint64
	UUID          string
	Label         string // LUKS2 only
	Subsystem     string // LUKS2 only
	// Header is a detached header file: the header goes there (created or
	// grown as needed) and the data stays on the device.
	Header string
	// Keyslot is the first keyslot's number; nil picks a free one.
	Keyslot *int
	// Size creates or extends the image file to this many bytes. A failed
	// Format removes a file it created.
	Size int64
	// VolumeKey is the volume key to store; nil makes a random one.
	VolumeKey []byte
	PBKDF     PBKDFOptions
	// Force formats over a device (or detached header) that already holds
	// a LUKS, BitLocker or FileVault 2 header; without it that is
	// ErrWouldDestroy and nothing is written. cryptsetup asks for
	// confirmation there.
	Force bool
	// HeaderDevice is a detached header for FormatDevice, as Header is
	// for Format.
	HeaderDevice io.ReaderAt
	// Integrity makes a LUKS2 volume with authenticated sectors, as
	// cryptsetup luksFormat --integrity: "aead" (Cipher aes-gcm-random or
	// aegis128-random), "poly1305" (chacha20-random), "hmac-sha256" (and
	// hmac-sha1, hmac-sha512, with a plain-IV cipher such as
	// aes-xts-plain64; KeySize then counts the cipher's key and the HMAC
	// key). The data area becomes a dm-integrity device with every
	// sector's tag written (volume_aead.go).
	Integrity string
}

// Format creates a LUKS volume on the file or block device at path with one
// keyslot for passphrase. The device (and a detached header) is locked
// exclusively while it runs. ctx cancels it before the header is written
// (during the KDF benchmark and derivation, which run before the first
// write); a header write under way is finished. A device that holds a
// header already is refused with ErrWouldDestroy unless o.Force; an empty
// passphrase is refused.
func Format(ctx context.Context, path string, passphrase []byte, o FormatOptions) (err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.HeaderDevice != nil {
		return fmt.Errorf("%w: HeaderDevice is for FormatDevice; Format takes Header", ErrInvalidOptions)
	}
	typ, err := checkFormat(passphrase, &o)
	if err != nil {
		return err
	}
	// The image (created or grown with Size) and a detached header, both
	// removed again if Format fails after creating them.
	var dev luksutil.Device
	var grow []func() error // run once nothing can refuse any more
	if IsURI(path) {
		var d URIDevice
		if d, err = formatURI(ctx, path, o.Size); err != nil {
			return err
		}
		defer func() {
			if cerr := d.Close(); err == nil {
				err = cerr
			}
		}()
		dev = d
	} else {
		var f *os.File
		var done func(bool)
		if f, done, err = createLocked(path, o.Size > 0); err != nil {
			return err
		}
		defer func() { done(err != nil) }()
		if o.Size > 0 {
			grow = append(grow, func() error { return growFile(f, o.Size) })
		}
		if o.Header != "" && sameFile(f, o.Header) {
			o.Header = "" // the device itself: not detached
		}
		dev = luksutil.File{File: f}
	}
	if o.Header != "" {
		var hf *os.File
		// A detached header file is grown to hold the header and keyslots,
		// as cryptsetup does.
		need := int64(16 << 20)
		if typ == "luks1" {
			need = 2 << 20
		}
		var hdone func(bool)
		if hf, hdone, err = createLocked(o.Header, true); err != nil {
			return err
		}
		defer func() { hdone(err != nil) }()
		grow = append(grow, func() error { return growFile(hf, need) })
		dev = luksutil.File{File: hf}
	}
	if err = refuseOverwrite(dev, o.Force); err != nil {
		return err
	}
	for _, g := range grow {
		if err = g(); err != nil {
			return err
		}
	}
	return formatOn(ctx, dev, o.Header != "", typ, passphrase, o)
}

// FormatDevice is Format over a device the caller opened (an *os.File, an
// NBD client, memory): it must be an io.WriterAt, and is used as it is
// (Size and Header do not apply; o.HeaderDevice is a detached header).
// It takes no lock and does not close dev.
func FormatDevice(ctx context.Context, dev io.ReaderAt, passphrase []byte, o FormatOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if dev == nil {
		return fmt.Errorf("%w: a nil device", ErrInvalidOptions)
	}
	if o.Header != "" || o.Size != 0 {
		return fmt.Errorf("%w: Header and Size are for Format; FormatDevice takes HeaderDevice", ErrInvalidOptions)
	}
	typ, err := checkFormat(passphrase, &o)
	if err != nil {
		return err
	}
	target := dev
	if o.HeaderDevice != nil {
		target = o.HeaderDevice
	}
	if _, ok := target.(io.WriterAt); !ok {
		return fmt.Errorf("%w: the device is not an io.WriterAt", ErrReadOnly)
	}
	hd, err := headerDevice(target)
	if err != nil {
		return err
	}
	if err := refuseOverwrite(hd, o.Force); err != nil {
		return err
	}
	return formatOn(ctx, hd, o.HeaderDevice != nil, typ, passphrase, o)
}

// refuseOverwrite is ErrWouldDestroy for a device that holds a header a
// format would replace, unless force.
func refuseOverwrite(dev io.ReaderAt, force bool) error {
	if force {
		return nil
	}
	t, err := DetectErr(dev)
	if err != nil {
		return err
	}
	if t != "" {
		return fmt.Errorf("%w: the device holds a %s header (set Force to replace it)", ErrWouldDestroy, t)
	}
	return nil
}

// formatOn writes a new header on dev (a detached header when detached);
// o has passed checkFormat.
func formatOn(ctx context.Context, dev luksutil.Device, detached bool, typ string, passphrase []byte, o FormatOptions) (err error) {
	key := o.VolumeKey
	if key == nil {
		key = make([]byte, o.KeySize)
		defer clear(key)
		if err = luksutil.Random(key); err != nil {
			return err
		}
	}
	if err = ctx.Err(); err != nil {
		return err
	}
	ks := luksutil.KeyslotOptions{Slot: o.Keyslot, PBKDF: o.PBKDF}
	if typ == "luks2" {
		var h2 *luks2.Header
		h2, err = luks2.FormatContext(ctx, dev, key, passphrase, luks2.FormatOptions{
			Cipher: o.Cipher, SectorSize: o.SectorSize, UUID: o.UUID, Label: o.Label, Subsystem: o.Subsystem,
			DataOffset: o.Offset * 512, Align: o.Align * 512, Detached: detached, Keyslot: ks, Integrity: o.Integrity,
		})
		if err == nil && o.Integrity != "" {
			err = formatIntegrity(dev, h2, key) // volume_aead.go
		}
	} else {
		_, err = luks1.FormatContext(ctx, dev, key, passphrase, luks1.FormatOptions{
			Cipher: o.Cipher, Hash: o.Hash, UUID: o.UUID, PayloadOffset: uint32(o.Offset), Align: uint32(o.Align),
			Detached: detached, Keyslot: ks,
		})
	}
	return err
}

// checkFormat validates o, fills its defaults and returns the LUKS version
// ("luks1" or "luks2"), before anything is opened.
func checkFormat(passphrase []byte, o *FormatOptions) (string, error) {
	typ := o.Type
	switch typ {
	case "", "luks2":
		typ = "luks2"
	case "luks", "luks1":
		typ = "luks1"
	default:
		return "", fmt.Errorf("%w: unknown type %q for format", ErrInvalidOptions, o.Type)
	}
	if len(passphrase) == 0 {
		return "", fmt.Errorf("%w: an empty passphrase", ErrInvalidOptions)
	}
	if o.Cipher == "" {
		o.Cipher = luks1.DefaultCipher
	}
	if o.KeySize == 0 {
		o.KeySize = 64
		if o.VolumeKey != nil {
			o.KeySize = len(o.VolumeKey)
		}
	}
	if o.KeySize < 0 || o.KeySize > 512 {
		return "", fmt.Errorf("%w: key size %d bits", ErrInvalidOptions, o.KeySize*8)
	}
	if o.VolumeKey != nil && len(o.VolumeKey) != o.KeySize {
		return "", fmt.Errorf("%w: volume key of %d bytes for a %d-byte key size", ErrInvalidOptions, len(o.VolumeKey), o.KeySize)
	}
	if err := checkFormatCipher(o, typ); err != nil { // volume_aead.go
		return "", fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if o.PBKDF.Hash == "" {
		o.PBKDF.Hash = o.Hash
	}
	if err := o.PBKDF.Check(map[string]string{"luks1": kdf.PBKDF2, "luks2": kdf.Argon2id}[typ]); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if o.Size < 0 {
		return "", fmt.Errorf("%w: negative size", ErrInvalidOptions)
	}
	if typ == "luks1" {
		switch {
		case o.SectorSize != 0 && o.SectorSize != 512:
			return "", fmt.Errorf("%w: LUKS1 has 512-byte sectors only", ErrInvalidOptions)
		case o.Label != "" || o.Subsystem != "":
			return "", fmt.Errorf("%w: a label or subsystem needs LUKS2", ErrInvalidOptions)
		case o.Offset > 1<<32-1 || o.Align > 1<<32-1:
			return "", fmt.Errorf("%w: LUKS1 offset and alignment are 32-bit sector counts", ErrInvalidOptions)
		}
	}
	if k := o.Keyslot; k != nil {
		n := map[string]int{"luks1": luks1.NumKeyslots, "luks2": luks2.MaxKeyslots}[typ]
		if *k < 0 || *k >= n {
			return "", fmt.Errorf("%w: keyslot %d (%s has keyslots 0-%d)", luksutil.ErrInvalidSlot, *k, strings.ToUpper(typ), n-1)
		}
	}
	if o.Offset > 1<<54 || o.Align > 1<<54 {
		return "", fmt.Errorf("%w: offset or alignment out of range", ErrInvalidOptions)
	}

	return typ, nil
}

// createLocked opens path read-write and locked, creating it when create
// is set. done(failed) unlocks and closes it, and removes it when failed
// and it did not exist before.
func createLocked(path string, create bool) (*os.File, func(failed bool), error) {
	flag := os.O_RDWR
	created := false
	if create {
		flag |= os.O_CREATE
		_, serr := os.Stat(path)
		created = errors.Is(serr, os.ErrNotExist)
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, nil, err
	}
	release := func() {}
	done := func(failed bool) {
		release()
		f.Close()
		if failed && created {
			os.Remove(path)
		}
	}
	if release, err = lockFile(f, true); err != nil {
		release = func() {}
		done(true)
		return nil, nil, err
	}
	return f, done, nil
}

// growFile extends a regular file to size bytes (block devices stay as
// they are).
func growFile(f *os.File, size int64) error {
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() < size {
		return f.Truncate(size)
	}
	return nil
}

// AddKey adds a keyslot for newPassphrase, authorised by any existing
// passphrase, and returns its number: OpenLUKS, LUKS.AddKey and Close.
func AddKey(ctx context.Context, path string, passphrase, newPassphrase []byte, pbkdf PBKDFOptions) (int, error) {
	h, err := OpenLUKS(ctx, path, LUKSOptions{})
	if err != nil {
		return -1, err
	}
	defer h.Close()
	return h.AddKey(ctx, passphrase, newPassphrase, KeyOptions{PBKDF: pbkdf})
}

// RemoveKey removes the keyslot that passphrase opens and returns its
// number: OpenLUKS, LUKS.RemoveKey and Close. The last keyslot is refused
// with ErrWouldDestroy; LUKS.RemoveKey with KeyOptions.Force removes it.
func RemoveKey(ctx context.Context, path string, passphrase []byte) (int, error) {
	h, err := OpenLUKS(ctx, path, LUKSOptions{})
	if err != nil {
		return -1, err
	}
	defer h.Close()
	return h.RemoveKey(ctx, passphrase, KeyOptions{})
}
