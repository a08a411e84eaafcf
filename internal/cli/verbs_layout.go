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

type convertOptions struct {
	Type string `flag:"type" help:"luks1 or luks2: the version to convert to"`
	headerFlag
	verboseFlag
	batchFlag
}

func runConvert(ctx context.Context, env *Env, o *convertOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	to := o.Type
	if to != "luks1" && to != "luks2" {
		return usageErr("invalid LUKS type, only luks1 and luks2 are supported")
	}
	// --type is the target, not what the device must hold.
	h, err := luksFlags{headerFlag: o.headerFlag}.open(ctx, dev, nil, false)
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
	if err := o.confirm(env, fmt.Sprintf("This operation will convert %s to %s format.", dev, strings.ToUpper(to)), ExitPermission, "operation aborted, device was not converted"); err != nil {
		return err
	}
	if err := h.Convert(ctx, to); err != nil {
		return err
	}
	o.done(env)
	return nil
}

type resizeOptions struct {
	Size       *int64    `flag:"size" short:"b" help:"new data size in 512-byte sectors" def:"the whole file"`
	DeviceSize *byteSize `flag:"device-size" help:"new data size in bytes, with K/M/G/T/P/E units (as cryptsetup's --device-size)" def:"the whole file"`
	luksFlags
	verboseFlag
}

// runResize changes the data area of an image file through the LUKS
// handle (blkcrypt.LUKS.Resize: its checks, locks and crash order).
func runResize(ctx context.Context, env *Env, opts *resizeOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	if opts.Size != nil && opts.DeviceSize != nil {
		return usageErr("options --size and --device-size cannot be combined")
	}
	if st, err := os.Stat(dev); blkcrypt.IsURI(dev) || err == nil && !st.Mode().IsRegular() {
		return usageErr("resize works on image files; %s is not a regular file", dev)
	}
	var o blkcrypt.ResizeOptions
	switch {
	case opts.DeviceSize != nil:
		if *opts.DeviceSize%512 != 0 {
			return usageErr("device size must be multiple of 512 bytes sector")
		}
		o.Size = int64(*opts.DeviceSize)
	case opts.Size != nil:
		n := *opts.Size
		if n < 0 || uint64(n) > (1<<63-1)/512 {
			return usageErr("invalid numeric value for --size: %d", n)
		}
		o.Size = n * 512
	}
	if _, err := opts.path(dev); err != nil {
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, dev, blkcrypt.LUKSOptions{Header: opts.Header, Type: opts.Type})
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
	opts.done(env)
	return nil
}
