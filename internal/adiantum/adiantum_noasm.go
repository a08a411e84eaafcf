//go:build !amd64 || purego

package adiantum

// Without the assembly only the generic implementation exists.
const (
	hasAVX2   = false
	hasAVX512 = false
)
