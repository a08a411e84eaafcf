//go:build !amd64 || purego

package aead

const useAESNI = false

func aegisEncAESNI(s *aegisState, dst, src *byte, n int) { panic("unreachable") }
func aegisDecAESNI(s *aegisState, dst, src *byte, n int) { panic("unreachable") }
