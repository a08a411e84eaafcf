package blkcrypt

import (
	"errors"
	"fmt"

	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// ErrIntegrity is the error of a sector whose authentication tag (or
// dm-integrity checksum) does not verify: tampering or bit rot, where the
// kernel returns EILSEQ. It is the same sentinel as integrity.ErrIntegrity
// and always comes inside an *IntegrityError naming the sector; the
// request returns no plaintext of that sector.
var ErrIntegrity = integrity.ErrIntegrity

// IntegrityError names the sector that failed its check.
type IntegrityError struct {
	// Offset is the sector's byte offset in the volume; Sector the same
	// in 512-byte units (dm-crypt's "INTEGRITY AEAD ERROR, sector N").
	Offset int64
	Sector uint64
}

func (e *IntegrityError) Error() string {
	return fmt.Sprintf("integrity: sector %d (byte offset %d) does not verify", e.Sector, e.Offset)
}

// Unwrap makes errors.Is(err, ErrIntegrity) true.
func (e *IntegrityError) Unwrap() error { return ErrIntegrity }

// aeadMap is the sector map of a LUKS2 volume made with --integrity: the
// data area is a dm-integrity device whose per-sector tags hold the AEAD
// metadata (tag, then IV). It does its own I/O (sectorIO): a sector and
// its metadata are read together and written together, through the
// integrity volume's journal, so a power cut leaves either the old or the
// new pair, both verifying.
type aeadMap struct {
	a  *sector.AEAD
	iv *integrity.Volume
}

// sectorIO is a sector map that reads and writes the device itself:
// sectors with per-sector metadata. start is the byte offset in the
// volume; buffers are whole sectors of plaintext.
type sectorIO interface {
	readSectors(dst []byte, start int64) error
	writeSectors(src []byte, start int64) error
}

func (m *aeadMap) decrypt(dst, src []byte, start int64, split bool) error {
	return errors.New("blkcrypt: an integrity volume's sectors are read through its map")
}

func (m *aeadMap) encrypt(dst, src []byte, start int64, split bool) error {
	return errors.New("blkcrypt: an integrity volume's sectors are written through its map")
}

func (m *aeadMap) layers() []*sector.Cipher { return nil }
func (m *aeadMap) wipe()                    { m.a.Wipe() }

func (m *aeadMap) readSectors(dst []byte, start int64) error {
	ss := int64(m.a.SectorSize())
	meta := make([]byte, int64(len(dst))/ss*int64(m.a.MetaSize()))
	if err := m.iv.ReadSectors(dst, meta, uint64(start/ss)); err != nil {
		clear(dst)
		return err
	}
	err := m.a.DecryptSectors(dst, dst, meta, uint64(start/512))
	var ae *sector.AuthError
	if errors.As(err, &ae) {
		return &IntegrityError{Sector: ae.Sector, Offset: int64(ae.Sector) * 512}
	}
	return err
}

func (m *aeadMap) writeSectors(src []byte, start int64) error {
	ss := int64(m.a.SectorSize())
	meta := make([]byte, int64(len(src))/ss*int64(m.a.MetaSize()))
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	for len(src) > 0 {
		n := min(len(src), len(*bp))
		ct := (*bp)[:n]
		mt := meta[:int64(n)/ss*int64(m.a.MetaSize())]
		if err := m.a.EncryptSectors(ct, mt, src[:n], uint64(start/512)); err != nil {
			return err
		}
		if err := m.iv.WriteSectors(ct, mt, uint64(start/ss)); err != nil {
			return err
		}
		src, start = src[n:], start+int64(n)
	}
	return nil
}

// integrityDevice stands for the device under an integrity volume in
// Volume.dev: Sync flushes the integrity volume (journal, bitmap) and
// Close closes it and then the device. Reads and writes go through the
// map, never through it.
type integrityDevice struct {
	iv  *integrity.Volume
	dev Device
}

func (d *integrityDevice) ReadAt(p []byte, off int64) (int, error) {
	return 0, errors.New("blkcrypt: raw read of an integrity volume")
}

func (d *integrityDevice) WriteAt(p []byte, off int64) (int, error) {
	return 0, errors.New("blkcrypt: raw write of an integrity volume")
}

func (d *integrityDevice) Sync() error { return d.iv.Flush() }

func (d *integrityDevice) Close() error {
	err := d.iv.Close()
	if cerr := d.dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// aeadVolume opens the payload of a LUKS2 volume whose data segment has
// integrity: the dm-integrity device at the segment's offset, the AEAD
// over it.
func aeadVolume(h luksutil.Header, integrityType string, data Device, devSize int64, key []byte, readOnly bool) (*Volume, error) {
	var ivOff uint64
	if t, ok := h.(interface{ IVTweak() uint64 }); ok {
		ivOff = t.IVTweak()
	}
	a, err := sector.NewAEAD(h.Cipher(), integrityType, key, h.SectorSize(), ivOff)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", luksutil.ErrUnsupported, err)
	}
	off, size := h.DataOffset(), h.DataSize(devSize)
	if size <= 0 || off+size > devSize {
		a.Wipe()
		return nil, fmt.Errorf("%w: the data area (offset %d) does not fit a %d-byte device", luksutil.ErrDeviceTooSmall, off, devSize)
	}
	sec := &integrity.SectionDevice{Dev: data, Offset: off, Length: size}
	iv, err := integrity.Open(sec, integrity.Options{ReadOnly: readOnly, TagSize: a.MetaSize(), SectorSize: a.SectorSize()})
	if err != nil {
		a.Wipe()
		return nil, fmt.Errorf("the integrity device of the data segment: %w", err)
	}
	m := &aeadMap{a: a, iv: iv}
	v, err := newVolume(&integrityDevice{iv: iv, dev: data}, m, 0, iv.Size()/int64(a.SectorSize())*int64(a.SectorSize()), readOnly)
	if err != nil {
		iv.Close()
		a.Wipe()
		return nil, err
	}
	return v, nil
}

// checkFormatCipher checks Format's cipher and key size, and turns
// o.Integrity (cryptsetup's spelling) into the segment's integrity type.
func checkFormatCipher(o *FormatOptions, typ string) error {
	if o.Integrity == "" {
		return luksutil.CheckCipher(o.Cipher, o.KeySize)
	}
	if typ != "luks2" {
		return errors.New("integrity needs LUKS2")
	}
	if o.Header != "" || o.HeaderDevice != nil {
		return errors.New("integrity with a detached header is not supported")
	}
	it, err := luks2.IntegrityType(o.Integrity)
	if err != nil {
		return err
	}
	o.Integrity = it
	a, err := sector.NewAEAD(o.Cipher, it, make([]byte, o.KeySize), 512, 0)
	if err != nil {
		return err
	}
	a.Wipe()
	return nil
}

// formatIntegrity makes the data area of a freshly written LUKS2 header
// with an integrity segment a dm-integrity device, as cryptsetup
// luksFormat --integrity leaves it: the superblock (tags of the AEAD's
// metadata size, the segment's sector size), then every sector written
// with encrypted zeros and its tag (cryptsetup wipes the device through
// dm-crypt so that every sector reads), written directly, without the
// journal, as nothing on the volume can be lost yet.
func formatIntegrity(dev luksutil.Device, h *luks2.Header, key []byte) error {
	devSize, err := dev.Size()
	if err != nil {
		return err
	}
	a, err := sector.NewAEAD(h.Cipher(), h.IntegrityType(), key, h.SectorSize(), h.IVTweak())
	if err != nil {
		return err
	}
	defer a.Wipe()
	off := h.DataOffset()
	sec := &integrity.SectionDevice{Dev: dev, Offset: off, Length: h.DataSize(devSize)}
	if _, err := integrity.Format(sec, integrity.FormatOptions{RawTags: true, TagSize: a.MetaSize(), SectorSize: a.SectorSize(), Force: true}); err != nil {
		return fmt.Errorf("formatting the integrity device: %w", err)
	}
	iv, err := integrity.Open(sec, integrity.Options{Mode: integrity.ModeDirect, TagSize: a.MetaSize(), SectorSize: a.SectorSize()})
	if err != nil {
		return fmt.Errorf("opening the new integrity device: %w", err)
	}
	m := &aeadMap{a: a, iv: iv}
	zero := make([]byte, chunkSize)
	size := iv.Size() / int64(a.SectorSize()) * int64(a.SectorSize())
	for at := int64(0); at < size; at += chunkSize {
		if err := m.writeSectors(zero[:min(chunkSize, size-at)], at); err != nil {
			iv.Close()
			return fmt.Errorf("writing the sectors' tags: %w", err)
		}
	}
	return iv.Close()
}
