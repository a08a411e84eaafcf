package loopaes

import (
	"context"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/internal/volspec/voltest"
)

// Open is the registered opener over a test device.
func Open(dev volspec.Device, size int64, text []byte, o Options) (*voltest.Volume, error) {
	s, err := open(context.Background(), &volspec.Request{Dev: dev, DevSize: size, KeyFiles: [][]byte{text}, Options: o})
	if err != nil {
		return nil, err
	}
	return voltest.Open(dev, s, o.ReadOnly), nil
}
