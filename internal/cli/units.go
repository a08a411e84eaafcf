package cli

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
)

// errBadSize is the one error of parseSize; the option's name is added by
// the caller.
var errBadSize = errors.New("not a size (a number of bytes, optionally with an S (512-byte sectors), K, M, G, T, P or E unit: 2048S, 512k, 64M, 1GiB, 1GB)")

// parseSize reads a byte size as cryptsetup reads --device-size,
// --reduce-device-size and --luks2-metadata-size: decimal digits, then
// optionally a unit letter: S (512-byte sectors) or K, M, G, T, P, E in
// either case, which alone or followed by "iB" counts in powers of 1024
// and followed by "B" in powers of 1000. The "i" and "B" are case-sensitive, as in cryptsetup;
// nothing else may follow, and a size that overflows is refused. Sizes
// above the largest int64 are refused too: no file or device is that big.
func parseSize(s string) (uint64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 && s != "" && s[0] == '-' {
		return 0, fmt.Errorf("%q: a size must not be negative", s)
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is %w", s, errBadSize)
	}
	n, err := strconv.ParseUint(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is %w", s, errBadSize)
	}
	unit := s[i:]
	if unit == "" {
		return checkSize(s, n, 1)
	}
	var base uint64
	switch unit[1:] {
	case "", "iB":
		base = 1024
	case "B":
		base = 1000
	default:
		return 0, fmt.Errorf("%q is %w", s, errBadSize)
	}
	if unit[0] == 'S' || unit[0] == 's' {
		// cryptsetup's 512-byte sectors; it takes "iB" and "B" after them too.
		return checkSize(s, n, 512)
	}
	power := map[byte]int{'k': 1, 'K': 1, 'm': 2, 'M': 2, 'g': 3, 'G': 3, 't': 4, 'T': 4, 'p': 5, 'P': 5, 'e': 6, 'E': 6}[unit[0]]
	if power == 0 {
		return 0, fmt.Errorf("%q is %w", s, errBadSize)
	}
	mult := uint64(1)
	for range power {
		mult *= base
	}
	return checkSize(s, n, mult)
}

func checkSize(s string, n, mult uint64) (uint64, error) {
	hi, lo := bits.Mul64(n, mult)
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	return lo, nil
}
