//go:build !linux && !darwin

package mount

import (
	"fmt"
	"runtime"
)

// Supported reports whether Start works on this system.
const Supported = false

// A Mount is a mounted file system with one file (not on this system).
type Mount struct{}

// Start is not available here: go-fuse mounts on Linux and macOS only.
func Start(dir string, dev Device, o Options) (*Mount, error) {
	if _, err := CheckDir(dir); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w (%s): use an NBD server and client", ErrUnsupported, runtime.GOOS)
}

// UnmountHint is the command that unmounts dir from outside.
func UnmountHint(dir string) string { return "umount " + dir }

func (m *Mount) Path() string                        { return "" }
func (m *Mount) Done() <-chan struct{}               { return nil }
func (m *Mount) Wait()                               {}
func (m *Mount) Unmount() (detached bool, err error) { return false, ErrUnsupported }
