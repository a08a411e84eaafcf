//go:build !linux

package cli

// hardenProcess is best effort: off Linux there is no portable way to keep
// keys out of core dumps, which docs/security.md states.
func hardenProcess() {}
