// Package kdf implements the password-based key derivation functions that
// LUKS keyslots use — PBKDF2 over any capi hash, Argon2i and Argon2id — and
// the cost benchmark cryptsetup runs before it creates a keyslot
// (crypt_pbkdf_perf in lib/crypto_backend/pbkdf_check.c and its callers in
// lib/utils_benchmark.c), so that unlocking takes about the requested time.
package kdf

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"strings"

	"github.com/blkcrypt/blkcrypt/capi"
)

// KDF type names as LUKS2 metadata spells them.
const (
	PBKDF2   = "pbkdf2"
	Argon2i  = "argon2i"
	Argon2id = "argon2id"
)

// Limits, as cryptsetup enforces them (crypt_pbkdf_get_limits).
const (
	MinPBKDF2Iterations = 1000
	MinArgon2Time       = 4
	MinArgon2MemoryKiB  = 32
	MaxArgon2MemoryKiB  = 4 * 1024 * 1024
	MaxArgon2Parallel   = 4
	// minBenchMemoryKiB is where the Argon2 benchmark starts.
	minBenchMemoryKiB = 64 * 1024
)

// Errors. Messages never contain key material.
var (
	// ErrUnsupported means a KDF type or hash that is not available.
	ErrUnsupported = errors.New("kdf: unsupported")
	// ErrInvalid means parameters outside what the KDF accepts.
	ErrInvalid = errors.New("kdf: invalid parameters")
)

// cryptsetupToKernel maps hash names that cryptsetup (gcrypt/OpenSSL
// spelling) and the kernel (capi) spell differently.
var cryptsetupToKernel = map[string]string{
	"whirlpool":  "wp512",
	"stribog256": "streebog256",
	"stribog512": "streebog512",
}

// HashFunc returns the hash constructor for a hash name as LUKS headers and
// cryptsetup spell it ("sha256", "whirlpool", "ripemd160", "sha3-256",
// "blake2b-512"), translated to the capi name where the two differ.
func HashFunc(name string) (func() hash.Hash, error) {
	n := strings.ToLower(name)
	if k, ok := cryptsetupToKernel[n]; ok {
		n = k
	}
	f, err := capi.HashFunc(n)
	if err != nil {
		return nil, fmt.Errorf("%w: hash %q is not available: %w", ErrUnsupported, name, err)
	}
	return f, nil
}

// HashSize returns the digest size of a hash name, or an error.
func HashSize(name string) (int, error) {
	f, err := HashFunc(name)
	if err != nil {
		return 0, err
	}
	return f().Size(), nil
}

// Params are the cost parameters of one derivation, as stored in a keyslot.
type Params struct {
	Type string // PBKDF2, Argon2i or Argon2id
	Hash string // PBKDF2 only
	// Iterations is the PBKDF2 iteration count or the Argon2 time cost.
	Iterations uint32
	MemoryKiB  uint32 // Argon2 only
	Parallel   uint32 // Argon2 only
}

// String describes the parameters (no secrets).
func (p Params) String() string {
	if p.Type == PBKDF2 {
		return fmt.Sprintf("pbkdf2-%s, %d iterations", p.Hash, p.Iterations)
	}
	return fmt.Sprintf("%s, time %d, memory %d KiB, %d threads", p.Type, p.Iterations, p.MemoryKiB, p.Parallel)
}

// Validate checks that p can be computed. It does not enforce cryptsetup's
// minimums for new keyslots (existing headers may use less); see Options.
func (p Params) Validate() error {
	switch p.Type {
	case PBKDF2:
		if _, err := HashFunc(p.Hash); err != nil {
			return err
		}
		if p.Iterations < 1 {
			return fmt.Errorf("%w: pbkdf2 needs at least one iteration", ErrInvalid)
		}
	case Argon2i, Argon2id:
		if p.Iterations < 1 {
			return fmt.Errorf("%w: argon2 time cost must be at least 1", ErrInvalid)
		}
		if p.Parallel < 1 || p.Parallel > 255 {
			return fmt.Errorf("%w: argon2 parallelism %d is not in 1..255", ErrInvalid, p.Parallel)
		}
		if p.MemoryKiB < 8*p.Parallel && p.MemoryKiB < MinArgon2MemoryKiB {
			return fmt.Errorf("%w: argon2 memory %d KiB is too small", ErrInvalid, p.MemoryKiB)
		}
		if p.MemoryKiB > MaxArgon2MemoryKiB {
			return fmt.Errorf("%w: argon2 memory %d KiB is above the %d KiB limit", ErrUnsupported, p.MemoryKiB, MaxArgon2MemoryKiB)
		}
	case "":
		return fmt.Errorf("%w: missing kdf type", ErrInvalid)
	default:
		return fmt.Errorf("%w: kdf type %q", ErrUnsupported, p.Type)
	}
	return nil
}

// Derive computes keyLen bytes from password and salt. The caller owns the
// result and should wipe it after use.
func Derive(p Params, password, salt []byte, keyLen int) ([]byte, error) {
	return DeriveContext(context.Background(), p, password, salt, keyLen)
}

// DeriveContext is Derive that returns promptly with ctx's error when ctx
// ends. PBKDF2 checks ctx every few thousand iterations, Argon2 every few
// dozen blocks; either way nothing of the derivation keeps running or
// holds memory after it returns.
func DeriveContext(ctx context.Context, p Params, password, salt []byte, keyLen int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if keyLen <= 0 {
		return nil, fmt.Errorf("%w: key length %d", ErrInvalid, keyLen)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Type == PBKDF2 {
		h, _ := HashFunc(p.Hash)
		return pbkdf2Key(ctx, h, password, salt, int(p.Iterations), keyLen)
	}
	return Argon2Key(ctx, p.Type, password, salt, p.Iterations, p.MemoryKiB, p.Parallel, keyLen)
}

// Run runs a derivation that cannot be interrupted and returns when it is
// done or ctx ends, whichever is first. An abandoned run finishes in the
// background and its result is wiped. f must not use memory the caller
// wipes on return. For KDFs that have no interruptible implementation
// (bitlk's and fvault2's); kdf's own PBKDF2 and Argon2 do not need it.
func Run(ctx context.Context, f func() ([]byte, error)) ([]byte, error) {
	if ctx.Done() == nil {
		return f()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := f()
		ch <- res{b, err}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-ctx.Done():
		go func() { r := <-ch; clear(r.b) }()
		return nil, ctx.Err()
	}
}
