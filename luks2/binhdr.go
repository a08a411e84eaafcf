package luks2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
)

// Binary header layout (4096 bytes, big-endian).
const (
	BinHeaderSize  = 4096
	MagicLen       = 6
	LabelLen       = 48
	ChecksumAlgLen = 32
	SaltLen        = 64
	UUIDLen        = 40
	ChecksumLen    = 64
	offVersion     = 6
	offHdrSize     = 8
	offSeqID       = 16
	offLabel       = 24
	offCsumAlg     = 72
	offSalt        = 104
	offUUID        = 168
	offSubsystem   = 208
	offHdrOffset   = 256
	offCsum        = 448
	MinHeaderSize  = 0x4000
	MaxHeaderSize  = 0x400000 // LUKS2_HDR_OFFSET_MAX
	MaxKeyslots    = 32
	MaxTokens      = 32 // LUKS2_TOKENS_MAX
	// MaxKeyslotsSize is LUKS2_MAX_KEYSLOTS_SIZE (128 MiB).
	MaxKeyslotsSize = 0x8000000
)

var (
	MagicPrimary   = [MagicLen]byte{'L', 'U', 'K', 'S', 0xba, 0xbe}
	MagicSecondary = [MagicLen]byte{'S', 'K', 'U', 'L', 0xba, 0xbe}
	// MetadataSizes are the allowed sizes of one metadata copy (binary
	// header plus JSON area); they are also where a secondary header is
	// looked for when the primary is damaged.
	MetadataSizes = []uint64{0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000}
)

// BinHeader is one decoded 4096-byte binary header.
type BinHeader struct {
	Magic       [MagicLen]byte
	Version     uint16
	HdrSize     uint64 // binary header + JSON area, bytes
	SeqID       uint64
	Label       string
	ChecksumAlg string
	Salt        [SaltLen]byte
	UUID        string
	Subsystem   string
	HdrOffset   uint64
	Csum        [ChecksumLen]byte
}

func cfield(b []byte) string {
	b = b[:len(b)-1] // the last byte is always a terminator
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// readHeaderBytes fills buf from dev at off. It returns the bytes read and
// whether the device ended before buf was full; any other failure is an
// I/O error. Only an unwrapped io.EOF is the end of the device (a wrapped
// one is a cause, such as a connection that ended mid-reply), and a full
// read is a success even when the ReaderAt adds io.EOF to it.
func readHeaderBytes(dev io.ReaderAt, buf []byte, off uint64) (n int, short bool, err error) {
	n, err = dev.ReadAt(buf, int64(off))
	switch {
	case n == len(buf):
		return n, false, nil
	case err == io.EOF: //nolint:errorlint // see above
		return n, true, nil
	case err == nil:
		return n, false, io.ErrShortBuffer // a ReaderAt must not do this
	}
	return n, false, err
}

// readBinHeader reads the 4096-byte binary header of the metadata copy at
// offset. LUKS2 looks for a copy at fixed offsets up to 4 MiB, so a device
// that ends before one is an answer, not an I/O error: ErrNotLUKS when the
// bytes that are there do not start with the copy's magic (nothing there),
// ErrDeviceTooSmall when they do (a header that is cut off).
func readBinHeader(dev io.ReaderAt, offset uint64, secondary bool) ([]byte, error) {
	buf := make([]byte, BinHeaderSize)
	n, short, err := readHeaderBytes(dev, buf, offset)
	if err != nil {
		return nil, fmt.Errorf("reading the LUKS2 header at offset %d: %w", offset, err)
	}
	if !short {
		return buf, nil
	}
	want := MagicPrimary
	if secondary {
		want = MagicSecondary
	}
	if n < MagicLen || [MagicLen]byte(buf[:MagicLen]) != want {
		return nil, fmt.Errorf("%w: no LUKS2 magic at offset %d (the device ends at %d)", luksutil.ErrNotLUKS, offset, offset+uint64(n))
	}
	return nil, fmt.Errorf("%w: the LUKS2 header at offset %d is cut off by the end of the device at %d", luksutil.ErrDeviceTooSmall, offset, offset+uint64(n))
}

// readJSONArea reads the size-byte JSON area that follows the binary
// header at offset; a device that ends inside it is ErrDeviceTooSmall.
func readJSONArea(dev io.ReaderAt, offset, size uint64) ([]byte, error) {
	area := make([]byte, size)
	n, short, err := readHeaderBytes(dev, area, offset+BinHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("reading the LUKS2 JSON area at offset %d: %w", offset+BinHeaderSize, err)
	}
	if short {
		return nil, fmt.Errorf("%w: the LUKS2 metadata at offset %d needs %d bytes, the device ends at %d", luksutil.ErrDeviceTooSmall, offset, BinHeaderSize+size, offset+BinHeaderSize+uint64(n))
	}
	return area, nil
}

// ParseBinHeader decodes at least BinHeaderSize bytes; it checks nothing.
func ParseBinHeader(b []byte) (*BinHeader, error) {
	if len(b) < BinHeaderSize {
		return nil, fmt.Errorf("%w: binary header needs %d bytes", luksutil.ErrCorruptHeader, BinHeaderSize)
	}
	be := binary.BigEndian
	h := &BinHeader{
		Version:     be.Uint16(b[offVersion:]),
		HdrSize:     be.Uint64(b[offHdrSize:]),
		SeqID:       be.Uint64(b[offSeqID:]),
		Label:       cfield(b[offLabel : offLabel+LabelLen]),
		ChecksumAlg: cfield(b[offCsumAlg : offCsumAlg+ChecksumAlgLen]),
		UUID:        cfield(b[offUUID : offUUID+UUIDLen]),
		Subsystem:   cfield(b[offSubsystem : offSubsystem+LabelLen]),
		HdrOffset:   be.Uint64(b[offHdrOffset:]),
	}
	copy(h.Magic[:], b)
	copy(h.Salt[:], b[offSalt:])
	copy(h.Csum[:], b[offCsum:])
	return h, nil
}

func putField(dst []byte, s string) {
	clear(dst)
	copy(dst[:len(dst)-1], s)
}

// Marshal encodes the header into BinHeaderSize bytes, with Csum as is.
func (h *BinHeader) Marshal() []byte {
	b := make([]byte, BinHeaderSize)
	be := binary.BigEndian
	copy(b, h.Magic[:])
	be.PutUint16(b[offVersion:], h.Version)
	be.PutUint64(b[offHdrSize:], h.HdrSize)
	be.PutUint64(b[offSeqID:], h.SeqID)
	putField(b[offLabel:offLabel+LabelLen], h.Label)
	putField(b[offCsumAlg:offCsumAlg+ChecksumAlgLen], h.ChecksumAlg)
	copy(b[offSalt:], h.Salt[:])
	putField(b[offUUID:offUUID+UUIDLen], h.UUID)
	putField(b[offSubsystem:offSubsystem+LabelLen], h.Subsystem)
	be.PutUint64(b[offHdrOffset:], h.HdrOffset)
	copy(b[offCsum:], h.Csum[:])
	return b
}

// checksum computes the header checksum over bin (with its csum field
// zeroed) followed by the JSON area.
func checksum(alg string, bin, jsonArea []byte) ([]byte, error) {
	hf, err := kdf.HashFunc(alg)
	if err != nil {
		return nil, fmt.Errorf("%w: checksum algorithm %q", luksutil.ErrUnsupported, alg)
	}
	h := hf()
	if h.Size() > ChecksumLen {
		return nil, fmt.Errorf("%w: checksum algorithm %q is too long", luksutil.ErrUnsupported, alg)
	}
	var tmp [BinHeaderSize]byte
	copy(tmp[:], bin)
	clear(tmp[offCsum : offCsum+ChecksumLen])
	h.Write(tmp[:])
	h.Write(jsonArea)
	return h.Sum(nil), nil
}

// sanityCheck is hdr_disk_sanity_check_pre: magic, version, offset and
// size, before the JSON area is read.
func (h *BinHeader) sanityCheck(secondary bool, offset uint64) error {
	want := MagicPrimary
	if secondary {
		want = MagicSecondary
	}
	if h.Magic != want {
		return fmt.Errorf("%w: no LUKS2 magic at offset %d", luksutil.ErrNotLUKS, offset)
	}
	if h.Version != 2 {
		return fmt.Errorf("%w: unsupported LUKS version %d", luksutil.ErrNotLUKS, h.Version)
	}
	if h.HdrOffset != offset {
		return fmt.Errorf("%w: header at offset %d says it is at %d", luksutil.ErrCorruptHeader, offset, h.HdrOffset)
	}
	if h.HdrSize < MinHeaderSize || h.HdrSize > MaxHeaderSize {
		return fmt.Errorf("%w: bogus header size %d", luksutil.ErrCorruptHeader, h.HdrSize)
	}
	if secondary && offset != h.HdrSize {
		return fmt.Errorf("%w: secondary header at %d does not match size %d", luksutil.ErrCorruptHeader, offset, h.HdrSize)
	}
	return nil
}
