package luks1

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sort"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// On-disk constants of the LUKS1 format.
const (
	PhdrSize       = 592  // bytes of the binary header
	NumKeyslots    = 8    // keyslots in a header
	Stripes        = 4000 // AF stripes of every keyslot
	SaltSize       = 32
	DigestSize     = 20
	KeyEnabled     = 0x00AC71F3 // keyslot "active" value when in use
	KeyDisabled    = 0x0000DEAD // keyslot "active" value when free
	SectorSize     = 512
	AlignKeyslots  = 4096 // keyslot areas are aligned to this many bytes
	DefaultAlign   = 2048 // default payload alignment, in sectors (1 MiB)
	MinIterations  = 1000 // LUKS_SLOT_ITERATIONS_MIN and LUKS_MKD_ITERATIONS_MIN
	maxKeyslotArea = 0x1000000
)

// Magic is the LUKS magic at offset 0.
var Magic = [6]byte{'L', 'U', 'K', 'S', 0xba, 0xbe}

// Keyslot is one of the eight keyslot descriptors, as stored.
type Keyslot struct {
	Active            uint32 // KeyEnabled, KeyDisabled, or garbage
	Iterations        uint32 // PBKDF2 iterations
	Salt              [SaltSize]byte
	KeyMaterialOffset uint32 // in 512-byte sectors
	Stripes           uint32
}

// Enabled reports whether the keyslot is in use.
func (k *Keyslot) Enabled() bool { return k.Active == KeyEnabled }

// Phdr is the 592-byte LUKS1 binary header. String fields keep their raw
// bytes so that writing back an unchanged header reproduces it exactly;
// use the accessor methods for their values.
type Phdr struct {
	Magic              [6]byte
	Version            uint16
	CipherNameRaw      [32]byte
	CipherModeRaw      [32]byte
	HashSpecRaw        [32]byte
	PayloadOffset      uint32 // in 512-byte sectors
	KeyBytes           uint32
	MKDigest           [DigestSize]byte
	MKDigestSalt       [SaltSize]byte
	MKDigestIterations uint32
	UUIDRaw            [40]byte
	Keyslots           [NumKeyslots]Keyslot
}

// cstr returns a fixed-size field up to its first NUL; the last byte is
// always treated as a terminator, as cryptsetup forces it to be.
func cstr(b []byte) string {
	b = b[:len(b)-1]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func setCstr(dst []byte, s string) error {
	if len(s) > len(dst)-1 || bytes.IndexByte([]byte(s), 0) >= 0 {
		return fmt.Errorf("%w: %q does not fit a %d-byte header field", luksutil.ErrInvalidOptions, s, len(dst))
	}
	clear(dst)
	copy(dst, s)
	return nil
}

// CipherName returns the cipher field, e.g. "aes".
func (p *Phdr) CipherName() string { return cstr(p.CipherNameRaw[:]) }

// CipherMode returns the mode field, e.g. "xts-plain64".
func (p *Phdr) CipherMode() string { return cstr(p.CipherModeRaw[:]) }

// HashSpec returns the hash field, e.g. "sha256".
func (p *Phdr) HashSpec() string { return cstr(p.HashSpecRaw[:]) }

// UUID returns the UUID field.
func (p *Phdr) UUID() string { return cstr(p.UUIDRaw[:]) }

// readPhdr reads the PhdrSize bytes of the binary header at the start of
// dev. A device that ends before them is no I/O failure but a verdict on
// the device, so it never returns io.EOF: ErrNotLUKS when the bytes that
// are there carry no LUKS1 magic (a short or empty device), and
// ErrDeviceTooSmall when a LUKS1 header starts but is cut off. Only an
// unwrapped io.EOF is the end of the device; a wrapped one is a cause (a
// connection that ended mid-reply) and is returned as such.
func readPhdr(dev io.ReaderAt) ([]byte, error) {
	buf := make([]byte, PhdrSize)
	n, err := dev.ReadAt(buf, 0)
	if n == len(buf) {
		return buf, nil // io.ReaderAt may report EOF with a full read
	}
	if err != io.EOF { //nolint:errorlint // see above
		if err == nil {
			err = io.ErrShortBuffer // a ReaderAt must not do this
		}
		return nil, fmt.Errorf("reading the LUKS1 header: %w", err)
	}
	b := buf[:n]
	magic := len(b) >= len(Magic) && (bytes.Equal(b[:len(Magic)], Magic[:]) || bytes.Equal(b[:len(Magic)], NoMagic[:]))
	if !magic {
		return nil, fmt.Errorf("%w: no LUKS magic (the device has only %d bytes)", luksutil.ErrNotLUKS, n)
	}
	if len(b) >= 8 && binary.BigEndian.Uint16(b[6:]) != 1 {
		return nil, fmt.Errorf("%w: unsupported LUKS version %d", luksutil.ErrNotLUKS, binary.BigEndian.Uint16(b[6:]))
	}
	return nil, fmt.Errorf("%w: the device has %d bytes, a LUKS1 header needs %d", luksutil.ErrDeviceTooSmall, n, PhdrSize)
}

// ParsePhdr decodes a binary header from at least PhdrSize bytes. It checks
// nothing but the length; see Validate.
func ParsePhdr(b []byte) (*Phdr, error) {
	if len(b) < PhdrSize {
		return nil, fmt.Errorf("%w: %d bytes is shorter than a LUKS1 header", luksutil.ErrCorruptHeader, len(b))
	}
	p := &Phdr{}
	be := binary.BigEndian
	copy(p.Magic[:], b[0:6])
	p.Version = be.Uint16(b[6:])
	copy(p.CipherNameRaw[:], b[8:40])
	copy(p.CipherModeRaw[:], b[40:72])
	copy(p.HashSpecRaw[:], b[72:104])
	p.PayloadOffset = be.Uint32(b[104:])
	p.KeyBytes = be.Uint32(b[108:])
	copy(p.MKDigest[:], b[112:132])
	copy(p.MKDigestSalt[:], b[132:164])
	p.MKDigestIterations = be.Uint32(b[164:])
	copy(p.UUIDRaw[:], b[168:208])
	for i := range p.Keyslots {
		k := &p.Keyslots[i]
		o := 208 + 48*i
		k.Active = be.Uint32(b[o:])
		k.Iterations = be.Uint32(b[o+4:])
		copy(k.Salt[:], b[o+8:o+40])
		k.KeyMaterialOffset = be.Uint32(b[o+40:])
		k.Stripes = be.Uint32(b[o+44:])
	}
	return p, nil
}

// Marshal encodes the header into PhdrSize bytes, big-endian.
func (p *Phdr) Marshal() []byte {
	b := make([]byte, PhdrSize)
	be := binary.BigEndian
	copy(b[0:6], p.Magic[:])
	be.PutUint16(b[6:], p.Version)
	copy(b[8:40], p.CipherNameRaw[:])
	copy(b[40:72], p.CipherModeRaw[:])
	copy(b[72:104], p.HashSpecRaw[:])
	be.PutUint32(b[104:], p.PayloadOffset)
	be.PutUint32(b[108:], p.KeyBytes)
	copy(b[112:132], p.MKDigest[:])
	copy(b[132:164], p.MKDigestSalt[:])
	be.PutUint32(b[164:], p.MKDigestIterations)
	copy(b[168:208], p.UUIDRaw[:])
	for i := range p.Keyslots {
		k := &p.Keyslots[i]
		o := 208 + 48*i
		be.PutUint32(b[o:], k.Active)
		be.PutUint32(b[o+4:], k.Iterations)
		copy(b[o+8:o+40], k.Salt[:])
		be.PutUint32(b[o+40:], k.KeyMaterialOffset)
		be.PutUint32(b[o+44:], k.Stripes)
	}
	return b
}

// AreaSectors is the size of one keyslot's material in sectors.
func (p *Phdr) AreaSectors() uint64 {
	return (uint64(p.KeyBytes)*Stripes + SectorSize - 1) / SectorSize
}

// HeaderSectors is how much of the device the header and all keyslot areas
// span (cryptsetup's LUKS_device_sectors).
func (p *Phdr) HeaderSectors() uint64 {
	var end uint64
	for i := range p.Keyslots {
		end = max(end, uint64(p.Keyslots[i].KeyMaterialOffset))
	}
	return end + p.AreaSectors()
}

// Validate applies cryptsetup's load-time checks (magic, version, keyslot
// geometry: 4000 stripes, areas after the header, before the payload and
// not overlapping). It does not check the device size or algorithms.
func (p *Phdr) Validate() error {
	if p.Magic != Magic {
		return fmt.Errorf("%w: no LUKS magic", luksutil.ErrNotLUKS)
	}
	if p.Version != 1 {
		return fmt.Errorf("%w: unsupported LUKS version %d", luksutil.ErrNotLUKS, p.Version)
	}
	if p.KeyBytes == 0 {
		return fmt.Errorf("%w: key size is zero", luksutil.ErrCorruptHeader)
	}
	secs := p.AreaSectors()
	order := []int{0, 1, 2, 3, 4, 5, 6, 7}
	sort.SliceStable(order, func(a, b int) bool {
		return p.Keyslots[order[a]].KeyMaterialOffset < p.Keyslots[order[b]].KeyMaterialOffset
	})
	for i := range p.Keyslots {
		k := &p.Keyslots[i]
		if k.Stripes != Stripes {
			return fmt.Errorf("%w: LUKS keyslot %d is invalid (%d stripes)", luksutil.ErrCorruptHeader, i, k.Stripes)
		}
		if uint64(k.KeyMaterialOffset)*SectorSize < PhdrSize {
			return fmt.Errorf("%w: LUKS keyslot %d is invalid (key material at sector %d is inside the header)", luksutil.ErrCorruptHeader, i, k.KeyMaterialOffset)
		}
		if p.PayloadOffset == 0 { // detached header
			continue
		}
		if p.PayloadOffset <= k.KeyMaterialOffset {
			return fmt.Errorf("%w: LUKS keyslot %d is invalid (key material at sector %d is beyond the payload offset %d)", luksutil.ErrCorruptHeader, i, k.KeyMaterialOffset, p.PayloadOffset)
		}
		if uint64(p.PayloadOffset) < uint64(k.KeyMaterialOffset)+secs {
			return fmt.Errorf("%w: LUKS keyslot %d is invalid (key material sectors %d-%d overlap the payload at %d)", luksutil.ErrCorruptHeader, i, k.KeyMaterialOffset, uint64(k.KeyMaterialOffset)+secs, p.PayloadOffset)
		}
	}
	for i := 1; i < NumKeyslots; i++ {
		prev, next := &p.Keyslots[order[i-1]], &p.Keyslots[order[i]]
		if uint64(next.KeyMaterialOffset) < uint64(prev.KeyMaterialOffset)+secs {
			return fmt.Errorf("%w: LUKS keyslot %d is invalid (its area overlaps keyslot %d)", luksutil.ErrCorruptHeader, order[i-1], order[i])
		}
	}
	return nil
}
