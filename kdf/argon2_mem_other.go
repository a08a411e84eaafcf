//go:build !linux

package kdf

// allocBlocks allocates n zeroed blocks on the Go heap; once the caller
// drops B the next collection frees them.
func allocBlocks(n int) (B []block, free func(), err error) {
	return make([]block, n), func() {}, nil
}
