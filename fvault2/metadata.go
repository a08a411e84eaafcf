package fvault2

import (
	"bytes"
	"crypto/aes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/kdf"
	"golang.org/x/crypto/xts"
)

// Sentinel errors. Errors from this package wrap one of them, and each
// matches the shared error of the same meaning (blkcrypt.ErrNoHeader,
// ErrCorrupt, ErrUnsupported, ErrWrongPassphrase) under errors.Is.
var (
	// ErrNotFileVault means the device has no Core Storage header.
	ErrNotFileVault = volspec.Sub("not a FileVault 2 (Core Storage) device", volspec.ErrNoHeader)
	// ErrCorrupt means Core Storage metadata that is damaged or lacks what
	// is needed (checksum mismatch, missing blocks, unparsable plist).
	ErrCorrupt = volspec.Sub("corrupt FileVault 2 metadata", volspec.ErrCorrupt)
	// ErrUnsupported means metadata blkcrypt cannot use (another version or
	// key size).
	ErrUnsupported = volspec.Sub("unsupported FileVault 2 volume", volspec.ErrUnsupported)
	// ErrWrongPassphrase means the passphrase does not unwrap the key.
	ErrWrongPassphrase = volspec.ErrWrongPassphrase
)

const (
	volumeHeaderSize = 512
	mdBlockSize      = 8192
	maxMetadataOff   = 1 << 30 // metadata is looked for in the first GiB
	aesKeySize       = 16
	xtsKeySize       = 32
	pwkSize          = 284 // decoded PassphraseWrappedKEKStruct
	kwvkSize         = 256 // decoded KEKWrappedVolumeKeyStruct
	wrappedKeySize   = 24
)

// Metadata is what a Core Storage physical volume says about its
// encrypted logical volume.
type Metadata struct {
	PhysicalVolumeUUID  string
	FamilyUUID          string // the logical volume family's UUID
	BlockSize           uint32
	LogicalVolumeOffset uint64 // bytes
	LogicalVolumeSize   uint64 // bytes
	PBKDF2Iterations    uint32
	PBKDF2Salt          [16]byte
	Cipher, CipherMode  string // "aes", "xts-plain64"
	KeySize             int    // volume key bytes (32)

	family     [16]byte
	wrappedKEK [wrappedKeySize]byte
	wrappedVK  [wrappedKeySize]byte
}

// CipherSpec is the dm-crypt cipher of the logical volume.
func (m *Metadata) CipherSpec() string { return m.Cipher + "-" + m.CipherMode }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkCRC checks the checksum at the start of a Core Storage block: a
// CRC32C value and its seed (always 0xffffffff), over the rest of the
// block, without the final inversion.
func checkCRC(b []byte) error {
	if len(b) < 8 {
		return errors.New("block too short")
	}
	val, seed := binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:])
	if seed != 0xffffffff {
		return fmt.Errorf("checksum seed %#x", seed)
	}
	if got := ^crc32.Update(^seed, castagnoli, b[8:]); got != val {
		return fmt.Errorf("checksum %08x, stored %08x", got, val)
	}
	return nil
}

// Detect reports whether head (the start of a device) holds a Core
// Storage volume header: the "CS" signature at 88 and a good checksum.
func Detect(head []byte) bool {
	return len(head) >= volumeHeaderSize && head[88] == 'C' && head[89] == 'S' && checkCRC(head[:volumeHeaderSize]) == nil
}

// header is the part of the physical volume header Read needs.
type header struct {
	blockSize uint64
	labelBlk  uint64
	uuid      [16]byte
	mdKey     [xtsKeySize]byte // AES-XTS key of the encrypted metadata
}

func parseHeader(b []byte) (*header, error) {
	le := binary.LittleEndian
	if len(b) < volumeHeaderSize || b[88] != 'C' || b[89] != 'S' {
		return nil, ErrNotFileVault
	}
	if err := checkCRC(b[:volumeHeaderSize]); err != nil {
		return nil, fmt.Errorf("%w: volume header: %v", ErrCorrupt, err)
	}
	if v := le.Uint16(b[8:]); v != 1 {
		return nil, fmt.Errorf("%w: Core Storage version %d", ErrUnsupported, v)
	}
	if n := le.Uint32(b[168:]); n != aesKeySize {
		return nil, fmt.Errorf("%w: metadata key of %d bytes", ErrUnsupported, n)
	}
	h := &header{blockSize: uint64(le.Uint32(b[96:])), labelBlk: le.Uint64(b[104:])}
	copy(h.uuid[:], b[304:320])
	// The metadata key is the key data followed by the physical volume
	// UUID (the XTS tweak key).
	copy(h.mdKey[:16], b[176:192])
	copy(h.mdKey[16:], h.uuid[:])
	if h.blockSize == 0 || h.blockSize > 1<<20 {
		return nil, fmt.Errorf("%w: block size %d", ErrCorrupt, h.blockSize)
	}
	return h, nil
}

// Read reads and checks a Core Storage physical volume's header and
// encrypted metadata.
func Read(r io.ReaderAt) (*Metadata, error) {
	hb := make([]byte, volumeHeaderSize)
	if _, err := r.ReadAt(hb, 0); err != nil {
		return nil, fmt.Errorf("%w: reading the volume header: %v", ErrNotFileVault, err)
	}
	h, err := parseHeader(hb)
	if err != nil {
		return nil, err
	}
	m := &Metadata{
		PhysicalVolumeUUID: uuidString(h.uuid[:]),
		BlockSize:          uint32(h.blockSize),
		Cipher:             "aes",
		CipherMode:         "xts-plain64",
		KeySize:            xtsKeySize,
	}

	// Disk label, then the volume groups descriptor it points to.
	off, ok := mulOff(h.labelBlk, h.blockSize)
	if !ok {
		return nil, fmt.Errorf("%w: disk label block %d out of range", ErrCorrupt, h.labelBlk)
	}
	blk := make([]byte, mdBlockSize)
	if err := readFull(r, blk, off); err != nil {
		return nil, fmt.Errorf("%w: disk label: %v", ErrCorrupt, err)
	}
	if err := checkCRC(blk); err != nil {
		return nil, fmt.Errorf("%w: disk label: %v", ErrCorrupt, err)
	}
	off += uint64(binary.LittleEndian.Uint32(blk[220:]))
	if off > maxMetadataOff {
		return nil, fmt.Errorf("%w: volume groups descriptor out of range", ErrCorrupt)
	}
	var vgd [40]byte
	if err := readFull(r, vgd[:], off); err != nil {
		return nil, fmt.Errorf("%w: volume groups descriptor: %v", ErrCorrupt, err)
	}
	count := binary.LittleEndian.Uint64(vgd[8:])
	start, ok := mulOff(binary.LittleEndian.Uint64(vgd[32:]), h.blockSize)
	if !ok {
		return nil, fmt.Errorf("%w: encrypted metadata out of range", ErrCorrupt)
	}

	// A few blocks only: the standard library's AES under x/crypto's XTS
	// (the tweak is the block index).
	xc, err := xts.NewCipher(aes.NewCipher, h.mdKey[:])
	if err != nil {
		return nil, err
	}
	var p parser
	enc := make([]byte, mdBlockSize)
	for i := uint64(0); i < count; i++ {
		o := start + i*mdBlockSize
		if o > maxMetadataOff || i > maxMetadataOff/mdBlockSize {
			return nil, fmt.Errorf("%w: encrypted metadata block %d out of range", ErrCorrupt, i)
		}
		if err := readFull(r, enc, o); err != nil {
			return nil, fmt.Errorf("%w: encrypted metadata block %d: %v", ErrCorrupt, i, err)
		}
		if allZero(enc) {
			break
		}
		xc.Decrypt(blk, enc, i)
		if err := checkCRC(blk); err != nil {
			return nil, fmt.Errorf("%w: encrypted metadata block %d: %v", ErrCorrupt, i, err)
		}
		if err := p.block(blk, h.blockSize); err != nil {
			return nil, err
		}
	}
	clear(blk)
	if err := p.done(); err != nil {
		return nil, err
	}
	p.fill(m)
	return m, nil
}

// parser collects what the decrypted metadata blocks say.
type parser struct {
	got        int // bit 0: 0x0019, bit 1: 0x001a, bit 2: 0x0305
	iters      uint32
	salt       [16]byte
	wrappedKEK [wrappedKeySize]byte
	wrappedVK  [wrappedKeySize]byte
	lvSize     uint64
	family     [16]byte
	lvOff      uint64
}

// block parses one decrypted metadata block (its checksum already
// checked). Blocks of other types are skipped.
func (p *parser) block(b []byte, blockSize uint64) error {
	le := binary.LittleEndian
	if len(b) != mdBlockSize {
		return fmt.Errorf("%w: metadata block of %d bytes", ErrCorrupt, len(b))
	}
	switch le.Uint16(b[10:]) {
	case 0x0019:
		xml, err := blockXML(b, le.Uint32(b[112:]), le.Uint32(b[116:]))
		if err != nil {
			return err
		}
		pwk, err := plistData(xml, "PassphraseWrappedKEKStruct", pwkSize)
		if err != nil {
			return err
		}
		kwvk, err := plistData(xml, "KEKWrappedVolumeKeyStruct", kwvkSize)
		if err != nil {
			return err
		}
		copy(p.salt[:], pwk[8:24])
		copy(p.wrappedKEK[:], pwk[32:56])
		p.iters = le.Uint32(pwk[168:])
		copy(p.wrappedVK[:], kwvk[8:32])
		clear(pwk)
		clear(kwvk)
		p.got |= 1
	case 0x001a:
		xml, err := blockXML(b, le.Uint32(b[128:]), le.Uint32(b[132:]))
		if err != nil {
			return err
		}
		s, err := plistValue(xml, "com.apple.corestorage.lv.size", "integer")
		if err != nil {
			return err
		}
		n, ok := parseHex(s)
		if !ok || n == 0 {
			return fmt.Errorf("%w: logical volume size %q", ErrCorrupt, s)
		}
		p.lvSize = n
		s, err = plistValue(xml, "com.apple.corestorage.lv.familyUUID", "string")
		if err != nil {
			return err
		}
		u, ok := parseUUID(s)
		if !ok {
			return fmt.Errorf("%w: family UUID %q", ErrCorrupt, s)
		}
		p.family = u
		p.got |= 2
	case 0x0305:
		off, ok := mulOff64(uint64(le.Uint32(b[104:])), blockSize)
		if !ok {
			return fmt.Errorf("%w: logical volume offset out of range", ErrCorrupt)
		}
		p.lvOff = off
		p.got |= 4
	}
	return nil
}

func (p *parser) done() error {
	var missing []string
	for i, n := range []string{"0x0019 (wrapped keys)", "0x001a (logical volume)", "0x0305 (logical volume offset)"} {
		if p.got&(1<<i) == 0 {
			missing = append(missing, n)
		}
	}
	if missing != nil {
		return fmt.Errorf("%w: metadata block %s not found", ErrCorrupt, strings.Join(missing, ", "))
	}
	return nil
}

func (p *parser) fill(m *Metadata) {
	m.PBKDF2Iterations = p.iters
	m.PBKDF2Salt = p.salt
	m.wrappedKEK = p.wrappedKEK
	m.wrappedVK = p.wrappedVK
	m.LogicalVolumeSize = p.lvSize
	m.family = p.family
	m.FamilyUUID = uuidString(p.family[:])
	m.LogicalVolumeOffset = p.lvOff
}

// blockXML returns the XML plist at [off, off+size) of a block, up to the
// first NUL.
func blockXML(b []byte, off, size uint32) (string, error) {
	if off >= mdBlockSize || size > mdBlockSize-off {
		return "", fmt.Errorf("%w: plist at %d (%d bytes) outside the metadata block", ErrCorrupt, off, size)
	}
	x := b[off : off+size]
	if i := bytes.IndexByte(x, 0); i >= 0 {
		x = x[:i]
	}
	return string(x), nil
}

// plistValue finds <key>KEY</key><TYPE …>VALUE</TYPE> in the plist.
func plistValue(xml, key, typ string) (string, error) {
	re, err := regexp.Compile("<key>" + regexp.QuoteMeta(key) + "</key><" + typ + "[^>]*>([^<]+)</" + typ + ">")
	if err != nil {
		return "", err
	}
	mm := re.FindStringSubmatch(xml)
	if mm == nil {
		return "", fmt.Errorf("%w: %s not found in the metadata plist", ErrCorrupt, key)
	}
	return mm[1], nil
}

// plistData finds a base64 <data> value that must decode to size bytes.
func plistData(xml, key string, size int) ([]byte, error) {
	s, err := plistValue(xml, key, "data")
	if err != nil {
		return nil, err
	}
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	if len(b) != size {
		return nil, fmt.Errorf("%w: %s decodes to %d bytes, want %d", ErrCorrupt, key, len(b), size)
	}
	return b, nil
}

// parseHex reads a hexadecimal number as strtoull(s, NULL, 16) would:
// leading spaces, an optional 0x, then digits up to the first other byte.
func parseHex(s string) (uint64, bool) {
	s = strings.TrimLeft(s, " \t\n\r\v\f")
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
	}
	var n uint64
	digits := 0
	for _, c := range []byte(s) {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return n, digits > 0
		}
		if n>>60 != 0 {
			return 0, false // overflow
		}
		n = n<<4 | uint64(d)
		digits++
	}
	return n, digits > 0
}

// parseUUID parses the 36-character text form of a UUID.
func parseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	b, err := hex.DecodeString(h)
	if err != nil {
		return u, false
	}
	copy(u[:], b)
	return u, true
}

func uuidString(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func mulOff(blk, size uint64) (uint64, bool) {
	o, ok := mulOff64(blk, size)
	return o, ok && o <= maxMetadataOff
}

func mulOff64(blk, size uint64) (uint64, bool) {
	if size != 0 && blk > (1<<63)/size {
		return 0, false
	}
	return blk * size, true
}

func readFull(r io.ReaderAt, b []byte, off uint64) error {
	if off > 1<<62 {
		return errors.New("offset out of range")
	}
	n, err := r.ReadAt(b, int64(off))
	if n == len(b) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// VolumeKey derives the 32-byte AES-XTS volume key from the passphrase:
// PBKDF2-SHA256 gives a key that unwraps (RFC 3394) the key-encrypting
// key, which unwraps the 16-byte volume key; the XTS tweak key is
// SHA-256(volume key || family UUID) truncated to 16 bytes.
func (m *Metadata) VolumeKey(passphrase []byte) ([]byte, error) {
	if m.PBKDF2Iterations == 0 {
		return nil, fmt.Errorf("%w: zero PBKDF2 iterations", ErrCorrupt)
	}
	pk, err := kdf.PBKDF2Key(sha256.New, passphrase, m.PBKDF2Salt[:], int(m.PBKDF2Iterations), aesKeySize)
	if err != nil {
		return nil, err
	}
	defer clear(pk)
	kek, err := unwrapKey(pk, m.wrappedKEK[:])
	if err != nil {
		return nil, ErrWrongPassphrase
	}
	defer clear(kek)
	vk, err := unwrapKey(kek, m.wrappedVK[:])
	if err != nil {
		return nil, fmt.Errorf("%w: the volume key does not unwrap with the key-encrypting key", ErrCorrupt)
	}
	defer clear(vk)
	h := sha256.New()
	h.Write(vk)
	h.Write(m.family[:])
	tweak := h.Sum(nil)
	defer clear(tweak)
	key := make([]byte, xtsKeySize)
	copy(key, vk)
	copy(key[aesKeySize:], tweak)
	return key, nil
}
