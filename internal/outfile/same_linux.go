package outfile

import (
	"io/fs"
	"syscall"
)

// sameBlockDevice reports whether two block-device nodes (two paths made
// with mknod, say) name the same device: their inodes differ, their
// device numbers do not.
func sameBlockDevice(a, b fs.FileInfo) bool {
	isBlock := func(st fs.FileInfo) bool {
		return st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0
	}
	if !isBlock(a) || !isBlock(b) {
		return false
	}
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Rdev == sb.Rdev
}
