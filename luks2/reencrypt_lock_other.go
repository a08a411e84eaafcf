//go:build !unix

package luks2

import "github.com/blkcrypt/blkcrypt/internal/volspec"

// ReencryptLockDir is where cryptsetup keeps its named locks (Linux only).
var ReencryptLockDir = "/run/cryptsetup"

// ErrReencryptBusy means another process holds the reencryption lock; it
// matches ErrBusy.
var ErrReencryptBusy = volspec.Sub("another process is reencrypting this volume", volspec.ErrBusy)

// LockReencryption takes nothing where cryptsetup does not run.
func LockReencryption(uuid string) (func(), error) { return func() {}, nil }
