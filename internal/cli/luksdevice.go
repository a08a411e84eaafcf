package cli

import (
	"context"
	"fmt"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// luksDevice opens the header device (the --header file or DEVICE itself)
// and reads the header, for the verbs that have not moved onto the LUKS
// handle yet (reencrypt, convert, resize: issue #25); the header verbs
// use openLUKS.
func luksDevice(ctx context.Context, p *parsed, path string, readOnly bool) (deviceFile, luksutil.Device, luksutil.Header, error) {
	hpath, err := luksPath(p, path)
	if err != nil {
		return nil, nil, nil, err
	}
	typ := p.str("type")
	var f deviceFile
	var dev luksutil.Device
	if blkcrypt.IsURI(hpath) {
		var err error
		if f, dev, err = uriDevice(ctx, hpath, readOnly); err != nil {
			return nil, nil, nil, err
		}
	} else {
		// Locked as the library locks it: a header change waits for no one
		// and is refused (busy) while a volume on it is open anywhere.
		lf, err := blkcrypt.OpenFileLocked(hpath, readOnly)
		if err != nil {
			return nil, nil, nil, err
		}
		f, dev = lf, luksutil.File{File: lf.File}
	}
	bh, err := blkcrypt.ReadHeaderContext(ctx, dev)
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	h := bh.(luksutil.Header) // the verbs below add keys too
	if typ != "" && typ != "luks" && typ != fmt.Sprintf("luks%d", h.Version()) {
		f.Close()
		return nil, nil, nil, usageErr("device holds LUKS%d, not %s", h.Version(), typ)
	}
	return f, dev, h, nil
}
