package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// The verbs that change where things are: convert (LUKS1 <-> LUKS2) and
// resize of an image file's data segment.
func init() {
	extraVerbs = append(extraVerbs,
		verb{"convert", []string{"luksConvert"}, runConvert, "DEVICE --type luks1|luks2 — convert the header in place"},
		verb{"resize", nil, runResize, "IMAGE — grow or shrink the data area (--size SECTORS or --device-size BYTES)"},
	)
}

func runConvert(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	to := p.str("type")
	if to != "luks1" && to != "luks2" {
		return usageErr("invalid LUKS type, only luks1 and luks2 are supported")
	}
	delete(p.set, "type") // the target, not what the device must hold
	f, hdev, h, err := luksDevice(ctx, p, dev, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer f.Close()
	if fmt.Sprintf("luks%d", h.Version()) == to {
		return usageErr("device is already %s type", to)
	}
	if err := confirm(env, p, fmt.Sprintf("This operation will convert %s to %s format.", dev, strings.ToUpper(to)), ExitPermission, "operation aborted, device was not converted"); err != nil {
		return err
	}
	switch hh := h.(type) {
	case *luks1.Header:
		_, err = luks2.FromLUKS1(hdev, hh)
	case *luks2.Header:
		_, err = hh.ToLUKS1(hdev)
	}
	if err != nil {
		return err
	}
	verbose(env, p)
	return nil
}

// runResize changes the data area of an image file: the file is grown or
// cut to data offset + the new size, and a fixed-size LUKS2 segment gets
// the new length ("dynamic" ones follow the file). A failed resize changes
// nothing: every check that can refuse it (the sizes, a read-only or
// reencrypting header, a data file in use) runs before the first change,
// and a grown file is cut back when the header update then fails. On a
// grow the file grows before the header says so; on a shrink the header
// shrinks before the file, so a cut in between never leaves a segment past
// the end.
func runResize(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	if p.has("size") && p.has("device-size") {
		return usageErr("options --size and --device-size cannot be combined")
	}
	if st, err := os.Stat(dev); blkcrypt.IsURI(dev) || err == nil && !st.Mode().IsRegular() {
		return usageErr("resize works on image files; %s is not a regular file", dev)
	}
	f, hdev, h, err := luksDevice(ctx, p, dev, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer f.Close()
	// The data lives in DEVICE; with --header the header file is another.
	lf, ok := f.(*blkcrypt.LockedFile)
	if !ok {
		return usageErr("resize works on image files; the header of %s is not one", dev)
	}
	data := lf.File
	if p.str("header") != "" && !sameFile(lf.File, dev) {
		// The data file changes size, so it is locked like the header:
		// a volume open on it (here or in cryptsetup) makes this busy.
		df, err := blkcrypt.OpenFileLocked(dev, false)
		if err != nil {
			if errors.Is(err, blkcrypt.ErrBusy) {
				return err
			}
			return deviceErr(fmt.Errorf("cannot open device %s: %w", dev, err))
		}
		defer df.Close()
		data = df.File
	}
	st, err := data.Stat()
	if err != nil {
		return deviceErr(err)
	}
	off := h.DataOffset()
	var size uint64
	switch {
	case p.has("device-size"):
		if size, err = parseSize(p.str("device-size")); err != nil {
			return usageErr("invalid --device-size: %v", err)
		}
		if size%512 != 0 {
			return usageErr("device size must be multiple of 512 bytes sector")
		}
	case p.has("size"):
		n := p.int("size", 0)
		if n < 0 || uint64(n) > (1<<63-1)/512 {
			return usageErr("invalid numeric value for --size: %s", p.str("size"))
		}
		size = uint64(n) * 512
	default:
		// No size: the data fills the file (what a fixed segment takes
		// after its file was grown by other means).
		if st.Size() <= off {
			return deviceErr(fmt.Errorf("%s ends before the data offset %d", dev, off))
		}
		size = uint64(st.Size()-off) / uint64(h.SectorSize()) * uint64(h.SectorSize())
	}
	if size == 0 {
		size = uint64(max(st.Size()-off, 0)) / uint64(h.SectorSize()) * uint64(h.SectorSize())
	}
	if size == 0 || size%uint64(h.SectorSize()) != 0 {
		return usageErr("device size is not aligned to requested sector size")
	}
	if size > uint64(1<<63-1-off) {
		return usageErr("invalid device size %d: the image would exceed the largest file size", size)
	}
	h2, _ := h.(*luks2.Header)
	resizeErr := func(err error) error {
		if errors.Is(err, luksutil.ErrInvalidOptions) {
			return usageErr("%v", err)
		}
		return err
	}
	if h2 != nil {
		// Refuse before the file grows, not after.
		if err := h2.CheckDataSize(size); err != nil {
			return resizeErr(err)
		}
	}
	newLen := off + int64(size)
	grow := newLen > st.Size()
	if grow {
		if err := data.Truncate(newLen); err != nil {
			return deviceErr(errors.Join(fmt.Errorf("growing %s: %w", dev, err), restoreSize(data, dev, st.Size())))
		}
		if err := data.Sync(); err != nil {
			return deviceErr(errors.Join(err, restoreSize(data, dev, st.Size())))
		}
	}
	if h2 != nil {
		if _, err := h2.SetDataSize(hdev, size); err != nil {
			if grow {
				// The header update is all or nothing, so the old
				// header stands: the old file size goes with it.
				err = errors.Join(err, restoreSize(data, dev, st.Size()))
			}
			return resizeErr(err)
		}
	}
	if !grow && newLen < st.Size() {
		if err := data.Truncate(newLen); err != nil {
			return deviceErr(fmt.Errorf("shrinking %s: %w", dev, err))
		}
		if err := data.Sync(); err != nil {
			return deviceErr(err)
		}
	}
	verbose(env, p)
	return nil
}

// restoreSize cuts a file the resize grew back to its old size.
func restoreSize(data *os.File, dev string, size int64) error {
	if err := data.Truncate(size); err != nil {
		return fmt.Errorf("restoring the size of %s to %d bytes: %w", dev, size, err)
	}
	if err := data.Sync(); err != nil {
		return fmt.Errorf("restoring the size of %s to %d bytes: %w", dev, size, err)
	}
	return nil
}

// sameFile reports whether path names the file f has open.
func sameFile(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}
