//go:build !linux

package cli

import (
	"fmt"
	"io"
)

// printAFALG reports the AF_ALG offload engine, which only Linux has.
func printAFALG(w io.Writer) {
	fmt.Fprintln(w, "# engine: AF_ALG offload: absent (not Linux); every request runs in-process")
}
