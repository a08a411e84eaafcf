//go:build amd64 && !purego

package aead

import "golang.org/x/sys/cpu"

// useAESNI runs AEGIS-128's bulk loops with the AESENC instruction, one
// state update per 16-byte block (aegis_amd64.s); init, associated data,
// partial blocks and the tag stay in Go.
var useAESNI = cpu.X86.HasAES && cpu.X86.HasSSE41

// aegisEncAESNI encrypts n full blocks of src into dst, updating s.
//
//go:noescape
func aegisEncAESNI(s *aegisState, dst, src *byte, n int)

// aegisDecAESNI decrypts n full blocks of src into dst, updating s.
//
//go:noescape
func aegisDecAESNI(s *aegisState, dst, src *byte, n int)
