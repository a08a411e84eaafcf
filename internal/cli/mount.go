package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/blkcrypt/blkcrypt/mount"
)

const mountHelp = "DEVICE DIR — show the decrypted volume (or --lv in it) as the file DIR/" + mount.DefaultFileName + " (FUSE) until unmounted"

// mountOptions: the volume as read opens it, and whether the file takes
// writes.
type mountOptions struct {
	openFlags
	stackFlags
	ReadOnly bool `flag:"read-only" short:"r" help:"mount: the file refuses writes"`
}

// runMount unlocks DEVICE as `read` does (same flags, --partition and
// --lv included) and serves it through package mount until it is
// unmounted from outside (fusermount3 -u) or the command gets SIGINT,
// SIGTERM or SIGHUP. The volume is closed after the last FUSE request.
func runMount(ctx context.Context, env *Env, o *mountOptions, args []string) error {
	if len(args) != 2 {
		return usageErr("expected DEVICE and DIR arguments, got %d", len(args))
	}
	dev := args[0]
	// Before the unlock: a bad mount point costs no passphrase.
	dir, err := mount.CheckDir(args[1])
	if err != nil {
		return usageErr("%v", err)
	}
	if !mount.Supported {
		return fmt.Errorf("mount: %w (use serve and an NBD client)", mount.ErrUnsupported)
	}
	hardenProcess()
	t, err := openTarget(ctx, env, &o.openFlags, o.stackFlags, dev, o.ReadOnly)
	if err != nil {
		return err
	}
	// A format that opens read-only on its own (TrueCrypt without
	// --tcrypt-read-write, BitLocker, FileVault 2) mounts read-only too.
	readOnly := o.ReadOnly || t.ReadOnly()
	// Closing the terminal (SIGHUP) unmounts cleanly rather than killing
	// the process and leaving a dead mount point; caught before the mount
	// exists.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	m, err := mount.Start(dir, t, mount.Options{ReadOnly: readOnly, Source: "blkcrypt:" + filepath.Base(dev),
		Logf: func(format string, args ...any) {
			fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", oneLine(fmt.Sprintf(format, args...)))
		}})
	if err != nil {
		t.Close()
		return err
	}
	ro := ""
	if readOnly {
		ro = ", read-only"
	}
	fmt.Fprintf(env.Stderr, "blkcrypt: %s mounted as %s (%d bytes%s); unmount with %s or Ctrl-C\n",
		dev, m.Path(), t.Size(), ro, mount.UnmountHint(dir))
	select {
	case <-m.Done(): // unmounted from outside
	case <-ctx.Done():
		stopMount(env, m)
	case <-hup:
		stopMount(env, m)
	}
	return t.Close()
}

// stopMount unmounts, or detaches a mount a file keeps busy and serves
// the open files until they are closed (ending now would fail their
// writes half way).
func stopMount(env *Env, m *mount.Mount) {
	detached, err := m.Unmount()
	switch {
	case err != nil:
		fmt.Fprintf(env.Stderr, "blkcrypt: %s; serving until it is unmounted\n", oneLine(err.Error()))
	case detached:
		fmt.Fprintf(env.Stderr, "blkcrypt: %s is busy; detached it, waiting for open files to be closed\n", filepath.Dir(m.Path()))
	}
	m.Wait()
}
