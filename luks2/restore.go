package luks2

import (
	"fmt"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// RestoreHeader writes a LUKS2 header backup (luksHeaderBackup's file:
// both metadata copies and the keyslots area) over the start of dev. The
// backup's keyslot material goes first (where the current header does
// not need it), then the primary and the secondary metadata one at a
// time, then the rest, each step synced, so a power cut leaves the
// current or the restored header working: see luksutil.RestoreHeader.
func RestoreHeader(dev Device, backup []byte) error {
	h, err := Read(luksutil.NewMemDevice(len(backup), backup))
	if err != nil {
		return fmt.Errorf("header backup: %w", err)
	}
	if uint64(len(backup)) < h.HeaderSize() {
		return fmt.Errorf("%w: the backup is %d bytes, its header and keyslots need %d", ErrCorruptHeader, len(backup), h.HeaderSize())
	}
	mds := int64(h.MetadataSize())
	return luksutil.RestoreHeader(dev, backup, []luksutil.Range{{Off: 0, Len: mds}, {Off: mds, Len: mds}})
}
