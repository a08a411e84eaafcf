package bitlk

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"
	"unicode/utf16"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// Sentinel errors. Errors from this package wrap one of them, and each
// matches the shared error of the same meaning (blkcrypt.ErrNoHeader,
// ErrCorrupt, ErrUnsupported, ErrWrongPassphrase) under errors.Is.
var (
	// ErrNotBitLocker means the device has no BitLocker signature.
	ErrNotBitLocker = volspec.Sub("not a BitLocker device", volspec.ErrNoHeader)
	// ErrCorrupt means BitLocker metadata that is damaged or inconsistent:
	// no FVE metadata copy with a good checksum, entries that do not parse,
	// or a metadata authentication (validation hash) failure.
	ErrCorrupt = volspec.Sub("corrupt BitLocker metadata", volspec.ErrCorrupt)
	// ErrUnsupported means valid metadata that uses something blkcrypt
	// cannot open: BitLocker version 1, an unknown encryption method or
	// sector size, or a volume that is partially encrypted, being
	// converted, or encrypt-on-write.
	ErrUnsupported = volspec.Sub("unsupported BitLocker volume", volspec.ErrUnsupported)
	// ErrWrongPassphrase means no VMK protector opened with the secret.
	ErrWrongPassphrase = volspec.Sub("no BitLocker key protector opened with this passphrase, recovery password or startup key", volspec.ErrWrongPassphrase)
)

// On-disk constants (BitLocker version 2, as cryptsetup's lib/bitlk reads
// it).
const (
	fveAreaSize        = 64 << 10 // each of the three FVE metadata areas
	blockHeaderLen     = 64       // FVE metadata block header
	metadataHeaderLen  = 48       // FVE metadata header after it
	entryHeaderLen     = 8        // size, type, value, version
	minKeyLen          = 16       // a key entry holds at least an AES-128 key
	vmkHeaderLen       = 28       // GUID, modified time, unknown, protection
	nonceLen           = 12
	tagLen             = 16
	validationLen      = 88 // validation block header and nested datum
	validationDatumLen = 72 // nonce, tag and 44 encrypted bytes
	bekHeaderLen       = 48
	startupKeyHdrLen   = 24
	keyMetadataLen     = 12 // in front of every decrypted key
	stateNormal        = 0x0004
)

var (
	signature     = []byte("-FVE-FS-")
	signatureToGo = []byte("MSWIN4.1")
	bootCodeV1    = []byte{0xeb, 0x52, 0x90}
	bootCodeV2    = []byte{0xeb, 0x58, 0x90}

	// The GUID in the volume's boot sector says how it was encrypted.
	guidNormal = [16]byte{0x3b, 0xd6, 0x67, 0x49, 0x29, 0x2e, 0xd8, 0x4a, 0x83, 0x99, 0xf6, 0xa3, 0x39, 0xe3, 0xd0, 0x01}
	guidEOW    = [16]byte{0x3b, 0x4d, 0xa8, 0x92, 0x80, 0xdd, 0x0e, 0x4d, 0x9e, 0x4e, 0xb1, 0xe3, 0x28, 0x4e, 0xae, 0xd8}
)

// Entry types and value types of the FVE metadata entry list.
const (
	entryProperty     = 0x0000
	entryVMK          = 0x0002
	entryFVEK         = 0x0003
	entryStartupKey   = 0x0006
	entryDescription  = 0x0007
	entryVolumeHeader = 0x000f
	entryVolumeGUID   = 0x0019

	valueErased       = 0x0000
	valueKey          = 0x0001
	valueString       = 0x0002
	valueStretchKey   = 0x0003
	valueUseKey       = 0x0004
	valueEncryptedKey = 0x0005
	valueTPMKey       = 0x0006
	valueValidation   = 0x0007
	valueVMK          = 0x0008
	valueExternalKey  = 0x0009
	valueOffsetSize   = 0x000f
	valueRecoveryTime = 0x0015
	valueGUID         = 0x0017
	valueHint         = 0x0018
)

// EncryptionType is the kind of encryption the boot sector's GUID names.
type EncryptionType int

const (
	Normal         EncryptionType = iota // fully encrypted (or being)
	EncryptOnWrite                       // "used space only": free space never encrypted
	UnknownType
)

func (t EncryptionType) String() string {
	switch t {
	case Normal:
		return "normal"
	case EncryptOnWrite:
		return "encrypt-on-write"
	}
	return "unknown"
}

// Protection is what a VMK (volume master key) is protected with.
type Protection int

const (
	ClearKey Protection = iota
	TPM
	StartupKey
	TPMAndPIN
	RecoveryPassword
	Password
	SmartCard
	UnknownProtection
)

func protectionOf(raw uint16) Protection {
	switch raw {
	case 0x0000:
		return ClearKey
	case 0x0100:
		return TPM
	case 0x0200:
		return StartupKey
	case 0x0500:
		return TPMAndPIN
	case 0x0800:
		return RecoveryPassword
	case 0x1000:
		return SmartCard
	case 0x2000:
		return Password
	}
	return UnknownProtection
}

// String is the wording of cryptsetup's bitlkDump.
func (p Protection) String() string {
	switch p {
	case ClearKey:
		return "VMK protected with clear key"
	case TPM:
		return "VMK protected with TPM"
	case StartupKey:
		return "VMK protected with startup key"
	case TPMAndPIN:
		return "VMK protected with TPM and PIN"
	case Password:
		return "VMK protected with passphrase"
	case RecoveryPassword:
		return "VMK protected with recovery passphrase"
	case SmartCard:
		return "VMK protected with smart card"
	}
	return "VMK with unknown protection"
}

// supported reports whether blkcrypt can open a VMK with this protection.
func (p Protection) supported() bool {
	return p == Password || p == RecoveryPassword || p == StartupKey || p == ClearKey
}

// wrapped is a key encrypted with AES-CCM (nonce, tag, ciphertext), or a
// clear key (Clear set, Data the key).
type wrapped struct {
	Nonce [nonceLen]byte
	Tag   [tagLen]byte
	Data  []byte
	Clear bool
}

// VMK is one volume master key entry: one key protector.
type VMK struct {
	GUID          string
	Name          string // optional name string of the entry
	Protection    Protection
	RawProtection uint16
	Salt          [16]byte // of the stretch key (password, recovery password)
	keys          []wrapped
}

// KeySizes returns the sizes of the key data the VMK entry holds, as
// bitlkDump lists them.
func (v *VMK) KeySizes() []int {
	var s []int
	for _, k := range v.keys {
		s = append(s, len(k.Data))
	}
	return s
}

// Metadata is a BitLocker volume's parsed metadata: the boot sector fields
// and the FVE metadata block of the first copy whose checksum is right.
type Metadata struct {
	ToGo            bool // BitLocker To Go (FAT-compatible boot sector)
	Version         int  // FVE metadata version (2)
	SectorSize      int  // 512 or 4096
	VolumeSize      uint64
	GUID            string
	Type            EncryptionType
	CurrentState    uint16
	NextState       uint16
	Method          uint16 // encryption method, 0x8000…0x8005
	Cipher          string // "aes"
	CipherMode      string // "cbc-elephant", "cbc-eboiv", "xts-plain64"
	KeyBits         int    // dm-crypt volume key size
	Created         time.Time
	Description     string
	MetadataOffsets [3]uint64
	ValidCopy       int // which of the three copies was used
	// The volume header (the file system's first sectors) is kept
	// encrypted elsewhere; the decrypted volume shows it at offset 0.
	VolumeHeaderOffset uint64
	VolumeHeaderSize   uint64
	VMKs               []VMK

	fvek       *wrapped
	validation wrapped
	fveHash    [32]byte // SHA-256 of the FVE metadata block
}

// CipherSpec is the dm-crypt cipher specification, e.g. "aes-xts-plain64".
func (m *Metadata) CipherSpec() string { return m.Cipher + "-" + m.CipherMode }

// FVEKSize is the size of the encrypted FVEK (key data) in bytes.
func (m *Metadata) FVEKSize() int {
	if m.fvek == nil {
		return 0
	}
	return len(m.fvek.Data)
}

// Activatable reports why the volume cannot be opened, as cryptsetup
// refuses it: only fully encrypted, normal volumes are supported.
func (m *Metadata) Activatable() error {
	if m.CurrentState != stateNormal || m.NextState != stateNormal {
		return fmt.Errorf("%w: the volume is in state %#04x (next %#04x), not fully encrypted (it may be partially encrypted, or being encrypted or decrypted); let Windows finish the conversion first", ErrUnsupported, m.CurrentState, m.NextState)
	}
	switch m.Type {
	case Normal:
	case EncryptOnWrite:
		return fmt.Errorf("%w: encrypt-on-write (used space only) volumes cannot be opened: their free space was never encrypted", ErrUnsupported)
	default:
		return fmt.Errorf("%w: unknown encryption type in the boot sector GUID", ErrUnsupported)
	}
	return nil
}

// Detect reports whether head (the start of a device) looks like a
// BitLocker volume. For To Go volumes, whose boot sector is FAT-compatible
// and says "MSWIN4.1" like any Windows-formatted FAT volume, the BitLocker
// GUID at the To Go superblock must be present too.
func Detect(head []byte) bool {
	if len(head) < 512 {
		return false
	}
	if bytes.Equal(head[3:11], signature) {
		return true
	}
	if bytes.Equal(head[3:11], signatureToGo) && bytes.Equal(head[:3], bootCodeV2) {
		g := head[424 : 424+16]
		return bytes.Equal(g, guidNormal[:]) || bytes.Equal(g, guidEOW[:])
	}
	return false
}

// Read reads and validates the BitLocker metadata of a device.
func Read(r io.ReaderAt) (*Metadata, error) {
	var boot [512]byte
	if _, err := r.ReadAt(boot[:], 0); err != nil {
		return nil, fmt.Errorf("%w: reading the boot sector: %v", ErrNotBitLocker, err)
	}
	m := &Metadata{}
	sbOff := 160
	switch {
	case bytes.Equal(boot[3:11], signature):
	case bytes.Equal(boot[3:11], signatureToGo):
		m.ToGo, sbOff = true, 424
	default:
		return nil, ErrNotBitLocker
	}
	switch {
	case bytes.Equal(boot[:3], bootCodeV1):
		return nil, fmt.Errorf("%w: BitLocker version 1 (Windows Vista) is not supported", ErrUnsupported)
	case bytes.Equal(boot[:3], bootCodeV2):
	default:
		if m.ToGo {
			return nil, ErrNotBitLocker
		}
		return nil, fmt.Errorf("%w: unknown boot code %x", ErrCorrupt, boot[:3])
	}
	m.SectorSize = int(binary.LittleEndian.Uint16(boot[11:]))
	if m.SectorSize == 0 {
		m.SectorSize = 512
	}
	if m.SectorSize != 512 && m.SectorSize != 4096 {
		return nil, fmt.Errorf("%w: sector size %d", ErrUnsupported, m.SectorSize)
	}
	var g [16]byte
	copy(g[:], boot[sbOff:])
	switch g {
	case guidNormal:
		m.Type = Normal
	case guidEOW:
		m.Type = EncryptOnWrite
	default:
		m.Type = UnknownType
	}
	for i := range m.MetadataOffsets {
		m.MetadataOffsets[i] = binary.LittleEndian.Uint64(boot[sbOff+16+8*i:])
	}

	// The first of the three copies whose CRC32 is right and which sits
	// where it says it does.
	buf := make([]byte, fveAreaSize)
	var errs []error
	for i, off := range m.MetadataOffsets {
		blk, val, err := readCopy(r, off, buf)
		if err == nil && binary.LittleEndian.Uint64(blk[32+8*i:]) != off {
			err = fmt.Errorf("copy %d at %d says it belongs at %d", i, off, binary.LittleEndian.Uint64(blk[32+8*i:]))
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m.ValidCopy = i
		if err := m.parseBlock(blk, val); err != nil {
			return nil, err
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: no valid FVE metadata copy: %w", ErrCorrupt, errors.Join(errs...))
}

// readCopy reads one FVE metadata copy at off into buf and checks its
// CRC32. It returns the block and its validation structure.
func readCopy(r io.ReaderAt, off uint64, buf []byte) (blk, val []byte, err error) {
	if off > 1<<62 {
		return nil, nil, fmt.Errorf("offset %d out of range", off)
	}
	n, err := r.ReadAt(buf, int64(off))
	if n < blockHeaderLen+metadataHeaderLen {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, fmt.Errorf("reading FVE metadata at %d: %v", off, err)
	}
	return checkCopy(buf[:n])
}

// checkCopy validates an FVE metadata area's contents (at least the block
// and its validation structure): signature, version, size and CRC32.
func checkCopy(area []byte) (blk, val []byte, err error) {
	if len(area) < blockHeaderLen+metadataHeaderLen || !bytes.Equal(area[:8], signature) {
		return nil, nil, errors.New("no FVE metadata signature")
	}
	if v := binary.LittleEndian.Uint16(area[10:]); v != 2 {
		return nil, nil, fmt.Errorf("FVE metadata version %d, want 2", v)
	}
	size := int(binary.LittleEndian.Uint16(area[8:])) << 4
	if size > fveAreaSize || size < blockHeaderLen+metadataHeaderLen {
		return nil, nil, fmt.Errorf("FVE metadata block size %d", size)
	}
	if len(area) < size+8 {
		return nil, nil, errors.New("FVE metadata block truncated")
	}
	val = area[size:min(len(area), size+validationLen)]
	vs := binary.LittleEndian.Uint16(val[0:])
	if vs < 8 || binary.LittleEndian.Uint16(val[2:]) > 2 {
		return nil, nil, fmt.Errorf("FVE metadata validation header (size %d, version %d)", vs, binary.LittleEndian.Uint16(val[2:]))
	}
	blk = area[:size]
	if got, want := crc32.ChecksumIEEE(blk), binary.LittleEndian.Uint32(val[4:]); got != want {
		return nil, nil, fmt.Errorf("FVE metadata CRC32 %08x, stored %08x", got, want)
	}
	return blk, val, nil
}

// parseBlock fills m from a checked FVE metadata block and its validation
// structure.
func (m *Metadata) parseBlock(blk, val []byte) error {
	le := binary.LittleEndian
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}
	m.fveHash = sha256.Sum256(blk)
	m.Version = int(le.Uint16(blk[10:]))
	m.CurrentState = le.Uint16(blk[12:])
	m.NextState = le.Uint16(blk[14:])
	m.VolumeSize = le.Uint64(blk[16:])
	hdrSectors := uint64(le.Uint32(blk[28:]))
	for i := range m.MetadataOffsets {
		m.MetadataOffsets[i] = le.Uint64(blk[32+8*i:])
	}
	hdrOff := le.Uint64(blk[56:])

	// The validation structure: a CRC32 and an AES-CCM datum holding the
	// SHA-256 of the block, checked once a VMK is known.
	if len(val) < validationLen || int(le.Uint16(val[0:])) < validationLen {
		return corrupt("FVE validation structure too short")
	}
	if le.Uint16(val[8:]) != entryHeaderLen+validationDatumLen || le.Uint16(val[10:]) != 0 || le.Uint16(val[12:]) != valueEncryptedKey {
		return corrupt("FVE validation datum is not an AES-CCM encrypted key")
	}
	d := val[16 : 16+validationDatumLen]
	copy(m.validation.Nonce[:], d)
	copy(m.validation.Tag[:], d[nonceLen:])
	m.validation.Data = append([]byte(nil), d[nonceLen+tagLen:]...)

	mh := blk[blockHeaderLen:]
	m.GUID = guidString(mh[16:32])
	m.Method = le.Uint16(mh[36:])
	switch m.Method {
	case 0x8000:
		m.Cipher, m.CipherMode, m.KeyBits = "aes", "cbc-elephant", 256
	case 0x8001:
		m.Cipher, m.CipherMode, m.KeyBits = "aes", "cbc-elephant", 512
	case 0x8002:
		m.Cipher, m.CipherMode, m.KeyBits = "aes", "cbc-eboiv", 128
	case 0x8003:
		m.Cipher, m.CipherMode, m.KeyBits = "aes", "cbc-eboiv", 256
	case 0x8004:
		m.Cipher, m.CipherMode, m.KeyBits = "aes", "xts-plain64", 256
	case 0x8005:
		m.Cipher, m.CipherMode, m.KeyBits = "aes", "xts-plain64", 512
	default:
		return fmt.Errorf("%w: unknown encryption method %#04x", ErrUnsupported, m.Method)
	}
	m.Created = filetime(le.Uint64(mh[40:]))

	mdSize := int(le.Uint32(mh[0:]))
	if mdSize < metadataHeaderLen+4 || mdSize > fveAreaSize {
		return corrupt("FVE metadata size %d", mdSize)
	}
	if blockHeaderLen+mdSize > len(blk) {
		return corrupt("FVE metadata entries (%d bytes) overrun the %d-byte block", mdSize-metadataHeaderLen, len(blk))
	}
	entries := blk[blockHeaderLen+metadataHeaderLen : blockHeaderLen+mdSize]
	gotHeader := false
	for p := 0; len(entries)-p >= 4; {
		size := int(le.Uint16(entries[p:]))
		if size == 0 {
			break
		}
		if size > len(entries)-p {
			return corrupt("FVE entry at %d (%d bytes) overruns the metadata", p, size)
		}
		if size < entryHeaderLen {
			return corrupt("FVE entry at %d is %d bytes, shorter than its header", p, size)
		}
		e := entries[p : p+size]
		switch le.Uint16(e[2:]) {
		case entryVMK:
			if size < entryHeaderLen+vmkHeaderLen {
				return corrupt("VMK entry of %d bytes", size)
			}
			v := VMK{GUID: guidString(e[8:24]), RawProtection: le.Uint16(e[34:])}
			v.Protection = protectionOf(v.RawProtection)
			if err := v.parse(e[entryHeaderLen+vmkHeaderLen:]); err != nil {
				return err
			}
			m.VMKs = append(m.VMKs, v)
		case entryFVEK:
			if m.fvek != nil {
				break // the first one counts
			}
			if size < entryHeaderLen+nonceLen+tagLen {
				return corrupt("FVEK entry of %d bytes", size)
			}
			w := &wrapped{Data: append([]byte(nil), e[entryHeaderLen+nonceLen+tagLen:]...)}
			copy(w.Nonce[:], e[entryHeaderLen:])
			copy(w.Tag[:], e[entryHeaderLen+nonceLen:])
			m.fvek = w
		case entryVolumeHeader:
			if size < entryHeaderLen+16 {
				return corrupt("volume header entry of %d bytes", size)
			}
			m.VolumeHeaderOffset = le.Uint64(e[8:])
			m.VolumeHeaderSize = le.Uint64(e[16:])
			gotHeader = true
		case entryDescription:
			if m.Description != "" {
				break
			}
			s, err := utf16String(e[entryHeaderLen:])
			if err != nil {
				return corrupt("volume description: %v", err)
			}
			m.Description = s
		}
		p += size
	}
	if !gotHeader {
		// Older metadata has no volume header entry; the block header
		// holds the same information.
		m.VolumeHeaderOffset, m.VolumeHeaderSize = hdrOff, hdrSectors*512
	}
	if m.fvek == nil {
		return corrupt("no FVEK entry")
	}
	return nil
}

// parse reads the properties nested in a VMK entry.
func (v *VMK) parse(b []byte) error {
	le := binary.LittleEndian
	sup := v.Protection.supported()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: VMK %s: %s", ErrCorrupt, v.GUID, fmt.Sprintf(format, a...))
	}
	for p := 0; len(b)-p >= 6; {
		size := int(le.Uint16(b[p:]))
		if size == 0 {
			break
		}
		if size > len(b)-p {
			return bad("entry at %d (%d bytes) overruns the VMK", p, size)
		}
		if size < entryHeaderLen {
			return bad("entry at %d is %d bytes, shorter than its header", p, size)
		}
		e := b[p : p+size]
		typ := le.Uint16(e[2:])
		val := le.Uint16(e[4:])
		if typ != entryProperty && sup {
			return bad("unexpected entry type %d", typ)
		}
		switch {
		case val == valueStretchKey:
			if len(b)-p < entryHeaderLen+4+16 || size < entryHeaderLen+4+16 {
				return bad("stretch key entry of %d bytes", size)
			}
			copy(v.Salt[:], e[entryHeaderLen+4:])
		case val == valueEncryptedKey:
			if size < entryHeaderLen+nonceLen+tagLen {
				return bad("encrypted key entry of %d bytes", size)
			}
			w := wrapped{Data: append([]byte(nil), e[entryHeaderLen+nonceLen+tagLen:]...)}
			copy(w.Nonce[:], e[entryHeaderLen:])
			copy(w.Tag[:], e[entryHeaderLen+nonceLen:])
			v.keys = append(v.keys, w)
		case val == valueKey:
			if size < entryHeaderLen+4+minKeyLen {
				return bad("key entry of %d bytes", size)
			}
			v.keys = append(v.keys, wrapped{Data: append([]byte(nil), e[entryHeaderLen+4:]...), Clear: true})
		case val == valueRecoveryTime, val == valueHint:
		case val == valueString:
			s, err := utf16String(e[entryHeaderLen:])
			if err != nil {
				return bad("name: %v", err)
			}
			if v.Name != "" {
				if sup {
					return bad("a second name %q", s)
				}
				break
			}
			v.Name = s
		case val == valueUseKey && v.Protection == StartupKey:
		case val == valueTPMKey && v.Protection == TPM:
		default:
			if sup {
				return bad("unexpected entry value %d", val)
			}
		}
		p += size
	}
	return nil
}

// guidString formats a Microsoft GUID (first three fields little-endian).
func guidString(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x", le.Uint32(b[0:]), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16])
}

// utf16String decodes a UTF-16LE string, ending at the first NUL.
func utf16String(b []byte) (string, error) {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	for i := 0; i < len(u); i++ {
		switch {
		case u[i] >= 0xd800 && u[i] < 0xdc00:
			if i+1 >= len(u) || u[i+1] < 0xdc00 || u[i+1] >= 0xe000 {
				return "", errors.New("unpaired UTF-16 surrogate")
			}
			i++
		case u[i] >= 0xdc00 && u[i] < 0xe000:
			return "", errors.New("unpaired UTF-16 surrogate")
		}
	}
	return string(utf16.Decode(u)), nil
}

// filetime converts Windows FILETIME (100 ns since 1601) to time.
func filetime(ft uint64) time.Time {
	const epoch = 116444736000000000 // 1970-01-01 as FILETIME
	if ft < epoch {
		return time.Unix(0, 0).UTC()
	}
	return time.Unix(int64((ft-epoch)/10000000), 0)
}
