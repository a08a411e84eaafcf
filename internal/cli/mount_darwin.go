package cli

import (
	"fmt"
	"os/exec"
	"strings"
)

func unmountHint(dir string) string { return "umount " + dir }

// detachMount forces the unmount: macOS has no lazy unmount, so open files
// of the volume get errors from here on.
func detachMount(dir string) error {
	out, err := exec.Command("umount", "-f", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("umount -f: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
