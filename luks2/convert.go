package luks2

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/af"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// Conversion between LUKS1 and LUKS2 in place (cryptsetup convert). The
// layout rules are cryptsetup 2.6.1's (lib/luks2/luks2_luks1_convert.c):
// a converted LUKS2 header has 16 KiB metadata copies, so the LUKS1
// keyslot areas, which start at 4 KiB, move 28 KiB up (and back down the
// other way); everything else keeps its place, the data above all.

// ErrNotConvertible means the header uses something the other LUKS
// version cannot express (an Argon2 keyslot, a token, a 4096-byte
// sector, ...); nothing was written. It matches ErrInvalidOptions.
var ErrNotConvertible = fmt.Errorf("%w: cannot convert", ErrInvalidOptions)

const (
	convHdrSize = 0x4000                              // LUKS2_HDR_16K_LEN
	convShift   = 2*convHdrSize - luks1.AlignKeyslots // 28 KiB
)

func roundUp4k(n uint64) uint64 { return (n + 4095) / 4096 * 4096 }

// luks1AreaSize is one LUKS1 keyslot's material rounded up as LUKS2
// keeps it.
func luks1AreaSize(keyBytes int) uint64 {
	return roundUp4k(uint64(af.Sectors(keyBytes, luks1.Stripes)) * 512)
}

// moveArea copies n bytes from src to dst in one write and syncs. It first
// reads the destination, as cryptsetup does, so a device too short fails
// before anything changes.
func moveArea(dev Device, src, dst int64, n int) error {
	buf := make([]byte, n)
	defer clear(buf)
	if _, err := dev.ReadAt(buf, dst); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading the new keyslot area: %w", err)
	}
	if _, err := dev.ReadAt(buf, src); err != nil {
		return fmt.Errorf("reading the keyslot area: %w", err)
	}
	if err := luksutil.WriteSync(dev, buf, dst); err != nil {
		return fmt.Errorf("moving the keyslot area: %w", err)
	}
	return nil
}

func convErr(format string, a ...any) error {
	return fmt.Errorf("%w to %s", ErrNotConvertible, fmt.Sprintf(format, a...))
}

// FromLUKS1 converts the LUKS1 header h1 on dev to LUKS2 (luksConvert
// --type luks2) and returns the new header, with the metadata cryptsetup's
// conversion writes (every keyslot 28 KiB further up). Everything is
// checked before the first write.
//
// When free LUKS1 keyslot areas can hold a copy of every active one (up to
// about three active keyslots in the usual layout), each keyslot hops
// through such an area so that a power cut at any point leaves a header
// that opens (see fromLUKS1Hops). Otherwise the keyslot areas move 28 KiB
// up in one write, then both metadata copies are written, as cryptsetup
// does: a power cut between the move and the first copy leaves neither
// header usable, so keep a header backup.
func FromLUKS1(dev Device, h1 *luks1.Header) (*Header, error) {
	p := h1.Phdr()
	size, err := dev.Size()
	if err != nil {
		return nil, fmt.Errorf("device size: %w", err)
	}
	maxSize := uint64(p.PayloadOffset) * 512
	if maxSize == 0 { // detached header: the header file is the limit
		maxSize = uint64(size)
	}
	luks1Size := roundUp4k(p.HeaderSectors() * 512)
	minOff := uint32(1<<32 - 1)
	for _, k := range p.Keyslots {
		minOff = min(minOff, k.KeyMaterialOffset)
	}
	if minOff != luks1.AlignKeyslots/512 {
		return nil, convErr("LUKS2: unsupported keyslots material offset %d", minOff)
	}
	spec := h1.Cipher()
	if err := luksutil.CheckCipher(spec, h1.KeySize()); err != nil {
		return nil, convErr("LUKS2: unable to use cipher specification %s for LUKS2", spec)
	}
	var lm [8]byte
	if _, err := dev.ReadAt(lm[:], int64(luks1Size)); err == nil && string(lm[:]) == "LUKSMETA" {
		return nil, convErr("LUKS2: unable to convert header with LUKSMETA additional metadata")
	}
	if need := luks1Size + convShift; maxSize < need {
		// A detached header file grows to fit, as cryptsetup grows it
		// (fallocate); a header before its data cannot.
		g, ok := dev.(interface{ Truncate(int64) error })
		if p.PayloadOffset != 0 || !ok {
			return nil, convErr("LUKS2: unable to move keyslot area, not enough space")
		}
		if err := g.Truncate(int64(need)); err != nil {
			return nil, fmt.Errorf("growing the header file: %w", err)
		}
		maxSize = need
	}
	keyslotsSize := (maxSize - 2*convHdrSize) / 4096 * 4096
	if luks1Size-luks1.AlignKeyslots > keyslotsSize {
		return nil, convErr("LUKS2: unable to move keyslot area, LUKS2 keyslots area too small")
	}

	b64 := base64.StdEncoding.EncodeToString
	hash := p.HashSpec()
	keyslots := jobj()
	var refs []string
	for i, k := range p.Keyslots {
		if !k.Enabled() {
			continue
		}
		sid := strconv.Itoa(i)
		refs = append(refs, sid)
		keyslots.obj = append(keyslots.obj, jmember{sid, jobj(
			jmember{"type", jstr("luks2")},
			jmember{"key_size", jint(int64(p.KeyBytes))},
			jmember{"kdf", jobj(
				jmember{"type", jstr("pbkdf2")},
				jmember{"hash", jstr(hash)},
				jmember{"iterations", jint(int64(k.Iterations))},
				jmember{"salt", jstr(b64(k.Salt[:]))},
			)},
			jmember{"af", jobj(
				jmember{"type", jstr("luks1")},
				jmember{"hash", jstr(hash)},
				jmember{"stripes", jint(luks1.Stripes)},
			)},
			jmember{"area", jobj(
				jmember{"type", jstr("raw")},
				jmember{"encryption", jstr(spec)},
				jmember{"key_size", jint(int64(p.KeyBytes))},
				jmember{"offset", ju64s(uint64(k.KeyMaterialOffset)*512 + convShift)},
				jmember{"size", ju64s(luks1AreaSize(int(p.KeyBytes)))},
			)},
		)})
	}
	root := jobj(
		jmember{"keyslots", keyslots},
		jmember{"tokens", jobj()},
		jmember{"segments", jobj(jmember{"0", jobj(
			jmember{"type", jstr("crypt")},
			jmember{"offset", ju64s(uint64(p.PayloadOffset) * 512)},
			jmember{"iv_tweak", jstr("0")},
			jmember{"size", jstr("dynamic")},
			jmember{"encryption", jstr(spec)},
			jmember{"sector_size", jint(512)},
		)})},
		jmember{"digests", jobj(jmember{"0", jobj(
			jmember{"type", jstr("pbkdf2")},
			jmember{"keyslots", jarrStr(refs...)},
			jmember{"segments", jarrStr("0")},
			jmember{"hash", jstr(hash)},
			jmember{"salt", jstr(b64(p.MKDigestSalt[:]))},
			jmember{"digest", jstr(b64(p.MKDigest[:]))},
			jmember{"iterations", jint(int64(p.MKDigestIterations))},
		)})},
		jmember{"config", jobj(
			jmember{"json_size", ju64s(convHdrSize - BinHeaderSize)},
			jmember{"keyslots_size", ju64s(keyslotsSize)},
		)},
	)
	h := &Header{bin: BinHeader{
		Magic: MagicPrimary, Version: 2, HdrSize: convHdrSize, SeqID: 0,
		ChecksumAlg: "sha256", UUID: p.UUID(),
	}}
	if err := luksutil.Random(h.bin.Salt[:]); err != nil {
		return nil, err
	}
	if err := luksutil.Random(h.salt2[:]); err != nil {
		return nil, err
	}
	prep, err := h.prepare(root, h.bin)
	if err != nil {
		return nil, convErr("LUKS2: invalid metadata: %v", err)
	}
	if plan := planLUKS1Hops(&p, 2*convHdrSize+keyslotsSize); plan != nil {
		return h.fromLUKS1Hops(dev, h1, root, plan)
	}
	if err := moveArea(dev, luks1.AlignKeyslots, 2*convHdrSize, int(luks1Size-luks1.AlignKeyslots)); err != nil {
		return nil, err
	}
	if err := h.write(dev, prep); err != nil {
		return nil, err
	}
	return h, nil
}

// ToLUKS1 converts h on dev to LUKS1 (luksConvert --type luks1), refusing
// what LUKS1 cannot hold as cryptsetup refuses it: a digest other than one
// PBKDF2 digest, a sector size other than 512, a wrapped-key cipher, more
// than one segment, any token, an active keyslot above 7, and keyslots
// other than PBKDF2 with the digest's hash, 4000 stripes, the data cipher
// and a LUKS1-sized area. The LUKS1 header is cryptsetup's. When free LUKS1
// keyslot areas can hold a copy of each active keyslot, the keyslots hop
// through them so that no power cut loses them (toLUKS1Hops); otherwise
// the keyslots area moves 28 KiB down in one write, then the LUKS1 header
// is written (the rest of its first 4 KiB zeroed, as cryptsetup leaves
// it), with the same power-cut window as FromLUKS1's in-place move.
func (h *Header) ToLUKS1(dev Device) (*luks1.Header, error) {
	if err := h.Writable(); err != nil {
		return nil, err
	}
	root := h.md.root
	digests := h.Digests()
	if len(digests) != 1 || digests[0].ID != 0 || digests[0].Type != "pbkdf2" {
		return nil, convErr("LUKS1 format: key slot digests are not LUKS1 compatible")
	}
	dg := digests[0]
	seg, ok := h.md.segments[0]
	if !ok {
		return nil, convErr("LUKS1 format: no default segment")
	}
	if seg.SectorSize != 512 {
		return nil, convErr("LUKS1 format: default segment encryption sector size is not 512 bytes")
	}
	cipher := seg.Encryption
	name, mode, _ := strings.Cut(cipher, "-")
	if strings.HasPrefix(cipher, "capi:") || strings.HasPrefix(name, "paes") || name == "" {
		return nil, convErr("LUKS1 format: device uses wrapped key cipher %s", name)
	}
	if len(root.get("segments").obj) != 1 {
		return nil, convErr("LUKS1 format: device uses more segments")
	}
	if n := len(root.get("tokens").obj); n > 0 {
		return nil, convErr("LUKS1 format: LUKS2 header contains %d token(s)", n)
	}
	if seg.Integrity {
		return nil, convErr("LUKS1 format: device uses integrity protection")
	}
	keySize := h.KeySize()
	areaLen := luks1AreaSize(keySize)
	for _, id := range h.keyslotIDs() {
		k := h.md.keyslots[id]
		if id >= luks1.NumKeyslots {
			return nil, convErr("LUKS1 format: slot %d (over maximum slots) is still active", id)
		}
		if k.Type != "luks2" || k.Digest != 0 || !strings.EqualFold(k.KDF.Type, "pbkdf2") || k.KDF.Hash != dg.Hash ||
			k.AFStripes != luks1.Stripes || k.AFHash != dg.Hash || k.AreaEncryption != cipher || k.AreaKeySize != keySize ||
			k.AreaSize != areaLen || len(k.KDFSalt) != luks1.SaltSize {
			return nil, convErr("LUKS1 format: keyslot %d is not LUKS1 compatible", id)
		}
	}
	if len(dg.Value) < luks1.DigestSize || len(dg.Salt) != luks1.SaltSize {
		return nil, convErr("LUKS1 format: key slot digests are not LUKS1 compatible")
	}
	var p luks1.Phdr
	p.Magic, p.Version = luks1.Magic, 1
	copy(p.CipherNameRaw[:len(p.CipherNameRaw)-1], name)
	copy(p.CipherModeRaw[:len(p.CipherModeRaw)-1], mode)
	copy(p.HashSpecRaw[:len(p.HashSpecRaw)-1], dg.Hash)
	copy(p.UUIDRaw[:36], h.UUID())
	p.KeyBytes = uint32(keySize)
	p.MKDigestIterations = dg.Iterations
	copy(p.MKDigest[:], dg.Value)
	copy(p.MKDigestSalt[:], dg.Salt)
	if seg.Offset/512 > 1<<32-1 {
		return nil, convErr("LUKS1 format: data offset %d is too large", seg.Offset)
	}
	p.PayloadOffset = uint32(seg.Offset / 512)
	// Free LUKS1 keyslots get areas too, each in the first gap left by the
	// active ones and the free ones placed before it, as cryptsetup places
	// them, so that a later luksAddKey finds them apart.
	var placed []luksutil.Range
	for i := range p.Keyslots {
		k := &p.Keyslots[i]
		k.Active, k.Stripes = luks1.KeyDisabled, luks1.Stripes
		var off uint64
		if ks, ok := h.md.keyslots[i]; ok {
			off = ks.AreaOffset
			k.Active = luks1.KeyEnabled
			k.Iterations = ks.KDF.Iterations
			copy(k.Salt[:], ks.KDFSalt)
		} else {
			o, err := h.findArea(areaLen, placed)
			if err != nil {
				return nil, convErr("LUKS1 format: no room for keyslot %d", i)
			}
			off = o
			placed = append(placed, luksutil.Range{Off: int64(o), Len: int64(areaLen)})
		}
		// cryptsetup moves keyslots_size bytes from 32 KiB whatever the
		// metadata size, so with larger metadata the top of the keyslots
		// area is not moved: an active keyslot there would be lost, and
		// we refuse it rather than follow.
		if off < 2*convHdrSize || (off-convShift)/512 > 1<<32-1 || off%512 != 0 ||
			k.Active == luks1.KeyEnabled && off+areaLen > 2*convHdrSize+h.md.config.KeyslotsSize {
			return nil, convErr("LUKS1 format: keyslot %d area at %d", i, off)
		}
		k.KeyMaterialOffset = uint32((off - convShift) / 512)
	}
	raw := p.Marshal()
	if q, err := luks1.ParsePhdr(raw); err != nil || q.Validate() != nil {
		return nil, convErr("LUKS1 format: the LUKS1 header would be invalid")
	}
	if plan := planLUKS2Hops(h, &p); plan != nil {
		return h.toLUKS1Hops(dev, &p, plan)
	}
	ks := h.md.config.KeyslotsSize
	if err := moveArea(dev, 2*convHdrSize, luks1.AlignKeyslots, int(ks)); err != nil {
		return nil, err
	}
	first := make([]byte, luks1.AlignKeyslots)
	copy(first, raw)
	if err := luksutil.WriteSync(dev, first, 0); err != nil {
		return nil, fmt.Errorf("writing the LUKS1 header: %w", err)
	}
	h1, err := luks1.Read(dev)
	if err != nil {
		return nil, fmt.Errorf("reading the converted header: %w", err)
	}
	if got := h1.Phdr(); !bytes.Equal(got.Marshal(), raw) {
		return nil, fmt.Errorf("%w: the converted header reads back differently", ErrCorruptHeader)
	}
	return h1, nil
}

// hop is one active LUKS1 keyslot's way to its LUKS2 place: from its area
// (from), through a free keyslot area (via, whose LUKS1 keyslot swaps
// offsets with it meanwhile), to 28 KiB above where it started.
type hop struct {
	slot, freeSlot int
	from, via, to  uint64
}

// planLUKS1Hops picks, for every active keyslot, a free keyslot's area
// that no active keyslot uses now or after the move, within the LUKS2
// keyslots area (below end); nil when there are not enough.
func planLUKS1Hops(p *luks1.Phdr, end uint64) []hop {
	n := uint64(luks1AreaSize(int(p.KeyBytes)))
	var busy []luksutil.Range
	var hops []hop
	for i, k := range p.Keyslots {
		if k.Enabled() {
			from := uint64(k.KeyMaterialOffset) * 512
			busy = append(busy, luksutil.Range{Off: int64(from), Len: int64(n)}, luksutil.Range{Off: int64(from + convShift), Len: int64(n)})
			hops = append(hops, hop{slot: i, from: from, to: from + convShift})
		}
	}
	used := map[int]bool{}
	for h := range hops {
		hops[h].freeSlot = -1
		for j, k := range p.Keyslots {
			off := uint64(k.KeyMaterialOffset) * 512
			r := luksutil.Range{Off: int64(off), Len: int64(n)}
			if k.Enabled() || used[j] || off < 2*convHdrSize || off+n > end || luksutil.OverlapsAny(r, busy) {
				continue
			}
			hops[h].freeSlot, hops[h].via = j, off
			used[j] = true
			busy = append(busy, r)
			break
		}
		if hops[h].freeSlot < 0 {
			return nil
		}
	}
	return hops
}

// fromLUKS1Hops converts with every write recoverable:
//
//  1. each active keyslot's material is copied to its free area, synced;
//     LUKS1 still points at the originals;
//  2. one LUKS1 header write swaps each active keyslot's offset with its
//     free keyslot's: LUKS1 now needs nothing below 32 KiB but the header;
//  3. the LUKS2 secondary copy (pointing at the copies) is written and
//     synced, then the first sector is cleared, so that cryptsetup, seeing
//     no LUKS1 magic, reads that copy, then the primary copy is written;
//  4. each keyslot's material is copied to its final place, synced, and
//     one metadata update (both copies, as every update) points there;
//  5. the copies, and what is left of the original areas, are wiped.
//
// A cut leaves the LUKS1 header (before 3 is durable), the LUKS2 header
// with the copies (3 to 4), or the final one; the keyslots open in each.
func (h *Header) fromLUKS1Hops(dev Device, h1 *luks1.Header, final *jval, hops []hop) (*Header, error) {
	p := h1.Phdr()
	matLen := int(p.AreaSectors() * 512)
	for _, hp := range hops {
		if err := moveArea(dev, int64(hp.from), int64(hp.via), matLen); err != nil {
			return nil, err
		}
	}
	var offs [luks1.NumKeyslots]uint32
	for i, k := range p.Keyslots {
		offs[i] = k.KeyMaterialOffset
	}
	for _, hp := range hops {
		offs[hp.slot], offs[hp.freeSlot] = offs[hp.freeSlot], offs[hp.slot]
	}
	if err := h1.SetKeyslotOffsets(dev, offs); err != nil {
		return nil, fmt.Errorf("pointing the LUKS1 keyslots at their copies: %w", err)
	}
	inter := final.clone()
	setOffsets := func(root *jval, at func(hop) uint64) {
		ks := root.get("keyslots")
		for _, hp := range hops {
			a := ks.get(strconv.Itoa(hp.slot)).get("area")
			a.set("offset", ju64s(at(hp)))
			ks.raw = nil
		}
	}
	setOffsets(inter, func(hp hop) uint64 { return hp.via })
	prep, err := h.prepare(inter, h.bin)
	if err != nil {
		return nil, convErr("LUKS2: invalid metadata: %v", err)
	}
	if err := h.writeSecondaryFirst(dev, prep); err != nil {
		return nil, err
	}
	for _, hp := range hops {
		if err := moveArea(dev, int64(hp.via), int64(hp.to), matLen); err != nil {
			return h, err
		}
	}
	if err := h.commit(dev, final); err != nil {
		return h, err
	}
	// Wipe every byte that held key material and is not a keyslot now
	// (the metadata copies below 32 KiB are not touched).
	var keep []luksutil.Range
	for _, hp := range hops {
		keep = append(keep, luksutil.Range{Off: int64(hp.to), Len: int64(matLen)})
	}
	for _, hp := range hops {
		for _, r := range []luksutil.Range{{Off: int64(hp.via), Len: int64(matLen)}, {Off: int64(hp.from), Len: int64(matLen)}} {
			for _, w := range subtract(r, append(keep, luksutil.Range{Off: 0, Len: 2 * convHdrSize})) {
				if err := luksutil.WipeArea(dev, w.Off, int(w.Len)); err != nil {
					return h, fmt.Errorf("wiping a keyslot copy: %w", err)
				}
			}
		}
	}
	return h, nil
}

// subtract returns the parts of r that none of cut covers.
func subtract(r luksutil.Range, cut []luksutil.Range) []luksutil.Range {
	out := []luksutil.Range{r}
	for _, c := range cut {
		var next []luksutil.Range
		for _, o := range out {
			if !o.Overlaps(c) {
				next = append(next, o)
				continue
			}
			if o.Off < c.Off {
				next = append(next, luksutil.Range{Off: o.Off, Len: c.Off - o.Off})
			}
			if o.End() > c.End() {
				next = append(next, luksutil.Range{Off: c.End(), Len: o.End() - c.End()})
			}
		}
		out = next
	}
	return out
}

// writeSecondaryFirst writes a first LUKS2 header over a LUKS1 one: the
// secondary copy, synced; the first sector cleared, synced (no LUKS1
// magic, so cryptsetup falls back to the secondary instead of reading a
// LUKS1 header half covered by the primary); then the primary, synced.
func (h *Header) writeSecondaryFirst(dev Device, p *prepared) error {
	bin := p.bin
	bin.SeqID++
	bin.Version = 2
	raws := make([][]byte, 2)
	for i, off := range []uint64{0, bin.HdrSize} {
		c := bin
		c.HdrOffset = off
		c.Magic = MagicPrimary
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
		raws[i] = append(raw, p.area...)
	}
	if err := luksutil.WriteSync(dev, raws[1], int64(bin.HdrSize)); err != nil {
		return fmt.Errorf("writing LUKS2 metadata copy 2: %w", err)
	}
	if err := luksutil.WriteSync(dev, make([]byte, 512), 0); err != nil {
		return fmt.Errorf("clearing the LUKS1 header: %w", err)
	}
	if err := luksutil.WriteSync(dev, raws[0], 0); err != nil {
		return fmt.Errorf("writing LUKS2 metadata copy 1: %w", err)
	}
	bin.HdrOffset, bin.Magic = 0, MagicPrimary
	h.bin = bin
	h.md = p.md
	h.primaryOK, h.secondOK = true, true
	return nil
}

// hop2 is one active LUKS2 keyslot's way to its LUKS1 place (28 KiB
// below): through the final area of a free LUKS1 keyslot (freeSlot),
// whose offset it borrows meanwhile.
type hop2 struct {
	slot, freeSlot int
	from, via, to  uint64
}

// planLUKS2Hops picks, for every active keyslot, a free LUKS1 keyslot whose
// final area is above the metadata and clear of every active keyslot's
// area now and after the move; nil when there are not enough.
func planLUKS2Hops(h *Header, final *luks1.Phdr) []hop2 {
	n := int64(luks1AreaSize(int(final.KeyBytes)))
	// Both metadata copies stay intact until LUKS1 takes over.
	busy := []luksutil.Range{{Off: 0, Len: int64(2 * h.bin.HdrSize)}}
	var hops []hop2
	for i, k := range final.Keyslots {
		if k.Enabled() {
			to := uint64(k.KeyMaterialOffset) * 512
			from := h.md.keyslots[i].AreaOffset
			busy = append(busy, luksutil.Range{Off: int64(from), Len: n}, luksutil.Range{Off: int64(to), Len: n})
			hops = append(hops, hop2{slot: i, from: from, to: to})
		}
	}
	used := map[int]bool{}
	for x := range hops {
		hops[x].freeSlot = -1
		for j, k := range final.Keyslots {
			off := uint64(k.KeyMaterialOffset) * 512
			r := luksutil.Range{Off: int64(off), Len: n}
			if k.Enabled() || used[j] || luksutil.OverlapsAny(r, busy) {
				continue
			}
			hops[x].freeSlot, hops[x].via = j, off
			used[j] = true
			busy = append(busy, r)
			break
		}
		if hops[x].freeSlot < 0 {
			return nil
		}
	}
	return hops
}

// toLUKS1Hops converts with every write recoverable:
//
//  1. each keyslot's material is copied to its free LUKS1 area, synced, and
//     one LUKS2 metadata update (both copies) points there;
//  2. the LUKS1 header, with each active keyslot at its copy and the free
//     keyslot it borrowed from at the active one's final place, is written
//     second sector first (which breaks only the LUKS2 primary's checksum:
//     the secondary still serves), then the first sector, the switch;
//  3. each keyslot's material is copied to its final place, synced, and
//     one header write (the final LUKS1 header, cryptsetup's) points there;
//  4. the copies, the old LUKS2 areas and metadata left over are cleared.
func (h *Header) toLUKS1Hops(dev Device, final *luks1.Phdr, hops []hop2) (*luks1.Header, error) {
	matLen := int(final.AreaSectors() * 512)
	for _, hp := range hops {
		if err := moveArea(dev, int64(hp.from), int64(hp.via), matLen); err != nil {
			return nil, err
		}
	}
	root := h.md.root.clone()
	ks := root.get("keyslots")
	for _, hp := range hops {
		ks.get(strconv.Itoa(hp.slot)).get("area").set("offset", ju64s(hp.via))
	}
	ks.raw = nil
	if err := h.commit(dev, root); err != nil {
		return nil, convErr("LUKS1 format: moving keyslots to their copies: %v", err)
	}
	inter := *final
	for _, hp := range hops {
		a, b := &inter.Keyslots[hp.slot], &inter.Keyslots[hp.freeSlot]
		a.KeyMaterialOffset, b.KeyMaterialOffset = b.KeyMaterialOffset, a.KeyMaterialOffset
	}
	raw := inter.Marshal()
	if q, err := luks1.ParsePhdr(raw); err != nil || q.Validate() != nil {
		return nil, convErr("LUKS1 format: the intermediate LUKS1 header would be invalid")
	}
	if err := luksutil.WriteSync(dev, raw[512:], 512); err != nil {
		return nil, fmt.Errorf("writing the LUKS1 header: %w", err)
	}
	if err := luksutil.WriteSync(dev, raw[:512], 0); err != nil {
		return nil, fmt.Errorf("writing the LUKS1 header: %w", err)
	}
	h1, err := luks1.Read(dev)
	if err != nil {
		return nil, fmt.Errorf("reading the converted header: %w", err)
	}
	for _, hp := range hops {
		if err := moveArea(dev, int64(hp.via), int64(hp.to), matLen); err != nil {
			return h1, err
		}
	}
	var offs [luks1.NumKeyslots]uint32
	for i, k := range final.Keyslots {
		offs[i] = k.KeyMaterialOffset
	}
	if err := h1.SetKeyslotOffsets(dev, offs); err != nil {
		return h1, err
	}
	// Clear what is no keyslot now: the copies, the old LUKS2 areas and
	// the LUKS2 metadata after the LUKS1 header (cryptsetup leaves the
	// first 4 KiB zero but the header).
	keep := []luksutil.Range{{Off: 0, Len: int64(len(raw))}}
	for _, hp := range hops {
		keep = append(keep, luksutil.Range{Off: int64(hp.to), Len: int64(matLen)})
	}
	for _, w := range subtract(luksutil.Range{Off: 0, Len: int64(2 * h.bin.HdrSize)}, keep) {
		if err := luksutil.WriteSync(dev, make([]byte, w.Len), w.Off); err != nil {
			return h1, fmt.Errorf("clearing the old LUKS2 metadata: %w", err)
		}
	}
	for _, hp := range hops {
		for _, r := range []luksutil.Range{{Off: int64(hp.via), Len: int64(matLen)}, {Off: int64(hp.from), Len: int64(matLen)}} {
			for _, w := range subtract(r, keep) {
				if err := luksutil.WipeArea(dev, w.Off, int(w.Len)); err != nil {
					return h1, fmt.Errorf("wiping a keyslot copy: %w", err)
				}
			}
		}
	}
	return luks1.Read(dev)
}
