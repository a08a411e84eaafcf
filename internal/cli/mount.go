package cli

import (
	"fmt"
	"os"
	"path/filepath"
)

func init() {
	extraVerbs = append(extraVerbs, verb{"mount", nil, runMount,
		"DEVICE DIR — show the decrypted volume as the file DIR/" + mountFileName + " (FUSE) until unmounted"})
}

// mountFileName is the one file a mount shows. It is fixed, as nbdfuse's
// "nbd" is, so scripts can name it without asking.
const mountFileName = "volume"

// mountArgs checks DEVICE and DIR before anything is unlocked, so a bad
// mount point costs no passphrase and leaves nothing mounted.
func mountArgs(p *parsed) (dev, dir string, err error) {
	if len(p.args) != 2 {
		return "", "", usageErr("expected DEVICE and DIR arguments, got %d", len(p.args))
	}
	dev, dir = p.args[0], p.args[1]
	st, err := os.Stat(dir)
	if err != nil {
		return "", "", usageErr("mount point %s: %v", dir, unwrapPath(err))
	}
	if !st.IsDir() {
		return "", "", usageErr("mount point %s is not a directory", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", usageErr("mount point %s: %v", dir, err)
	}
	return dev, abs, nil
}

// unwrapPath drops the path an *os.PathError repeats, so the message names
// the mount point once.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// mountMessage is the line printed once the mount is up: what to open and
// how to end it.
func mountMessage(dev, dir string, size int64, readOnly bool) string {
	ro := ""
	if readOnly {
		ro = ", read-only"
	}
	return fmt.Sprintf("blkcrypt: %s mounted as %s (%d bytes%s); unmount with %s or Ctrl-C",
		dev, filepath.Join(dir, mountFileName), size, ro, unmountHint(dir))
}
