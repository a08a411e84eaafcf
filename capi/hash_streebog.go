package capi

import (
	"hash"

	"github.com/blkcrypt/blkcrypt/internal/streebog"
)

// Streebog (GOST R 34.11-2012) lives in its own file so that it can be
// added without touching the shared hash table in algs.go. VeraCrypt's
// PBKDF2-HMAC-Streebog-512 reaches it as "stribog512", which kdf
// and tcrypt map to the kernel name.
func init() {
	for _, h := range []struct {
		name string
		size int
		f    func() hash.Hash
	}{
		{"streebog256", streebog.Size256, streebog.New256},
		{"streebog512", streebog.Size512, streebog.New512},
	} {
		mustRegister(&Alg{Name: h.name, Driver: h.name + "-generic", Priority: PriorityGeneric, Type: TypeHash,
			BlockSize: streebog.BlockSize, DigestSize: h.size, NewHash: h.f})
	}
}
