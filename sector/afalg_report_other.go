//go:build !linux

package sector

import (
	"fmt"
	"io"
)

// WriteAFALGReport writes the AF_ALG offload engine's "# engine:" line:
// only Linux has it.
func WriteAFALGReport(w io.Writer) {
	fmt.Fprintln(w, "# engine: AF_ALG offload: absent (not Linux); every request runs in-process")
}
