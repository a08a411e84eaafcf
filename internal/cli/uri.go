package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/blkcrypt/blkcrypt"
)

// A DEVICE may be an NBD URI (nbd://, nbds://, nbd+unix://, nbds+unix://):
// importing nbdclient (cli.go) registers those schemes with blkcrypt.Open and
// Format, so the verbs that open a volume need nothing more, and the LUKS
// handle (blkcrypt.OpenLUKS) opens one for the header verbs. URI devices
// are not flock-locked: the lock is local, the device is not.

// deviceFile is a device detectErr reads: a file, or a URI device.
type deviceFile interface {
	io.ReaderAt
	io.Closer
}

// detectURI names the format a URI device carries, or "".
func detectURI(ctx context.Context, path string) string {
	d, err := blkcrypt.OpenURI(ctx, path, true)
	if err != nil {
		return ""
	}
	defer d.Close()
	return blkcrypt.Detect(d)
}

// detectErr is why detectType found no signature on path when the cause
// is the device (a URI that does not open, a header read that fails), or
// nil when it read the head and there was none.
func detectErr(ctx context.Context, path string) error {
	var d deviceFile
	if blkcrypt.IsURI(path) {
		if err := ctx.Err(); err != nil {
			// A signal cut detectURI short: say so, not that a fresh
			// connection could not be made.
			return fmt.Errorf("device %s: %w", path, err)
		}
		u, err := blkcrypt.OpenURI(ctx, path, true)
		if err != nil {
			return err
		}
		d = u
	} else {
		f, err := os.Open(path)
		if err != nil {
			return deviceErr(fmt.Errorf("cannot open device %s: %w", path, err))
		}
		d = f
	}
	defer d.Close()
	if _, err := blkcrypt.DetectErr(d); err != nil {
		return deviceErr(fmt.Errorf("device %s: %w", path, err))
	}
	return nil
}
