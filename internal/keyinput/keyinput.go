// Package keyinput reads passphrases and key files the way cryptsetup does:
// a key file is raw bytes (optionally after --keyfile-offset and cut at
// --keyfile-size), while a passphrase typed or piped without --key-file ends
// at the first newline.
package keyinput

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// MaxKeyFile is cryptsetup's default upper bound on key file size (8 MiB).
const MaxKeyFile = 8 << 20

// ErrKeyFile wraps every key-file problem: too short, too large, unreadable,
// an offset past the end.
var ErrKeyFile = errors.New("key file")

// ErrNothingToRead is returned, with Options.RequireInput, when the source
// yields no byte at all. cryptsetup makes this a parameter error ("Nothing to
// read on input.", exit 1) for stdin and other streams, while an empty
// passphrase line ("\n") or an empty regular key file is a passphrase that
// is tried and fails (exit 2).
var ErrNothingToRead = errors.New("nothing to read on input")

// Options are the cryptsetup key-file flags.
type Options struct {
	Offset int64 // --keyfile-offset: bytes to skip
	Size   int64 // --keyfile-size: bytes to read at most (0: no limit)
	// Exact requires Size bytes to be present (cryptsetup fails when a key
	// file is shorter than --keyfile-size).
	Exact bool
	// RequireInput makes a source that yields no byte (after Offset) fail
	// with ErrNothingToRead instead of giving an empty secret. The caller
	// sets it for stdin and non-regular key files, where cryptsetup does.
	RequireInput bool
}

// ReadKeyFile reads raw key material: every byte counts, newlines included,
// up to Size bytes (or MaxKeyFile when Size is 0). The caller wipes it.
func ReadKeyFile(r io.Reader, o Options) ([]byte, error) {
	if err := skip(r, o); err != nil {
		return nil, err
	}
	limit := o.Size
	if limit <= 0 {
		limit = MaxKeyFile
	}
	buf := make([]byte, 0, min(limit, 4096))
	chunk := make([]byte, 4096)
	defer clear(chunk)
	for int64(len(buf)) < limit {
		n, err := r.Read(chunk[:min(int64(len(chunk)), limit-int64(len(buf)))])
		buf = appendWipe(buf, chunk[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			clear(buf)
			return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
		}
	}
	if len(buf) == 0 && o.RequireInput {
		return nil, ErrNothingToRead
	}
	if o.Size > 0 && o.Exact && int64(len(buf)) < o.Size {
		clear(buf)
		return nil, fmt.Errorf("%w: shorter than the requested %d bytes", ErrKeyFile, o.Size)
	}
	if o.Size <= 0 && int64(len(buf)) >= MaxKeyFile {
		if n, _ := r.Read(chunk[:1]); n > 0 {
			clear(buf)
			return nil, fmt.Errorf("%w: larger than %d bytes", ErrKeyFile, MaxKeyFile)
		}
	}
	return buf, nil
}

// ReadPassphrase reads a passphrase from a pipe: up to the first newline
// (dropped), after Offset bytes, at most Size bytes.
func ReadPassphrase(r io.Reader, o Options) ([]byte, error) {
	if err := skip(r, o); err != nil {
		return nil, err
	}
	limit := o.Size
	if limit <= 0 {
		limit = 512 // cryptsetup's DEFAULT_PASSPHRASE_SIZE_MAX
	}
	br := bufio.NewReaderSize(r, 64)
	var buf []byte
	for n := 0; int64(len(buf)) < limit; n++ {
		c, err := br.ReadByte()
		if err == io.EOF {
			if n == 0 && o.RequireInput {
				return nil, ErrNothingToRead
			}
			break
		}
		if err != nil {
			clear(buf)
			return nil, fmt.Errorf("reading passphrase: %w", err)
		}
		if c == '\n' {
			break
		}
		buf = append(buf, c)
	}
	return buf, nil
}

// appendWipe appends and wipes any backing array it outgrows, so key
// material is not left behind in freed memory.
func appendWipe(dst, src []byte) []byte {
	if len(dst)+len(src) <= cap(dst) {
		return append(dst, src...)
	}
	n := make([]byte, len(dst), 2*(len(dst)+len(src)))
	copy(n, dst)
	clear(dst)
	return append(n, src...)
}

// skip moves past o.Offset bytes. On a seekable source an offset past the
// end is an error, as cryptsetup's "Cannot seek to requested keyfile
// offset"; an offset exactly at the end leaves an empty key.
func skip(r io.Reader, o Options) error {
	n := o.Offset
	if n <= 0 {
		return nil
	}
	if s, ok := r.(io.Seeker); ok {
		if cur, err := s.Seek(0, io.SeekCurrent); err == nil {
			if end, err := s.Seek(0, io.SeekEnd); err == nil {
				if n > end-cur {
					return fmt.Errorf("%w: cannot seek to offset %d, the file holds %d bytes", ErrKeyFile, n, end-cur)
				}
				if _, err := s.Seek(cur+n, io.SeekStart); err == nil {
					return nil
				}
			}
			// Seek to the end failed or moved us: back to where we were,
			// then read past the offset.
			if _, err := s.Seek(cur, io.SeekStart); err != nil {
				return fmt.Errorf("%w: %w", ErrKeyFile, err)
			}
		}
	}
	if m, err := io.CopyN(io.Discard, r, n); err != nil {
		if m == 0 && errors.Is(err, io.EOF) && o.RequireInput {
			return ErrNothingToRead
		}
		if errors.Is(err, io.EOF) && o.RequireInput {
			return fmt.Errorf("%w: input ended after %d of the %d bytes of --keyfile-offset: %w", ErrKeyFile, m, n, ErrNothingToRead)
		}
		return fmt.Errorf("%w: cannot skip %d bytes: %w", ErrKeyFile, n, err)
	}
	return nil
}
