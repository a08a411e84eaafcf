package capi

// The arm64 drivers of internal/aes's "ce" implementation (ARMv8 Crypto
// Extensions) carry the names and priorities the kernel gives its arm64
// AES drivers (arch/arm64/crypto: aes-ce-glue.c registers the cipher,
// aes-glue.c the modes with MODE "ce" and PRIO 300, its fused ESSIV at
// PRIO + 1): aes-ce, ecb-aes-ce, cbc-aes-ce, xts-aes-ce and
// essiv-cbc-aes-sha256-ce. The registration loop in aes_drivers.go adds
// them wherever aes.Impls lists "ce".
//
// The ESSIV template instance over cbc-aes-ce inherits 300, so the fused
// driver is chosen by one point, as in the kernel; the xts and cbc template
// instances over aes-ce (250) rank below the mode drivers.
const (
	PriorityCE      = 250 // aes-ce
	PriorityModeCE  = 300 // ecb-aes-ce, cbc-aes-ce, xts-aes-ce
	PriorityFusedCE = 301 // essiv-cbc-aes-sha256-ce
)
