//go:build amd64 && !purego

package aead

import "golang.org/x/sys/cpu"

// useAESNI runs whole messages with VEX-encoded AESENC, one state
// (sealAESNI, openAESNI); useVAES runs four or eight messages at once on
// ZMM registers, one per 128-bit lane (sealVAES4, sealVAES8, …).
var (
	useAESNI = cpu.X86.HasAES && cpu.X86.HasAVX
	useVAES  = useAESNI && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VAES
)

// The kernels run j as sectors.go's job describes, with 1, 4 or 8 lanes.

//go:noescape
func sealAESNI(j *job)

//go:noescape
func openAESNI(j *job)

//go:noescape
func sealVAES4(j *job)

//go:noescape
func openVAES4(j *job)

//go:noescape
func sealVAES8(j *job)

//go:noescape
func openVAES8(j *job)
