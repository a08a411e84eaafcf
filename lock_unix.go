//go:build unix

package blkcrypt

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// lockDir is where cryptsetup keeps its block-device lock files
// (DEFAULT_LUKS2_LOCK_PATH), one per device: L_<major>:<minor>.
var lockDir = "/run/cryptsetup"

// lockFile takes the lock cryptsetup takes for f: a flock on the file
// itself for a regular file, on /run/cryptsetup/L_<major>:<minor> for a
// block device. Exclusive for read-write, shared for read-only, and never
// waiting: a held lock is ErrBusy at once. The returned release drops it
// (closing f drops a lock on f itself too).
func lockFile(f *os.File, exclusive bool) (release func(), err error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if err := flock(f, how); err != nil {
			return nil, busyErr(f.Name(), err, uint64(st.Dev), st.Ino)
		}
		return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN) }, nil
	case unix.S_IFBLK:
		name := filepath.Join(lockDir, fmt.Sprintf("L_%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))))
		if err := os.MkdirAll(lockDir, 0o700); err != nil {
			// Without the lock directory (no root) cryptsetup cannot lock
			// either; do not refuse what it would allow.
			return func() {}, nil
		}
		lf, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return func() {}, nil
		}
		if err := flock(lf, how); err != nil {
			var lst unix.Stat_t
			unix.Fstat(int(lf.Fd()), &lst)
			lf.Close()
			return nil, busyErr(f.Name(), err, uint64(lst.Dev), lst.Ino)
		}
		return func() { lf.Close() }, nil
	}
	return func() {}, nil // character devices, pipes: nothing to share
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}

// busyErr says who holds the lock when /proc/locks tells.
func busyErr(name string, err error, dev, ino uint64) error {
	if err != unix.EWOULDBLOCK {
		return fmt.Errorf("locking %s: %w", name, err)
	}
	if who := lockHolder(dev, ino); who != "" {
		return fmt.Errorf("%w: %s is locked by %s", ErrBusy, name, who)
	}
	return fmt.Errorf("%w: %s is locked by another open", ErrBusy, name)
}

// lockHolder finds the process holding a flock on the inode in
// /proc/locks ("1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF").
func lockHolder(dev, ino uint64) string {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return ""
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[5] != want {
			continue
		}
		pid := fs[4]
		if pid == fmt.Sprint(os.Getpid()) {
			return "this process"
		}
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		if c := strings.TrimSpace(string(comm)); c != "" {
			return fmt.Sprintf("process %s (%s)", pid, c)
		}
		return "process " + pid
	}
	return ""
}
