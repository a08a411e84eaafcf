// Package outfile writes a command's output file safely: never over one
// of its inputs, and, for a regular file, under a temporary name renamed
// into place only when everything was written, so that a failed or
// interrupted command leaves the old file as it was. Decrypted data goes
// into a new file with mode 0600.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Input is a file the command reads (a device, a header, a key file).
type Input struct{ What, Path string }

// precious reports whether writing over the file loses data: a regular file
// or a block device. Writing to /dev/null or a terminal that is also an
// input destroys nothing.
func precious(st fs.FileInfo) bool {
	return st.Mode().IsRegular() || st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0
}

// Check refuses an output that is the same file (same device and inode,
// through any symlink or hard link; the same block device through two
// nodes) as one of the inputs. It runs before anything is opened for
// writing. out "" or "-" is stdout, which counts too when it is a file:
// `read img >> img` would append plaintext to the image.
func Check(out string, stdout io.Writer, inputs []Input) error {
	var ost fs.FileInfo
	name := out
	if out == "" || out == "-" {
		f, ok := stdout.(*os.File)
		if !ok {
			return nil
		}
		st, err := f.Stat()
		if err != nil {
			return nil
		}
		ost, name = st, "stdout"
	} else {
		st, err := os.Stat(out)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cannot use output %s: %w", out, err)
		}
		if st.IsDir() {
			return fmt.Errorf("output %s is a directory", out)
		}
		ost = st
	}
	if !precious(ost) {
		return nil
	}
	for _, in := range inputs {
		st, err := os.Stat(in.Path)
		if err != nil {
			continue // the command reports a missing input itself
		}
		if os.SameFile(ost, st) || sameBlockDevice(ost, st) {
			return fmt.Errorf("output %s is the %s %s (the same file); refusing to overwrite it", name, in.What, in.Path)
		}
	}
	return nil
}

// File is an output being written. A regular file is written to a
// temporary file beside it and renamed into place by Commit. Pipes,
// character and block devices are written in place; they cannot be
// renamed over.
type File struct {
	w     io.Writer
	f     *os.File // nil when writing to stdout
	tmp   string   // the temporary file, renamed to final by Commit
	final string
	// inPlace: an existing regular file written without truncating (its
	// directory does not let us create the temporary file); Commit cuts it
	// to the bytes written.
	inPlace bool
	n       int64
}

func (o *File) Write(b []byte) (int, error) {
	n, err := o.w.Write(b)
	o.n += int64(n)
	return n, err
}

// stdoutAliases name the process's own stdout: write to it as stdout, not
// as a file to replace (the shell may have opened it for appending).
var stdoutAliases = map[string]bool{"-": true, "/dev/stdout": true, "/dev/fd/1": true, "/proc/self/fd/1": true}

// fdPath reports whether path names an open file descriptor, which the
// caller's shell opened: renaming over its target would detach it.
func fdPath(path string) bool {
	if strings.HasPrefix(path, "/dev/fd/") || path == "/dev/stderr" {
		return true
	}
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return false
	}
	_, fd, ok := strings.Cut(rest, "/")
	return ok && strings.HasPrefix(fd, "fd/")
}

// Create opens out for writing (stdout for "" and "-"). Call Check
// first.
func Create(out string, stdout io.Writer) (*File, error) {
	if out == "" || stdoutAliases[out] {
		return &File{w: stdout}, nil
	}
	st, err := os.Stat(out)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cannot create output: %w", err)
	}
	if exists && (!st.Mode().IsRegular() || fdPath(out)) {
		// A device, a FIFO or an open descriptor (/dev/fd/N): written in
		// place, never truncated or replaced.
		f, err := os.OpenFile(out, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot open output: %w", err)
		}
		return &File{w: f, f: f}, nil
	}
	// Replace the file a symlink points to, not the symlink.
	final := out
	if exists {
		if final, err = filepath.EvalSymlinks(out); err != nil {
			return nil, fmt.Errorf("cannot create output: %w", err)
		}
	}
	// Decrypted data: a new file is private (0600) until its owner says
	// otherwise; an existing one keeps its mode.
	tmp, err := os.CreateTemp(filepath.Dir(final), "."+filepath.Base(final)+".blkcrypt-*")
	if err != nil {
		if !exists {
			return nil, fmt.Errorf("cannot create output: %w", err)
		}
		f, err := os.OpenFile(final, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot open output: %w", err)
		}
		return &File{w: f, f: f, final: final, inPlace: true}, nil
	}
	if exists {
		if err := tmp.Chmod(st.Mode().Perm()); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("cannot create output: %w", err)
		}
	}
	return &File{w: tmp, f: tmp, tmp: tmp.Name(), final: final}, nil
}

// Commit makes the written bytes the output: the temporary file is synced
// and renamed over the target.
func (o *File) Commit() error {
	if o.f == nil {
		return nil
	}
	if o.inPlace {
		if err := o.f.Truncate(o.n); err != nil {
			o.f.Close()
			return fmt.Errorf("truncating output: %w", err)
		}
	}
	if o.tmp != "" || o.inPlace {
		if err := o.f.Sync(); err != nil {
			o.Abort()
			return fmt.Errorf("syncing output: %w", err)
		}
	}
	if err := o.f.Close(); err != nil {
		o.Abort()
		return fmt.Errorf("closing output: %w", err)
	}
	if o.tmp == "" {
		return nil
	}
	if err := os.Rename(o.tmp, o.final); err != nil {
		os.Remove(o.tmp)
		return fmt.Errorf("replacing output: %w", err)
	}
	o.tmp = ""
	// The rename is durable only once the directory is synced.
	if d, err := os.Open(filepath.Dir(o.final)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort drops a temporary file; the target is left as it was. Safe after
// Commit.
func (o *File) Abort() {
	if o.f != nil {
		o.f.Close()
	}
	if o.tmp != "" {
		os.Remove(o.tmp)
		o.tmp = ""
	}
}
