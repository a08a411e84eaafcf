package blkcrypt

import (
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// The shared errors. Every format's own sentinel errors (luks1.ErrNotLUKS,
// bitlk.ErrWrongPassphrase, tcrypt.ErrNoHeader, …) match the one of the
// same meaning under errors.Is, so a caller can handle any format alike.
// ErrClosed, ErrReadOnly and ErrOutOfRange (the volume layer's) complete
// the set.
var (
	// ErrWrongPassphrase means no keyslot or key protector opened with the
	// passphrase, key files or volume key given. For TrueCrypt/VeraCrypt
	// it is also what a device that holds no such volume gives, because
	// the two cannot be told apart.
	ErrWrongPassphrase = volspec.ErrWrongPassphrase
	// ErrNoHeader means the device holds no header of the format asked for
	// (or, when detecting, of any format with a signature).
	ErrNoHeader = volspec.ErrNoHeader
	// ErrUnsupported means a valid volume that uses something blkcrypt
	// cannot do (an unknown cipher, reencryption in progress, …).
	ErrUnsupported = volspec.ErrUnsupported
	// ErrCorrupt means metadata that is damaged or fails validation.
	ErrCorrupt = volspec.ErrCorrupt
	// ErrInvalidOptions means options that are out of range, contradict
	// each other or cannot be honoured on this path.
	ErrInvalidOptions = volspec.ErrInvalidOptions
	// ErrBusy means another process (or another open in this one) holds the
	// device or header: an exclusive lock for read-write opens, a shared
	// one for read-only opens.
	ErrBusy = volspec.ErrBusy
	// ErrDeviceTooSmall means the device cannot hold the header or data.
	ErrDeviceTooSmall = volspec.ErrDeviceTooSmall
	// ErrNotLUKS means the device has no LUKS header; it matches
	// ErrNoHeader.
	ErrNotLUKS = luksutil.ErrNotLUKS
)
