//go:build !amd64 || purego

package adiantum

// nhKeyX is filled in everywhere so Cipher has one layout; only the amd64
// assembly reads it.
