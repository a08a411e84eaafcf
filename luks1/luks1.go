package luks1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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

// KeyslotOptions configure a new keyslot. Only PBKDF2 is valid for LUKS1,
// with the header's hash; Priority must stay unset.
type KeyslotOptions = keyslot.Options

// PBKDFOptions choose the keyslot KDF cost (iteration time, or forced
// iterations).
type PBKDFOptions = kdf.Options

// AnySlot asks for any keyslot where a keyslot number is an argument
// (Unlock, ChangeKey); in KeyslotOptions any keyslot is a nil Slot.
const AnySlot = keyslot.AnySlot

// Sentinel errors (shared with package luks2).
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
	ErrDeviceTooSmall  = luksutil.ErrDeviceTooSmall
	ErrInvalidOptions  = luksutil.ErrInvalidOptions
)

// Header is a validated LUKS1 header read from a device.
type Header struct {
	p Phdr
}

var _ luksutil.Header = (*Header)(nil)

func init() { luksutil.RegisterProber(inUse) }

// inUse reports the header and the active keyslot areas of a LUKS1 header
// on dev, for format-over-existing.
func inUse(dev Device) []luksutil.Range {
	h, err := Read(dev)
	if err != nil {
		return nil
	}
	out := []luksutil.Range{{Off: 0, Len: PhdrSize}}
	for _, s := range h.ActiveKeyslots() {
		out = append(out, h.area(s))
	}
	return out
}

// Read reads and validates the LUKS1 header at the start of dev, as
// cryptsetup's LUKS_read_phdr does, including the check that the device
// holds every keyslot area.
func Read(dev Device) (*Header, error) {
	buf, err := readPhdr(dev)
	if err != nil {
		return nil, err
	}
	return parse(dev, buf)
}

func parse(dev Device, buf []byte) (*Header, error) {
	if len(buf) >= 8 && bytes.Equal(buf[:6], NoMagic[:]) && buf[6] == 0 && buf[7] == 1 {
		// cryptsetup's mark of a LUKS1 reencryption: the data area is
		// half old, half new key, so nothing may open it.
		return nil, ErrReencryptInProgress
	}
	p, err := ParsePhdr(buf)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if n, err := kdf.HashSize(p.HashSpec()); err != nil || n < DigestSize {
		return nil, fmt.Errorf("%w: requested LUKS hash %q is not supported", ErrUnsupported, p.HashSpec())
	}
	if dev != nil {
		size, err := dev.Size()
		if err != nil {
			return nil, fmt.Errorf("device size: %w", err)
		}
		if need := p.HeaderSectors() * SectorSize; uint64(size) < need {
			return nil, fmt.Errorf("%w: LUKS1 requires at least %d bytes, the device has %d", ErrDeviceTooSmall, need, size)
		}
	}
	return &Header{p: *p}, nil
}

// Phdr returns a copy of the binary header.
func (h *Header) Phdr() Phdr { return h.p }

// Version returns 1.
func (h *Header) Version() int { return 1 }

// UUID returns the volume UUID.
func (h *Header) UUID() string { return h.p.UUID() }

// Cipher returns the data cipher in cryptsetup form, cipher-mode.
func (h *Header) Cipher() string {
	return cipherSpec(h.p.CipherName(), h.p.CipherMode())
}

func cipherSpec(name, mode string) string {
	if mode == "" {
		return name
	}
	return name + "-" + mode
}

// Hash returns the header hash (PBKDF2, AF and digest).
func (h *Header) Hash() string { return h.p.HashSpec() }

// KeySize returns the volume key size in bytes.
func (h *Header) KeySize() int { return int(h.p.KeyBytes) }

// SectorSize is always 512 for LUKS1.
func (h *Header) SectorSize() int { return SectorSize }

// DataOffset returns the payload offset in bytes (0 for a detached header).
func (h *Header) DataOffset() int64 { return int64(h.p.PayloadOffset) * SectorSize }

// DataSize returns the payload size on a device of devSize bytes, in whole
// sectors; 0 if the device ends before the payload.
func (h *Header) DataSize(devSize int64) int64 {
	n := devSize - h.DataOffset()
	if n < 0 {
		return 0
	}
	return n &^ (SectorSize - 1)
}

// HeaderSize is the size of the header plus every keyslot area in bytes.
func (h *Header) HeaderSize() int64 { return int64(h.p.HeaderSectors()) * SectorSize }

// ActiveKeyslots lists the enabled keyslots.
func (h *Header) ActiveKeyslots() []int {
	var out []int
	for i := range h.p.Keyslots {
		if h.p.Keyslots[i].Enabled() {
			out = append(out, i)
		}
	}
	return out
}

// Keyslot returns a copy of a keyslot descriptor.
func (h *Header) Keyslot(slot int) (Keyslot, error) {
	if slot < 0 || slot >= NumKeyslots {
		return Keyslot{}, fmt.Errorf("%w: %d (LUKS1 has keyslots 0-7)", ErrInvalidSlot, slot)
	}
	return h.p.Keyslots[slot], nil
}

func (h *Header) area(slot int) luksutil.Range {
	return luksutil.Range{
		Off: int64(h.p.Keyslots[slot].KeyMaterialOffset) * SectorSize,
		Len: int64(h.p.AreaSectors()) * SectorSize,
	}
}

func (h *Header) areaSpec(slot int) luksutil.AreaSpec {
	k := &h.p.Keyslots[slot]
	return luksutil.AreaSpec{
		Cipher:  h.Cipher(),
		KeySize: int(h.p.KeyBytes),
		Offset:  int64(k.KeyMaterialOffset) * SectorSize,
		KeyLen:  int(h.p.KeyBytes),
		Stripes: int(k.Stripes),
		AFHash:  h.p.HashSpec(),
	}
}

// VolumeKeyDigestOK reports whether key matches the header's digest:
// PBKDF2(key, mkDigestSalt, mkDigestIterations) compared in constant time.
func (h *Header) VolumeKeyDigestOK(key []byte) bool {
	if len(key) != int(h.p.KeyBytes) || h.p.MKDigestIterations == 0 {
		return false
	}
	hf, err := kdf.HashFunc(h.p.HashSpec())
	if err != nil {
		return false
	}
	d, err := kdf.PBKDF2Key(hf, key, h.p.MKDigestSalt[:], int(h.p.MKDigestIterations), DigestSize)
	if err != nil {
		return false
	}
	defer clear(d)
	return luksutil.ConstantTimeEqual(d, h.p.MKDigest[:])
}

// openSlot tries one keyslot; ErrWrongPassphrase when the digest differs.
func (h *Header) openSlot(ctx context.Context, dev Device, passphrase []byte, slot int) ([]byte, error) {
	k := &h.p.Keyslots[slot]
	p := kdf.Params{Type: kdf.PBKDF2, Hash: h.p.HashSpec(), Iterations: k.Iterations}
	key, err := luksutil.OpenAreaContext(ctx, dev, h.areaSpec(slot), p, k.Salt[:], passphrase)
	if err != nil {
		return nil, err
	}
	if !h.VolumeKeyDigestOK(key) {
		clear(key)
		return nil, ErrWrongPassphrase
	}
	return key, nil
}

// Unlock derives the volume key from passphrase. With slot AnySlot every
// enabled keyslot is tried in order; otherwise only slot. It returns the
// key (wipe it after use), the keyslot that opened, or ErrWrongPassphrase.
// Errors other than a wrong passphrase (an unavailable cipher, an I/O
// error) stop the search, as in cryptsetup.
func (h *Header) Unlock(dev Device, passphrase []byte, slot int) ([]byte, int, error) {
	return h.UnlockContext(context.Background(), dev, passphrase, slot)
}

// UnlockContext is Unlock that returns with ctx's error (in the chain)
// when ctx ends during a key derivation or between keyslots.
func (h *Header) UnlockContext(ctx context.Context, dev Device, passphrase []byte, slot int) ([]byte, int, error) {
	if slot != AnySlot {
		if slot < 0 || slot >= NumKeyslots {
			return nil, -1, fmt.Errorf("%w: %d (LUKS1 has keyslots 0-7)", ErrInvalidSlot, slot)
		}
		if !h.p.Keyslots[slot].Enabled() {
			return nil, -1, fmt.Errorf("%w: keyslot %d", ErrSlotInactive, slot)
		}
		key, err := h.openSlot(ctx, dev, passphrase, slot)
		if err != nil {
			return nil, -1, err
		}
		return key, slot, nil
	}
	for i := range h.p.Keyslots {
		if !h.p.Keyslots[i].Enabled() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, -1, err
		}
		key, err := h.openSlot(ctx, dev, passphrase, i)
		if err == nil {
			return key, i, nil
		}
		if !errors.Is(err, ErrWrongPassphrase) {
			return nil, -1, err
		}
	}
	return nil, -1, ErrWrongPassphrase
}

// writeHeader writes p at offset 0 and syncs; on success h takes p.
//
// The 592-byte header spans two sectors, and a power cut may keep either
// without the other. So when its second sector (the end of keyslot 6 and
// keyslot 7) changes, that part is written and synced on its own first:
// until the first sector follows, the old header still holds (its keyslots
// 0-5 unchanged; over a LUKS2 header, whose primary this breaks, the
// LUKS2 secondary copy), and the switch is the single-sector write of the
// first. Writing both at once let a cut keep a new first sector over an
// old second one: over LUKS2, a LUKS1 header with keyslots 6 and 7 made of
// LUKS2 bytes, which cryptsetup refuses, so nothing opened.
func (h *Header) writeHeader(dev Device, p *Phdr) error {
	raw := p.Marshal()
	cur := make([]byte, len(raw)-SectorSize)
	if _, err := dev.ReadAt(cur, SectorSize); err != nil || !bytes.Equal(cur, raw[SectorSize:]) {
		if err := luksutil.WriteSync(dev, raw[SectorSize:], SectorSize); err != nil {
			return fmt.Errorf("writing LUKS1 header: %w", err)
		}
	}
	if err := luksutil.WriteSync(dev, raw[:SectorSize], 0); err != nil {
		return fmt.Errorf("writing LUKS1 header: %w", err)
	}
	h.p = *p
	return nil
}

func checkPBKDF(o kdf.Options) error {
	if o.Type != "" && o.Type != kdf.PBKDF2 {
		return fmt.Errorf("%w: requested PBKDF type %s is not supported for LUKS1", ErrInvalidOptions, o.Type)
	}
	return nil
}

// AddKey stores volumeKey in a free keyslot under passphrase and returns
// the slot. The key material is written and synced before the header that
// enables it, so a crash leaves the old header intact. opts.PBKDF sets the
// iteration time or forced iterations; the hash is always the header's.
func (h *Header) AddKey(dev Device, volumeKey, passphrase []byte, opts KeyslotOptions) (int, error) {
	return h.AddKeyContext(context.Background(), dev, volumeKey, passphrase, opts)
}

// AddKeyContext is AddKey whose KDF benchmark and derivation stop, with
// ctx's error in the chain and nothing written, when ctx ends.
func (h *Header) AddKeyContext(ctx context.Context, dev Device, volumeKey, passphrase []byte, opts KeyslotOptions) (int, error) {
	if err := checkPBKDF(opts.PBKDF); err != nil {
		return -1, err
	}
	if opts.Priority != luksutil.PriorityUnset {
		return -1, fmt.Errorf("%w: LUKS1 keyslots have no priority", ErrInvalidOptions)
	}
	if !h.VolumeKeyDigestOK(volumeKey) {
		return -1, ErrWrongKey
	}
	slot := keyslot.Number(opts.Slot)
	if slot == AnySlot {
		slot = -1
		for i := range h.p.Keyslots {
			if h.p.Keyslots[i].Active == KeyDisabled {
				slot = i
				break
			}
		}
		if slot < 0 {
			return -1, fmt.Errorf("%w: all %d LUKS1 keyslots are in use", ErrNoFreeSlot, NumKeyslots)
		}
	} else if slot < 0 || slot >= NumKeyslots {
		return -1, fmt.Errorf("%w: %d (LUKS1 has keyslots 0-7)", ErrInvalidSlot, slot)
	} else if h.p.Keyslots[slot].Active != KeyDisabled {
		return -1, fmt.Errorf("%w: keyslot %d is active, remove it first", ErrSlotInUse, slot)
	}
	return slot, h.setKey(ctx, dev, slot, volumeKey, passphrase, opts.PBKDF)
}

func (h *Header) setKey(ctx context.Context, dev Device, slot int, volumeKey, passphrase []byte, o kdf.Options) error {
	o.Type, o.Hash = kdf.PBKDF2, h.p.HashSpec()
	params, err := kdf.ResolveContext(ctx, o, kdf.PBKDF2, int(h.p.KeyBytes))
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	params.Iterations = max(params.Iterations, MinIterations)
	np := h.p
	k := &np.Keyslots[slot]
	if err := luksutil.Random(k.Salt[:]); err != nil {
		return err
	}
	k.Iterations = params.Iterations
	k.Active = KeyEnabled
	spec := h.areaSpec(slot)
	material, err := luksutil.SealAreaContext(ctx, spec, params, k.Salt[:], passphrase, volumeKey)
	if err != nil {
		return err
	}
	defer clear(material)
	if err := luksutil.WriteSync(dev, material, spec.Offset); err != nil {
		return fmt.Errorf("writing keyslot %d material: %w", slot, err)
	}
	return h.writeHeader(dev, &np)
}

// RemoveKey disables a keyslot (luksKillSlot). The header stops referring
// to the keyslot first; only then is its key material overwritten with
// random data.
func (h *Header) RemoveKey(dev Device, slot int) error {
	if slot < 0 || slot >= NumKeyslots {
		return fmt.Errorf("%w: %d (LUKS1 has keyslots 0-7)", ErrInvalidSlot, slot)
	}
	if !h.p.Keyslots[slot].Enabled() {
		return fmt.Errorf("%w: keyslot %d", ErrSlotInactive, slot)
	}
	np := h.p
	k := &np.Keyslots[slot]
	k.Active = KeyDisabled
	k.Iterations = 0
	clear(k.Salt[:])
	if err := h.writeHeader(dev, &np); err != nil {
		return err
	}
	a := h.area(slot)
	if err := luksutil.WipeArea(dev, a.Off, int(a.Len)); err != nil {
		return fmt.Errorf("wiping keyslot %d material: %w", slot, err)
	}
	return nil
}

// ChangeKey replaces the passphrase of the keyslot that oldPassphrase
// opens (only slot, unless AnySlot). The new passphrase goes into a free
// keyslot (opts.Slot, or the first free one): material, then a header
// enabling it, then a header disabling the old keyslot, then the old
// material is wiped. A crash at any point leaves the old or the new
// passphrase working. Without a free keyslot it returns ErrNoFreeSlot
// rather than overwrite the only copy in place.
func (h *Header) ChangeKey(dev Device, oldPassphrase, newPassphrase []byte, slot int, opts KeyslotOptions) (int, error) {
	return h.ChangeKeyContext(context.Background(), dev, oldPassphrase, newPassphrase, slot, opts)
}

// ChangeKeyContext is ChangeKey whose key derivations stop, with ctx's
// error in the chain and nothing written, when ctx ends.
func (h *Header) ChangeKeyContext(ctx context.Context, dev Device, oldPassphrase, newPassphrase []byte, slot int, opts KeyslotOptions) (int, error) {
	if err := checkPBKDF(opts.PBKDF); err != nil {
		return -1, err
	}
	key, old, err := h.UnlockContext(ctx, dev, oldPassphrase, slot)
	if err != nil {
		return -1, err
	}
	defer clear(key)
	ns := keyslot.Number(opts.Slot)
	if ns == old {
		return -1, fmt.Errorf("%w: keyslot %d holds the old passphrase; pick another slot so the change stays crash-safe", ErrSlotInUse, ns)
	}
	if ns == AnySlot {
		ns = -1
		for i := range h.p.Keyslots {
			if i != old && h.p.Keyslots[i].Active == KeyDisabled {
				ns = i
				break
			}
		}
		if ns < 0 {
			return -1, fmt.Errorf("%w: changing a passphrase needs a free keyslot (remove one first)", ErrNoFreeSlot)
		}
	}
	o := opts
	o.Slot = &ns
	if _, err := h.AddKeyContext(ctx, dev, key, newPassphrase, o); err != nil {
		return -1, err
	}
	if err := h.RemoveKey(dev, old); err != nil {
		return ns, err
	}
	return ns, nil
}

// FormatOptions configure Format. Zero values give cryptsetup's LUKS1
// defaults: aes-xts-plain64, sha256, payload aligned to 1 MiB.
type FormatOptions struct {
	// Cipher is cipher-mode, e.g. "aes-xts-plain64" or
	// "aes-cbc-essiv:sha256".
	Cipher string
	// Hash is the header hash; empty means sha256.
	Hash string
	// UUID is the volume UUID; empty means a random one.
	UUID string
	// PayloadOffset forces the data offset in 512-byte sectors.
	PayloadOffset uint32
	// Align is the payload alignment in sectors when PayloadOffset is
	// zero; 0 means 2048 (1 MiB).
	Align uint32
	// Detached writes a header for a separate data device: payload offset
	// 0 unless PayloadOffset is given.
	Detached bool
	// Keyslot configures the first keyslot. With Slot nil (any), Format
	// picks the first keyslot whose area does not overlap a LUKS header
	// already on the device, so a crash mid-format leaves the old volume
	// openable.
	Keyslot KeyslotOptions
}

// DefaultCipher is cryptsetup's default LUKS1 cipher.
const DefaultCipher = "aes-xts-plain64"

// Format writes a new LUKS1 header holding volumeKey under passphrase and
// returns it. Key material is written first, into a keyslot area that no
// existing LUKS header on the device uses; the new header is then written
// in one step; only after that are the remaining header and keyslot areas
// wiped (zeros, and random data over unused keyslot areas).
func Format(dev Device, volumeKey, passphrase []byte, opts FormatOptions) (*Header, error) {
	return FormatContext(context.Background(), dev, volumeKey, passphrase, opts)
}

// FormatContext is Format that stops, with ctx's error in the chain, when
// ctx ends during its KDF benchmark or derivation; those run before the
// first write, so a cancelled FormatContext leaves the device as it was.
func FormatContext(ctx context.Context, dev Device, volumeKey, passphrase []byte, opts FormatOptions) (*Header, error) {
	if err := checkPBKDF(opts.Keyslot.PBKDF); err != nil {
		return nil, err
	}
	if len(volumeKey) == 0 {
		return nil, fmt.Errorf("%w: empty volume key", ErrInvalidOptions)
	}
	spec := opts.Cipher
	if spec == "" {
		spec = DefaultCipher
	}
	name, mode, _ := strings.Cut(spec, "-")
	if err := luksutil.CheckCipher(spec, len(volumeKey)); err != nil {
		return nil, fmt.Errorf("%w: cipher %s with a %d-bit key: %w", ErrInvalidOptions, spec, len(volumeKey)*8, err)
	}
	hash := opts.Hash
	if hash == "" {
		hash = kdf.DefaultHash
	}
	hash = strings.ToLower(hash)
	if n, err := kdf.HashSize(hash); err != nil || n < DigestSize {
		return nil, fmt.Errorf("%w: requested LUKS hash %s is not supported", ErrInvalidOptions, hash)
	}
	p := &Phdr{Magic: Magic, Version: 1, KeyBytes: uint32(len(volumeKey))}
	for _, f := range []struct {
		dst []byte
		s   string
	}{{p.CipherNameRaw[:], name}, {p.CipherModeRaw[:], mode}, {p.HashSpecRaw[:], hash}} {
		if err := setCstr(f.dst, f.s); err != nil {
			return nil, err
		}
	}
	uuid := opts.UUID
	var err error
	if uuid == "" {
		uuid, err = luksutil.NewUUID()
	} else {
		uuid, err = luksutil.CheckUUID(uuid)
	}
	if err != nil {
		return nil, err
	}
	setCstr(p.UUIDRaw[:], uuid)

	secs := p.AreaSectors()
	off := uint64(AlignKeyslots / SectorSize)
	for i := range p.Keyslots {
		p.Keyslots[i] = Keyslot{Active: KeyDisabled, KeyMaterialOffset: uint32(off), Stripes: Stripes}
		off = roundUp(off+secs, AlignKeyslots/SectorSize)
	}
	headerEnd := off
	switch {
	case opts.PayloadOffset != 0:
		if uint64(opts.PayloadOffset) < headerEnd {
			return nil, fmt.Errorf("%w: data offset for LUKS header must be either 0 or higher than header size (%d sectors)", ErrInvalidOptions, headerEnd)
		}
		p.PayloadOffset = opts.PayloadOffset
	case opts.Detached:
		p.PayloadOffset = 0
	default:
		align := uint64(opts.Align)
		if align == 0 {
			align = DefaultAlign
		}
		po := roundUp(headerEnd, align)
		if po > 1<<32-1 {
			return nil, fmt.Errorf("%w: payload offset overflows", ErrInvalidOptions)
		}
		p.PayloadOffset = uint32(po)
	}
	size, err := dev.Size()
	if err != nil {
		return nil, err
	}
	need := int64(headerEnd) * SectorSize
	if int64(p.PayloadOffset)*SectorSize > need {
		need = int64(p.PayloadOffset) * SectorSize
	}
	if size < need {
		return nil, fmt.Errorf("%w: LUKS1 with this layout needs %d bytes, the device has %d", ErrDeviceTooSmall, need, size)
	}

	// Volume key digest.
	if err := luksutil.Random(p.MKDigestSalt[:]); err != nil {
		return nil, err
	}
	o := opts.Keyslot.PBKDF
	o.Type, o.Hash = kdf.PBKDF2, hash
	if err := o.Check(kdf.PBKDF2); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	var slotParams kdf.Params
	if o.Forced() {
		p.MKDigestIterations = MinIterations
	} else {
		slotParams, err = kdf.ResolveContext(ctx, o, kdf.PBKDF2, len(volumeKey))
		if err != nil {
			return nil, err
		}
		// iterations per ms × 125 ms, as LUKS_generate_phdr computes it.
		t := o.IterTime
		if t <= 0 {
			t = kdf.DefaultIterTime
		}
		it := uint64(slotParams.Iterations) * uint64(kdf.DigestIterTime.Milliseconds()) / uint64(max(1, t.Milliseconds()))
		p.MKDigestIterations = uint32(max(it, MinIterations))
		o.Iterations = max(slotParams.Iterations, MinIterations) // reuse the benchmark
	}
	hf, _ := kdf.HashFunc(hash)
	d, err := kdf.PBKDF2Key(hf, volumeKey, p.MKDigestSalt[:], int(p.MKDigestIterations), DigestSize)
	if err != nil {
		return nil, err
	}
	copy(p.MKDigest[:], d)
	clear(d)

	// Pick the keyslot: away from whatever an existing header still needs.
	slot := keyslot.Number(opts.Keyslot.Slot)
	inUse := luksutil.InUse(dev)
	h := &Header{p: *p}
	if slot == AnySlot {
		slot = -1
		for i := range p.Keyslots {
			if !luksutil.OverlapsAny(h.area(i), inUse) {
				slot = i
				break
			}
		}
		if slot < 0 {
			slot = 0 // nothing to preserve in order: no crash-safe choice
		}
	} else if slot < 0 || slot >= NumKeyslots {
		return nil, fmt.Errorf("%w: %d (LUKS1 has keyslots 0-7)", ErrInvalidSlot, slot)
	}

	// Keyslot material first, then the header: the switch is one write.
	empty := &Header{p: *p}
	if err := empty.setKey(ctx, dev, slot, volumeKey, passphrase, o); err != nil {
		return nil, err
	}
	h = empty

	// Wipe what the old volume left: zeros between the header and the
	// first keyslot and after the last one up to the payload, random data
	// over the unused keyslot areas.
	if err := h.wipeUnused(dev, slot); err != nil {
		return h, fmt.Errorf("wiping old header areas: %w", err)
	}
	return h, nil
}

func (h *Header) wipeUnused(dev Device, keep int) error {
	zero := func(off, end int64) error {
		if end <= off {
			return nil
		}
		buf := make([]byte, min(end-off, 1<<20))
		for off < end {
			n := min(int64(len(buf)), end-off)
			if _, err := dev.WriteAt(buf[:n], off); err != nil {
				return err
			}
			off += n
		}
		return nil
	}
	first := int64(h.p.Keyslots[0].KeyMaterialOffset) * SectorSize
	if err := zero(PhdrSize, first); err != nil {
		return err
	}
	for i := range h.p.Keyslots {
		a := h.area(i)
		if i != keep {
			if err := luksutil.WipeArea(dev, a.Off, int(a.Len)); err != nil {
				return err
			}
		}
		end := h.HeaderSize()
		if i+1 < NumKeyslots {
			end = int64(h.p.Keyslots[i+1].KeyMaterialOffset) * SectorSize
		}
		if err := zero(a.End(), end); err != nil {
			return err
		}
	}
	if po := h.DataOffset(); po > h.HeaderSize() && po <= NumKeyslots*maxKeyslotArea {
		if err := zero(h.HeaderSize(), po); err != nil {
			return err
		}
	}
	return dev.Sync()
}

func roundUp(v, a uint64) uint64 { return (v + a - 1) / a * a }
