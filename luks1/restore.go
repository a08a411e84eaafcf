package luks1

import (
	"fmt"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// RestoreHeader writes a LUKS1 header backup (luksHeaderBackup's file:
// the header and its keyslot areas) over the start of dev. The backup's
// keyslot material goes first (where the current header does not need
// it), then the 592-byte header (its second sector, then its first), then
// the rest, each step synced, so a power cut leaves the current or the
// restored header working: see luksutil.RestoreHeader.
func RestoreHeader(dev Device, backup []byte) error {
	if len(backup) < PhdrSize {
		return fmt.Errorf("%w: a %d-byte backup cannot hold a LUKS1 header", ErrCorruptHeader, len(backup))
	}
	h, err := parse(nil, backup[:PhdrSize])
	if err != nil {
		return fmt.Errorf("header backup: %w", err)
	}
	if int64(len(backup)) < h.HeaderSize() {
		return fmt.Errorf("%w: the backup is %d bytes, its header and keyslots need %d", ErrCorruptHeader, len(backup), h.HeaderSize())
	}
	// Only the header and its keyslot areas are written, as cryptsetup's
	// LUKS_hdr_restore writes them: the backup's zero padding to a page
	// may lie over the data or luksmeta's gap. The header's second
	// sector first, then the first: the switch is a one-sector write, as
	// in writeHeader.
	return luksutil.RestoreHeader(dev, backup[:h.HeaderSize()], []luksutil.Range{{Off: SectorSize, Len: PhdrSize - SectorSize}, {Off: 0, Len: SectorSize}})
}
