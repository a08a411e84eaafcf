package luks2

import (
	"fmt"
	"strconv"
)

// SetDataSize records size bytes as the data segment's length (resize).
// A "dynamic" segment follows its device and is left as it is (the caller
// resizes the device); a fixed one gets the new length in one metadata
// update. size must be a positive multiple of the segment's sector size.
// It reports whether the metadata changed.
func (h *Header) SetDataSize(dev Device, size uint64) (bool, error) {
	if err := h.Writable(); err != nil {
		return false, err
	}
	s, err := h.dataSegment()
	if err != nil {
		return false, err
	}
	if size == 0 || size%uint64(s.SectorSize) != 0 {
		return false, fmt.Errorf("%w: data size %d is not a positive multiple of the %d-byte sector size", ErrInvalidOptions, size, s.SectorSize)
	}
	if s.Dynamic || s.Size == size {
		return false, nil
	}
	root := h.md.root.clone()
	seg := root.get("segments").get(strconv.Itoa(s.ID))
	seg.set("size", ju64s(size))
	return true, h.commit(dev, root)
}
