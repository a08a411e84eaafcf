package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/blkcrypt/blkcrypt"
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
	h, err := openLUKS(ctx, p, dev, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	hd, err := h.Header(ctx)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	if fmt.Sprintf("luks%d", hd.Version()) == to {
		return usageErr("device is already %s type", to)
	}
	if err := confirm(env, p, fmt.Sprintf("This operation will convert %s to %s format.", dev, strings.ToUpper(to)), ExitPermission, "operation aborted, device was not converted"); err != nil {
		return err
	}
	if err := h.Convert(ctx, to); err != nil {
		return err
	}
	verbose(env, p)
	return nil
}

// runResize changes the data area of an image file through the LUKS
// handle (blkcrypt.LUKS.Resize: its checks, locks and crash order).
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
	var o blkcrypt.ResizeOptions
	switch {
	case p.has("device-size"):
		size, err := parseSize(p.str("device-size"))
		if err != nil {
			return usageErr("invalid --device-size: %v", err)
		}
		if size%512 != 0 {
			return usageErr("device size must be multiple of 512 bytes sector")
		}
		if size > 1<<63-1 {
			return usageErr("invalid device size %d: the image would exceed the largest file size", size)
		}
		o.Size = int64(size)
	case p.has("size"):
		n := p.int("size", 0)
		if n < 0 || uint64(n) > (1<<63-1)/512 {
			return usageErr("invalid numeric value for --size: %s", p.str("size"))
		}
		o.Size = n * 512
	}
	if _, err := luksPath(p, dev); err != nil {
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, dev, blkcrypt.LUKSOptions{Header: p.str("header"), Type: p.str("type")})
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	if err := h.Resize(ctx, o); err != nil {
		if errors.Is(err, blkcrypt.ErrBusy) || errors.Is(err, blkcrypt.ErrReadOnly) {
			return err
		}
		if errors.Is(err, blkcrypt.ErrInvalidOptions) {
			return usageErr("%v", err)
		}
		if errors.Is(err, blkcrypt.ErrDeviceTooSmall) {
			return deviceErr(err)
		}
		return err
	}
	verbose(env, p)
	return nil
}
