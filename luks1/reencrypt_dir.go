package luks1

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ReencryptFile is one of the files a LUKS1 reencryption keeps beside the
// device (the log, the two header copies, blkcrypt's block journal).
type ReencryptFile interface {
	Device
	Close() error
}

// ReencryptDir is the directory holding those files. cryptsetup uses the
// current directory; DirFS(".") is that.
type ReencryptDir interface {
	// Create makes a new file of the given size, failing with an error
	// matching fs.ErrExist when one exists (O_CREAT|O_EXCL, as cryptsetup).
	Create(name string, perm fs.FileMode, size int64) (ReencryptFile, error)
	// Open opens an existing file for reading and writing; a missing one
	// gives an error matching fs.ErrNotExist.
	Open(name string) (ReencryptFile, error)
	// Remove deletes a file; a missing one is not an error.
	Remove(name string) error
	// Sync makes the directory's entries durable.
	Sync() error
}

// DirFS returns the ReencryptDir for a directory of the file system.
func DirFS(path string) ReencryptDir { return osDir(path) }

type osDir string

func (d osDir) Create(name string, perm fs.FileMode, size int64) (ReencryptFile, error) {
	f, err := os.OpenFile(filepath.Join(string(d), name), os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing %s: %w", name, err)
	}
	return File{File: f}, nil
}

func (d osDir) Open(name string) (ReencryptFile, error) {
	f, err := os.OpenFile(filepath.Join(string(d), name), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return File{File: f}, nil
}

func (d osDir) Remove(name string) error {
	err := os.Remove(filepath.Join(string(d), name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (d osDir) Sync() error {
	f, err := os.Open(string(d))
	if err != nil {
		return err
	}
	defer f.Close()
	// Some file systems refuse fsync on a directory; the entries are then
	// as durable as that file system makes them.
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
