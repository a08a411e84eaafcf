// Package plain implements cryptsetup's plain dm-crypt mode: no header, the
// volume key comes straight from a hashed passphrase or from a key file, and
// the data sits at a fixed offset.
//
// Passphrase hashing follows cryptsetup (lib/crypt_plain.c): round r of the
// hash takes "A"×r ‖ passphrase, the rounds are concatenated and cut to the
// key size. "hash:N" cuts the digest to N bytes and zero-pads to the key
// size; "plain" copies the passphrase and zero-pads it; "plain:N" copies
// exactly N bytes.
package plain

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/capi"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// ErrInvalidHash means the --hash value is malformed or names no hash.
var ErrInvalidHash = volspec.Sub("invalid passphrase hash", volspec.ErrInvalidOptions)

// Defaults of cryptsetup 2.7 for --type plain.
const (
	DefaultCipher  = "aes-xts-plain64"
	DefaultKeySize = 32 // bytes (256 bits)
	DefaultHash    = "sha256"
)

// cryptsetupHashNames maps cryptsetup/gcrypt hash names to kernel names.
var cryptsetupHashNames = map[string]string{
	"whirlpool": "wp512",
	"sha3-224":  "sha3-224",
	"blake2b":   "blake2b-512",
	"blake2s":   "blake2s-256",
	// gcrypt spells Streebog after its Russian name.
	"stribog256": "streebog256",
	"stribog512": "streebog512",
}

// KernelHashName maps a cryptsetup hash name to the capi name.
func KernelHashName(h string) string {
	if k, ok := cryptsetupHashNames[strings.ToLower(h)]; ok {
		return k
	}
	return strings.ToLower(h)
}

// stdinKeyFileOptions adjusts key-file options for a key file read from
// standard input: with hash "plain" cryptsetup reads exactly the key size,
// whatever --keyfile-size says.
func stdinKeyFileOptions(hashSpec string, keySize int, o keyinput.Options) keyinput.Options {
	if hashSpec == "plain" {
		o.Size = int64(keySize)
	}
	return o
}

// Key derives a keySize-byte volume key from a passphrase with the hash
// spec ("sha256", "ripemd160:20", "plain", "plain:16"). The result is a new
// buffer the caller must wipe.
func Key(hashSpec string, passphrase []byte, keySize int) ([]byte, error) {
	name, lenStr, hasLen := strings.Cut(hashSpec, ":")
	limit := keySize
	if hasLen {
		n, err := strconv.Atoi(lenStr)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: %q: the length after ':' must be a positive number", ErrInvalidHash, hashSpec)
		}
		if n > keySize {
			return nil, fmt.Errorf("%w: %q: %d bytes is more than the %d-byte key", ErrInvalidHash, hashSpec, n, keySize)
		}
		limit = n
	}
	key := make([]byte, keySize)
	if name == "plain" {
		if hasLen && len(passphrase) < limit {
			return nil, fmt.Errorf("%w: %q: the passphrase has fewer than %d bytes", ErrInvalidHash, hashSpec, limit)
		}
		copy(key[:limit], passphrase)
		return key, nil
	}
	newHash, err := capi.HashFunc(KernelHashName(name))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidHash, hashSpec, err)
	}
	h := newHash()
	var buf []byte
	for round := 0; len(buf) < limit; round++ {
		h.Reset()
		for i := 0; i < round; i++ {
			h.Write([]byte{'A'})
		}
		h.Write(passphrase)
		buf = h.Sum(buf)
	}
	copy(key[:limit], buf)
	clear(buf)
	return key, nil
}
