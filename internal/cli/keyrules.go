package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt"
)

// emptyKeyFile is an empty regular key file. Where the key file is a
// passphrase, cryptsetup tries it as the empty passphrase, which opens no
// keyslot (exit 2), so it unwraps to ErrWrongPassphrase; verbs that set a
// new passphrase turn it back into a parameter error with newSecretErr.
type emptyKeyFile struct{ path string }

func (e *emptyKeyFile) Error() string {
	return fmt.Sprintf("key file %s is empty: %v", e.path, blkcrypt.ErrWrongPassphrase)
}
func (e *emptyKeyFile) Unwrap() error { return blkcrypt.ErrWrongPassphrase }

// keyFileIsStream reports whether cryptsetup's stream rule applies to the
// key file: stdin ("-") and anything that is not a regular file (a pipe,
// /dev/null, a FIFO). For those, no byte at all is "Nothing to read on
// input" (exit 1); a regular file that is empty, or whose
// --keyfile-offset is exactly its size, is an empty passphrase instead.
func keyFileIsStream(kf string, st os.FileInfo) bool {
	return kf == "-" || st == nil || !st.Mode().IsRegular()
}

// emptyKeyFileErr is the error for an empty regular key file. For plain
// and loop-AES (rawKey) the file is the key itself, so an empty one is the wrong
// parameter (exit 1), as cryptsetup cannot read the key size from it; for
// the passphrase formats it is a passphrase that opens no keyslot (exit 2).
func emptyKeyFileErr(rawKey bool, kf string) error {
	if rawKey {
		return usageErr("key file %s is empty", kf)
	}
	return &exitError{ExitPermission, &emptyKeyFile{kf}}
}

// keyReadErr keeps keyinput's errors parameter errors (exit 1), as
// cryptsetup's, with the message cryptsetup gives for empty input.
func keyReadErr(err error) error {
	return usageErr("%w", err)
}

// newSecretErr maps readSecret's errors for a new passphrase: an empty key
// file cannot be checked against anything, so it is a wrong parameter
// (exit 1) rather than a failed unlock.
func newSecretErr(err error) error {
	var e *emptyKeyFile
	if errors.As(err, &e) {
		return usageErr("empty passphrase: the key file is empty")
	}
	return err
}
