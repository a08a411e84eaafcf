//go:build !linux

package outfile

import "io/fs"

// sameBlockDevice: off Linux, block devices are compared by inode only.
func sameBlockDevice(a, b fs.FileInfo) bool { return false }
