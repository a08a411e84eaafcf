package nbdclient

import (
	"context"

	"github.com/blkcrypt/blkcrypt"
)

// Importing this package (for its side effect, `import _
// "github.com/blkcrypt/blkcrypt/nbd/nbdclient"`, as the blkcrypt command
// does) makes an NBD URI a device for blkcrypt.Open, Format, OpenLUKS and
// the rest. The root package does not import it itself, so that a program
// that opens only files compiles no network or TLS code.
//
// The context given to Open (or OpenURI, Format, …) stays with the device
// as Options.Context: a program stopped by a signal, whose context ends,
// is not held by a server that stalls, while one that answers still gets
// the last writes and flush (see CancelGrace). A caller whose context
// ends before it is done with the device (a timeout for Open alone) gives
// it that grace per request and no reconnection after.
func init() {
	open := func(ctx context.Context, uri string, readOnly bool) (blkcrypt.URIDevice, error) {
		c, err := Dial(ctx, uri, Options{ReadOnly: readOnly, Context: ctx})
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	for _, s := range Schemes {
		blkcrypt.RegisterURIScheme(s, open)
	}
}
