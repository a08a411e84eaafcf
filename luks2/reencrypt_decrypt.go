package luks2

import (
	"context"
	"fmt"
	"strconv"
)

// DecryptOptions configure Decrypt.
type DecryptOptions struct {
	// Resilience is "checksum" (default), "journal" or "none".
	Resilience  string
	Hash        string
	HotzoneSize uint64
	// Slot is the keyslot to open (AnySlot for any).
	Slot      int
	Keyslot   KeyslotOptions // the KDF of the reencryption digest
	InitOnly  bool
	StopAfter int
	Progress  func(done, total uint64)
}

// ErrDecryptAttached means Decrypt of a volume whose header is on its
// data device; it matches ErrUnsupported.
var ErrDecryptAttached = fmt.Errorf("%w: decryption of a LUKS2 volume needs a detached header with the data at offset 0 (cryptsetup 2.6's export of an attached header to --header FILE with datashift-checksum is not supported yet)", ErrUnsupported)

// Decrypt turns the LUKS2 volume of the detached header hdev with data on
// data into plaintext in place, or resumes such a run. It goes backward
// from the end of the data with checksum (default), journal or none
// resilience, as cryptsetup 2.6 does; at the end the header holds one
// linear segment and no keyslots. On ctx's end it stops between hotzones.
func Decrypt(ctx context.Context, hdev, data Device, passphrase []byte, o DecryptOptions) error {
	h, err := ReadContext(ctx, hdev)
	if err != nil {
		return err
	}
	if mode := h.reencMode(); mode != "" {
		if mode != "decrypt" {
			return fmt.Errorf("%w: %w: the volume is in %s, not decryption", ErrInvalidOptions, ErrReencryptInProgress, mode)
		}
		if o.InitOnly {
			return fmt.Errorf("%w: cannot initialise it again", ErrReencryptInProgress)
		}
		return h.resumeModal(ctx, hdev, data, passphrase, modalOpts{o.HotzoneSize, o.Slot, o.StopAfter, o.Progress, o.Resilience, o.Hash})
	}
	if err := h.decryptInit(ctx, hdev, data, passphrase, o); err != nil {
		return err
	}
	if o.InitOnly {
		return nil
	}
	if h, err = ReadContext(ctx, hdev); err != nil {
		return err
	}
	return h.resumeModal(ctx, hdev, data, passphrase, modalOpts{o.HotzoneSize, o.Slot, o.StopAfter, o.Progress, "", ""})
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
	area, err := h.resilienceArea(o.Resilience, o.Hash, block)
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
	key, _, err := h.UnlockContext(ctx, hdev, passphrase, o.Slot)
	if err != nil {
		return err
	}
	defer clear(key)
	d := h.segmentDigest()
	if d == nil {
		return fmt.Errorf("%w: no digest for the data segment", ErrCorruptHeader)
	}
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
	return h.commit(hdev, root)
}
