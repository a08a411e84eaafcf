package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// write --length works like dd's count in bytes: exactly that many bytes of
// input are written, the rest of the input is not read. An input shorter
// than --length is an error (exit 1), refused before anything is written
// when the input's size is known (a regular file); from a stream the bytes
// that did arrive are written, and the message says how many.

// writeLength decides how many input bytes `write` writes, before anything
// is written: length is --length (-1 when not given), inputSize the size
// of a regular input file (-1 for a stream). It returns -1 for a stream of
// unknown length. Whatever is known not to fit is refused here, so a
// refused write changes nothing.
func writeLength(length, inputSize, off, volSize int64) (int64, error) {
	if off > volSize {
		return 0, usageErr("--offset-bytes %d is past the end of the %d-byte volume; nothing was written", off, volSize)
	}
	n := inputSize
	if length >= 0 {
		if inputSize >= 0 && inputSize < length {
			return 0, usageErr("--length %d is more than the %d-byte input; nothing was written", length, inputSize)
		}
		n = length
	}
	if n >= 0 && n > volSize-off {
		what := "input of"
		if length >= 0 {
			what = "--length"
		}
		return 0, usageErr("%s %d bytes at offset %d does not fit the %d-byte volume; nothing was written", what, n, off, volSize)
	}
	return n, nil
}

// copyIntoVolume writes r into v from off: n bytes exactly, or with n < 0
// everything up to EOF. A stream larger than the room left fills the
// volume to its end and fails saying so; every error after the first write
// says how many bytes were written, and where.
func copyIntoVolume(ctx context.Context, v interface {
	io.WriterAt
	Size() int64
}, r io.Reader, off, n int64) error {
	if n >= 0 {
		r = io.LimitReader(r, n)
	}
	size := v.Size()
	buf := make([]byte, 1<<20)
	pos := off
	written := func() string {
		if pos == off {
			return "nothing was written"
		}
		return fmt.Sprintf("%d bytes were written at offset %d (up to %d)", pos-off, off, pos)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted; %s: %w", written(), err)
		}
		m, rerr := io.ReadFull(r, buf)
		if m > 0 {
			chunk := buf[:m]
			over := pos+int64(m) > size
			if over {
				chunk = chunk[:size-pos]
			}
			if len(chunk) > 0 {
				if _, err := v.WriteAt(chunk, pos); err != nil {
					return fmt.Errorf("writing at offset %d (%s before): %w", pos, written(), err)
				}
				pos += int64(len(chunk))
			}
			if over {
				return usageErr("input does not fit: the volume ends at %d bytes; %s, the rest of the input was not", size, written())
			}
		}
		if rerr == io.EOF || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("reading input (%s): %w", written(), rerr)
		}
	}
	if n >= 0 && pos-off < n {
		return usageErr("input ended after %d of the %d bytes of --length; %s", pos-off, n, written())
	}
	return nil
}
