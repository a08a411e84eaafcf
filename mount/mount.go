package mount

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Device is what a mount shows: *blkcrypt.Volume and *blkcrypt.Stack
// have this method set.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	Flush() error
}

// Options tune Start. The zero value mounts read-write, as a file named
// DefaultFileName.
type Options struct {
	// FileName is the one file's name; "" is DefaultFileName.
	FileName string
	// ReadOnly mounts read-only: the kernel refuses writes (EROFS), mmap
	// included.
	ReadOnly bool
	// Source is the source column of /proc/mounts ("blkcrypt:disk.img");
	// "" is "blkcrypt".
	Source string
	// Logf reports the first ten I/O errors of the device (a failing
	// image should not look like a quiet EIO); nil drops them.
	Logf func(format string, args ...any)
}

// DefaultFileName is the file a mount shows unless Options.FileName says
// otherwise. It is fixed, as nbdfuse's "nbd" is, so scripts can name it
// without asking.
const DefaultFileName = "volume"

// ErrUnsupported is Start on a system without FUSE support here.
var ErrUnsupported = errors.New("FUSE mounts are not supported on this system")

// CheckDir checks that dir is an existing directory and returns its
// absolute path: a program calls it before unlocking anything, so that a
// bad mount point costs no passphrase.
func CheckDir(dir string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path once, not twice
		}
		return "", fmt.Errorf("mount point %s: %w", dir, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("mount point %s is not a directory", dir)
	}
	return filepath.Abs(dir)
}

func (o Options) fileName() string {
	if o.FileName == "" {
		return DefaultFileName
	}
	return o.FileName
}
