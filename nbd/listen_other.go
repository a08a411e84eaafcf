//go:build !unix

package nbd

// lockDir is a no-op where flock does not exist: the stale-socket check
// still runs, only two servers starting in the same instant are not
// ordered.
func lockDir(dir string) (func(), error) { return func() {}, nil }
