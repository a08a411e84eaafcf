package luks2

import (
	"context"
	"encoding/binary"

	"fmt"
	"hash"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Reencryption (cryptsetup reencrypt, LUKS2 "online-reencrypt-v2" metadata).
//
// The on-disk state is cryptsetup 2.6's, so either tool resumes the other's
// interrupted run:
//   - a keyslot of type "reencrypt" whose area holds the resilience data
//     (one hash per block of the hotzone's old ciphertext for "checksum",
//     the hotzone's old ciphertext itself for "journal", nothing for "none");
//   - segments "backup-previous" (the old data segment) and "backup-final"
//     (the new one), and the live segments: the part already reencrypted
//     (new key), at most one "in-reencryption" hotzone (both keys) and the
//     rest (old key);
//   - a digest bound to the reencrypt keyslot over the keys, the keyslot's
//     parameters and the backup segments, which cryptsetup checks before it
//     resumes (luks2_reencrypt_digest.c);
//   - the mandatory requirement "online-reencrypt-v2".
//
// One step: the hotzone's old ciphertext is read, its resilience data is
// written and synced, then metadata naming the hotzone (the commit point);
// the hotzone is decrypted, encrypted with the new key, written and synced;
// then metadata moving the boundary past it. After a crash, the hotzone is
// recovered from the resilience data before going on.

// ReencryptOptions configure Reencrypt. Zero values keep the cipher, key
// size and sector size, and use checksum resilience with sha256.
type ReencryptOptions struct {
	// Cipher is the new data cipher ("" keeps the current one).
	Cipher string
	// KeySize is the new volume key size in bytes (0 keeps the current one).
	KeySize int
	// SectorSize is the new encryption sector size (0 keeps the current
	// one); the data area must be a multiple of it.
	SectorSize int
	// Resilience is "checksum" (default), "journal" or "none".
	Resilience string
	// Hash is the checksum hash (default sha256).
	Hash string
	// HotzoneSize caps the bytes reencrypted per step (default 32 MiB;
	// 2 MiB offline with resilience none).
	HotzoneSize uint64
	// Slot, when set, is the keyslot to keep (cryptsetup's --key-slot):
	// only it is opened, it alone gets a keyslot for the new key, and the
	// other keyslots of the old key are removed at the end. nil (the zero
	// value) opens any keyslot, which must then be the only one of the
	// volume key. On a resumed run it names a keyslot of the old or the
	// new key; the other key comes from any of its keyslots.
	Slot *int
	// Keyslot configures the new keyslot (its KDF; the slot is picked).
	Keyslot KeyslotOptions
	// InitOnly writes the reencryption metadata and stops.
	InitOnly bool
	// ResumeOnly refuses to start a new reencryption.
	ResumeOnly bool
	// StopAfter, when above zero, stops (cleanly, resumable) after that many
	// hotzones; for tests and for an interrupted run.
	StopAfter int
	// Data is the data device when the header is detached (nil: dev).
	Data Device
	// Progress, when set, is called after each hotzone with the bytes of
	// the data area done so far and its size (for a progress line).
	Progress func(done, total uint64)
}

// Reencryption errors.
var (
	// ErrReencryptInProgress means InitOnly on a volume that already has a
	// reencryption in progress, or resume options that contradict the
	// stored ones; it matches ErrBusy.
	ErrReencryptInProgress = volspec.Sub("a LUKS2 reencryption is already in progress", volspec.ErrBusy)
	// ErrNoReencryption means ResumeOnly on a volume with no reencryption;
	// it matches ErrInvalidOptions.
	ErrNoReencryption = volspec.Sub("no LUKS2 reencryption is in progress", volspec.ErrInvalidOptions)
)

const (
	reencReq          = "online-reencrypt-v2"
	defaultHotzone    = 32 << 20
	reencDigestVer    = 2
	flagPrevious      = "backup-previous"
	flagFinal         = "backup-final"
	flagMoved         = "backup-moved-segment"
	flagInReencrypt   = "in-reencryption"
	reencMaxStringLen = 64
)

// Offline with none the hotzone is never in the metadata and a step
// commits nothing: it is only the read-ahead's unit, and its buffers of
// 2 MiB stay in cache where 32 MiB ones did not (0.2 s against 0.3 s
// for 256 MiB on tmpfs, mostly system time).
const defaultNoneHotzone = 2 << 20

// ReencryptStatus describes a reencryption in progress (nil when none).
type ReencryptStatus struct {
	Keyslot                     int // the reencrypt keyslot
	Mode, Direction, Resilience string
	Hash                        string // checksum resilience only
	HashBlock                   int    // bytes per checksum ("Hash data")
	Crashed                     bool   // an in-reencryption hotzone needs recovery
	ShiftSize                   uint64 // datashift resilience only
}

// ReencryptionStatus reports the stored reencryption, or nil.
func (h *Header) ReencryptionStatus() *ReencryptStatus {
	id := h.reencKeyslot()
	if id < 0 {
		return nil
	}
	ks := h.md.root.get("keyslots").get(strconv.Itoa(id))
	area := ks.get("area")
	st := &ReencryptStatus{Keyslot: id, Mode: jsGet(ks, "mode"), Direction: jsGet(ks, "direction"), Resilience: jsGet(area, "type")}
	if st.Resilience == "checksum" {
		st.Hash = jsGet(area, "hash")
		if v := area.get("sector_size"); v != nil && v.kind == jNum {
			st.HashBlock = int(v.getInt64())
		}
	}
	if st.Resilience == "datashift" { // luksDump shows it for plain datashift only
		st.ShiftSize, _ = strconv.ParseUint(jsGet(area, "shift_size"), 10, 64)
	}
	for _, s := range h.md.segments {
		if contains1(s.Flags, flagInReencrypt) {
			st.Crashed = true
		}
	}
	return st
}

func jsGet(v *jval, k string) string {
	if v == nil {
		return ""
	}
	if x := v.get(k); x != nil && x.kind == jStr {
		return x.s
	}
	return ""
}

func (h *Header) reencKeyslot() int {
	for id, k := range h.md.keyslots {
		if k.Type == "reencrypt" {
			return id
		}
	}
	return -1
}

func (h *Header) segmentByFlag(flag string) (int, *jval) {
	segs := h.md.root.get("segments")
	for id, s := range h.md.segments {
		if contains1(s.Flags, flag) {
			return id, segs.get(strconv.Itoa(id))
		}
	}
	return -1, nil
}

func (h *Header) digestOfSegment(seg int) int {
	for id, d := range h.md.digests {
		for _, s := range d.Segments {
			if s == seg {
				return id
			}
		}
	}
	return -1
}

// KeyslotUnbound reports whether cryptsetup 2.6's luksDump marks keyslot
// id "(unbound)": LUKS2_keyslot_for_segment(CRYPT_ONE_SEGMENT) finds the
// keyslot's digest (the first digest, in stored order, listing it) is not
// the digest of any of the segment ids 0 to n-1, n the number of segments
// that are not backups, where a segment's digest is the first digest in
// stored order that lists it. During a reencryption the segment in
// reencryption lists both digests, so while it is segment 0 the digest
// stored first (the old key's) takes it and the new key's keyslot shows
// as unbound; once segment 0 is the reencrypted part, it is bound.
func (h *Header) KeyslotUnbound(id int) bool {
	kd := h.firstDigestListing("keyslots", strconv.Itoa(id))
	if kd < 0 {
		return true
	}
	n := 0
	for _, s := range h.md.segments {
		backup := false
		for _, f := range s.Flags {
			backup = backup || strings.HasPrefix(f, "backup-")
		}
		if !backup {
			n++
		}
	}
	for s := 0; s < n; s++ {
		if h.firstDigestListing("segments", strconv.Itoa(s)) == kd {
			return false
		}
	}
	return true
}

// firstDigestListing is the id of the first digest, in stored order, whose
// array field lists name (cryptsetup's LUKS2_digest_by_keyslot and
// LUKS2_digest_by_segment), or -1.
func (h *Header) firstDigestListing(field, name string) int {
	dgs := h.md.root.get("digests")
	if dgs == nil || dgs.kind != jObj {
		return -1
	}
	for _, m := range dgs.obj {
		if a := m.val.get(field); a != nil && a.kind == jArr && arrHas(a, name) {
			if id, err := strconv.Atoi(m.key); err == nil {
				return id
			}
		}
	}
	return -1
}

// Reencrypt changes the volume key (and optionally the cipher) of a LUKS2
// volume in place, or resumes an interrupted reencryption (by blkcrypt or
// cryptsetup). passphrase must open a keyslot; the new keyslot gets the
// same passphrase and the tokens bound to the opened one, and the old
// key's keyslots go at the end (opts.Slot). On ctx's end it stops between
// hotzones, leaving a state both tools resume.
func Reencrypt(ctx context.Context, dev Device, passphrase []byte, opts ReencryptOptions) error {
	ctx, known := withDerivedKeys(ctx)
	defer known.wipe()
	h, err := ReadContext(ctx, dev)
	if err != nil {
		return err
	}
	data := opts.Data
	if data == nil {
		data = dev
	}
	ro := runOpts{hotzone: opts.HotzoneSize, slot: slotArg(opts.Slot), stopAfter: opts.StopAfter, progress: opts.Progress}
	if h.reencKeyslot() < 0 {
		if opts.ResumeOnly {
			return ErrNoReencryption
		}
		if err := h.reencryptInit(ctx, dev, data, passphrase, opts); err != nil {
			return err
		}
		if opts.InitOnly {
			return nil
		}
		if h, err = ReadContext(ctx, dev); err != nil {
			return err
		}
		return h.resume(ctx, dev, data, passphrase, ro) // reencrypt_engine.go
	}
	if opts.InitOnly {
		return fmt.Errorf("%w: cannot initialise it again", ErrReencryptInProgress)
	}
	if mode := h.reencMode(); (mode == "encrypt" || mode == "decrypt") && (opts.Cipher != "" || opts.KeySize != 0 || opts.SectorSize != 0) {
		return fmt.Errorf("%w: %w: an %s in progress keeps its cipher, key size and sector size", ErrInvalidOptions, ErrReencryptInProgress, mode)
	}
	ro.resilience, ro.hash, ro.cipher = opts.Resilience, opts.Hash, opts.Cipher
	return h.resume(ctx, dev, data, passphrase, ro)
}

// checkHotzone refuses a hotzone size below the alignment of an in-place
// run (its sector size, also the checksum block): the run's first step
// would stop it after its init has written the metadata.
func checkHotzone(hz uint64, align int) error {
	if hz != 0 && hz < uint64(align) {
		return fmt.Errorf("%w: hotzone size %d is below the %d-byte sector size", ErrInvalidOptions, hz, align)
	}
	return nil
}

// slotArg is the keyslot a ReencryptOptions.Slot names, or AnySlot.
func slotArg(slot *int) int {
	if slot == nil {
		return AnySlot
	}
	return *slot
}

func hashByName(name string) (func() hash.Hash, error) {
	if len(name) >= ChecksumAlgLen {
		return nil, fmt.Errorf("%w: checksum hash name too long", ErrInvalidOptions)
	}
	hf, err := kdf.HashFunc(name)
	if err != nil {
		return nil, fmt.Errorf("%w: checksum hash %q: %w", ErrInvalidOptions, name, err)
	}
	return hf, nil
}

// maxGap is the largest free 4 KiB-aligned range of the keyslots area
// (LUKS2_find_area_max_gap).
func (h *Header) maxGap(extra []luksutil.Range) (uint64, uint64) {
	var used []luksutil.Range
	for _, k := range h.md.keyslots {
		used = append(used, luksutil.Range{Off: int64(k.AreaOffset), Len: int64(k.AreaSize)})
	}
	used = append(used, extra...)
	sort.Slice(used, func(i, j int) bool { return used[i].Off < used[j].Off })
	start, end := 2*h.bin.HdrSize, h.HeaderSize()
	var bestOff, bestLen uint64
	pos := start
	consider := func(upto uint64) {
		if upto > pos && upto-pos > bestLen {
			bestOff, bestLen = pos, upto-pos
		}
	}
	for _, u := range used {
		if uint64(u.Off) > pos {
			consider(uint64(u.Off))
		}
		if e := (uint64(u.End()) + 4095) / 4096 * 4096; e > pos {
			pos = e
		}
	}
	consider(end)
	return bestOff, bestLen
}

func segJSON(off uint64, size *uint64, iv uint64, enc string, ss int, flags ...string) *jval {
	sz := jstr("dynamic")
	if size != nil {
		sz = ju64s(*size)
	}
	o := jobj(jmember{"type", jstr("crypt")}, jmember{"offset", ju64s(off)}, jmember{"size", sz},
		jmember{"iv_tweak", ju64s(iv)}, jmember{"encryption", jstr(enc)}, jmember{"sector_size", jint(int64(ss))})
	if len(flags) > 0 {
		o.set("flags", jarrStr(flags...))
	}
	return o
}

func (h *Header) reencryptInit(ctx context.Context, dev, data Device, passphrase []byte, o ReencryptOptions) error {
	if err := h.Writable(); err != nil {
		return err
	}
	res := o.Resilience
	if res == "" {
		res = "checksum"
	}
	switch res {
	case "checksum", "journal", "none":
	case "datashift":
		return fmt.Errorf("%w: resilience datashift is for --encrypt, which is not supported yet", ErrUnsupported)
	default:
		return fmt.Errorf("%w: unknown resilience mode %q (checksum, journal or none)", ErrInvalidOptions, res)
	}
	hashName := o.Hash
	if hashName == "" {
		hashName = "sha256"
	}
	if res == "checksum" {
		if _, err := hashByName(hashName); err != nil {
			return err
		}
	}
	seg, err := h.dataSegment()
	if err != nil {
		return err
	}
	newSS := seg.SectorSize
	if o.SectorSize != 0 {
		if o.SectorSize < 512 || o.SectorSize > 4096 || o.SectorSize&(o.SectorSize-1) != 0 {
			return fmt.Errorf("%w: sector size %d (512, 1024, 2048 or 4096)", ErrInvalidOptions, o.SectorSize)
		}
		newSS = o.SectorSize
	}
	if seg.IVTweak%uint64(newSS/512) != 0 || seg.Offset%uint64(newSS) != 0 {
		return fmt.Errorf("%w: the data offset or IV tweak is not aligned to the %d-byte sector size", ErrInvalidOptions, newSS)
	}
	// The run's first step must fit: a hotzone smaller than the alignment
	// would stop it after this init has written its metadata.
	if err := checkHotzone(o.HotzoneSize, max(seg.SectorSize, newSS)); err != nil {
		return err
	}
	oldKey, slot, err := h.UnlockContext(ctx, dev, passphrase, slotArg(o.Slot))
	if err != nil {
		return err
	}
	defer clear(oldKey)
	// Only the opened keyslot gets the new key; the other keyslots of the
	// old key are removed when the run ends, as cryptsetup does with
	// --key-slot. Without a named slot that loss is refused: cryptsetup
	// would ask for each keyslot's passphrase, and refuses a key file.
	if slotArg(o.Slot) == AnySlot {
		var others []int
		for id, k := range h.md.keyslots {
			if id != slot && k.Type == "luks2" && k.Digest == oldDigestID(h) {
				others = append(others, id)
			}
		}
		if len(others) > 0 {
			sort.Ints(others)
			return fmt.Errorf("%w: keyslots %v also hold the volume key and would be removed at the end; name the one keyslot to keep (--key-slot)", ErrInvalidOptions, others)
		}
	}
	newCipher := o.Cipher
	if newCipher == "" {
		newCipher = seg.Encryption
	}
	keySize := o.KeySize
	if keySize == 0 {
		keySize = len(oldKey)
	}
	if err := luksutil.CheckCipher(newCipher, keySize); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	newKey := make([]byte, keySize)
	defer clear(newKey)
	if err := luksutil.Random(newKey); err != nil {
		return err
	}
	if _, err := sector.New(newCipher, newKey, sector.Options{SectorSize: newSS, IVOffset: seg.IVTweak}); err != nil {
		return fmt.Errorf("%w: cipher %q: %w", ErrInvalidOptions, newCipher, err)
	}
	devSize, err := data.Size()
	if err != nil {
		return err
	}
	if uint64(devSize) <= seg.Offset {
		return fmt.Errorf("%w: no data area after offset %d", ErrDeviceTooSmall, seg.Offset)
	}
	dataLen := uint64(devSize) - seg.Offset
	if !seg.Dynamic {
		dataLen = seg.Size
	}
	if dataLen%uint64(newSS) != 0 {
		return fmt.Errorf("%w: the data area (%d bytes) is not aligned to the %d-byte sector size", ErrInvalidOptions, dataLen, newSS)
	}
	oldDigest := h.segmentDigest()
	if oldDigest == nil {
		return fmt.Errorf("%w: no digest for the data segment", ErrCorruptHeader)
	}
	// The new keyslot holds the new key under the same passphrase.
	newSlot, err := h.freeSlot()
	if err != nil {
		return err
	}
	kopts := o.Keyslot
	kopts.Slot = keyslot.Slot(newSlot)
	if kopts.Priority == PriorityUnset {
		if k := h.md.keyslots[slot]; k != nil {
			kopts.Priority = k.Priority
			if kopts.Priority == PriorityNormal {
				kopts.Priority = PriorityUnset
			}
		}
	}
	nk, err := h.buildKeyslot(newSlot, newKey, passphrase, kopts, nil)
	if err != nil {
		return err
	}
	defer clear(nk.material)
	reSlot, err := h.freeReencSlot(newSlot)
	if err != nil {
		return err
	}
	if res != "checksum" {
		hashName = ""
	}
	area, err := h.resilienceArea(res, hashName, max(seg.SectorSize, newSS), []luksutil.Range{{Off: int64(nk.offset), Len: int64(areaSize(len(newKey)))}})
	if err != nil {
		return err
	}
	reKS := reencKeyslotJSON(area, "reencrypt", "forward")

	root := h.md.root.clone()
	segs := root.get("segments")
	segID := strconv.Itoa(seg.ID)
	cur := segs.get(segID)
	prev := cur.clone()
	prev.set("flags", jarrStr(append(flagsOf(cur), flagPrevious)...))
	var size *uint64
	if !seg.Dynamic {
		s := seg.Size
		size = &s
	}
	fin := segJSON(seg.Offset, size, seg.IVTweak, newCipher, newSS, flagFinal)
	prevID, finID := nextFree(segs, -1), -1
	insertSorted(segs, strconv.Itoa(prevID), prev)
	finID = nextFree(segs, -1)
	insertSorted(segs, strconv.Itoa(finID), fin)

	dgs := root.get("digests")
	od := dgs.get(strconv.Itoa(oldDigest.ID))
	od.set("segments", jarrStr(segID, strconv.Itoa(prevID)))
	od.raw = nil
	newDig, err := newDigest(newKey, o.Keyslot.PBKDF, []string{strconv.Itoa(finID)})
	if err != nil {
		return err
	}
	newDig.get("keyslots").arr = append(newDig.get("keyslots").arr, jstr(strconv.Itoa(newSlot)))
	newDID := nextFree(dgs, -1)
	insertSorted(dgs, strconv.Itoa(newDID), newDig)
	insertSorted(root.get("keyslots"), strconv.Itoa(newSlot), nk.obj)
	// Tokens follow their keyslot to the new one (cryptsetup's
	// assign_tokens): the old keyslot leaves them with the rest of the old
	// key at the end, and a systemd-tpm2 or clevis token bound to it
	// unlocks the new keyslot instead of none.
	assignTokens(root, slot, newSlot)
	if err := addReencKeyslot(root, reSlot, reKS, reencDigestVer, oldKey, newKey, prev, fin, nil, o.Keyslot.PBKDF); err != nil {
		return err
	}

	p, err := h.prepare(root, h.bin)
	if err != nil {
		return err
	}
	if err := luksutil.WriteSync(dev, nk.material, int64(nk.offset)); err != nil {
		return fmt.Errorf("writing keyslot %d material: %w", newSlot, err)
	}
	if err := h.write(dev, p); err != nil {
		return err
	}
	rememberKey(ctx, oldDigest.ID, oldKey) // reencrypt_keys.go
	rememberKey(ctx, newDID, newKey)
	return nil
}

// freeReencSlot is the first free keyslot other than not, for the
// reencrypt keyslot.
func (h *Header) freeReencSlot(not int) (int, error) {
	for i := 0; i < MaxKeyslots; i++ {
		if h.md.keyslots[i] == nil && i != not {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: no keyslot is left for the reencryption keyslot", ErrNoFreeSlot)
}

// addReencKeyslot adds the reencrypt keyslot ks to root as reSlot, with
// its digest (cryptsetup's reencryption digest over the keys, ks and the
// backup segments, for requirement version ver) and the requirement.
func addReencKeyslot(root *jval, reSlot int, ks *jval, ver byte, oldKey, newKey []byte, prev, fin, moved *jval, pbkdf PBKDFOptions) error {
	insertSorted(root.get("keyslots"), strconv.Itoa(reSlot), ks)
	vd, err := verificationData(oldKey, newKey, ks, prev, fin, moved)
	if err != nil {
		return err
	}
	defer clear(vd)
	vd[1] = 0x30 + ver
	rd, err := newDigest(vd, pbkdf, nil)
	if err != nil {
		return err
	}
	rd.get("keyslots").arr = append(rd.get("keyslots").arr, jstr(strconv.Itoa(reSlot)))
	dgs := root.get("digests")
	insertSorted(dgs, strconv.Itoa(nextFree(dgs, -1)), rd)
	dgs.raw = nil
	setRequirement(root, true)
	if ver != reencDigestVer {
		// setRequirement added the version 2 name last: rename it.
		m := root.get("config").get("requirements").get("mandatory")
		m.arr[len(m.arr)-1] = jstr(fmt.Sprintf("online-reencrypt-v%d", ver))
	}
	return nil
}

// assignTokens adds keyslot to to every token that lists keyslot from,
// at the end of its list, as cryptsetup's crypt_token_assign_keyslot does.
func assignTokens(root *jval, from, to int) {
	toks := root.get("tokens")
	if toks == nil || toks.kind != jObj {
		return
	}
	f, n := strconv.Itoa(from), strconv.Itoa(to)
	for _, t := range toks.obj {
		ks := t.val.get("keyslots")
		if ks == nil || ks.kind != jArr || !arrHas(ks, f) || arrHas(ks, n) {
			continue
		}
		ks.arr = append(ks.arr, jstr(n))
		ks.raw = nil
		t.val.raw = nil
	}
	toks.raw = nil
}

func arrHas(a *jval, s string) bool {
	for _, e := range a.arr {
		if e.kind == jStr && e.s == s {
			return true
		}
	}
	return false
}

func oldDigestID(h *Header) int {
	if d := h.segmentDigest(); d != nil {
		return d.ID
	}
	return -1
}

func flagsOf(seg *jval) []string {
	var out []string
	if f := seg.get("flags"); f != nil && f.kind == jArr {
		for _, e := range f.arr {
			if e.kind == jStr {
				out = append(out, e.s)
			}
		}
	}
	return out
}

// nextFree is the lowest unused numeric id of obj above after.
func nextFree(obj *jval, after int) int {
	for i := after + 1; ; i++ {
		if obj.get(strconv.Itoa(i)) == nil {
			return i
		}
	}
}

func setRequirement(root *jval, on bool) {
	cfg := root.get("config")
	cfg.raw = nil
	req := cfg.get("requirements")
	var mand []string
	if req != nil {
		if m := req.get("mandatory"); m != nil && m.kind == jArr {
			for _, e := range m.arr {
				if e.kind == jStr && e.s != reencReq {
					mand = append(mand, e.s)
				}
			}
		}
	}
	if on {
		mand = append(mand, reencReq)
	}
	if len(mand) == 0 {
		if req != nil {
			req.raw = nil
			req.del("mandatory")
			if len(req.obj) == 0 {
				cfg.del("requirements")
			}
		}
		return
	}
	if req == nil {
		req = jobj()
		cfg.set("requirements", req)
	}
	req.raw = nil
	req.set("mandatory", jarrStr(mand...))
}

// serializeFields appends cryptsetup's reencryption digest serialization
// of the named members: 's' string, 'u' u64 stored as a string, 'x' u64 or
// "dynamic", 'i' u32 stored as an integer. A missing or mistyped member
// makes the data invalid, as in cryptsetup.
func serializeFields(b []byte, obj *jval, spec string, names ...string) ([]byte, error) {
	for i, n := range names {
		v := obj.get(n)
		if v == nil {
			return nil, fmt.Errorf("%w: reencryption metadata lacks %q", ErrCorruptHeader, n)
		}
		switch spec[i] {
		case 's':
			if v.kind != jStr || len(v.s) > reencMaxStringLen {
				return nil, fmt.Errorf("%w: reencryption metadata %q", ErrCorruptHeader, n)
			}
			b = append(b, v.s...)
		case 'u', 'x':
			if v.kind != jStr {
				return nil, fmt.Errorf("%w: reencryption metadata %q is not a string", ErrCorruptHeader, n)
			}
			if spec[i] == 'x' && v.s == "dynamic" {
				b = append(b, "dynamic"...)
				continue
			}
			u, _ := strconv.ParseUint(v.s, 10, 64)
			b = binary.BigEndian.AppendUint64(b, u)
		case 'i':
			if v.kind != jNum || !v.isInt() {
				return nil, fmt.Errorf("%w: reencryption metadata %q is not an integer", ErrCorruptHeader, n)
			}
			b = binary.BigEndian.AppendUint32(b, uint32(v.getInt64()))
		}
	}
	return b, nil
}

func serializeSegment(b []byte, seg *jval) ([]byte, error) {
	switch jsGet(seg, "type") {
	case "crypt":
		return serializeFields(b, seg, "suxusi", "type", "offset", "size", "iv_tweak", "encryption", "sector_size")
	case "linear":
		return serializeFields(b, seg, "sux", "type", "offset", "size")
	}
	return nil, fmt.Errorf("%w: backup segment type %q", ErrCorruptHeader, jsGet(seg, "type"))
}

// verificationData is what cryptsetup's reencryption digest covers: 'v',
// '0'+version, the old key, the new key (when it differs), the reencrypt
// keyslot's parameters and the backup segments.
func verificationData(oldKey, newKey []byte, ks, prev, fin, moved *jval) ([]byte, error) {
	b := []byte{0x76, 0x30 + reencDigestVer}
	b = append(b, oldKey...)
	b = append(b, newKey...)
	area := ks.get("area")
	if area == nil {
		return nil, fmt.Errorf("%w: reencrypt keyslot has no area", ErrCorruptHeader)
	}
	var err error
	if b, err = serializeFields(b, ks, "ss", "mode", "direction"); err != nil {
		return nil, err
	}
	switch jsGet(area, "type") {
	case "checksum":
		b, err = serializeFields(b, area, "suusi", "type", "offset", "size", "hash", "sector_size")
	case "datashift", "datashift-journal":
		b, err = serializeFields(b, area, "suuu", "type", "offset", "size", "shift_size")
	case "datashift-checksum":
		b, err = serializeFields(b, area, "suusiu", "type", "offset", "size", "hash", "sector_size", "shift_size")
	default:
		b, err = serializeFields(b, area, "suu", "type", "offset", "size")
	}
	if err != nil {
		return nil, err
	}
	for _, s := range []*jval{prev, fin, moved} {
		if s == nil {
			continue
		}
		if b, err = serializeSegment(b, s); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func readFull(d io.ReaderAt, b []byte, off int64) (int, error) {
	n, err := d.ReadAt(b, off)
	if n == len(b) {
		return n, nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
