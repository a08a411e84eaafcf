package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// errSocketBusy is returned (with exit 5) when --listen unix:PATH names
// something that is not a stale socket: a live server's socket, a file, a
// directory, a symlink. Only a socket nobody accepts on is replaced.
var errSocketBusy = errors.New("path busy")

// listenUnix listens on a Unix socket at path. A socket left by a server
// that died (connect is refused) is removed first; anything else at path
// is left alone and reported busy. The check, the removal and the bind run
// under an exclusive flock on the socket's directory, so two blkcrypt
// servers starting together cannot both take the same stale path, nor one
// remove the socket the other has just bound.
func listenUnix(path string) (net.Listener, error) {
	unlock, err := lockDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, busyErr(fmt.Errorf("%w: %s appeared while starting", errSocketBusy, path))
	}
	return l, err
}

func busyErr(err error) error { return &exitError{ExitBusy, err} }

// removeStaleSocket removes path only if it is a socket that refuses
// connections. Lstat, so a symlink is never followed to its target.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if st.Mode()&fs.ModeSocket == 0 {
		return busyErr(fmt.Errorf("%w: %s is %s, not a socket; it is left as it is", errSocketBusy, path, kindOf(st)))
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return busyErr(fmt.Errorf("%w: another server is listening on %s", errSocketBusy, path))
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		// EACCES, a timeout (a live server with a full backlog): not
		// known to be stale, so not ours to remove.
		return busyErr(fmt.Errorf("%w: cannot tell whether %s is in use (%v); it is left as it is", errSocketBusy, path, unwrapSyscall(err)))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

func kindOf(st fs.FileInfo) string {
	m := st.Mode()
	switch {
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "something else"
}

// unwrapSyscall drops net.OpError's "dial unix PATH:" prefix, which would
// repeat the path.
func unwrapSyscall(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

// listenErr keeps a busy path's exit code (5); any other listen failure is
// a wrong --listen (1).
func listenErr(addr string, err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return &exitError{ee.code, fmt.Errorf("cannot listen on %s: %w", addr, ee.err)}
	}
	return usageErr("cannot listen on %s: %v", addr, err)
}
