//go:build !linux

package cli

import "testing"

// processDumpable: PR_GET_DUMPABLE is Linux-only, so the check cannot run
// here (this keeps `GOOS=darwin go vet` building the package's tests).
func processDumpable(t *testing.T) (int, error) {
	t.Skip("PR_GET_DUMPABLE is Linux-only")
	return 0, nil
}
