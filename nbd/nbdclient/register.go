package nbdclient

import (
	"context"

	"github.com/blkcrypt/blkcrypt"
)

func init() {
	open := func(ctx context.Context, uri string, readOnly bool) (blkcrypt.URIDevice, error) {
		c, err := Dial(ctx, uri, Options{ReadOnly: readOnly})
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	for _, s := range Schemes {
		blkcrypt.RegisterURIScheme(s, open)
	}
}
