//go:build !amd64 || !gc || purego

package kdf

func processBlock(out, x, y *block, xor bool) { processBlockGeneric(out, x, y, xor) }
