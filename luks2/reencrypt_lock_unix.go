//go:build unix

package luks2

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"golang.org/x/sys/unix"
)

// ReencryptLockDir is where cryptsetup keeps its named locks.
var ReencryptLockDir = "/run/cryptsetup"

// ErrReencryptBusy means another process (cryptsetup or blkcrypt) holds
// the reencryption lock; it matches ErrBusy.
var ErrReencryptBusy = volspec.Sub("another process is reencrypting this volume", volspec.ErrBusy)

// LockReencryption takes cryptsetup's reencryption lock for the volume
// uuid: an exclusive flock on ReencryptLockDir/LN_LUKS2-reencryption-UUID,
// so blkcrypt and cryptsetup never reencrypt one volume at once. Where the
// directory does not exist (no cryptsetup locking on this host) it takes
// nothing and returns a no-op.
func LockReencryption(uuid string) (func(), error) {
	if _, err := checkUUIDForLock(uuid); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(ReencryptLockDir); err != nil || !fi.IsDir() {
		return func() {}, nil
	}
	path := filepath.Join(ReencryptLockDir, "LN_LUKS2-reencryption-"+uuid)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the reencryption lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrReencryptBusy
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// checkUUIDForLock refuses a UUID that could escape the lock directory.
func checkUUIDForLock(uuid string) (string, error) {
	if uuid == "" || len(uuid) > UUIDLen {
		return "", fmt.Errorf("%w: bad UUID for the reencryption lock", ErrInvalidOptions)
	}
	for _, c := range uuid {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return "", fmt.Errorf("%w: bad UUID for the reencryption lock", ErrInvalidOptions)
		}
	}
	return uuid, nil
}
