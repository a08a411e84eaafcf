package blkcrypt

import (
	"context"
	"fmt"
	"io"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// LUKS1Gap returns a reader of a LUKS1 volume's gap, the bytes between
// its keyslot areas and its data where luksmeta keeps its slots (and so
// clevis its LUKS1 bindings): from the end of the last keyslot area,
// rounded up to 4096 bytes, to the data offset rounded down to 4096, as
// luksmeta computes it. A gap that is empty (data right after the
// keyslots, or a detached header whose data offset is 0) gives a reader
// of length 0. A LUKS2 header is ErrNotLUKS. Shared lock while the
// header is read; the reader reads the device directly and is valid
// until the handle is closed.
func (h *LUKS) LUKS1Gap(ctx context.Context) (*io.SectionReader, error) {
	var start, end int64
	err := h.do(ctx, false, func(hd luksutil.Header) error {
		h1, ok := hd.(*luks1.Header)
		if !ok {
			return fmt.Errorf("%w: the device holds luks%d, not luks1", ErrNotLUKS, hd.Version())
		}
		start = (h1.HeaderSize() + 4095) &^ 4095
		end = h1.DataOffset() &^ 4095
		if end < start {
			end = start
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(h.dev, start, end-start), nil
}
