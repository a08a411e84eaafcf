package luks2

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
)

// Defaults, as cryptsetup 2.7 formats LUKS2.
const (
	DefaultCipher          = "aes-xts-plain64"
	DefaultKeySize         = 64 // bytes
	DefaultMetadataSize    = 0x4000
	DefaultDataOffset      = 0x1000000 // 16 MiB
	DefaultAlign           = 0x100000  // 1 MiB
	defaultKeyslotCipher   = "aes-xts-plain64"
	defaultKeyslotKeyBytes = 64
	stripes                = 4000
	saltSize               = 32
)

// prepared is validated metadata ready to be written.
type prepared struct {
	bin  BinHeader
	md   *metadata
	area []byte
}

// prepare validates root for a header of h's geometry and serialises it.
func (h *Header) prepare(root *jval, bin BinHeader) (*prepared, error) {
	md, err := validateMetadata(root, bin.HdrSize-BinHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("refusing to write invalid metadata: %w", err)
	}
	js := marshalMetadata(root)
	area := make([]byte, bin.HdrSize-BinHeaderSize)
	if len(js) > len(area)-1 {
		return nil, fmt.Errorf("%w: the JSON metadata (%d bytes) does not fit the %d-byte area", ErrNoFreeSlot, len(js), len(area))
	}
	copy(area, js)
	return &prepared{bin: bin, md: md, area: area}, nil
}

// write writes the primary copy, syncs, then the secondary copy, syncs,
// each as one write of binary header plus the whole JSON area, with the
// sequence id incremented. A crash between the two leaves a valid newer
// primary or the older pair; Read picks whichever is valid and newest.
func (h *Header) write(dev Device, p *prepared) error {
	bin := p.bin
	bin.SeqID++
	bin.Version = 2
	for i, off := range []uint64{0, bin.HdrSize} {
		c := bin
		c.HdrOffset = off
		c.Magic = MagicPrimary
		c.Salt = bin.Salt
		if i == 1 {
			c.Magic = MagicSecondary
			c.Salt = h.salt2
		}
		c.Csum = [ChecksumLen]byte{}
		raw := c.Marshal()
		sum, err := checksum(c.ChecksumAlg, raw, p.area)
		if err != nil {
			return err
		}
		copy(raw[offCsum:], sum)
		if err := luksutil.WriteSync(dev, append(raw, p.area...), int64(off)); err != nil {
			return fmt.Errorf("writing LUKS2 metadata copy %d: %w", i+1, err)
		}
	}
	bin.HdrOffset, bin.Magic = 0, MagicPrimary
	h.bin = bin
	h.md = p.md
	h.primaryOK, h.secondOK = true, true
	return nil
}

// commit validates and writes root with h's binary header.
func (h *Header) commit(dev Device, root *jval) error {
	p, err := h.prepare(root, h.bin)
	if err != nil {
		return err
	}
	return h.write(dev, p)
}

// Repair rewrites both metadata copies from the valid one (after Read
// found one damaged or outdated), like cryptsetup's automatic recovery.
func (h *Header) Repair(dev Device) error {
	if err := h.Writable(); err != nil {
		return err
	}
	return h.commit(dev, h.md.root.clone())
}

// keyslotEncryption picks the keyslot area cipher: the data cipher with
// the volume key size when usable for keyslots, else aes-xts-plain64/512.
func (h *Header) keyslotEncryption(keyLen int) (string, int) {
	c := h.Cipher()
	if c != "" && !strings.HasPrefix(c, "capi:") && !strings.HasPrefix(c, "cipher_null") && keyLen > 0 {
		if luksutil.CheckCipher(c, keyLen) == nil {
			return c, keyLen
		}
	}
	return defaultKeyslotCipher, defaultKeyslotKeyBytes
}

func areaSize(keyLen int) uint64 { return (uint64(keyLen)*stripes + 4095) / 4096 * 4096 }

// findArea returns the first gap of size bytes in the keyslots area that
// no keyslot and no range in avoid uses (LUKS2_find_area_gap).
func (h *Header) findArea(size uint64, avoid []luksutil.Range) (uint64, error) {
	used := append([]luksutil.Range(nil), avoid...)
	for _, k := range h.md.keyslots {
		used = append(used, luksutil.Range{Off: int64(k.AreaOffset), Len: int64(k.AreaSize)})
	}
	sort.Slice(used, func(i, j int) bool { return used[i].Off < used[j].Off })
	off := 2 * h.bin.HdrSize
	end := h.HeaderSize()
	for {
		r := luksutil.Range{Off: int64(off), Len: int64(size)}
		moved := false
		for _, u := range used {
			if r.Overlaps(u) {
				off = (uint64(u.End()) + 4095) / 4096 * 4096
				moved = true
				break
			}
		}
		if !moved {
			break
		}
	}
	if off+size > end {
		return 0, fmt.Errorf("%w: no space for a new keyslot in the %d-byte keyslots area", ErrNoFreeSlot, h.md.config.KeyslotsSize)
	}
	return off, nil
}

func (h *Header) freeSlot() (int, error) {
	for i := 0; i < MaxKeyslots; i++ {
		if h.md.keyslots[i] == nil {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: all %d LUKS2 keyslots are in use", ErrNoFreeSlot, MaxKeyslots)
}

// newKeyslot prepares keyslot JSON and sealed material for key.
type newKeyslot struct {
	id       int
	obj      *jval
	offset   uint64
	material []byte
}

func (h *Header) buildKeyslot(id int, key, passphrase []byte, opts KeyslotOptions, avoid []luksutil.Range) (*newKeyslot, error) {
	return h.buildKeyslotContext(context.Background(), id, key, passphrase, opts, avoid)
}

// buildKeyslotContext makes a keyslot's metadata and sealed material; its
// KDF benchmark and derivation stop when ctx ends. It writes nothing.
func (h *Header) buildKeyslotContext(ctx context.Context, id int, key, passphrase []byte, opts KeyslotOptions, avoid []luksutil.Range) (*newKeyslot, error) {
	if err := opts.PBKDF.Check(kdf.Argon2id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	enc, encKey := h.keyslotEncryption(len(key))
	size := areaSize(len(key))
	off, err := h.findArea(size, avoid)
	if err != nil {
		return nil, err
	}
	params, err := kdf.ResolveContext(ctx, opts.PBKDF, kdf.Argon2id, encKey)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	afHash := opts.PBKDF.Hash
	if afHash == "" {
		afHash = kdf.DefaultHash
	}
	salt := make([]byte, saltSize)
	if err := luksutil.Random(salt); err != nil {
		return nil, err
	}
	kd := jobj(jmember{"type", jstr(params.Type)})
	if params.Type == kdf.PBKDF2 {
		kd.set("hash", jstr(params.Hash))
		kd.set("iterations", jint(int64(params.Iterations)))
	} else {
		kd.set("time", jint(int64(params.Iterations)))
		kd.set("memory", jint(int64(params.MemoryKiB)))
		kd.set("cpus", jint(int64(params.Parallel)))
	}
	kd.set("salt", jstr(base64.StdEncoding.EncodeToString(salt)))
	obj := jobj(
		jmember{"type", jstr("luks2")},
		jmember{"key_size", jint(int64(len(key)))},
		jmember{"af", jobj(jmember{"type", jstr("luks1")}, jmember{"stripes", jint(stripes)}, jmember{"hash", jstr(afHash)})},
		jmember{"area", jobj(jmember{"type", jstr("raw")}, jmember{"offset", ju64s(off)}, jmember{"size", ju64s(size)},
			jmember{"encryption", jstr(enc)}, jmember{"key_size", jint(int64(encKey))})},
		jmember{"kdf", kd},
	)
	if opts.Priority != PriorityUnset {
		if opts.Priority.DiskValue() < 0 || opts.Priority.DiskValue() > 2 {
			return nil, fmt.Errorf("%w: priority %d", ErrInvalidOptions, opts.Priority)
		}
		obj.set("priority", jint(int64(opts.Priority.DiskValue())))
	}
	spec := luksutil.AreaSpec{Cipher: enc, KeySize: encKey, Offset: int64(off), KeyLen: len(key), Stripes: stripes, AFHash: afHash}
	material, err := luksutil.SealAreaContext(ctx, spec, params, salt, passphrase, key)
	if err != nil {
		return nil, err
	}
	return &newKeyslot{id: id, obj: obj, offset: off, material: material}, nil
}

func arrRemove(a *jval, s string) bool {
	if a == nil || a.kind != jArr {
		return false
	}
	found := false
	for i := 0; i < len(a.arr); {
		if a.arr[i].kind == jStr && a.arr[i].s == s {
			a.arr = append(a.arr[:i], a.arr[i+1:]...)
			found = true
			continue
		}
		i++
	}
	return found
}

// insertSorted puts member key into obj keeping numeric order of ids.
func insertSorted(obj *jval, key string, val *jval) {
	obj.raw = nil
	n, _ := strconv.Atoi(key)
	for i, m := range obj.obj {
		if m.key == key {
			obj.obj[i].val = val
			return
		}
		if k, err := strconv.Atoi(m.key); err == nil && k > n {
			obj.obj = append(obj.obj[:i], append([]jmember{{key, val}}, obj.obj[i:]...)...)
			return
		}
	}
	obj.obj = append(obj.obj, jmember{key, val})
}

// storeKeyslot writes the keyslot material, then the metadata that
// references it.
func (h *Header) storeKeyslot(dev Device, nk *newKeyslot, root *jval) error {
	defer clear(nk.material)
	p, err := h.prepare(root, h.bin)
	if err != nil {
		return err
	}
	if err := luksutil.WriteSync(dev, nk.material, int64(nk.offset)); err != nil {
		return fmt.Errorf("writing keyslot %d material: %w", nk.id, err)
	}
	return h.write(dev, p)
}

func (h *Header) pickSlot(slot int) (int, error) {
	if slot == AnySlot {
		return h.freeSlot()
	}
	if slot < 0 || slot >= MaxKeyslots {
		return -1, fmt.Errorf("%w: %d (LUKS2 has keyslots 0-%d)", ErrInvalidSlot, slot, MaxKeyslots-1)
	}
	if h.md.keyslots[slot] != nil {
		return -1, fmt.Errorf("%w: keyslot %d", ErrSlotInUse, slot)
	}
	return slot, nil
}

// AddKey stores the volume key in a new keyslot under passphrase and
// returns its number. The key material goes to a free part of the keyslots
// area and is synced before the metadata that references it.
func (h *Header) AddKey(dev Device, volumeKey, passphrase []byte, opts KeyslotOptions) (int, error) {
	return h.AddKeyContext(context.Background(), dev, volumeKey, passphrase, opts)
}

// AddKeyContext is AddKey whose KDF benchmark and derivation stop, with
// ctx's error in the chain and nothing written, when ctx ends.
func (h *Header) AddKeyContext(ctx context.Context, dev Device, volumeKey, passphrase []byte, opts KeyslotOptions) (int, error) {
	if err := h.Writable(); err != nil {
		return -1, err
	}
	d := h.segmentDigest()
	if d == nil || !h.VolumeKeyDigestOK(volumeKey) {
		return -1, ErrWrongKey
	}
	return h.addKeyslot(ctx, dev, d.ID, volumeKey, passphrase, opts, nil)
}

func (h *Header) addKeyslot(ctx context.Context, dev Device, digest int, key, passphrase []byte, opts KeyslotOptions, avoid []luksutil.Range) (int, error) {
	nk, err := h.prepareKeyslot(ctx, key, passphrase, opts, avoid)
	if err != nil {
		return -1, err
	}
	return h.storeNewKeyslot(dev, digest, nk)
}

// prepareKeyslot picks a keyslot number and builds it, writing nothing.
func (h *Header) prepareKeyslot(ctx context.Context, key, passphrase []byte, opts KeyslotOptions, avoid []luksutil.Range) (*newKeyslot, error) {
	id, err := h.pickSlot(keyslot.Number(opts.Slot))
	if err != nil {
		return nil, err
	}
	return h.buildKeyslotContext(ctx, id, key, passphrase, opts, avoid)
}

// storeNewKeyslot adds a built keyslot to digest and writes it.
func (h *Header) storeNewKeyslot(dev Device, digest int, nk *newKeyslot) (int, error) {
	id := nk.id
	root := h.md.root.clone()
	sid := strconv.Itoa(id)
	insertSorted(root.get("keyslots"), sid, nk.obj)
	dg := root.get("digests").get(strconv.Itoa(digest))
	dg.get("keyslots").arr = append(dg.get("keyslots").arr, jstr(sid))
	dg.raw = nil
	if err := h.storeKeyslot(dev, nk, root); err != nil {
		return -1, err
	}
	return id, nil
}

// AddUnboundKey stores an arbitrary key (not the volume key) in a new
// keyslot with its own digest, assigned to no segment (cryptsetup's
// luksAddKey --unbound).
func (h *Header) AddUnboundKey(dev Device, key, passphrase []byte, opts KeyslotOptions) (int, error) {
	if err := h.Writable(); err != nil {
		return -1, err
	}
	if len(key) == 0 || len(key) > 1024 {
		return -1, fmt.Errorf("%w: unbound key of %d bytes", ErrInvalidOptions, len(key))
	}
	id, err := h.pickSlot(keyslot.Number(opts.Slot))
	if err != nil {
		return -1, err
	}
	did := 0
	for h.md.digests[did] != nil {
		did++
	}
	dobj, err := newDigest(key, opts.PBKDF, nil)
	if err != nil {
		return -1, err
	}
	nk, err := h.buildKeyslot(id, key, passphrase, opts, nil)
	if err != nil {
		return -1, err
	}
	sid := strconv.Itoa(id)
	dobj.get("keyslots").arr = append(dobj.get("keyslots").arr, jstr(sid))
	root := h.md.root.clone()
	insertSorted(root.get("keyslots"), sid, nk.obj)
	insertSorted(root.get("digests"), strconv.Itoa(did), dobj)
	if err := h.storeKeyslot(dev, nk, root); err != nil {
		return -1, err
	}
	return id, nil
}

// newDigest makes a pbkdf2 digest object for key (LUKS2 digest store):
// 1000 iterations when the keyslot KDF is forced, else what the hash does
// in 125 ms.
func newDigest(key []byte, o kdf.Options, segments []string) (*jval, error) {
	return newDigestContext(context.Background(), key, o, segments)
}

func newDigestContext(ctx context.Context, key []byte, o kdf.Options, segments []string) (*jval, error) {
	hash := o.Hash
	if hash == "" {
		hash = kdf.DefaultHash
	}
	hf, err := kdf.HashFunc(hash)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	it, err := kdf.DigestIterationsContext(ctx, o, hash, len(key))
	if err != nil {
		return nil, err
	}
	salt := make([]byte, saltSize)
	if err := luksutil.Random(salt); err != nil {
		return nil, err
	}
	v, err := kdf.PBKDF2Key(hf, key, salt, int(it), hf().Size())
	if err != nil {
		return nil, err
	}
	return jobj(
		jmember{"type", jstr("pbkdf2")},
		jmember{"keyslots", jarrStr()},
		jmember{"segments", jarrStr(segments...)},
		jmember{"hash", jstr(hash)},
		jmember{"iterations", jint(int64(it))},
		jmember{"salt", jstr(base64.StdEncoding.EncodeToString(salt))},
		jmember{"digest", jstr(base64.StdEncoding.EncodeToString(v))},
	), nil
}

// dropKeyslotRefs removes keyslot id from digests and tokens.
func dropKeyslotRefs(root *jval, sid string) {
	for _, d := range root.get("digests").obj {
		if arrRemove(d.val.get("keyslots"), sid) {
			d.val.raw = nil
		}
	}
	for _, t := range root.get("tokens").obj {
		if arrRemove(t.val.get("keyslots"), sid) {
			t.val.raw = nil
		}
	}
}

// RemoveKey deletes a keyslot (luksKillSlot): the metadata stops referring
// to it (keyslot, digest and token references) first; then its area is
// overwritten with random data.
func (h *Header) RemoveKey(dev Device, slot int) error {
	if err := h.Writable(); err != nil {
		return err
	}
	k, err := h.keyslot(slot)
	if err != nil {
		return err
	}
	root := h.md.root.clone()
	sid := strconv.Itoa(slot)
	root.get("keyslots").del(sid)
	dropKeyslotRefs(root, sid)
	if err := h.commit(dev, root); err != nil {
		return err
	}
	if k.AreaSize > 0 && k.AreaSize <= MaxKeyslotsSize {
		if err := luksutil.WipeArea(dev, int64(k.AreaOffset), int(k.AreaSize)); err != nil {
			return fmt.Errorf("wiping keyslot %d area: %w", slot, err)
		}
	}
	return nil
}

// ChangeKey replaces the passphrase of the keyslot oldPassphrase opens
// (only slot, unless AnySlot). The keyslot keeps its number, digest and
// token assignments (and priority unless opts sets one), but gets a new
// area: the new material is written to free space first, one metadata
// update switches the keyslot over, and the old area is wiped last. So a
// crash leaves the old or the new passphrase working. opts.Slot is
// ignored. Without free space in the keyslots area it returns
// ErrNoFreeSlot instead of overwriting the keyslot in place.
func (h *Header) ChangeKey(dev Device, oldPassphrase, newPassphrase []byte, slot int, opts KeyslotOptions) (int, error) {
	return h.ChangeKeyContext(context.Background(), dev, oldPassphrase, newPassphrase, slot, opts)
}

// ChangeKeyContext is ChangeKey whose key derivations stop, with ctx's
// error in the chain and nothing written, when ctx ends.
func (h *Header) ChangeKeyContext(ctx context.Context, dev Device, oldPassphrase, newPassphrase []byte, slot int, opts KeyslotOptions) (int, error) {
	if err := h.Writable(); err != nil {
		return -1, err
	}
	key, id, _, err := h.UnlockUnboundContext(ctx, dev, oldPassphrase, slot)
	if err != nil {
		return -1, err
	}
	defer clear(key)
	old := h.md.keyslots[id]
	if opts.Priority == PriorityUnset {
		opts.Priority = old.Priority
	}
	nk, err := h.buildKeyslotContext(ctx, id, key, newPassphrase, opts, nil)
	if err != nil {
		return -1, err
	}
	root := h.md.root.clone()
	root.get("keyslots").set(strconv.Itoa(id), nk.obj)
	if err := h.storeKeyslot(dev, nk, root); err != nil {
		return -1, err
	}
	if err := luksutil.WipeArea(dev, int64(old.AreaOffset), int(min(old.AreaSize, MaxKeyslotsSize))); err != nil {
		return id, fmt.Errorf("wiping the old keyslot %d area: %w", id, err)
	}
	return id, nil
}

// SetPriority changes a keyslot's priority.
func (h *Header) SetPriority(dev Device, slot int, p Priority) error {
	if err := h.Writable(); err != nil {
		return err
	}
	if _, err := h.keyslot(slot); err != nil {
		return err
	}
	root := h.md.root.clone()
	ks := root.get("keyslots").get(strconv.Itoa(slot))
	if p == PriorityUnset {
		ks.del("priority")
	} else if p.DiskValue() >= 0 && p.DiskValue() <= 2 {
		ks.set("priority", jint(int64(p.DiskValue())))
	} else {
		return fmt.Errorf("%w: priority %d", ErrInvalidOptions, p)
	}
	return h.commit(dev, root)
}

// SetLabel sets the label and subsystem (at most 47 bytes each).
func (h *Header) SetLabel(dev Device, label, subsystem string) error {
	if err := h.Writable(); err != nil {
		return err
	}
	if len(label) >= LabelLen || len(subsystem) >= LabelLen || strings.IndexByte(label+subsystem, 0) >= 0 {
		return fmt.Errorf("%w: label and subsystem take at most %d bytes", ErrInvalidOptions, LabelLen-1)
	}
	p, err := h.prepare(h.md.root.clone(), h.bin)
	if err != nil {
		return err
	}
	p.bin.Label, p.bin.Subsystem = label, subsystem
	return h.write(dev, p)
}

// SetToken stores a token's JSON (an object with a "type" string and a
// "keyslots" array of existing keyslot ids) under id, byte for byte.
func (h *Header) SetToken(dev Device, id int, token []byte) error {
	if err := h.Writable(); err != nil {
		return err
	}
	if id < 0 || id >= MaxKeyslots {
		return fmt.Errorf("%w: token id %d", ErrInvalidOptions, id)
	}
	v, err := parseJSON(token)
	if err != nil || v.kind != jObj {
		return fmt.Errorf("%w: token is not a JSON object", ErrInvalidOptions)
	}
	v.raw = bytes.TrimSpace(append([]byte(nil), token...))
	root := h.md.root.clone()
	insertSorted(root.get("tokens"), strconv.Itoa(id), v)
	return h.commit(dev, root)
}

// RemoveToken deletes a token.
func (h *Header) RemoveToken(dev Device, id int) error {
	if err := h.Writable(); err != nil {
		return err
	}
	root := h.md.root.clone()
	key := strconv.Itoa(id)
	if root.get("tokens").get(key) == nil {
		return fmt.Errorf("%w: no token %d", ErrInvalidOptions, id)
	}
	root.get("tokens").del(key)
	return h.commit(dev, root)
}

// FormatOptions configure Format. Zero values give cryptsetup 2.7's
// defaults: aes-xts-plain64, argon2id keyslot, 16 KiB metadata, data at
// 16 MiB with the keyslots area filling the space before it, sector size
// 4096 when the data area is aligned to it.
type FormatOptions struct {
	Cipher string
	// SectorSize is 512, 1024, 2048 or 4096; 0 picks 4096 when the data
	// offset and size allow it, else 512.
	SectorSize int
	// MetadataSize is one metadata copy (0x4000 … 0x400000).
	MetadataSize uint64
	// KeyslotsSize is the binary keyslots area (4 KiB multiple).
	KeyslotsSize uint64
	// DataOffset is the data segment offset in bytes.
	DataOffset uint64
	// Align aligns the default data offset (bytes; 1 MiB).
	Align uint64
	// Detached writes a header for a separate data device: the data
	// segment starts at DataOffset (default 0) of that device.
	Detached  bool
	UUID      string
	Label     string
	Subsystem string
	// Keyslot configures the first keyslot (KDF default argon2id).
	Keyslot KeyslotOptions
	// Integrity is the data segment's integrity type (IntegrityType's
	// result: "aead", "poly1305", "hmac(sha256)", …) for authenticated
	// encryption over dm-integrity, as cryptsetup --integrity; the caller
	// formats the dm-integrity device in the data area (integrity.go).
	Integrity string
}

// existingSeqID returns the highest sequence id of any LUKS2 binary
// header on dev, so a new header written over it wins.
func existingSeqID(dev Device) uint64 {
	var best uint64
	buf := make([]byte, offSeqID+8)
	for _, off := range append([]uint64{0}, MetadataSizes...) {
		if _, err := dev.ReadAt(buf, int64(off)); err != nil {
			continue
		}
		if bytes.Equal(buf[:MagicLen], MagicPrimary[:]) || bytes.Equal(buf[:MagicLen], MagicSecondary[:]) {
			best = max(best, binary.BigEndian.Uint64(buf[offSeqID:]))
		}
	}
	return best
}

// Format writes a new LUKS2 header holding volumeKey under passphrase.
// The keyslot material is written first, to space no LUKS header on the
// device still uses; then the primary and the secondary metadata (with a
// sequence id above any old one); then the rest of the keyslots area is
// overwritten with random data. So a power cut leaves the old header
// working or the new one, except where the old header's keyslot material
// lies under the new metadata (a LUKS1 header with its first keyslot at
// 4 KiB): that header cannot survive, and its signatures are erased
// first, so a cut leaves it, no LUKS header, or the new one, never a
// header that nothing opens.
func Format(dev Device, volumeKey, passphrase []byte, opts FormatOptions) (*Header, error) {
	return FormatContext(context.Background(), dev, volumeKey, passphrase, opts)
}

// FormatContext is Format that stops, with ctx's error in the chain, when
// ctx ends during its KDF benchmarks and derivations: they all run before
// the first write, so a cancelled FormatContext leaves the device as it
// was.
func FormatContext(ctx context.Context, dev Device, volumeKey, passphrase []byte, opts FormatOptions) (*Header, error) {
	if len(volumeKey) == 0 {
		return nil, fmt.Errorf("%w: empty volume key", ErrInvalidOptions)
	}
	cipher := opts.Cipher
	if cipher == "" {
		cipher = DefaultCipher
	}
	checkCipher := luksutil.CheckCipher
	if opts.Integrity != "" {
		checkCipher = func(c string, n int) error { return checkIntegrityCipher(c, opts.Integrity, n) }
	}
	if err := checkCipher(cipher, len(volumeKey)); err != nil {
		return nil, fmt.Errorf("%w: cipher %s with a %d-bit key: %w", ErrInvalidOptions, cipher, len(volumeKey)*8, err)
	}
	if err := opts.Keyslot.PBKDF.Check(kdf.Argon2id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	mds := opts.MetadataSize
	if mds == 0 {
		mds = DefaultMetadataSize
	}
	if !contains1u(MetadataSizes, mds) {
		return nil, fmt.Errorf("%w: metadata size %d is not one of 16 KiB … 4 MiB", ErrInvalidOptions, mds)
	}
	align := opts.Align
	if align == 0 {
		align = DefaultAlign
	}
	if align%512 != 0 {
		return nil, fmt.Errorf("%w: alignment %d is not a multiple of 512", ErrInvalidOptions, align)
	}
	dataOff := opts.DataOffset
	if dataOff%512 != 0 {
		return nil, fmt.Errorf("%w: data offset %d is not a multiple of 512", ErrInvalidOptions, dataOff)
	}
	if dataOff != 0 && dataOff < 2*mds {
		return nil, fmt.Errorf("%w: requested data offset is too small", ErrInvalidOptions)
	}
	ks := opts.KeyslotsSize
	if ks%4096 != 0 || ks > MaxKeyslotsSize {
		return nil, fmt.Errorf("%w: keyslots size %d must be a 4 KiB multiple up to 128 MiB", ErrInvalidOptions, ks)
	}
	if ks == 0 && dataOff != 0 {
		ks = min((dataOff-2*mds)/4096*4096, MaxKeyslotsSize)
	}
	if ks == 0 {
		ks = DefaultDataOffset - 2*mds
	}
	if dataOff != 0 && ks+2*mds > dataOff {
		ks = (dataOff - 2*mds) / 4096 * 4096
	}
	if dataOff == 0 && !opts.Detached {
		dataOff = (2*mds + ks + align - 1) / align * align
	}
	devSize, err := dev.Size()
	if err != nil {
		return nil, err
	}
	if uint64(devSize) < 2*mds+ks || !opts.Detached && uint64(devSize) <= dataOff {
		return nil, fmt.Errorf("%w: %d bytes cannot hold the LUKS2 header and data at offset %d", ErrDeviceTooSmall, devSize, dataOff)
	}
	ss := opts.SectorSize
	switch ss {
	case 0:
		ss = 512
		if !opts.Detached && dataOff%4096 == 0 && (uint64(devSize)-dataOff)%4096 == 0 {
			ss = 4096
		}
	case 512, 1024, 2048, 4096:
		if !opts.Detached && (uint64(devSize)-dataOff)%uint64(ss) != 0 {
			return nil, fmt.Errorf("%w: data area is not aligned to the %d-byte sector size", ErrInvalidOptions, ss)
		}
	default:
		return nil, fmt.Errorf("%w: sector size %d", ErrInvalidOptions, ss)
	}
	uuid := opts.UUID
	if uuid == "" {
		uuid, err = luksutil.NewUUID()
	} else {
		uuid, err = luksutil.CheckUUID(uuid)
	}
	if err != nil {
		return nil, err
	}
	if len(opts.Label) >= LabelLen || len(opts.Subsystem) >= LabelLen {
		return nil, fmt.Errorf("%w: label and subsystem take at most %d bytes", ErrInvalidOptions, LabelLen-1)
	}

	dobj, err := newDigestContext(ctx, volumeKey, opts.Keyslot.PBKDF, []string{"0"})
	if err != nil {
		return nil, err
	}
	seg := jobj(
		jmember{"type", jstr("crypt")},
		jmember{"offset", ju64s(dataOff)},
		jmember{"size", jstr("dynamic")},
		jmember{"iv_tweak", jstr("0")},
		jmember{"encryption", jstr(cipher)},
		jmember{"sector_size", jint(int64(ss))},
	)
	if opts.Integrity != "" {
		seg.set("integrity", jobj(jmember{"type", jstr(opts.Integrity)},
			jmember{"journal_encryption", jstr("none")}, jmember{"journal_integrity", jstr("none")}))
	}
	root := jobj(
		jmember{"keyslots", jobj()},
		jmember{"tokens", jobj()},
		jmember{"segments", jobj(jmember{"0", seg})},
		jmember{"digests", jobj(jmember{"0", dobj})},
		jmember{"config", jobj(jmember{"json_size", ju64s(mds - BinHeaderSize)}, jmember{"keyslots_size", ju64s(ks)})},
	)
	h := &Header{bin: BinHeader{
		Magic: MagicPrimary, Version: 2, HdrSize: mds, SeqID: existingSeqID(dev),
		Label: opts.Label, Subsystem: opts.Subsystem, ChecksumAlg: "sha256", UUID: uuid,
	}}
	if err := luksutil.Random(h.bin.Salt[:]); err != nil {
		return nil, err
	}
	if err := luksutil.Random(h.salt2[:]); err != nil {
		return nil, err
	}
	md, err := validateMetadata(root, mds-BinHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	h.md = md

	// The first keyslot avoids whatever an existing header still needs,
	// when the keyslots area leaves room for that. It is built (the KDF
	// benchmark and derivation) before anything is written.
	avoid := luksutil.InUse(dev)
	kopts := opts.Keyslot
	if kopts.Slot == nil {
		kopts.Slot = keyslot.Slot(0)
	}
	if _, err := h.findArea(areaSize(len(volumeKey)), avoid); err != nil {
		avoid = nil
	}
	nk, err := h.prepareKeyslot(ctx, volumeKey, passphrase, kopts, avoid)
	if err != nil {
		return nil, err
	}
	if buriedKeyslots(luksutil.InUse(dev), 2*mds) {
		if err := eraseSignatures(dev); err != nil {
			clear(nk.material)
			return nil, fmt.Errorf("erasing the old header signatures: %w", err)
		}
	}
	slot, err := h.storeNewKeyslot(dev, 0, nk)
	if err != nil {
		return nil, err
	}
	if err := h.wipeUnused(dev, slot, dataOff); err != nil {
		return h, fmt.Errorf("wiping old header areas: %w", err)
	}
	return h, nil
}

// buriedKeyslots reports whether an old header's keyslot material (a range
// of inUse not at offset 0, where the old metadata itself starts) lies
// under the new metadata copies, [0, end). Such an old header cannot
// outlive the metadata writes: a torn primary would leave it readable
// with its key material half overwritten, a LUKS device nothing opens.
func buriedKeyslots(inUse []luksutil.Range, end uint64) bool {
	for _, r := range inUse {
		if r.Off != 0 && r.Overlaps(luksutil.Range{Off: 0, Len: int64(end)}) {
			return true
		}
	}
	return false
}

// eraseSignatures zeroes the sector of every LUKS1 or LUKS2 header magic
// at the places readers look (offset 0 and the LUKS2 secondary offsets)
// and syncs, so that until the new metadata is durable a power cut leaves
// no LUKS header rather than a broken one, as cryptsetup's format wipes
// signatures first.
func eraseSignatures(dev Device) error {
	var magic [MagicLen]byte
	zero := make([]byte, 512)
	wrote := false
	for _, off := range append([]uint64{0}, MetadataSizes...) {
		if _, err := dev.ReadAt(magic[:], int64(off)); err != nil {
			continue // beyond the device
		}
		if magic != MagicPrimary && magic != MagicSecondary {
			continue
		}
		if _, err := dev.WriteAt(zero, int64(off)); err != nil {
			return err
		}
		wrote = true
	}
	if !wrote {
		return nil
	}
	return dev.Sync()
}

// wipeUnused overwrites the keyslots area outside the keyslot with random
// data and zeroes the gap up to the data offset.
func (h *Header) wipeUnused(dev Device, slot int, dataOff uint64) error {
	k := h.md.keyslots[slot]
	start, end := 2*h.bin.HdrSize, h.HeaderSize()
	if err := luksutil.WipeArea(dev, int64(start), int(k.AreaOffset-start)); err != nil {
		return err
	}
	if s := k.AreaOffset + k.AreaSize; s < end {
		if err := luksutil.WipeArea(dev, int64(s), int(end-s)); err != nil {
			return err
		}
	}
	if dataOff > end {
		limit := min(dataOff, 2*MaxHeaderSize+MaxKeyslotsSize)
		zero := make([]byte, 1<<20)
		for off := end; off < limit; {
			n := min(uint64(len(zero)), limit-off)
			if _, err := dev.WriteAt(zero[:n], int64(off)); err != nil {
				return err
			}
			off += n
		}
		return dev.Sync()
	}
	return nil
}
