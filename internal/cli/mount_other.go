//go:build !linux && !darwin

package cli

import (
	"context"
	"fmt"
	"runtime"

	"github.com/blkcrypt/blkcrypt"
)

// runMount: go-fuse mounts on Linux and macOS only.
func runMount(ctx context.Context, env *Env, p *parsed) error {
	if _, _, err := mountArgs(p); err != nil {
		return err
	}
	return fmt.Errorf("mount is not available on %s (use serve and an NBD client): %w", runtime.GOOS, blkcrypt.ErrUnsupported)
}

func unmountHint(dir string) string { return "umount " + dir }
