package luks2

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/sector"
)

// The reencryption engine: one for every LUKS2 reencryption cryptsetup 2.6
// knows, as cryptsetup has one luks2_reencrypt. The inits (reencryptInit,
// encryptShiftInit, encryptDetachedInit, decryptInit, decryptShiftInit)
// write the starting metadata; everything after reads it back into an
// engine: its direction (forward, backward), mode (reencrypt, encrypt,
// decrypt: which of the two sides is a "crypt" and which a "linear"
// segment), its data shift (a moved first segment: encryption backward
// with datashift, decryption forward with datashift-checksum) and its
// resilience. One run loop (offline, with read-ahead) and one step (also
// the Online API's, under its caller's locks) take each hotzone through
// the same order: resilience data (synced), metadata naming the hotzone,
// the new data (synced), metadata moving the boundary; none commits only
// when it stops or ends, except online. One recovery puts a crashed
// hotzone into the new form, one finish drops the reencryption metadata.

// side is one form of the data: the old (from) or the new (to).
type side struct {
	off    uint64 // where logical offset 0 of the data is, on the data device
	crypt  bool   // false: plaintext, a "linear" segment
	cipher string
	ss     int
	iv     uint64
	dig    int // the key's digest; -1 for plaintext
	key    []byte
	c      *sector.Cipher
}

// liveSeg is a segment with the digests that map it.
type liveSeg struct {
	j    *jval
	digs []int
}

// seg is a segment of the side at logical offset off.
func (s *side) seg(off uint64, size *uint64, flags ...string) liveSeg {
	if s.crypt {
		return liveSeg{segJSON(s.off+off, size, s.iv+off/512, s.cipher, s.ss, flags...), []int{s.dig}}
	}
	return liveSeg{linSeg(s.off+off, size, flags...), nil}
}

func (s *side) wipe() {
	clear(s.key)
	if s.c != nil {
		s.c.Wipe()
	}
}

// engine is a loaded reencryption: what the metadata says plus the keys.
type engine struct {
	h                 *Header
	dev, data         Device // the header device, the data device
	ks                int    // the reencrypt keyslot
	mode, dir, res    string
	hash              string // checksum resilience
	block             int    // checksum resilience: bytes per checksum
	areaOff, areaSize uint64
	shift             uint64
	prev, fin, moved  *jval // backup segments (moved: nil without a data shift)
	digReenc          int
	reqVer            byte // the requirement's version: 2, or 3 for a datashift decryption
	from, to          side
	movedOff          uint64 // the moved first segment, physical
	movedLen          uint64
	size              uint64 // logical data bytes
	dynamic           bool   // the old data's last segment runs to the device's end
	b                 uint64 // boundary: new data is [0,b) forward, [b,size) backward
	crashed           bool
	hotOff, hotLen    uint64
	finishOnly        bool // all data is new and the old key is gone: metadata only
	fwdShift          bool // decrypt forward with a moved first segment (datashift-checksum)
	movedDone         bool // fwdShift: the moved first segment is plaintext too
	online            bool // every step commits its boundary, none included
}

func (e *engine) wipe() {
	e.from.wipe()
	e.to.wipe()
}

// reencMode is the stored reencryption mode ("" when none).
func (h *Header) reencMode() string {
	if st := h.ReencryptionStatus(); st != nil {
		return st.Mode
	}
	return ""
}

// loadEngine reads the stored reencryption, unlocks its keys and checks
// the reencryption digest. Nothing is written.
func (h *Header) loadEngine(ctx context.Context, dev, data Device, passphrase []byte, slot int) (*engine, error) {
	e := &engine{h: h, dev: dev, data: data, ks: h.reencKeyslot()}
	if e.ks < 0 {
		return nil, ErrNoReencryption
	}
	ks := h.md.root.get("keyslots").get(strconv.Itoa(e.ks))
	area := ks.get("area")
	e.mode, e.dir, e.res = jsGet(ks, "mode"), jsGet(ks, "direction"), jsGet(area, "type")
	k := h.md.keyslots[e.ks]
	e.areaOff, e.areaSize, e.digReenc = k.AreaOffset, k.AreaSize, k.Digest
	var err error
	switch e.res {
	case "checksum":
		if e.hash, e.block, err = checksumParams(area); err != nil {
			return nil, err
		}
	case "journal", "none":
	case "datashift", "datashift-checksum":
		v, err := strconv.ParseUint(jsGet(area, "shift_size"), 10, 64)
		if err != nil || v == 0 || v%512 != 0 {
			return nil, fmt.Errorf("%w: %s without a valid shift_size", ErrCorruptHeader, e.res)
		}
		e.shift = v
		if e.res == "datashift-checksum" {
			if e.hash, e.block, err = checksumParams(area); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("%w: %s with resilience %q is not supported yet", ErrUnsupported, e.mode, e.res)
	}
	pid, prev := h.segmentByFlag(flagPrevious)
	fid, fin := h.segmentByFlag(flagFinal)
	mid, moved := h.segmentByFlag(flagMoved)
	if prev == nil || fin == nil {
		return nil, fmt.Errorf("%w: reencryption without backup segments", ErrCorruptHeader)
	}
	e.prev, e.fin, e.moved = prev, fin, moved
	switch layout := fmt.Sprintf("%s/%s/%s/%v", e.mode, e.dir, e.res, moved != nil); layout {
	case "reencrypt/forward/checksum/false", "reencrypt/forward/journal/false", "reencrypt/forward/none/false",
		"encrypt/forward/checksum/false", "encrypt/forward/journal/false", "encrypt/forward/none/false",
		"decrypt/backward/checksum/false", "decrypt/backward/journal/false", "decrypt/backward/none/false",
		"encrypt/backward/datashift/true":
	case "decrypt/forward/datashift-checksum/true":
		e.fwdShift = true
	default:
		return nil, fmt.Errorf("%w: %s %s with resilience %s (moved segment: %v) is not supported", ErrUnsupported, e.mode, e.dir, e.res, moved != nil)
	}
	ps, fs := h.md.segments[pid], h.md.segments[fid]
	for _, x := range []struct {
		s    *side
		seg  *Segment
		id   int
		want bool // crypt
	}{{&e.from, ps, pid, e.mode != "encrypt"}, {&e.to, fs, fid, e.mode != "decrypt"}} {
		x.s.off, x.s.dig = x.seg.Offset, -1
		if (x.seg.Type == "crypt") != x.want || (x.seg.Type != "crypt" && x.seg.Type != "linear") {
			return nil, fmt.Errorf("%w: %s with backup segments of type %q and %q", ErrCorruptHeader, e.mode, ps.Type, fs.Type)
		}
		if x.want {
			x.s.crypt, x.s.cipher, x.s.ss, x.s.iv = true, x.seg.Encryption, x.seg.SectorSize, x.seg.IVTweak
			if x.s.dig = h.digestOfSegment(x.id); x.s.dig < 0 {
				return nil, fmt.Errorf("%w: backup segments without digests", ErrCorruptHeader)
			}
		}
	}
	devSize, err := data.Size()
	if err != nil {
		return nil, err
	}
	e.reqVer = reencDigestVer
	if contains1(h.Requirements(), "online-reencrypt-v3") {
		e.reqVer = 3
	}
	switch {
	case e.fwdShift:
		ms := h.md.segments[mid]
		if ms.Type != "crypt" || ms.Dynamic || ms.Offset != 0 || ms.Size == 0 || ms.Size > e.shift || fs.Offset != 0 || ps.Offset != e.shift || e.reqVer != 3 {
			return nil, fmt.Errorf("%w: a decryption data shift layout blkcrypt does not know (previous at %d, final at %d, moved %d bytes at %d, shift %d)", ErrUnsupported, ps.Offset, fs.Offset, ms.Size, ms.Offset, e.shift)
		}
		e.movedOff, e.movedLen = ms.Offset, ms.Size
		if uint64(devSize) <= ps.Offset+ms.Size {
			return nil, fmt.Errorf("%w: no data area after offset %d", ErrDeviceTooSmall, ps.Offset)
		}
		e.dynamic = ps.Dynamic
		e.size = uint64(devSize) - ps.Offset
		if !ps.Dynamic {
			e.size = ps.Size
		}
	case moved != nil:
		ms := h.md.segments[mid]
		if ms.Type != "linear" || ms.Dynamic || ps.Dynamic || ps.Offset != 0 || fs.Offset != e.shift || ms.Size != e.shift {
			return nil, fmt.Errorf("%w: a data shift layout blkcrypt does not know (previous at %d, final at %d, moved %d bytes, shift %d)", ErrUnsupported, ps.Offset, fs.Offset, ms.Size, e.shift)
		}
		e.movedOff, e.movedLen = ms.Offset, ms.Size
		e.size = ps.Size
		if e.size < e.shift || e.movedOff+e.movedLen > uint64(devSize) || e.shift+e.size > e.movedOff {
			return nil, fmt.Errorf("%w: the data shift layout does not fit the %d-byte device", ErrCorruptHeader, devSize)
		}
	default:
		if fs.Offset != ps.Offset || (e.mode == "reencrypt" && ps.IVTweak != fs.IVTweak) {
			return nil, fmt.Errorf("%w: an %s that moves data without a moved segment", ErrUnsupported, e.mode)
		}
		if uint64(devSize) <= ps.Offset {
			return nil, fmt.Errorf("%w: no data area after offset %d", ErrDeviceTooSmall, ps.Offset)
		}
		e.dynamic = ps.Dynamic
		e.size = uint64(devSize) - ps.Offset
		if !ps.Dynamic {
			e.size = ps.Size
		}
	}
	if e.mode == "reencrypt" {
		// cryptsetup maps the old-key rest of a reencryption as dynamic
		// whatever the original segment was.
		e.dynamic = true
	}
	e.size -= e.size % e.align()
	if err := e.locate(); err != nil {
		return nil, err
	}
	oldGone := e.from.dig >= 0 && e.from.dig != e.to.dig && len(h.md.digests[e.from.dig].Keyslots) == 0
	// cryptsetup's own finish removes the old keyslots (one commit each)
	// before the reencryption metadata: a cut between leaves every data
	// segment in its new form, no old key to be had, and a state
	// cryptsetup 2.6 can neither resume nor repair. Only metadata is left
	// to change then, so it is finished without the old key (the
	// reencryption digest, which covers it, cannot be checked; no data is
	// read or written). A decryption has no other key to check.
	endOnly := e.finished() && !e.crashed && oldGone
	if endOnly && e.to.dig < 0 {
		e.finishOnly = true
		return e, nil
	}
	if err := e.unlock(ctx, passphrase, slot); err != nil {
		if endOnly && e.to.key != nil {
			e.finishOnly = true
			return e, nil
		}
		e.wipe()
		return nil, err
	}
	newKey := e.to.key
	if e.to.dig == e.from.dig {
		newKey = nil // one key: the digest covers it once
	}
	if err := h.checkReencDigest(e.reqVer, e.digReenc, e.from.key, newKey, ks, prev, fin, moved); err != nil {
		e.wipe()
		return nil, err
	}
	for _, s := range []*side{&e.from, &e.to} {
		if !s.crypt {
			continue
		}
		if s.c, err = sector.New(s.cipher, s.key, sector.Options{SectorSize: s.ss, IVOffset: s.iv}); err != nil {
			e.wipe()
			return nil, fmt.Errorf("%w: cipher %s: %w", ErrUnsupported, s.cipher, err)
		}
	}
	return e, nil
}

// locate finds where the run is from the live segments, as cryptsetup
// builds them for the layout: a hotzone in reencryption (a crash), or the
// boundary.
func (e *engine) locate() error {
	h := e.h
	var pos uint64
	oldEnd, oldSeen := uint64(0), false
	firstOld, firstLater := e.size, e.size
	movedPending := false
	for _, id := range h.segmentIDs() {
		s := h.md.segments[id]
		if isBackupFlags(s.Flags) {
			continue
		}
		n := s.Size
		if s.Dynamic {
			n = e.size - min(pos, e.size)
		}
		switch {
		case contains1(s.Flags, flagInReencrypt):
			e.crashed, e.hotOff, e.hotLen = true, pos, n
		case h.digestOfSegment(id) == e.from.dig: // old data (plaintext: no digest)
			if !oldSeen {
				firstOld = pos
			}
			if pos == 0 {
				movedPending = true
			} else if firstLater == e.size {
				firstLater = pos
			}
			oldSeen, oldEnd = true, pos+n
		}
		pos += n
	}
	switch {
	case e.fwdShift:
		// [moved part, old][plaintext][old after the shift]: the boundary
		// is where the old data after the plaintext starts.
		e.b = firstLater
		e.movedDone = !movedPending && !(e.crashed && e.hotOff == 0)
		if e.crashed && e.hotOff > 0 {
			e.b = e.hotOff
		}
	case e.dir == "forward":
		e.b = firstOld
		if e.crashed {
			e.b = e.hotOff
		}
	default:
		e.b = oldEnd
		if e.crashed {
			e.b = e.hotOff + e.hotLen
		}
	}
	if e.crashed && (e.hotLen == 0 || e.hotOff+e.hotLen > e.size) {
		return fmt.Errorf("%w: in-reencryption segment outside the data area", ErrCorruptHeader)
	}
	return nil
}

// unlock opens the keys of both sides that have one: every keyslot the
// passphrase opens, by digest. A named keyslot holds one of the keys; the
// other comes from any keyslot of its digest, as cryptsetup's init with
// --key-slot opens the old key with that keyslot and the new one with the
// keyslot it has just made for it (with the same passphrase).
func (e *engine) unlock(ctx context.Context, passphrase []byte, slot int) error {
	h := e.h
	want := func(d int) bool { return d >= 0 && (d == e.from.dig || d == e.to.dig) }
	slotDigest := -1
	if slot != AnySlot {
		k, err := h.keyslot(slot)
		if err != nil {
			return err
		}
		if k.Type != "luks2" || !want(k.Digest) {
			return fmt.Errorf("%w: keyslot %d holds neither the old nor the new volume key", ErrWrongPassphrase, slot)
		}
		slotDigest = k.Digest
	}
	keys := map[int][]byte{}
	var lastErr error = ErrWrongPassphrase
	for _, id := range h.byPriorityAll(AnySlot) {
		ksl := h.md.keyslots[id]
		if ksl.Type != "luks2" || !want(ksl.Digest) || keys[ksl.Digest] != nil {
			continue
		}
		if ksl.Digest == slotDigest && id != slot {
			continue
		}
		if key := derivedKey(ctx, ksl.Digest); key != nil { // reencrypt_keys.go
			keys[ksl.Digest] = key
			continue
		}
		key, err := h.openKeyslot(ctx, e.dev, ksl, passphrase)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, ErrWrongPassphrase) {
				lastErr = err
			}
			continue
		}
		keys[ksl.Digest] = key
	}
	missing := false
	for _, s := range []*side{&e.from, &e.to} {
		if s.dig >= 0 {
			s.key = keys[s.dig]
			missing = missing || s.key == nil
		}
	}
	switch {
	case !missing:
		return nil
	case len(keys) == 0:
		return lastErr
	}
	return fmt.Errorf("%w: the passphrase opens only one of the old and new keys", ErrWrongPassphrase)
}

// byPriorityAll lists the keyslots to try: slot alone, or all in id order.
func (h *Header) byPriorityAll(slot int) []int {
	if slot >= 0 {
		if h.md.keyslots[slot] != nil {
			return []int{slot}
		}
		return nil
	}
	var ids []int
	for id := range h.md.keyslots {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// checkReencDigest checks the reencryption digest digReenc against the
// keys and the stored parameters (cryptsetup's check before any resume).
func (h *Header) checkReencDigest(ver byte, digReenc int, oldKey, newKey []byte, ks, prev, fin, moved *jval) error {
	vd, err := verificationData(oldKey, newKey, ks, prev, fin, moved)
	if err != nil {
		return err
	}
	defer clear(vd)
	vd[1] = 0x30 + ver // cryptsetup's digest covers the requirement version
	d := h.md.digests[digReenc]
	if d == nil {
		return fmt.Errorf("%w: the reencryption digest is missing (repair it with cryptsetup reencrypt --repair)", ErrCorruptHeader)
	}
	if ok, err := digestOK(d, vd); err != nil || !ok {
		return fmt.Errorf("%w: reencryption metadata is invalid (its digest does not match)", ErrCorruptHeader)
	}
	return nil
}

// checksumParams reads the hash and block size of a checksum area.
func checksumParams(area *jval) (string, int, error) {
	hash, block := jsGet(area, "hash"), 0
	if _, err := hashByName(hash); err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if v := area.get("sector_size"); v != nil && v.kind == jNum {
		block = int(v.getInt64())
	}
	if block < 512 || block > 4096 || block&(block-1) != 0 {
		return "", 0, fmt.Errorf("%w: checksum block size %d", ErrUnsupported, block)
	}
	return hash, block, nil
}

// segmentIDs lists the segment ids in ascending order.
func (h *Header) segmentIDs() []int {
	var ids []int
	for id := range h.md.segments {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// align is the boundary's granularity: every sector size of the data.
func (e *engine) align() uint64 {
	a := 512
	for _, s := range []*side{&e.from, &e.to} {
		if s.crypt {
			a = max(a, s.ss)
		}
	}
	return uint64(a)
}

func (e *engine) tail(from uint64) *uint64 {
	if e.dynamic {
		return nil
	}
	return u64p(e.size - from)
}

// hot is the in-reencryption segment [o,o+n): the new form, mapped by
// both keys of a reencryption.
func (e *engine) hot(o, n uint64) liveSeg {
	s := e.to.seg(o, u64p(n), flagInReencrypt)
	if e.mode == "reencrypt" {
		s.digs = append(s.digs, e.from.dig)
	}
	return s
}

// live lists the live segments for the boundary b with a hotzone [o,o+n)
// (n 0: none), as cryptsetup 2.6 builds them for the layout.
func (e *engine) live(o, n uint64) []liveSeg {
	var out []liveSeg
	add := func(s ...liveSeg) { out = append(out, s...) }
	switch {
	case e.fwdShift: // decrypt, forward, moved first segment
		moved := liveSeg{segJSON(e.movedOff, u64p(e.movedLen), e.from.iv, e.from.cipher, e.from.ss), []int{e.from.dig}}
		switch {
		case n > 0 && o == 0:
			add(e.hot(0, n), e.to.seg(n, nil))
		case n > 0:
			add(moved)
			if o > e.movedLen {
				add(e.to.seg(e.movedLen, u64p(o-e.movedLen)))
			}
			add(e.hot(o, n))
			if o+n < e.size {
				add(e.from.seg(o+n, e.tail(o+n)))
			}
		case e.movedDone:
			add(e.to.seg(0, nil))
		default:
			add(moved)
			var sz *uint64
			if e.b < e.size {
				sz = u64p(e.b - e.movedLen)
			}
			if e.b > e.movedLen {
				add(e.to.seg(e.movedLen, sz))
			}
			if e.b < e.size {
				add(e.from.seg(e.b, e.tail(e.b)))
			}
		}
	case e.moved != nil: // encrypt, backward, datashift
		lo := o
		if n == 0 {
			lo = e.b
		}
		if lo > 0 {
			add(liveSeg{linSeg(e.movedOff, u64p(e.movedLen)), nil})
		}
		if lo > e.movedLen {
			add(e.from.seg(e.movedLen, u64p(lo-e.movedLen)))
		}
		switch {
		case n > 0:
			add(e.hot(o, n))
			if o+n < e.size {
				add(e.to.seg(o+n, u64p(e.size-o-n)))
			}
		case e.b == 0:
			add(e.to.seg(0, nil))
		default:
			add(e.to.seg(e.b, u64p(e.size-e.b)))
		}
	case e.dir == "forward":
		if n > 0 {
			if o > 0 {
				add(e.to.seg(0, u64p(o)))
			}
			add(e.hot(o, n))
			if o+n < e.size {
				add(e.from.seg(o+n, e.tail(o+n)))
			}
			break
		}
		var sz *uint64
		if e.b < e.size {
			sz = u64p(e.b)
		}
		if e.b > 0 {
			add(e.to.seg(0, sz))
		}
		if e.b < e.size {
			add(e.from.seg(e.b, e.tail(e.b)))
		}
	default: // backward in place
		lo := o
		if n == 0 {
			lo = e.b
		}
		if lo > 0 {
			add(e.from.seg(0, u64p(lo)))
		}
		if n > 0 {
			add(e.hot(o, n))
			if o+n < e.size {
				add(e.to.seg(o+n, e.tail(o+n)))
			}
		} else {
			add(e.to.seg(e.b, e.tail(e.b)))
		}
	}
	return out
}

// root is h's metadata with the live segments for a hotzone [o,o+n) (n 0:
// the boundary e.b), the backups after them (previous, final, moved, as
// cryptsetup's steps append them) and each key's digest naming its
// segments.
func (e *engine) root(o, n uint64) *jval {
	list := append(e.live(o, n), liveSeg{e.prev.clone(), []int{e.from.dig}}, liveSeg{e.fin.clone(), []int{e.to.dig}})
	if e.moved != nil {
		list = append(list, liveSeg{e.moved.clone(), []int{e.from.dig}})
	}
	return e.h.rootWith(list, e.from.dig, e.to.dig)
}

// rootWith is h's metadata with segments numbered from 0 in list order
// and each of digs (-1: none) naming the segments that list it.
func (h *Header) rootWith(list []liveSeg, digs ...int) *jval {
	root := h.md.root.clone()
	segs := jobj()
	ids := map[int][]string{}
	for i, s := range list {
		id := strconv.Itoa(i)
		segs.obj = append(segs.obj, jmember{id, s.j})
		for _, d := range s.digs {
			if l := ids[d]; len(l) == 0 || l[len(l)-1] != id {
				ids[d] = append(l, id)
			}
		}
	}
	root.set("segments", segs)
	dgs := root.get("digests")
	for _, d := range digs {
		if d < 0 {
			continue
		}
		dj := dgs.get(strconv.Itoa(d))
		dj.set("segments", jarrStr(ids[d]...))
		dj.raw = nil
	}
	dgs.raw = nil
	return root
}

// rootWithSegments is h's metadata with segments numbered from 0 in list
// order and digest dig naming every crypt one (the only key of an encrypt
// or decrypt).
func (h *Header) rootWithSegments(list []*jval, dig int) *jval {
	ls := make([]liveSeg, len(list))
	for i, s := range list {
		ls[i].j = s
		if jsGet(s, "type") == "crypt" {
			ls[i].digs = []int{dig}
		}
	}
	return h.rootWith(ls, dig)
}

// next is the hotzone after the boundary, hz bytes at most in place.
func (e *engine) next(hz uint64) (uint64, uint64) {
	switch {
	case e.fwdShift:
		if e.b < e.size {
			return e.b, min(e.shift, e.size-e.b)
		}
		return 0, e.movedLen
	case e.moved != nil:
		s := e.shift
		switch {
		case e.b >= 2*s:
			return e.b - s, s
		case e.b > s:
			return s, e.b - s
		default:
			return 0, e.b
		}
	case e.dir == "forward":
		return e.b, min(hz, e.size-e.b)
	default:
		n := min(hz, e.b)
		return e.b - n, n
	}
}

// advance moves the boundary past a finished hotzone [off, off+n).
func (e *engine) advance(off, n uint64) {
	switch {
	case e.fwdShift && off == 0:
		e.movedDone = true
	case e.dir == "forward":
		e.b = off + n
	default:
		e.b = off
	}
}

// progress is the bytes done so far.
func (e *engine) progress() uint64 {
	switch {
	case e.fwdShift:
		done := e.b - e.movedLen
		if e.movedDone {
			done += e.movedLen
		}
		return done
	case e.dir == "forward":
		return e.b
	}
	return e.size - e.b
}

func (e *engine) finished() bool {
	switch {
	case e.fwdShift:
		return e.movedDone
	case e.dir == "forward":
		return e.b >= e.size
	}
	return e.b == 0
}

// doneAfterRecovery reports whether nothing but the finish is left once
// a crashed hotzone is recovered.
func (e *engine) doneAfterRecovery() bool {
	c := *e
	if c.crashed {
		c.advance(c.hotOff, c.hotLen)
	}
	return c.finished()
}

// plan lists the hotzones left from the boundary.
func (e *engine) plan(hz uint64) [][2]uint64 {
	c := *e
	var out [][2]uint64
	for !c.finished() {
		off, n := c.next(hz)
		out = append(out, [2]uint64{off, n})
		c.advance(off, n)
	}
	return out
}

// hotzoneMax is the in-place hotzone for the option hz (0: the default),
// capped by what the resilience area holds and aligned.
func (e *engine) hotzoneMax(hz uint64) uint64 {
	if hz == 0 {
		hz = defaultHotzone
	}
	align := e.align()
	switch e.res {
	case "checksum":
		hf, _ := hashByName(e.hash)
		hz = min(hz, e.areaSize/uint64(hf().Size())*uint64(e.block))
		align = max(align, uint64(e.block))
	case "journal":
		hz = min(hz, e.areaSize)
	}
	return hz - hz%align
}

// hotzone is hotzoneMax, refusing (before anything is written) a run
// with hotzones left and no room for one.
func (e *engine) hotzone(hz uint64) (uint64, error) {
	hz = e.hotzoneMax(hz)
	if hz == 0 && e.moved == nil && !e.doneAfterRecovery() {
		return 0, fmt.Errorf("%w: no room for a hotzone", ErrNoFreeSlot)
	}
	return hz, nil
}

// src is where the old data of logical offset off is.
func (e *engine) src(off uint64) uint64 {
	if e.moved != nil && off < e.movedLen {
		return e.movedOff + off
	}
	return e.from.off + off
}

// dst is where the new data of logical offset off goes.
func (e *engine) dst(off uint64) uint64 { return e.to.off + off }

// transform turns old data of logical offset off into new, in place.
func (e *engine) transform(b []byte, off uint64) error {
	if e.from.c != nil {
		if err := e.from.c.DecryptSectors(b, b, off/512); err != nil {
			return err
		}
	}
	if e.to.c != nil {
		return e.to.c.EncryptSectors(b, b, off/512)
	}
	return nil
}

// protection is the resilience data kept for the hotzone at off: none
// for a data shift (its source stays intact), checksums for the moved
// first segment of a datashift-checksum decryption (done in place).
func (e *engine) protection(off uint64) string {
	switch e.res {
	case "datashift":
		return ""
	case "datashift-checksum":
		if off == 0 {
			return "checksum"
		}
		return ""
	}
	return e.res
}

func (e *engine) commit(root *jval) error { return e.h.commit(e.dev, root) }

// recover puts the crashed hotzone into the new form, syncs, and commits
// the boundary after it.
func (e *engine) recover() error {
	if err := e.recoverHotzone(); err != nil {
		return fmt.Errorf("recovering the interrupted reencryption hotzone: %w", err)
	}
	e.advance(e.hotOff, e.hotLen)
	e.crashed = false
	return e.commit(e.root(0, 0))
}

// recoverHotzone finishes a crashed hotzone: in place from its resilience
// data, or (a data shift) again from its source, which no step writes.
func (e *engine) recoverHotzone() error {
	if res := e.protection(e.hotOff); res != "" {
		return recoverInPlace(e.dev, e.data, res, e.hash, e.block, e.areaOff, e.areaSize, int64(e.dst(e.hotOff)), e.hotOff, e.hotLen, e.transform)
	}
	buf := make([]byte, e.hotLen)
	defer clear(buf)
	if _, err := readFull(e.data, buf, int64(e.src(e.hotOff))); err != nil {
		return fmt.Errorf("reading the hotzone: %w", err)
	}
	if err := e.transform(buf, e.hotOff); err != nil {
		return err
	}
	if _, err := e.data.WriteAt(buf, int64(e.dst(e.hotOff))); err != nil {
		return fmt.Errorf("recovering the hotzone: %w", err)
	}
	return e.data.Sync()
}

// recoverInPlace finishes a crashed in-place hotzone of n bytes at
// physical offset off (logical lo) from its checksums (a block still
// matching the old data's checksum is redone) or its journal (all of it
// redone from the old data), then syncs. fix turns old data of logical
// offset x into new, in place.
func recoverInPlace(dev, data Device, res, hash string, block int, areaOff, areaSize uint64, off int64, lo, n uint64, fix func(b []byte, x uint64) error) error {
	buf := make([]byte, n)
	defer clear(buf)
	switch res {
	case "checksum":
		hf, _ := hashByName(hash)
		hs := hf().Size()
		count := int(n) / block
		if uint64(count*hs) > areaSize {
			return fmt.Errorf("%w: hotzone too large for the checksum area", ErrCorruptHeader)
		}
		sums := make([]byte, count*hs)
		if _, err := dev.ReadAt(sums, int64(areaOff)); err != nil {
			return fmt.Errorf("reading reencryption checksums: %w", err)
		}
		if _, err := readFull(data, buf, off); err != nil {
			return fmt.Errorf("reading the hotzone: %w", err)
		}
		for i := 0; i < count; i++ {
			blk := buf[i*block : (i+1)*block]
			hh := hf()
			hh.Write(blk)
			if !luksutil.ConstantTimeEqual(hh.Sum(nil), sums[i*hs:(i+1)*hs]) {
				continue // already new
			}
			if err := fix(blk, lo+uint64(i*block)); err != nil {
				return err
			}
			if _, err := data.WriteAt(blk, off+int64(i*block)); err != nil {
				return fmt.Errorf("recovering the hotzone: %w", err)
			}
		}
	case "journal":
		if n > areaSize {
			return fmt.Errorf("%w: hotzone larger than the journal", ErrCorruptHeader)
		}
		if _, err := readFull(dev, buf, int64(areaOff)); err != nil {
			return fmt.Errorf("reading the reencryption journal: %w", err)
		}
		if err := fix(buf, lo); err != nil {
			return err
		}
		if _, err := data.WriteAt(buf, off); err != nil {
			return fmt.Errorf("recovering the hotzone: %w", err)
		}
	default:
		return fmt.Errorf("%w: an interrupted hotzone with resilience %q cannot be recovered", ErrUnsupported, res)
	}
	return data.Sync()
}

// runOpts are a run's options; resilience, hash and cipher, when set,
// must match the stored ones.
type runOpts struct {
	hotzone                  uint64
	slot                     int
	stopAfter                int
	progress                 func(done, total uint64)
	resilience, hash, cipher string
}

// checkResumeOptions refuses resume options that contradict the stored
// reencryption instead of silently ignoring them.
func (h *Header) checkResumeOptions(o runOpts) error {
	st := h.ReencryptionStatus()
	if st == nil {
		return ErrNoReencryption
	}
	if o.resilience != "" && o.resilience != st.Resilience {
		return fmt.Errorf("%w: %w: it uses resilience %q, not %q", ErrInvalidOptions, ErrReencryptInProgress, st.Resilience, o.resilience)
	}
	if o.hash != "" && st.Resilience == "checksum" && o.hash != st.Hash {
		return fmt.Errorf("%w: %w: it uses checksum hash %q, not %q", ErrInvalidOptions, ErrReencryptInProgress, st.Hash, o.hash)
	}
	_, fin := h.segmentByFlag(flagFinal)
	if o.cipher != "" && fin != nil && o.cipher != jsGet(fin, "encryption") {
		return fmt.Errorf("%w: %w: its new cipher is %q, not %q", ErrInvalidOptions, ErrReencryptInProgress, jsGet(fin, "encryption"), o.cipher)
	}
	return nil
}

// resume checks the options, loads the stored reencryption and runs it
// to its end (or to a stop).
func (h *Header) resume(ctx context.Context, dev, data Device, passphrase []byte, o runOpts) error {
	if err := h.checkResumeOptions(o); err != nil {
		return err
	}
	e, err := h.loadEngine(ctx, dev, data, passphrase, o.slot)
	if err != nil {
		return err
	}
	defer e.wipe()
	return e.run(ctx, o)
}

var errStopAfter = errors.New("stopped after the hotzones asked for")

// stopBeforeFinish leaves a completed run unfinished (tests only).
var stopBeforeFinish bool

// run runs the hotzones from the boundary to the end and finishes. Every
// check that can refuse comes before the first write.
func (e *engine) run(ctx context.Context, o runOpts) error {
	if e.finishOnly {
		return e.finish()
	}
	hzOpt := o.hotzone
	if hzOpt == 0 && e.res == "none" {
		hzOpt = defaultNoneHotzone
	}
	hz, err := e.hotzone(hzOpt)
	if err != nil {
		return err
	}
	if e.crashed {
		if err := e.recover(); err != nil {
			return err
		}
	}
	none := e.res == "none"
	plan := e.plan(hz)
	if len(plan) > 0 {
		// A reader goroutine reads the next hotzone (and computes its
		// resilience data) while this one is written. In every layout the
		// sources still to come are disjoint from the destinations of the
		// hotzones before them (in place: each hotzone its own range;
		// shifted: the destinations move away from the sources by the
		// shift, and the moved copy is read last and written nowhere), so
		// what it reads is what the run would read then.
		var most uint64
		for _, p := range plan {
			most = max(most, p[1])
		}
		pool := newBufferPool(most)
		next := make(chan preparedChunk, 1)
		stop := make(chan struct{})
		defer func() {
			close(stop)
			for c := range next { // waits for the reader: nothing reads after the return
				clear(c.plain)
			}
		}()
		go e.readAhead(plan, pool, next, stop) // reencrypt_pipeline.go
		var piece []byte
		defer func() { clear(piece) }()
		for steps, p := range plan {
			stopped := ctx.Err()
			if stopped == nil && o.stopAfter > 0 && steps >= o.stopAfter {
				stopped = errStopAfter
			}
			if stopped != nil {
				// With none the metadata moves only here: the data written
				// so far must be durable before it says so.
				if none && steps > 0 {
					if err := e.data.Sync(); err != nil {
						return err
					}
					if err := e.commit(e.root(0, 0)); err != nil {
						return err
					}
				}
				if stopped == errStopAfter {
					return nil
				}
				return stopped
			}
			c, ok := <-next
			if !ok || c.off != p[0] || c.n != p[1] {
				return fmt.Errorf("internal error: hotzone reader out of step")
			}
			if c.err != nil {
				return fmt.Errorf("reading the hotzone at %d: %w", e.src(c.off), c.err)
			}
			if c.plain == nil && piece == nil {
				piece = make([]byte, pieceSize)
			}
			if err := e.step(c, piece, pool); err != nil {
				return err
			}
			if o.progress != nil {
				o.progress(e.progress(), e.size)
			}
		}
		if none {
			if err := e.data.Sync(); err != nil {
				return err
			}
		}
	}
	if stopBeforeFinish {
		return e.commit(e.root(0, 0))
	}
	return e.finish()
}

// step does one hotzone read ahead as c: its resilience data (synced) and
// the metadata naming it, the new data (synced), the metadata moving the
// boundary (unless it was the last). Offline none writes only the data;
// online none syncs and commits the boundary too, as the volume may be
// closed (or the process killed) between any two steps. piece is the
// buffer to read a hotzone again in (checksum, whose reader keeps only
// the checksums). The hotzone's buffer goes back to pool once written,
// so the reader need not wait for the sync and commits.
func (e *engine) step(c preparedChunk, piece []byte, pool *bufferPool) error {
	off, n := c.off, c.n
	none := e.res == "none"
	if !none {
		if err := e.writeResilience(c.prot); err != nil {
			return fmt.Errorf("writing reencryption resilience data: %w", err)
		}
		if err := e.commit(e.root(off, n)); err != nil {
			return err
		}
	}
	var err error
	if c.plain == nil {
		err = e.rewriteHotzone(off, n, piece)
	} else {
		err = e.writeHotzone(c.plain, off)
		pool.put(c.plain)
	}
	if err != nil {
		return err
	}
	e.advance(off, n)
	if none && !e.online {
		return nil
	}
	if err := e.data.Sync(); err != nil {
		return err
	}
	// The last hotzone is not committed as done: the finish's commit
	// follows. For a data shift this matters: until then the metadata
	// names the hotzone with the moved copy as its source, which either
	// tool recovers (cryptsetup 2.6.1 cannot resume the state after a
	// committed last hotzone, its own included).
	if !e.finished() {
		return e.commit(e.root(0, 0))
	}
	return nil
}

// finish drops the reencryption metadata in one commit: the backup
// segments, the reencrypt keyslot and digest, the old key's keyslots and
// digest (a decryption's only key: the header then describes plaintext)
// and the requirement. Then it overwrites what a data shift left of the
// old data with random data and wipes the dropped keyslot areas; a cut
// before those leaves them on the device, nothing else.
func (e *engine) finish() error {
	h := e.h
	root := h.md.root.clone()
	final := e.fin.clone()
	final.del("flags")
	if e.mode == "reencrypt" {
		// cryptsetup's last reencryption segment is dynamic again.
		final = e.to.seg(0, nil).j
	}
	root.set("segments", jobj(jmember{"0", final}))
	oldDig := e.from.dig
	if oldDig == e.to.dig {
		oldDig = -1 // one key kept (not a new one)
	}
	var wipe [][2]uint64
	ksObj := root.get("keyslots")
	for id, k := range h.md.keyslots {
		if id == e.ks || (oldDig >= 0 && k.Digest == oldDig) {
			sid := strconv.Itoa(id)
			ksObj.del(sid)
			dropKeyslotRefs(root, sid)
			wipe = append(wipe, [2]uint64{k.AreaOffset, k.AreaSize})
		}
	}
	dgs := root.get("digests")
	dgs.del(strconv.Itoa(e.digReenc))
	if oldDig >= 0 {
		dgs.del(strconv.Itoa(oldDig))
	}
	if e.to.dig >= 0 {
		d := dgs.get(strconv.Itoa(e.to.dig))
		d.set("segments", jarrStr("0"))
		d.raw = nil
	}
	dgs.raw = nil
	setRequirement(root, false)
	dropRequirement(root, "online-reencrypt-v3")
	if err := e.commit(root); err != nil {
		return err
	}
	if e.fwdShift {
		// The last shift bytes held old ciphertext; cryptsetup overwrites
		// them with random data too.
		devSize, err := e.data.Size()
		if err != nil {
			return err
		}
		if err := randomFill(e.data, uint64(devSize)-e.shift, e.shift); err != nil {
			return fmt.Errorf("wiping the end of the device: %w", err)
		}
	}
	if e.moved != nil && e.mode == "encrypt" {
		if err := randomFill(e.data, e.movedOff, e.movedLen); err != nil {
			return fmt.Errorf("wiping the moved plaintext copy: %w", err)
		}
	}
	for _, w := range wipe {
		if w[1] > 0 && w[1] <= MaxKeyslotsSize {
			if err := luksutil.WipeArea(e.dev, int64(w[0]), int(w[1])); err != nil {
				return fmt.Errorf("wiping an old keyslot area: %w", err)
			}
		}
	}
	return nil
}

// randomFill overwrites n bytes at off with random data, then syncs.
func randomFill(dev Device, off, n uint64) error {
	buf := make([]byte, min(n, 1<<20))
	for done := uint64(0); done < n; {
		b := buf[:min(uint64(len(buf)), n-done)]
		if err := luksutil.Random(b); err != nil {
			return err
		}
		if _, err := dev.WriteAt(b, int64(off+done)); err != nil {
			return err
		}
		done += uint64(len(b))
	}
	return dev.Sync()
}

// dropRequirement removes name from the mandatory requirements.
func dropRequirement(root *jval, name string) {
	cfg := root.get("config")
	req := cfg.get("requirements")
	if req == nil {
		return
	}
	m := req.get("mandatory")
	if m == nil || m.kind != jArr {
		return
	}
	var keep []string
	for _, e := range m.arr {
		if e.kind == jStr && e.s != name {
			keep = append(keep, e.s)
		}
	}
	if len(keep) == len(m.arr) {
		return
	}
	cfg.raw, req.raw = nil, nil
	if len(keep) == 0 {
		req.del("mandatory")
		if len(req.obj) == 0 {
			cfg.del("requirements")
		}
		return
	}
	req.set("mandatory", jarrStr(keep...))
}
