package luksutil

import (
	"bytes"
	"fmt"
)

// RestoreHeader writes a header backup (header plus keyslot areas, as
// luksHeaderBackup saved it) over the start of dev, in an order that
// keeps a usable header on the device at every moment, even if power
// fails and the drive loses, reorders or tears the unsynced writes:
//
//  1. every part of the backup that differs from the device and that the
//     current header does not use (InUse: its metadata and active keyslot
//     areas, as seen by the probers of the header packages linked in),
//     synced: the backup's keyslot material is in place while the current
//     header still works;
//  2. the backup's header copies, one by one in the order given, each
//     synced: the switch (LUKS2 has two checksummed copies and readers
//     take the valid one with the higher sequence id, so each step leaves
//     either header intact; LUKS1's header is a single 592-byte write);
//  3. what is left (the areas only the old header used), synced.
//
// Sectors that already hold the backup's content are not written at all,
// so a keyslot both headers share is never touched. A backup keyslot whose
// area the current header uses for other material opens only once step 3
// is durable; cryptsetup writes everything in one go and gives no such
// guarantee for any keyslot.
func RestoreHeader(dev Device, backup []byte, headers []Range) error {
	size, err := dev.Size()
	if err != nil {
		return fmt.Errorf("device size: %w", err)
	}
	if size < int64(len(backup)) {
		return fmt.Errorf("%w: the device (%d bytes) is smaller than the header backup (%d bytes)", ErrDeviceTooSmall, size, len(backup))
	}
	cur := make([]byte, len(backup))
	if _, err := dev.ReadAt(cur, 0); err != nil {
		return fmt.Errorf("reading the current header: %w", err)
	}
	keep := InUse(dev)
	const blk = 512
	done := make([]bool, (len(backup)+blk-1)/blk)
	for i := range done {
		lo, hi := i*blk, min((i+1)*blk, len(backup))
		done[i] = bytes.Equal(cur[lo:hi], backup[lo:hi])
	}
	// writeRuns writes the not yet written blocks that sel accepts, in
	// runs of adjacent blocks, and syncs if it wrote anything.
	writeRuns := func(sel func(r Range) bool) error {
		wrote := false
		for i := 0; i < len(done); {
			if done[i] || !sel(Range{Off: int64(i) * blk, Len: blk}) {
				i++
				continue
			}
			j := i
			for j < len(done) && !done[j] && sel(Range{Off: int64(j) * blk, Len: blk}) {
				done[j] = true
				j++
			}
			lo, hi := i*blk, min(j*blk, len(backup))
			if _, err := dev.WriteAt(backup[lo:hi], int64(lo)); err != nil {
				return err
			}
			wrote = true
			i = j
		}
		if wrote {
			return dev.Sync()
		}
		return nil
	}
	if err := writeRuns(func(r Range) bool { return !OverlapsAny(r, keep) && !OverlapsAny(r, headers) }); err != nil {
		return fmt.Errorf("restoring keyslot areas: %w", err)
	}
	for i, h := range headers {
		if err := writeRuns(func(r Range) bool { return r.Overlaps(h) }); err != nil {
			return fmt.Errorf("restoring header copy %d: %w", i+1, err)
		}
	}
	if err := writeRuns(func(Range) bool { return true }); err != nil {
		return fmt.Errorf("restoring the rest of the header area: %w", err)
	}
	return nil
}
