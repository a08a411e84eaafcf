package tcrypt

import (
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/internal/volspec/voltest"
	"github.com/blkcrypt/blkcrypt/sector"
)

// NewVolume stacks the mapping's layers over data, as the root package does
// with the Spec the opener returns.
func NewVolume(data volspec.Device, m *Mapping, readOnly bool) (*voltest.Volume, error) {
	cs, err := m.Ciphers()
	if err != nil {
		return nil, err
	}
	return voltest.Open(data, &volspec.Spec{Layers: append([]*sector.Cipher(nil), cs...), Offset: int64(m.Offset) * 512, Size: int64(m.Size) * 512}, readOnly), nil
}
