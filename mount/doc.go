// Package mount shows a block device (a blkcrypt Volume, a Stack's
// logical volume, any Device) as one file in a directory, through FUSE, in
// userspace and without root: the counterpart of the /dev/mapper node
// cryptsetup open makes.
//
//	v, err := blkcrypt.Open(ctx, "disk.img", blkcrypt.OpenOptions{Passphrase: pw})
//	m, err := mount.Start("/mnt/x", v, mount.Options{})
//	// /mnt/x/volume is the decrypted volume until:
//	detached, err := m.Unmount() // or fusermount3 -u /mnt/x from outside
//	m.Wait()
//	v.Close()
//
// The file behaves as a block device: its size is fixed (a truncation to
// 0 or to its size, as an open with O_TRUNC sends, is accepted and does
// nothing), a write that starts at the end gets ENOSPC and one that
// crosses it is short; mode and owner are fixed (0600, or 0400 read-only,
// owned by the user who mounted it). Writes are write-through: without
// FUSE's writeback cache (which this package does not ask for) every
// write(2) has reached Device.WriteAt when it returns. fsync(2), and
// close(2) after a write through that descriptor, call Device.Flush, so
// close reports a failed flush.
//
// Linux mounts through fusermount3 (fuse3), whose message becomes the
// error's one line; macOS through macFUSE; other systems get
// ErrUnsupported. The Device is not closed here: the caller closes it
// after Wait, once the last FUSE request was answered.
package mount
