package luks1

import (
	"fmt"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// SetUUID changes the volume UUID (luksUUID --uuid), stored lowercase in
// the canonical text form as cryptsetup stores it.
func (h *Header) SetUUID(dev Device, uuid string) error {
	u, err := luksutil.CheckUUID(uuid)
	if err != nil {
		return err
	}
	np := h.p
	if err := setCstr(np.UUIDRaw[:], u); err != nil {
		return err
	}
	return h.writeHeader(dev, &np)
}

// Erase disables every keyslot (luksErase) in one header write, then
// overwrites their key material with random data. A cut before the header
// write leaves the volume as it was; after it, no keyslot is enabled.
func (h *Header) Erase(dev Device) error {
	active := h.ActiveKeyslots()
	np := h.p
	for _, s := range active {
		k := &np.Keyslots[s]
		k.Active = KeyDisabled
		k.Iterations = 0
		clear(k.Salt[:])
	}
	if err := h.writeHeader(dev, &np); err != nil {
		return err
	}
	for _, s := range active {
		a := h.area(s)
		if err := luksutil.WipeArea(dev, a.Off, int(a.Len)); err != nil {
			return fmt.Errorf("wiping keyslot %d material: %w", s, err)
		}
	}
	return nil
}

// SetKeyslotOffsets points the keyslots at other key material offsets (in
// 512-byte sectors) in one header write, for a caller that has already
// copied each active keyslot's material to its new place and synced it
// (a layout change such as luks2.FromLUKS1's). The new offsets must pass
// the load-time checks: after the header, before the payload, apart.
func (h *Header) SetKeyslotOffsets(dev Device, sectors [NumKeyslots]uint32) error {
	np := h.p
	for i := range np.Keyslots {
		np.Keyslots[i].KeyMaterialOffset = sectors[i]
	}
	if err := np.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return h.writeHeader(dev, &np)
}
