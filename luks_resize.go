package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// ResizeOptions choose a resize's new data size.
type ResizeOptions struct {
	// Size is the new size of the data area in bytes, a multiple of the
	// sector size; 0 fills the data file from the data offset (what a
	// fixed-size segment takes after its file was grown by other means).
	Size int64
}

// Resize changes the data area of a volume in an image file, as
// cryptsetup resize changes the mapping: the file is grown or cut to data
// offset + o.Size, and a fixed-size LUKS2 segment gets the new length (a
// "dynamic" one, and LUKS1, follow the file). It needs a handle opened
// with OpenLUKS on a regular file (the data file is locked like the header
// when o.Header is another file: ErrBusy while a volume on it is open).
//
// A failed Resize changes nothing: every check that can refuse it (the
// size, a read-only or reencrypting header, a data file in use) runs
// before the first change, and a grown file is cut back when the header
// update then fails. On a grow the file grows before the header says so;
// on a shrink the header shrinks before the file, so a crash in between
// never leaves a segment past the end of the file.
func (h *LUKS) Resize(ctx context.Context, o ResizeOptions) error {
	if h != nil && (h.lockOn == nil || h.dataPath == "" || IsURI(h.dataPath)) {
		return fmt.Errorf("%w: resize works on image files opened with OpenLUKS", ErrUnsupported)
	}
	if o.Size < 0 {
		return fmt.Errorf("%w: negative size", ErrInvalidOptions)
	}
	return h.do(ctx, true, func(hd luksutil.Header) error {
		data := h.lockOn
		if !sameFile(h.lockOn, h.dataPath) {
			df, err := OpenFileLocked(h.dataPath, false)
			if err != nil {
				return err
			}
			defer df.Close()
			data = df.File
		}
		st, err := data.Stat()
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%w: resize works on image files; %s is not a regular file", ErrUnsupported, h.dataPath)
		}
		off, ss := hd.DataOffset(), int64(hd.SectorSize())
		size := o.Size
		if size == 0 {
			if st.Size() <= off {
				return fmt.Errorf("%w: %s ends before the data offset %d", ErrDeviceTooSmall, h.dataPath, off)
			}
			size = (st.Size() - off) / ss * ss
		}
		if size == 0 || size%ss != 0 {
			return fmt.Errorf("%w: device size is not aligned to requested sector size", ErrInvalidOptions)
		}
		if size > 1<<63-1-off {
			return fmt.Errorf("%w: invalid device size %d: the image would exceed the largest file size", ErrInvalidOptions, size)
		}
		h2, _ := hd.(*luks2.Header)
		if h2 != nil {
			if err := h2.CheckDataSize(uint64(size)); err != nil {
				return err
			}
		}
		newLen := off + size
		grow := newLen > st.Size()
		if grow {
			if err := data.Truncate(newLen); err != nil {
				return errors.Join(fmt.Errorf("growing %s: %w", h.dataPath, err), restoreSize(data, st.Size()))
			}
			if err := data.Sync(); err != nil {
				return errors.Join(err, restoreSize(data, st.Size()))
			}
		}
		if h2 != nil {
			if _, err := h2.SetDataSize(h.dev, uint64(size)); err != nil {
				if grow {
					// The header update is all or nothing, so the old
					// header stands: the old file size goes with it.
					err = errors.Join(err, restoreSize(data, st.Size()))
				}
				return err
			}
		}
		if !grow && newLen < st.Size() {
			if err := data.Truncate(newLen); err != nil {
				return fmt.Errorf("shrinking %s: %w", h.dataPath, err)
			}
			return data.Sync()
		}
		return nil
	})
}

// restoreSize cuts a file a resize grew back to its old size.
func restoreSize(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("restoring the size of %s to %d bytes: %w", f.Name(), size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("restoring the size of %s to %d bytes: %w", f.Name(), size, err)
	}
	return nil
}
