package luks2

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
)

// Device is where a header lives: random-access reads and writes, a
// durability barrier and a size. Wrap an *os.File with File.
type Device = interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Size() (int64, error)
}

// File adapts an *os.File (regular file or block device) to Device.
type File struct{ *os.File }

// Size returns the file size, or the block device size.
func (f File) Size() (int64, error) { return luksutil.File{File: f.File}.Size() }

// KeyslotOptions configure a new keyslot: Slot (nil: the first free one), the KDF
// (PBKDFOptions) and the priority.
type KeyslotOptions = keyslot.Options

// PBKDFOptions choose the keyslot KDF and its cost.
type PBKDFOptions = kdf.Options

// Priority is a keyslot priority.
type Priority = keyslot.Priority

// Keyslot priorities.
const (
	PriorityUnset  = luksutil.PriorityUnset
	PriorityIgnore = luksutil.PriorityIgnore
	PriorityNormal = luksutil.PriorityNormal
	PriorityPrefer = luksutil.PriorityPrefer
)

// AnySlot asks for any keyslot.
const AnySlot = keyslot.AnySlot

// Sentinel errors (shared with package luks1, plus ErrUnbound).
var (
	ErrNotLUKS         = luksutil.ErrNotLUKS
	ErrCorruptHeader   = luksutil.ErrCorruptHeader
	ErrUnsupported     = luksutil.ErrUnsupported
	ErrWrongPassphrase = luksutil.ErrWrongPassphrase
	ErrNoFreeSlot      = luksutil.ErrNoFreeSlot
	ErrInvalidSlot     = luksutil.ErrInvalidSlot
	ErrSlotInactive    = luksutil.ErrSlotInactive
	ErrSlotInUse       = luksutil.ErrSlotInUse
	ErrWrongKey        = luksutil.ErrWrongKey
	ErrReadOnly        = luksutil.ErrReadOnly
	ErrDeviceTooSmall  = luksutil.ErrDeviceTooSmall
	ErrInvalidOptions  = luksutil.ErrInvalidOptions
	// ErrUnbound means a keyslot that holds a key not assigned to the data
	// segment: use UnlockUnbound.
	ErrUnbound = errors.New("keyslot is not bound to the data segment")
)

// Header is a validated LUKS2 header (both metadata copies considered).
type Header struct {
	bin       BinHeader // the copy in use (primary form)
	salt2     [SaltLen]byte
	md        *metadata
	primaryOK bool
	secondOK  bool
	// areaEnd is the JSON length of the longest copy on disk, so a
	// shorter rewrite clears the old tail (the whole area is written).
}

var _ luksutil.Header = (*Header)(nil)

func init() { luksutil.RegisterProber(inUse) }

// inUse reports what an existing LUKS2 header needs: both metadata copies
// and the areas of its keyslots.
func inUse(dev Device) []luksutil.Range {
	h, err := Read(dev)
	if err != nil {
		return nil
	}
	mds := int64(h.bin.HdrSize)
	out := []luksutil.Range{{Off: 0, Len: 2 * mds}}
	for _, k := range h.md.keyslots {
		out = append(out, luksutil.Range{Off: int64(k.AreaOffset), Len: int64(k.AreaSize)})
	}
	return out
}

type hdrState int

const (
	hdrFail hdrState = iota
	hdrFailIO
	hdrObsolete
	hdrOK
	hdrCancelled // the context ended while this copy was parsed
)

type copyRead struct {
	bin   *BinHeader
	md    *metadata
	state hdrState
	err   error
}

// readCopy reads and checks one metadata copy at offset.
func readCopy(ctx context.Context, dev Device, offset uint64, secondary bool) copyRead {
	buf, err := readBinHeader(dev, offset, secondary)
	if err != nil {
		return copyRead{state: hdrFailIO, err: err}
	}
	bin, _ := ParseBinHeader(buf)
	if err := bin.sanityCheck(secondary, offset); err != nil {
		return copyRead{bin: bin, err: err}
	}
	area, err := readJSONArea(dev, offset, bin.HdrSize-BinHeaderSize)
	if err != nil {
		return copyRead{bin: bin, state: hdrFailIO, err: err}
	}
	sum, err := checksum(bin.ChecksumAlg, buf, area)
	if err != nil {
		return copyRead{bin: bin, err: err}
	}
	if !luksutil.ConstantTimeEqual(sum, bin.Csum[:len(sum)]) {
		return copyRead{bin: bin, err: fmt.Errorf("%w: checksum mismatch in the header at offset %d", ErrCorruptHeader, offset)}
	}
	md, err := parseAreaContext(ctx, area)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return copyRead{bin: bin, state: hdrCancelled, err: err}
		}
		return copyRead{bin: bin, state: hdrObsolete, err: err}
	}
	return copyRead{bin: bin, md: md, state: hdrOK}
}

// parseArea parses and validates a JSON area (validate_json_area plus
// LUKS2_hdr_validate).
func parseArea(area []byte) (*metadata, error) {
	return parseAreaContext(context.Background(), area)
}

func parseAreaContext(ctx context.Context, area []byte) (*metadata, error) {
	if len(area) == 0 || area[0] != '{' {
		return nil, verr("the JSON area must start with '{'")
	}
	root, end, err := parseJSONAreaContext(ctx, area)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, err
		}
		return nil, verr("%v", err)
	}
	if end >= len(area) {
		return nil, verr("missing trailing NUL after the JSON data")
	}
	for i := end; i < len(area); i++ {
		if area[i] != 0 {
			return nil, verr("byte 0x%02x found beyond the JSON data at offset %d", area[i], i)
		}
	}
	return validateMetadataContext(ctx, root, uint64(len(area)))
}

// Read is ReadContext with context.Background().
func Read(dev Device) (*Header, error) {
	return ReadContext(context.Background(), dev)
}

// ReadContext reads both metadata copies of a LUKS2 header, validates
// them like cryptsetup and picks the valid one with the higher sequence
// id; a damaged copy is reported by NeedsRepair and fixed by Repair or by
// the next write. The device must hold both copies and all keyslot areas.
// When ctx ends during the parse (a 4 MiB JSON area takes a fraction of a
// second) it returns an error with ctx.Err() in its chain.
func ReadContext(ctx context.Context, dev Device) (*Header, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reading the LUKS2 header: %w", err)
	}
	var first [8]byte
	if _, err := dev.ReadAt(first[:], 0); err == nil && [MagicLen]byte(first[:MagicLen]) == MagicPrimary {
		// cryptsetup picks the LUKS version from the primary header's
		// version field before it reads either copy: 1 is LUKS1, and a
		// number other than 2 makes the device no LUKS device at all,
		// even with a valid secondary copy (crypt_load's dispatch; only
		// a damaged primary magic, version 0 there, sends it to the
		// secondary).
		switch v := binary.BigEndian.Uint16(first[offVersion:]); v {
		case 1:
			return nil, fmt.Errorf("%w: the device has a LUKS1 header", ErrNotLUKS)
		case 2:
		default:
			return nil, fmt.Errorf("%w: unsupported LUKS version %d", ErrNotLUKS, v)
		}
	}
	p := readCopy(ctx, dev, 0, false)
	var s copyRead
	if p.state == hdrCancelled {
		return nil, p.err
	}
	if p.state == hdrOK || p.state == hdrObsolete {
		s = readCopy(ctx, dev, p.bin.HdrSize, true)
	} else {
		for _, off := range MetadataSizes {
			s = readCopy(ctx, dev, off, true)
			if s.state == hdrOK || s.state == hdrObsolete || s.state == hdrCancelled {
				break
			}
			if errors.Is(s.err, ErrDeviceTooSmall) {
				// The device ends inside this copy: every later
				// offset is past its end, and "nothing there"
				// would hide the copy that was cut off.
				break
			}
		}
	}
	if s.state == hdrCancelled {
		return nil, s.err
	}
	if p.state == hdrOK && s.state == hdrOK {
		if p.bin.SeqID > s.bin.SeqID {
			s.state = hdrObsolete
		} else if p.bin.SeqID < s.bin.SeqID {
			p.state = hdrObsolete
		}
	}
	var use copyRead
	h := &Header{}
	switch {
	case p.state == hdrOK:
		use = p
		h.bin = *p.bin
		if s.bin != nil {
			h.salt2 = s.bin.Salt
		}
	case s.state == hdrOK:
		use = s
		h.bin = *s.bin
		h.bin.Magic, h.bin.HdrOffset = MagicPrimary, 0
		h.salt2 = s.bin.Salt
		if p.bin != nil {
			h.bin.Salt = p.bin.Salt
		} else {
			luksutil.Random(h.bin.Salt[:])
		}
	default:
		err := p.err
		if err == nil {
			err = s.err
		}
		if errors.Is(err, ErrNotLUKS) && s.err != nil && !errors.Is(s.err, ErrNotLUKS) {
			err = s.err
		}
		if err == nil {
			err = ErrCorruptHeader
		}
		if p.state == hdrObsolete || s.state == hdrObsolete {
			return nil, fmt.Errorf("no valid LUKS2 metadata copy: %w", err)
		}
		return nil, err
	}
	h.md = use.md
	h.primaryOK = p.state == hdrOK
	h.secondOK = s.state == hdrOK
	if h.salt2 == ([SaltLen]byte{}) {
		luksutil.Random(h.salt2[:])
	}
	size, err := dev.Size()
	if err != nil {
		return nil, fmt.Errorf("device size: %w", err)
	}
	if need := h.HeaderSize(); uint64(size) < need {
		return nil, fmt.Errorf("%w: the LUKS2 header and keyslot areas need %d bytes, the device has %d", ErrDeviceTooSmall, need, size)
	}
	return h, nil
}

// NeedsRepair reports whether one metadata copy is damaged or outdated.
func (h *Header) NeedsRepair() bool { return !h.primaryOK || !h.secondOK }

// Version returns 2.
func (h *Header) Version() int { return 2 }

// UUID returns the volume UUID.
func (h *Header) UUID() string { return h.bin.UUID }

// Label returns the label (binary header).
func (h *Header) Label() string { return h.bin.Label }

// Subsystem returns the subsystem label.
func (h *Header) Subsystem() string { return h.bin.Subsystem }

// SeqID returns the metadata sequence id ("epoch").
func (h *Header) SeqID() uint64 { return h.bin.SeqID }

// MetadataSize is the size of one metadata copy (binary header + JSON).
func (h *Header) MetadataSize() uint64 { return h.bin.HdrSize }

// KeyslotsSize is the size of the binary keyslots area.
func (h *Header) KeyslotsSize() uint64 { return h.md.config.KeyslotsSize }

// HeaderSize is what the header occupies: two metadata copies and the
// keyslots area.
func (h *Header) HeaderSize() uint64 { return 2*h.bin.HdrSize + h.md.config.KeyslotsSize }

// Config returns the config section.
func (h *Header) Config() Config {
	c := h.md.config
	c.Flags = append([]string(nil), c.Flags...)
	c.Requirements = append([]string(nil), c.Requirements...)
	return c
}

// Requirements lists config.requirements.mandatory.
func (h *Header) Requirements() []string { return h.Config().Requirements }

// JSON returns the metadata as it would be written (compact JSON).
func (h *Header) JSON() []byte { return marshalMetadata(h.md.root) }

// Keyslots returns the keyslots in id order.
func (h *Header) Keyslots() []Keyslot {
	var out []Keyslot
	for _, id := range h.keyslotIDs() {
		out = append(out, *h.md.keyslots[id])
	}
	return out
}

func (h *Header) keyslotIDs() []int {
	ids := make([]int, 0, len(h.md.keyslots))
	for id := range h.md.keyslots {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// Segments returns the segments in id order.
func (h *Header) Segments() []Segment {
	var out []Segment
	for i := 0; i < len(h.md.segments)+64; i++ {
		if s, ok := h.md.segments[i]; ok {
			out = append(out, *s)
		}
	}
	return out
}

// Digests returns the digests in id order.
func (h *Header) Digests() []Digest {
	var ids []int
	for id := range h.md.digests {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var out []Digest
	for _, id := range ids {
		out = append(out, *h.md.digests[id])
	}
	return out
}

// TokenIDs returns the ids of the tokens in ascending order, the order
// cryptsetup lists them in.
func (h *Header) TokenIDs() []int {
	var ids []int
	for _, m := range h.md.root.get("tokens").obj {
		id, _ := strconv.Atoi(m.key)
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// Tokens returns every token's JSON, byte for byte as stored; see
// TokenIDs for their order.
func (h *Header) Tokens() map[int]json.RawMessage {
	out := map[int]json.RawMessage{}
	tokens := h.md.root.get("tokens")
	for _, m := range tokens.obj {
		id, _ := strconv.Atoi(m.key)
		if m.val.raw != nil {
			out[id] = append(json.RawMessage(nil), m.val.raw...)
		} else {
			out[id] = m.val.appendJSON(nil)
		}
	}
	return out
}

// defaultSegment is the data segment: the lowest-numbered non-backup
// segment (segment 0 outside reencryption).
func (h *Header) defaultSegment() *Segment {
	for i := 0; i < len(h.md.segments); i++ {
		s := h.md.segments[i]
		if s != nil && !isBackupFlags(s.Flags) {
			return s
		}
	}
	return nil
}

func isBackupFlags(f []string) bool {
	for _, x := range f {
		if strings.HasPrefix(x, "backup-") {
			return true
		}
	}
	return false
}

// Reencryption returns a non-nil error when a reencryption is in progress
// (several segments, or a reencryption requirement): such a volume cannot
// be opened or changed here.
func (h *Header) Reencryption() error {
	for _, r := range h.md.config.Requirements {
		if r == "offline-reencrypt" || reencryptCandidate(r) {
			return fmt.Errorf("%w: LUKS2 reencryption is in progress (requirement %q); finish or recover it with cryptsetup reencrypt first", ErrUnsupported, r)
		}
	}
	if len(h.md.segments) != 1 {
		return fmt.Errorf("%w: the header has %d segments: a LUKS2 reencryption is in progress or was interrupted; finish it with cryptsetup reencrypt first", ErrUnsupported, len(h.md.segments))
	}
	return nil
}

var knownRequirements = map[string]bool{}

// Writable returns nil when the header may be modified, ErrReadOnly for
// unknown mandatory requirements, ErrUnsupported during reencryption.
func (h *Header) Writable() error {
	if err := h.Reencryption(); err != nil {
		return err
	}
	for _, r := range h.md.config.Requirements {
		if !knownRequirements[r] {
			return fmt.Errorf("%w: unknown mandatory requirement %q: the header may be read but not modified", ErrReadOnly, r)
		}
	}
	return nil
}

func (h *Header) dataSegment() (*Segment, error) {
	s, err := h.cryptSegment()
	if err != nil {
		return nil, err
	}
	if s.Integrity {
		return nil, fmt.Errorf("%w: this operation on an authenticated encryption (dm-integrity) segment", ErrUnsupported)
	}
	return s, nil
}

// cryptSegment is the data segment of a volume that can be unlocked and
// opened: a crypt segment, with or without integrity.
func (h *Header) cryptSegment() (*Segment, error) {
	if err := h.Reencryption(); err != nil {
		return nil, err
	}
	s := h.defaultSegment()
	if s == nil {
		return nil, fmt.Errorf("%w: no data segment", ErrCorruptHeader)
	}
	if s.Type != "crypt" {
		return nil, fmt.Errorf("%w: data segment type %q", ErrUnsupported, s.Type)
	}
	if s.Integrity && (s.IntegrityJournalEncryption != "none" || s.IntegrityJournalIntegrity != "none") {
		return nil, fmt.Errorf("%w: integrity segment with journal encryption %q, journal integrity %q", ErrUnsupported, s.IntegrityJournalEncryption, s.IntegrityJournalIntegrity)
	}
	return s, nil
}

// IntegrityType is the data segment's integrity type ("aead",
// "poly1305", "hmac(sha256)", …: a volume made with cryptsetup
// --integrity, whose data area is a dm-integrity device holding each
// sector's tag and IV), or "" for a plain crypt segment.
func (h *Header) IntegrityType() string {
	if s := h.defaultSegment(); s != nil && s.Integrity {
		return s.IntegrityType
	}
	return ""
}

// Cipher returns the data segment cipher ("aes-xts-plain64"), or "" when
// there is no usable crypt segment.
func (h *Header) Cipher() string {
	if s := h.defaultSegment(); s != nil {
		return s.Encryption
	}
	return ""
}

// SectorSize returns the data segment's encryption sector size.
func (h *Header) SectorSize() int {
	if s := h.defaultSegment(); s != nil && s.SectorSize > 0 {
		return s.SectorSize
	}
	return 512
}

// DataOffset returns the data segment offset in bytes.
func (h *Header) DataOffset() int64 {
	if s := h.defaultSegment(); s != nil {
		return int64(s.Offset)
	}
	return 0
}

// IVTweak returns the data segment's iv_tweak (IV offset in sectors).
func (h *Header) IVTweak() uint64 {
	if s := h.defaultSegment(); s != nil {
		return s.IVTweak
	}
	return 0
}

// DataSize returns the data segment size on a device of devSize bytes: the
// fixed size, or for "dynamic" everything after the offset rounded down to
// the sector size.
func (h *Header) DataSize(devSize int64) int64 {
	s := h.defaultSegment()
	if s == nil {
		return 0
	}
	if !s.Dynamic {
		return int64(s.Size)
	}
	n := devSize - int64(s.Offset)
	if n < 0 {
		return 0
	}
	ss := int64(max(s.SectorSize, 512))
	return n / ss * ss
}

// segmentDigest returns the digest bound to the data segment.
func (h *Header) segmentDigest() *Digest {
	s := h.defaultSegment()
	if s == nil {
		return nil
	}
	for _, d := range h.md.digests {
		for _, sg := range d.Segments {
			if sg == s.ID {
				return d
			}
		}
	}
	return nil
}

// KeySize returns the volume key size in bytes (from a keyslot bound to
// the data segment), or 0 when no keyslot holds it.
func (h *Header) KeySize() int {
	d := h.segmentDigest()
	if d == nil {
		return 0
	}
	for _, id := range d.Keyslots {
		if k := h.md.keyslots[id]; k != nil {
			return k.KeySize
		}
	}
	return 0
}

// ActiveKeyslots lists the keyslots bound to the data segment.
func (h *Header) ActiveKeyslots() []int {
	var out []int
	for _, id := range h.keyslotIDs() {
		if h.bound(h.md.keyslots[id]) {
			out = append(out, id)
		}
	}
	return out
}

func (h *Header) bound(k *Keyslot) bool {
	d := h.segmentDigest()
	return d != nil && k.Digest == d.ID
}

// digestOK checks key against a pbkdf2 digest in constant time.
func digestOK(d *Digest, key []byte) (bool, error) {
	if d.Type != "pbkdf2" {
		return false, fmt.Errorf("%w: digest type %q", ErrUnsupported, d.Type)
	}
	hf, err := kdf.HashFunc(d.Hash)
	if err != nil {
		return false, fmt.Errorf("%w: digest hash: %w", ErrUnsupported, err)
	}
	if len(d.Salt) != 32 || d.Iterations == 0 {
		return false, fmt.Errorf("%w: digest %d has a bad salt or iteration count", ErrCorruptHeader, d.ID)
	}
	if n := len(d.Value); n < 20 || n > 64 || n != 20 && n != hf().Size() {
		return false, fmt.Errorf("%w: digest %d has a bad length", ErrCorruptHeader, d.ID)
	}
	v, err := kdf.PBKDF2Key(hf, key, d.Salt, int(d.Iterations), len(d.Value))
	if err != nil {
		return false, err
	}
	defer clear(v)
	return luksutil.ConstantTimeEqual(v, d.Value), nil
}

// VolumeKeyDigestOK reports whether key is the data segment's volume key.
func (h *Header) VolumeKeyDigestOK(key []byte) bool {
	d := h.segmentDigest()
	if d == nil {
		return false
	}
	ok, err := digestOK(d, key)
	return err == nil && ok
}

// openKeyslot derives, decrypts and merges one keyslot and checks the
// result against the keyslot's digest.
func (h *Header) openKeyslot(ctx context.Context, dev Device, k *Keyslot, passphrase []byte) ([]byte, error) {
	if k.Type != "luks2" {
		return nil, fmt.Errorf("%w: keyslot %d has type %q", ErrUnsupported, k.ID, k.Type)
	}
	if h.md.badToken != 0 {
		return nil, fmt.Errorf("%w: token id %d is out of range (LUKS2 has tokens 0-%d)", ErrCorruptHeader, h.md.badToken, MaxTokens-1)
	}
	if len(k.KDFSalt) != 32 {
		return nil, fmt.Errorf("%w: keyslot %d salt is not 32 bytes", ErrCorruptHeader, k.ID)
	}
	switch k.KDF.Type {
	case kdf.PBKDF2:
	case kdf.Argon2i, kdf.Argon2id:
		// Argon2 needs at least 8 KiB per lane (ARGON2_MEMORY_TOO_LITTLE),
		// which cryptsetup's argon2 reports as an error rather than a
		// wrong passphrase. golang.org/x/crypto/argon2 silently raises
		// the memory instead, deriving a different key.
		if uint64(k.KDF.MemoryKiB) < 8*uint64(k.KDF.Parallel) {
			return nil, fmt.Errorf("%w: keyslot %d: argon2 memory %d KiB is below 8 KiB for each of its %d lanes", ErrCorruptHeader, k.ID, k.KDF.MemoryKiB, k.KDF.Parallel)
		}
	default:
		return nil, fmt.Errorf("%w: keyslot %d kdf type %q", ErrUnsupported, k.ID, k.KDF.Type)
	}
	// cryptsetup splits and merges LUKS2 keyslots with 4000 stripes
	// whatever af.stripes says; so do we.
	spec := luksutil.AreaSpec{
		Cipher: k.AreaEncryption, KeySize: k.AreaKeySize, Offset: int64(k.AreaOffset),
		KeyLen: k.KeySize, Stripes: stripes, AFHash: k.AFHash,
	}
	if uint64(spec.MaterialLen()) > k.AreaSize {
		return nil, fmt.Errorf("%w: keyslot %d material does not fit its area", ErrCorruptHeader, k.ID)
	}
	if strings.HasPrefix(k.AreaEncryption, "cipher_null") && len(passphrase) > 0 {
		return nil, ErrWrongPassphrase
	}
	key, err := luksutil.OpenAreaContext(ctx, dev, spec, k.KDF, k.KDFSalt, passphrase)
	if err != nil {
		return nil, err
	}
	d := h.md.digests[k.Digest]
	if d == nil {
		clear(key)
		return nil, fmt.Errorf("%w: keyslot %d has no digest", ErrCorruptHeader, k.ID)
	}
	if !d.named {
		clear(key)
		return nil, fmt.Errorf("%w: digest %d is not stored under its id", ErrCorruptHeader, d.ID)
	}
	ok, err := digestOK(d, key)
	if err != nil || !ok {
		clear(key)
		if err != nil {
			return nil, err
		}
		return nil, ErrWrongPassphrase
	}
	return key, nil
}

func (h *Header) keyslot(slot int) (*Keyslot, error) {
	if slot < 0 || slot >= MaxKeyslots {
		return nil, fmt.Errorf("%w: %d (LUKS2 has keyslots 0-%d)", ErrInvalidSlot, slot, MaxKeyslots-1)
	}
	k := h.md.keyslots[slot]
	if k == nil {
		return nil, fmt.Errorf("%w: keyslot %d", ErrSlotInactive, slot)
	}
	return k, nil
}

// Unlock derives the volume key of the data segment from passphrase. With
// AnySlot it tries keyslots of priority "prefer", then "normal" (never
// "ignore"), in id order; with a slot number only that keyslot (whatever
// its priority). It returns the key (wipe it after use) and the keyslot,
// or ErrWrongPassphrase. Keyslots not bound to the data segment are
// skipped (ErrUnbound when named); see UnlockUnbound.
func (h *Header) Unlock(dev Device, passphrase []byte, slot int) ([]byte, int, error) {
	return h.UnlockContext(context.Background(), dev, passphrase, slot)
}

// UnlockContext is Unlock that returns with ctx's error (in the chain)
// when ctx ends during a key derivation or between keyslots.
func (h *Header) UnlockContext(ctx context.Context, dev Device, passphrase []byte, slot int) ([]byte, int, error) {
	if _, err := h.cryptSegment(); err != nil {
		return nil, -1, err
	}
	if slot != AnySlot {
		k, err := h.keyslot(slot)
		if err != nil {
			return nil, -1, err
		}
		if !h.bound(k) {
			return nil, -1, fmt.Errorf("%w: keyslot %d", ErrUnbound, slot)
		}
		key, err := h.openKeyslot(ctx, dev, k, passphrase)
		if err != nil {
			return nil, -1, err
		}
		return key, slot, nil
	}
	for _, id := range h.byPriority() {
		k := h.md.keyslots[id]
		if !h.bound(k) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, -1, err
		}
		key, err := h.openKeyslot(ctx, dev, k, passphrase)
		if err == nil {
			return key, id, nil
		}
		if !errors.Is(err, ErrWrongPassphrase) {
			return nil, -1, err
		}
	}
	return nil, -1, ErrWrongPassphrase
}

// UnlockUnbound opens any keyslot, bound to the data segment or not
// (cryptsetup's --unbound): it returns the stored key, the keyslot, and
// whether that key is the volume key.
func (h *Header) UnlockUnbound(dev Device, passphrase []byte, slot int) ([]byte, int, bool, error) {
	return h.UnlockUnboundContext(context.Background(), dev, passphrase, slot)
}

// UnlockUnboundContext is UnlockUnbound that returns with ctx's error (in
// the chain) when ctx ends during a key derivation or between keyslots.
func (h *Header) UnlockUnboundContext(ctx context.Context, dev Device, passphrase []byte, slot int) ([]byte, int, bool, error) {
	var try []int
	if slot != AnySlot {
		if _, err := h.keyslot(slot); err != nil {
			return nil, -1, false, err
		}
		try = []int{slot}
	} else {
		try = h.byPriority()
	}
	for _, id := range try {
		k := h.md.keyslots[id]
		if k.Type != "luks2" && slot == AnySlot {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, -1, false, err
		}
		key, err := h.openKeyslot(ctx, dev, k, passphrase)
		if err == nil {
			return key, id, h.bound(k), nil
		}
		if !errors.Is(err, ErrWrongPassphrase) {
			return nil, -1, false, err
		}
	}
	return nil, -1, false, ErrWrongPassphrase
}

// byPriority lists keyslot ids as an AnySlot unlock tries them: priority
// "prefer" first, then "normal" (or unset); "ignore" never.
func (h *Header) byPriority() []int {
	var out []int
	for _, prio := range []luksutil.Priority{PriorityPrefer, PriorityNormal} {
		for _, id := range h.keyslotIDs() {
			p := h.md.keyslots[id].Priority
			if p == PriorityUnset {
				p = PriorityNormal
			}
			if p == prio {
				out = append(out, id)
			}
		}
	}
	return out
}
