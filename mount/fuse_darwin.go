package mount

import (
	"fmt"
	"os/exec"
	"strings"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// UnmountHint is the command that unmounts dir from outside.
func UnmountHint(dir string) string { return "umount " + dir }

// mountFS mounts through go-fuse's own macFUSE path.
func mountFS(dir string, root fs.InodeEmbedder, opts *fs.Options) (*fuse.Server, func() error, error) {
	srv, err := fs.Mount(dir, root, opts)
	if err != nil {
		return nil, nil, err
	}
	return srv, srv.Unmount, nil
}

// detachMount forces the unmount: macOS has no lazy unmount, so open files
// of the volume get errors from here on.
func detachMount(dir string) error {
	out, err := exec.Command("umount", "-f", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("umount -f: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
