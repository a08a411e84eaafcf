package cli

import (
	"testing"

	"golang.org/x/sys/unix"
)

// processDumpable is prctl(PR_GET_DUMPABLE), which only Linux has.
func processDumpable(t *testing.T) (int, error) {
	return unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
}
