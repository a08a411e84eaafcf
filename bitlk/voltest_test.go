package bitlk

import (
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/internal/volspec/voltest"
)

// Open is the layout the opener describes, over a test device.
func Open(dev volspec.Device, devSize int64, m *Metadata, key []byte, readOnly bool) (*voltest.Volume, error) {
	if err := m.Activatable(); err != nil {
		return nil, err
	}
	s, err := describe(dev, devSize, m, key)
	if err != nil {
		return nil, err
	}
	return voltest.Open(dev, s, readOnly), nil
}
