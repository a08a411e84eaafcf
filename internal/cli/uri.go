package cli

import (
	"context"

	"github.com/blkcrypt/blkcrypt"
)

// A DEVICE may be an NBD URI (nbd://, nbds://, nbd+unix://, nbds+unix://):
// importing nbdclient (cli.go) registers those schemes with blkcrypt.Open and
// Format, so the verbs that open a volume need nothing more, and the LUKS
// handle (blkcrypt.OpenLUKS) opens one for the header verbs. URI devices
// are not flock-locked: the lock is local, the device is not.

// detectURI names the format a URI device carries, or "".
func detectURI(ctx context.Context, path string) string {
	d, err := blkcrypt.OpenURI(ctx, path, true)
	if err != nil {
		return ""
	}
	defer d.Close()
	return blkcrypt.Detect(d)
}
