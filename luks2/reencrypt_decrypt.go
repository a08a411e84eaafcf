package luks2

import (
	"context"
	"fmt"
	"strconv"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// DecryptOptions configure Decrypt.
type DecryptOptions struct {
	// Resilience is "checksum" (default), "journal" or "none".
	Resilience  string
	Hash        string
	HotzoneSize uint64
	// Slot is the keyslot to open; nil (the zero value) tries any.
	Slot *int
	// ResumeOnly refuses to start a new decryption.
	ResumeOnly bool
	Keyslot    KeyslotOptions // the KDF of the reencryption digest
	InitOnly   bool
	StopAfter  int
	Progress   func(done, total uint64)
}

// ErrDecryptAttached means Decrypt of a volume whose header is on its
// data device without a separate device to export the header to; it
// matches ErrUnsupported.
var ErrDecryptAttached = fmt.Errorf("%w: decrypting a LUKS2 volume whose header is on the data device needs a new header device to export the header to", ErrUnsupported)

// defaultMovedLen caps the first segment a datashift decryption moves
// (cryptsetup's LUKS2_DEFAULT_NONE_REENCRYPTION_LENGTH).
const defaultMovedLen = 20 << 20

// DecryptPlan is what Decrypt does with its devices and options.
type DecryptPlan struct {
	// Resume is set when the header holds a decryption in progress,
	// which Decrypt resumes.
	Resume bool
	// Export is set when a new decryption moves the data (forward,
	// datashift-checksum): the header is on the data device (and is
	// exported to the header device), or the header device holds a
	// plain detached header with a data offset.
	Export bool
	// UUID is the volume's; the reencryption lock (LockReencryption)
	// names it.
	UUID string
}

// PlanDecrypt reads the headers and says what Decrypt would do, refusing
// what Decrypt refuses from the devices alone, before a passphrase is
// asked for and before anything is written: another reencryption in
// progress, InitOnly with a decryption in progress (ErrReencryptInProgress),
// ResumeOnly without one (ErrNoReencryption), a header on the data device
// without a device to export it to (ErrDecryptAttached). hdev nil stands
// for a header device still to be made for an export; then data must
// hold the header.
func PlanDecrypt(ctx context.Context, hdev, data Device, o DecryptOptions) (DecryptPlan, error) {
	_, _, p, err := planDecrypt(ctx, hdev, data, o)
	return p, err
}

// planDecrypt is PlanDecrypt, with the header a new run starts from and
// the device it was read from.
func planDecrypt(ctx context.Context, hdev, data Device, o DecryptOptions) (*Header, Device, DecryptPlan, error) {
	if data == nil {
		data = hdev
	}
	var h *Header
	err := fmt.Errorf("%w: no header device", ErrInvalidOptions)
	if hdev != nil {
		h, err = ReadContext(ctx, hdev)
	}
	if err != nil {
		if data == hdev || data == nil {
			return nil, nil, DecryptPlan{}, err
		}
		hd, derr := ReadContext(ctx, data)
		if derr != nil {
			if hdev == nil {
				err = derr
			}
			return nil, nil, DecryptPlan{}, err
		}
		if o.ResumeOnly {
			return nil, nil, DecryptPlan{}, ErrNoReencryption
		}
		if hd.reencMode() != "" {
			return nil, nil, DecryptPlan{}, fmt.Errorf("%w: %w: the header on the data device has one", ErrInvalidOptions, ErrReencryptInProgress)
		}
		return hd, data, DecryptPlan{Export: true, UUID: hd.UUID()}, nil
	}
	plan := DecryptPlan{UUID: h.UUID()}
	switch mode := h.reencMode(); {
	case mode != "" && mode != "decrypt":
		return nil, nil, plan, fmt.Errorf("%w: %w: the volume is in %s, not decryption", ErrInvalidOptions, ErrReencryptInProgress, mode)
	case mode != "" && o.InitOnly:
		return nil, nil, plan, fmt.Errorf("%w: cannot initialise it again", ErrReencryptInProgress)
	case mode != "":
		plan.Resume = true
		return h, hdev, plan, nil
	case o.ResumeOnly:
		return nil, nil, plan, ErrNoReencryption
	}
	seg, err := h.dataSegment()
	switch {
	case err != nil:
		return nil, nil, plan, err
	case seg.Offset != 0 && data != hdev:
		plan.Export = true
	case seg.Offset != 0 || data == hdev:
		return nil, nil, plan, ErrDecryptAttached
	}
	return h, hdev, plan, nil
}

// Decrypt turns a LUKS2 volume into plaintext in place, or resumes such a
// run, as cryptsetup 2.6 does (PlanDecrypt says which beforehand):
//   - a detached header hdev with the data at offset 0 of data: backward
//     from the end, checksum (default), journal or none resilience;
//   - a volume whose header is on data, with hdev a new (empty) header
//     device: the header is exported to hdev, and the data moves to the
//     start of the device as it is decrypted (forward, datashift-checksum:
//     its first HotzoneSize bytes, at most the data offset and 20 MiB, are
//     moved to the start first and decrypted last, in place, under
//     checksums). hdev also names a plain detached header with a data
//     offset (a cut before the run began leaves one): the same is done.
//
// At the end the header holds one linear segment and no keyslots. On ctx's
// end it stops between hotzones.
func Decrypt(ctx context.Context, hdev, data Device, passphrase []byte, o DecryptOptions) error {
	ctx, known := withDerivedKeys(ctx) // reencrypt_keys.go: init's key, not derived again
	defer known.wipe()
	if hdev == nil {
		return fmt.Errorf("%w: no header device", ErrInvalidOptions)
	}
	if data == nil {
		data = hdev
	}
	h, src, plan, err := planDecrypt(ctx, hdev, data, o)
	if err != nil {
		return err
	}
	ro := runOpts{hotzone: o.HotzoneSize, slot: slotArg(o.Slot), stopAfter: o.StopAfter, progress: o.Progress}
	switch {
	case plan.Resume:
		ro.resilience, ro.hash = o.Resilience, o.Hash
		return h.resume(ctx, hdev, data, passphrase, ro) // reencrypt_engine.go
	case plan.Export:
		err = h.decryptShiftInit(ctx, hdev, data, src, passphrase, o)
	default:
		err = h.decryptInit(ctx, hdev, data, passphrase, o)
	}
	if err != nil || o.InitOnly {
		return err
	}
	if h, err = ReadContext(ctx, hdev); err != nil {
		return err
	}
	return h.resume(ctx, hdev, data, passphrase, ro)
}

// decryptShiftInit starts cryptsetup's decryption with a data shift. h is
// read from src (data for an attached header, else hdev). Each step keeps
// a header that opens the volume: hdev gets a plain copy of the header
// first (synced); then the LUKS signatures on data are cleared and the
// first moved bytes of ciphertext copied to its start (synced), which the
// volume, its data at the offset, does not use; then one metadata commit
// to hdev starts the run. A cut before that commit leaves hdev a detached
// header of the untouched volume, which Decrypt starts again from.
func (h *Header) decryptShiftInit(ctx context.Context, hdev, data, src Device, passphrase []byte, o DecryptOptions) error {
	if err := h.Writable(); err != nil {
		return err
	}
	seg, err := h.dataSegment()
	if err != nil {
		return err
	}
	res := o.Resilience
	if res != "" && res != "datashift-checksum" && res != "checksum" {
		return fmt.Errorf("%w: decryption with a data shift uses resilience datashift-checksum, not %q", ErrInvalidOptions, res)
	}
	hash := o.Hash
	if hash == "" {
		hash = "sha256"
	}
	hf, err := hashByName(hash)
	if err != nil {
		return err
	}
	shift, ss := seg.Offset, uint64(seg.SectorSize)
	devSize, err := data.Size()
	if err != nil {
		return err
	}
	if uint64(devSize) <= shift {
		return fmt.Errorf("%w: no data after offset %d", ErrDeviceTooSmall, shift)
	}
	dataLen := uint64(devSize) - shift
	if !seg.Dynamic {
		dataLen = min(dataLen, seg.Size)
	}
	if dataLen%ss != 0 || shift%ss != 0 {
		return fmt.Errorf("%w: the data offset or size is not aligned to the %d-byte sector size", ErrInvalidOptions, ss)
	}
	moved := o.HotzoneSize
	if moved == 0 {
		moved = min(shift, defaultMovedLen)
	}
	if moved > shift {
		return fmt.Errorf("%w: the moved segment (--hotzone-size, %d bytes) cannot be larger than the data shift (%d bytes)", ErrInvalidOptions, moved, shift)
	}
	moved = min(moved, dataLen)
	moved -= moved % ss
	if moved == 0 {
		return fmt.Errorf("%w: the moved segment is smaller than a sector", ErrInvalidOptions)
	}
	key, d, err := h.unlockSegmentKey(ctx, src, passphrase, slotArg(o.Slot))
	if err != nil {
		return err
	}
	defer clear(key)
	// The header, with its keyslots area, copied to memory: the copy for
	// hdev and the base of the new metadata.
	mem := luksutil.NewMemDevice(int(h.HeaderSize()), nil)
	if _, err := readFull(src, mem.Buf, 0); err != nil {
		return fmt.Errorf("reading the header: %w", err)
	}
	hm, err := ReadContext(ctx, mem)
	if err != nil {
		return err
	}
	offA, nA := hm.maxGap(nil)
	block := int(ss)
	if nA == 0 || nA/uint64(hf().Size())*uint64(block) < moved {
		return fmt.Errorf("%w: the free keyslots area (%d bytes) cannot hold the checksums of a %d-byte moved segment", ErrNoFreeSlot, nA, moved)
	}
	area := jobj(jmember{"offset", ju64s(offA)}, jmember{"size", ju64s(nA)}, jmember{"type", jstr("datashift-checksum")},
		jmember{"hash", jstr(hash)}, jmember{"sector_size", jint(int64(block))}, jmember{"shift_size", ju64s(shift)})
	ks := reencKeyslotJSON(area, "decrypt", "forward")
	var size *uint64
	if !seg.Dynamic {
		size = u64p(dataLen)
	}
	live := []*jval{segJSON(0, u64p(moved), seg.IVTweak, seg.Encryption, seg.SectorSize)}
	if dataLen > moved {
		var rest *uint64
		if size != nil {
			rest = u64p(dataLen - moved)
		}
		live = append(live, segJSON(shift+moved, rest, seg.IVTweak+moved/512, seg.Encryption, seg.SectorSize))
	}
	movedSeg := segJSON(0, u64p(moved), seg.IVTweak, seg.Encryption, seg.SectorSize, flagMoved)
	prev := segJSON(shift, size, seg.IVTweak, seg.Encryption, seg.SectorSize, flagPrevious)
	fin := linSeg(0, size, flagFinal)
	root, err := hm.initModalRootVer(3, live, movedSeg, prev, fin, d.ID, nil, key, ks, o.Keyslot.PBKDF)
	if err != nil {
		return err
	}
	p, err := hm.prepare(root, hm.bin)
	if err != nil {
		return err
	}
	if src != hdev {
		if err := luksutil.WriteSync(hdev, mem.Buf, 0); err != nil {
			return fmt.Errorf("exporting the header: %w", err)
		}
	}
	if err := clearSignatures(data, h.bin.HdrSize, shift); err != nil {
		return fmt.Errorf("clearing the LUKS signatures on the data device: %w", err)
	}
	if err := copyRange(data, shift, 0, moved); err != nil {
		return fmt.Errorf("moving the first %d bytes of data: %w", moved, err)
	}
	if err := hm.write(hdev, p); err != nil {
		return err
	}
	rememberKey(ctx, d.ID, key)
	return nil
}

// clearSignatures zeroes the LUKS magic of both header copies on dev
// (the secondary at hdrSize) below limit, then syncs.
func clearSignatures(dev Device, hdrSize, limit uint64) error {
	zero := make([]byte, MagicLen)
	for _, off := range []uint64{0, hdrSize} {
		if off+MagicLen > limit {
			continue
		}
		if _, err := dev.WriteAt(zero, int64(off)); err != nil {
			return err
		}
	}
	return dev.Sync()
}

func (h *Header) decryptInit(ctx context.Context, hdev, data Device, passphrase []byte, o DecryptOptions) error {
	if err := h.Writable(); err != nil {
		return err
	}
	seg, err := h.dataSegment()
	if err != nil {
		return err
	}
	if seg.Offset != 0 || data == nil || data == hdev {
		return ErrDecryptAttached
	}
	block := seg.SectorSize
	if err := checkHotzone(o.HotzoneSize, block); err != nil {
		return err
	}
	area, err := h.resilienceArea(o.Resilience, o.Hash, block, nil)
	if err != nil {
		return err
	}
	devSize, err := data.Size()
	if err != nil {
		return err
	}
	if devSize <= 0 || (!seg.Dynamic && seg.Size > uint64(devSize)) {
		return fmt.Errorf("%w: the data device is smaller than the data segment", ErrDeviceTooSmall)
	}
	if uint64(devSize)%uint64(seg.SectorSize) != 0 && seg.Dynamic {
		return fmt.Errorf("%w: the data device (%d bytes) is not a multiple of the %d-byte sector size", ErrInvalidOptions, devSize, seg.SectorSize)
	}
	key, d, err := h.unlockSegmentKey(ctx, hdev, passphrase, slotArg(o.Slot))
	if err != nil {
		return err
	}
	defer clear(key)
	cur := h.md.root.get("segments").get(strconv.Itoa(seg.ID))
	prev := cur.clone()
	prev.set("flags", jarrStr(append(flagsOf(cur), flagPrevious)...))
	var size *uint64
	if !seg.Dynamic {
		size = u64p(seg.Size)
	}
	fin := linSeg(0, size, flagFinal)
	ks := reencKeyslotJSON(area, "decrypt", "backward")
	// initModalRoot numbers the segments afresh: the live one stays 0.
	root, err := h.initModalRoot([]*jval{cur.clone()}, nil, prev, fin, d.ID, nil, key, ks, o.Keyslot.PBKDF)
	if err != nil {
		return err
	}
	if err := h.commit(hdev, root); err != nil {
		return err
	}
	rememberKey(ctx, d.ID, key)
	return nil
}

// unlockSegmentKey opens the data segment's key and returns it with its
// digest.
func (h *Header) unlockSegmentKey(ctx context.Context, dev Device, passphrase []byte, slot int) ([]byte, *Digest, error) {
	d := h.segmentDigest()
	if d == nil {
		return nil, nil, fmt.Errorf("%w: no digest for the data segment", ErrCorruptHeader)
	}
	key, _, err := h.UnlockContext(ctx, dev, passphrase, slot)
	return key, d, err
}
