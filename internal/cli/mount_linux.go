package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

func unmountHint(dir string) string { return "fusermount3 -u " + dir }

// detachMount lazily unmounts dir: it leaves the name space at once and
// the kernel ends the FUSE session when the last open file is closed.
func detachMount(dir string) error {
	if os.Geteuid() == 0 {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err == nil {
			return nil
		}
	}
	bin := "fusermount3"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "fusermount"
	}
	out, err := exec.Command(bin, "-u", "-z", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -u -z: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	return nil
}
