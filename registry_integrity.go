package blkcrypt

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/sector"
)

// The registry's entry for standalone dm-integrity volumes (integritysetup's
// volumes, --type integrity): no encryption, a checksum or MAC per sector
// that the kernel stores beside the data. The Volume reads and writes
// through package integrity (a sector map with its own I/O, as the LUKS2
// AEAD map in volume_aead.go): every read is checked, every write keeps
// data and tag together (through the journal by default, as the kernel's
// J mode), and a sector whose tag does not match is an *IntegrityError.

// TypeIntegrity is a standalone dm-integrity volume (integritysetup;
// blkid's TYPE="DM_integrity").
const TypeIntegrity = "integrity"

// IntegrityOptions are integritysetup open's parameters of a standalone
// dm-integrity volume (OpenOptions.Integrity). The layout (tag size,
// sector size, interleave, journal) is the superblock's; what the
// superblock does not record (the algorithms and keys) must be given as
// integritysetup needs them.
type IntegrityOptions struct {
	// Algorithm is the tag algorithm, integritysetup's --integrity:
	// crc32c (the default, as integritysetup's), crc32, sha1, sha256,
	// sha512, hmac-sha1, hmac-sha256, hmac-sha512 (the kernel's
	// hmac(sha256) spelling works too).
	Algorithm string
	// Key is the HMAC key of a keyed Algorithm (--integrity-key-file).
	Key []byte
	// JournalIntegrity and JournalIntegrityKey are the journal's MAC
	// (--journal-integrity, --journal-integrity-key-file), needed when the
	// volume was formatted with one.
	JournalIntegrity    string
	JournalIntegrityKey []byte
	// JournalCrypt and JournalCryptKey decrypt the journal of a volume
	// formatted with --journal-crypt (ctr-aes, chacha20, cbc-aes).
	JournalCrypt    string
	JournalCryptKey []byte
	// Mode is how writes reach the disk: integrity.ModeJournal (the
	// default), ModeBitmap (--integrity-bitmap-mode) or ModeDirect
	// (--integrity-no-journal: no protection against a power cut between
	// a sector and its tag).
	Mode integrity.Mode
	// TagSize and SectorSize, when not zero, must match the superblock
	// (--tag-size, --sector-size).
	TagSize, SectorSize int
}

// integrityFormat is the registry entry (registry.go's formats lists it).
var integrityFormat = &volumeFormat{
	VolumeType: VolumeType{Name: TypeIntegrity, Description: "dm-integrity", Signature: true, Dump: true},
	open:       openIntegrityCall,
	dump:       dumpIntegrity,
}

// isIntegrity reports whether head starts with a dm-integrity superblock
// of a version the kernel knows (blkid's DM_integrity probe: the magic
// and a version from 1 up).
func isIntegrity(head []byte) bool {
	return len(head) >= 9 && bytes.Equal(head[:8], []byte("integrt\x00")) && head[8] >= 1 && head[8] <= 6
}

func openIntegrityCall(_ context.Context, c *openCall) (*Volume, error) {
	if c.header != nil {
		return nil, fmt.Errorf("%w: a dm-integrity volume has no detached header", ErrInvalidOptions)
	}
	o := c.o.Integrity
	if err := o.Check(); err != nil {
		return nil, err
	}
	alg := o.Algorithm
	if alg == "" {
		alg = "crc32c"
	}
	iv, err := integrity.Open(c.dev, integrity.Options{
		Algorithm: alg, Key: o.Key,
		JournalMAC: o.JournalIntegrity, JournalMACKey: o.JournalIntegrityKey,
		JournalCrypt: o.JournalCrypt, JournalCryptKey: o.JournalCryptKey,
		Mode: o.Mode, ReadOnly: c.o.ReadOnly, TagSize: o.TagSize, SectorSize: o.SectorSize,
		DeviceSize: c.size,
	})
	if err != nil {
		return nil, integrityOpenErr(err)
	}
	ss := int64(iv.SectorSize())
	v := &Volume{dev: &integrityDevice{iv: iv, dev: c.dev}, off: 0, size: iv.Size() / ss * ss, ss: ss, readOnly: c.o.ReadOnly}
	m := &integrityMap{iv: iv}
	v.m, v.sio = m, m
	return v, nil
}

// integrityOpenErr gives package integrity's errors the root's sentinels,
// keeping the cause: no superblock is ErrNoHeader, an unsupported feature
// ErrUnsupported, anything else about the volume's metadata ErrCorrupt
// unless it is an I/O error or a wrong option.
func integrityOpenErr(err error) error {
	switch {
	case errors.Is(err, integrity.ErrNotIntegrity):
		return fmt.Errorf("%w: %w", ErrNoHeader, err)
	case errors.Is(err, integrity.ErrUnsupported):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	case errors.Is(err, integrity.ErrJournal):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// integrityMap is the sector map of a standalone dm-integrity volume: no
// cipher, the data as it is, each sector checked against its tag on read
// and written with its tag (sectorIO).
type integrityMap struct {
	iv *integrity.Volume
}

func (m *integrityMap) decrypt(dst, src []byte, start int64, split bool) error {
	return errors.New("blkcrypt: an integrity volume's sectors are read through its map")
}

func (m *integrityMap) encrypt(dst, src []byte, start int64, split bool) error {
	return errors.New("blkcrypt: an integrity volume's sectors are written through its map")
}

func (m *integrityMap) layers() []*sector.Cipher { return nil }
func (m *integrityMap) wipe()                    {}

func (m *integrityMap) readSectors(dst []byte, start int64) error {
	ss := int64(m.iv.SectorSize())
	err := m.iv.ReadSectors(dst, nil, uint64(start/ss))
	var se *integrity.SectorError
	if errors.As(err, &se) {
		return &IntegrityError{Sector: se.Sector, Offset: int64(se.Sector) * 512}
	}
	return err
}

func (m *integrityMap) writeSectors(src []byte, start int64) error {
	ss := int64(m.iv.SectorSize())
	return m.iv.WriteSectors(src, nil, uint64(start/ss))
}

// dumpIntegrity prints integritysetup dump's text for the superblock.
func dumpIntegrity(_ context.Context, c *openCall, d *volspec.DumpRequest, _ DumpVolumeOptions) error {
	sb, err := integrity.ReadSuperblock(c.dev)
	if err != nil {
		return integrityOpenErr(err)
	}
	return integrity.Dump(d.W, sb, d.Device)
}

// FormatIntegrityOptions describe a new standalone dm-integrity volume,
// with integritysetup format's defaults for every zero field.
type FormatIntegrityOptions struct {
	// Algorithm (--integrity, default crc32c) and Key (--integrity-key-file
	// for hmac-*).
	Algorithm string
	Key       []byte
	// TagSize (--tag-size) defaults to the algorithm's digest size;
	// SectorSize (--sector-size) to 512.
	TagSize, SectorSize int
	// JournalSize (--journal-size, bytes) defaults to the kernel's: the
	// device's size/128, at most 64 MiB.
	JournalSize int64
	// InterleaveSectors (--interleave-sectors) defaults to 32768.
	InterleaveSectors uint64
	// JournalIntegrity/JournalIntegrityKey and JournalCrypt/JournalCryptKey
	// as in IntegrityOptions.
	JournalIntegrity    string
	JournalIntegrityKey []byte
	JournalCrypt        string
	JournalCryptKey     []byte
	// NoWipe (--no-wipe) leaves the data and tags as they are: until
	// written, sectors read as integrity errors, as after integritysetup
	// format --no-wipe.
	NoWipe bool
	// Force formats over a device whose first 4 KiB are not zero (the
	// command line asks first, as integritysetup does).
	Force bool
}

// FormatIntegrity creates a standalone dm-integrity volume on the file or
// block device at path, offline, as integritysetup format leaves it (the
// data zeroed and every tag computed unless NoWipe, an empty journal, the
// superblock written last), under the exclusive lock. Without Force it
// refuses a device whose first 4 KiB hold anything (integrity.ErrNotEmpty,
// which is ErrInvalidOptions too). Options Check refuses are refused
// before the device is opened.
func FormatIntegrity(ctx context.Context, path string, o FormatIntegrityOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if IsURI(path) {
		return fmt.Errorf("%w: FormatIntegrity on a URI device", ErrUnsupported)
	}
	if err := o.Check(); err != nil {
		return err
	}
	f, release, err := openLocked(path, false)
	if err != nil {
		return err
	}
	defer f.Close()
	defer release()
	size, err := DeviceSize(f)
	if err != nil {
		return err
	}
	_, err = integrity.Format(f, integrity.FormatOptions{
		Algorithm: o.Algorithm, Key: o.Key, TagSize: o.TagSize, SectorSize: o.SectorSize,
		JournalSectors: uint64(o.JournalSize) >> 9, InterleaveSectors: o.InterleaveSectors,
		JournalMAC: o.JournalIntegrity, JournalMACKey: o.JournalIntegrityKey,
		JournalCrypt: o.JournalCrypt, JournalCryptKey: o.JournalCryptKey,
		NoWipe: o.NoWipe, Force: o.Force, DeviceSize: size,
	})
	switch {
	case errors.Is(err, integrity.ErrNotEmpty):
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	case errors.Is(err, integrity.ErrUnsupported):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	case err != nil:
		return err
	}
	return f.Sync()
}

// IntegrityVolume reports whether v is a standalone dm-integrity volume and
// its superblock (what integritysetup status and dump show).
func (v *Volume) IntegrityVolume() (integrity.Superblock, bool) {
	if !v.usable() {
		return integrity.Superblock{}, false
	}
	if m, ok := v.m.(*integrityMap); ok {
		return m.iv.Superblock(), true
	}
	return integrity.Superblock{}, false
}
