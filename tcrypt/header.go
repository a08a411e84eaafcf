package tcrypt

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// On-disk layout: a 512-byte sector holding a 64-byte salt and 448
// encrypted bytes. Decrypted, the 448 bytes are (big-endian):
//
//	  0  magic "TRUE" (TrueCrypt) or "VERA" (VeraCrypt)
//	  4  header version (u16)
//	  6  minimum program version, "driver requirement" (u16, BCD-ish x.y)
//	  8  CRC32 of the 256 key bytes
//	 12  creation times (16 bytes, ignored)
//	 28  hidden volume size in bytes (u64; non-zero in a hidden header)
//	 36  volume size in bytes (u64)
//	 44  master key (data) offset in bytes (u64; 0 means 512)
//	 52  master key (encrypted area) size in bytes (u64)
//	 60  flags (u32): bit 0 system encryption, bit 1 non-system in-place
//	 64  sector size (u32; 0 means 512)
//	 68  reserved (120 bytes)
//	188  CRC32 of bytes 0-187 (checked for header version 4 and later)
//	192  keys (256 bytes): the cipher keys of the chain, then XTS/LRW
//	     tweak keys, or the CBC IV seed and whitening
const (
	SaltLen      = 64  // bytes of salt before the encrypted part
	HeaderLen    = 448 // encrypted part of the header
	SectorLen    = 512 // SaltLen + HeaderLen
	DerivedLen   = 192 // header key material derived from the passphrase
	KeysLen      = 256 // key bytes in the header
	keysOff      = 192 // where the keys start in the decrypted part
	headerCRCLen = 188 // bytes covered by the header CRC
	MagicTrue    = "TRUE"
	MagicVera    = "VERA"
	HiddenOffset = 65536 // hidden volume header, from the start
	// HiddenOffsetOld is TrueCrypt's pre-6.0 hidden header: 1536 bytes
	// before the end of the device.
	HiddenOffsetOld = -1536
	// BackupOffset and HiddenBackupOffset are the backup headers (TrueCrypt
	// 6.0 and later), counted from the end of the device.
	BackupOffset       = -131072
	HiddenBackupOffset = -65536
	// SystemOffset is the system-encryption header: sector 62 of the drive.
	SystemOffset = 31744

	FlagSystem    = 1 << 0 // TCRYPT_HDR_FLAG_SYSTEM
	FlagNonSystem = 1 << 1 // TCRYPT_HDR_FLAG_NONSYSTEM: encrypted in place
)

// Sentinel errors.
var (
	// ErrNoHeader means no derivation and cipher gave a valid header: a
	// wrong passphrase, PIM or key file, or not a TrueCrypt/VeraCrypt
	// volume. It matches both blkcrypt.ErrWrongPassphrase and ErrNoHeader.
	ErrNoHeader = volspec.Sub("no TCRYPT header detected with this passphrase", volspec.ErrWrongPassphrase, volspec.ErrNoHeader)
	// ErrCorruptHeader means the magic decrypted but a CRC did not match.
	ErrCorruptHeader = volspec.Sub("TCRYPT header corrupted", volspec.ErrCorrupt)
	// ErrUnsupported means a cipher, mode or hash blkcrypt cannot map.
	ErrUnsupported = volspec.Sub("unsupported TCRYPT parameters", volspec.ErrUnsupported)
	// ErrInvalid means a bad option or an impossible header geometry.
	ErrInvalid = volspec.Sub("invalid TCRYPT parameters", volspec.ErrInvalidOptions)
)

// Fields are the decrypted header fields, in host order, with cryptsetup's
// defaults applied (a zero master-key offset or sector size reads as 512).
type Fields struct {
	Magic            string
	Version          uint16
	VersionTC        uint16 // program version required, e.g. 0x010b for VeraCrypt 1.11
	KeysCRC32        uint32
	HiddenVolumeSize uint64
	VolumeSize       uint64
	MKOffset         uint64
	MKSize           uint64
	Flags            uint32
	SectorSize       uint32
	HeaderCRC32      uint32
	Keys             [KeysLen]byte
}

// VeraCrypt reports whether the magic is VeraCrypt's.
func (f *Fields) VeraCrypt() bool { return f.Magic == MagicVera }

// ParseFields parses the decrypted 448-byte part of a header. It checks the
// magic (VeraCrypt's only when vera is set), the keys CRC32 and, from
// header version 4 on, the header CRC32, as cryptsetup does.
func ParseFields(d []byte, vera bool) (*Fields, error) {
	if len(d) < HeaderLen {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrInvalid, len(d), HeaderLen)
	}
	d = d[:HeaderLen]
	magic := string(d[:4])
	if magic != MagicTrue && (!vera || magic != MagicVera) {
		return nil, ErrNoHeader
	}
	be := binary.BigEndian
	f := &Fields{
		Magic:            magic,
		Version:          be.Uint16(d[4:]),
		VersionTC:        be.Uint16(d[6:]),
		KeysCRC32:        be.Uint32(d[8:]),
		HiddenVolumeSize: be.Uint64(d[28:]),
		VolumeSize:       be.Uint64(d[36:]),
		MKOffset:         be.Uint64(d[44:]),
		MKSize:           be.Uint64(d[52:]),
		Flags:            be.Uint32(d[60:]),
		SectorSize:       be.Uint32(d[64:]),
		HeaderCRC32:      be.Uint32(d[headerCRCLen:]),
	}
	if f.Version > 3 && crc32.ChecksumIEEE(d[:headerCRCLen]) != f.HeaderCRC32 {
		return nil, fmt.Errorf("%w: header CRC32 mismatch", ErrCorruptHeader)
	}
	if crc32.ChecksumIEEE(d[keysOff:]) != f.KeysCRC32 {
		return nil, fmt.Errorf("%w: keys CRC32 mismatch", ErrCorruptHeader)
	}
	copy(f.Keys[:], d[keysOff:])
	if f.MKOffset == 0 {
		f.MKOffset = 512
	}
	if f.SectorSize == 0 {
		f.SectorSize = 512
	}
	return f, nil
}

// Marshal encodes the fields as a decrypted header part with both CRCs
// computed (the inverse of ParseFields, for tests and tools). Zero-default
// fields are written as they are held, so a parsed header marshals with 512
// where the disk may have had 0.
func (f *Fields) Marshal() []byte {
	d := make([]byte, HeaderLen)
	copy(d, f.Magic)
	be := binary.BigEndian
	be.PutUint16(d[4:], f.Version)
	be.PutUint16(d[6:], f.VersionTC)
	copy(d[keysOff:], f.Keys[:])
	be.PutUint32(d[8:], crc32.ChecksumIEEE(d[keysOff:]))
	be.PutUint64(d[28:], f.HiddenVolumeSize)
	be.PutUint64(d[36:], f.VolumeSize)
	be.PutUint64(d[44:], f.MKOffset)
	be.PutUint64(d[52:], f.MKSize)
	be.PutUint32(d[60:], f.Flags)
	be.PutUint32(d[64:], f.SectorSize)
	be.PutUint32(d[headerCRCLen:], crc32.ChecksumIEEE(d[:headerCRCLen]))
	return d
}

// Wipe zeroes the keys.
func (f *Fields) Wipe() { clear(f.Keys[:]) }
