package luks2

import (
	"fmt"
	"strconv"
)

// CheckDataSize runs every check SetDataSize makes before it writes (a
// writable header, a usable data segment, a whole number of sectors) and
// writes nothing. A caller that must change something else before the
// header, such as the resize verb that grows the file first, calls it so
// that a refusal comes before any change.
func (h *Header) CheckDataSize(size uint64) error {
	_, err := h.checkDataSize(size)
	return err
}

func (h *Header) checkDataSize(size uint64) (*Segment, error) {
	if err := h.Writable(); err != nil {
		return nil, err
	}
	s, err := h.dataSegment()
	if err != nil {
		return nil, err
	}
	if size == 0 || size%uint64(s.SectorSize) != 0 {
		return nil, fmt.Errorf("%w: data size %d is not a positive multiple of the %d-byte sector size", ErrInvalidOptions, size, s.SectorSize)
	}
	return s, nil
}

// SetDataSize records size bytes as the data segment's length (resize).
// A "dynamic" segment follows its device and is left as it is (the caller
// resizes the device); a fixed one gets the new length in one metadata
// update. size must be a positive multiple of the segment's sector size.
// It reports whether the metadata changed.
func (h *Header) SetDataSize(dev Device, size uint64) (bool, error) {
	s, err := h.checkDataSize(size)
	if err != nil {
		return false, err
	}
	if s.Dynamic || s.Size == size {
		return false, nil
	}
	root := h.md.root.clone()
	seg := root.get("segments").get(strconv.Itoa(s.ID))
	seg.set("size", ju64s(size))
	return true, h.commit(dev, root)
}
