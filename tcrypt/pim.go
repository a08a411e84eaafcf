package tcrypt

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// The errors of ParsePIM, worded as cryptsetup words them; each is
// ErrInvalid (and the shared ErrInvalidOptions).
var (
	ErrPIMSyntax = volspec.Sub("invalid PIM value: parse error", ErrInvalid, volspec.ErrInvalidOptions)
	ErrPIMRange  = volspec.Sub("invalid PIM value: outside of range", ErrInvalid, volspec.ErrInvalidOptions)
	ErrPIMZero   = volspec.Sub("invalid PIM value: 0", ErrInvalid, volspec.ErrInvalidOptions)
)

// ParsePIM reads a VeraCrypt PIM (personal iterations multiplier) as
// typed at cryptsetup's --veracrypt-query-pim prompt: a decimal number
// from 1 to 2^32-1, white space around it ignored. 0, which means "the
// default iterations" to Options.PIM, is not a PIM anyone types.
func ParsePIM(b []byte) (uint32, error) {
	s := string(bytes.TrimSpace(b))
	if s == "" {
		return 0, ErrPIMSyntax
	}
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange), err == nil && n > 1<<32-1:
		return 0, ErrPIMRange
	case err != nil:
		return 0, ErrPIMSyntax
	case n == 0:
		return 0, ErrPIMZero
	}
	return uint32(n), nil
}

// ReadKeyfiles reads every key file of paths with ReadKeyfile, in order.
// On an error the ones already read are wiped and none is returned; the
// caller wipes the result.
func ReadKeyfiles(paths []string) ([][]byte, error) {
	var out [][]byte
	for _, p := range paths {
		b, err := ReadKeyfile(p)
		if err != nil {
			for _, k := range out {
				clear(k)
			}
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}
