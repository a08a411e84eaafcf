// Package volspec is the hand-over between the format packages (tcrypt,
// bitlk, fvault2, loopaes) and the root package: a format reads its
// metadata, derives its keys and describes the volume as a Spec; the root
// package builds the Volume from it. Formats register an Opener here at
// init, so they never import the root package and the root package never
// needs their internals.
package volspec

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/blkcrypt/blkcrypt/sector"
)

// Shared sentinel errors. The root package re-exports them, and every
// format wraps them, so errors.Is works whatever the format.
var (
	ErrWrongPassphrase = errors.New("no key available with this passphrase")
	ErrNoHeader        = errors.New("no known volume header found")
	ErrUnsupported     = errors.New("unsupported volume feature")
	ErrCorrupt         = errors.New("corrupt volume metadata")
	ErrReadOnly        = errors.New("volume is read-only")
	ErrInvalidOptions  = errors.New("invalid options")
	ErrBusy            = errors.New("device is in use")
	ErrDeviceTooSmall  = errors.New("device is too small")
)

// Sub returns a sentinel error with its own message that matches each of
// parents under errors.Is, so a format keeps its wording and the shared
// meaning.
func Sub(msg string, parents ...error) error { return &subError{msg, parents} }

type subError struct {
	msg     string
	parents []error
}

func (e *subError) Error() string { return e.msg }

func (e *subError) Is(target error) bool {
	for _, p := range e.parents {
		if target == p {
			return true
		}
	}
	return false
}

// Device is the ciphertext store under a volume. It has the same method set
// as blkcrypt.Device, so values convert both ways.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// Spec describes a volume for the root package to build.
type Spec struct {
	// Layers are the sector ciphers, the one that reads the device first.
	// More than one is a cascade, stacked as dm-crypt devices are.
	Layers []*sector.Cipher
	// Offset and Size are the ciphertext range on the (wrapped) device, in
	// bytes.
	Offset, Size int64
	// Wrap, when set, presents the device as the ciphertext the first
	// layer reads (BitLocker's non-contiguous layout). The result owns dev.
	Wrap func(dev Device) Device
	// ReadOnly means the format allows no writes with these options.
	ReadOnly bool
	// Note is a warning for the user (a guessed geometry), or "".
	Note string
}

// Wipe clears the keys of every layer; for error paths before the Volume
// owns them.
func (s *Spec) Wipe() {
	for _, c := range s.Layers {
		c.Wipe()
	}
}

// Request is what an Opener (or a Dumper) is given.
type Request struct {
	// Dev is the data device, DevSize its size; Path its name when known.
	Dev     io.ReaderAt
	DevSize int64
	Path    string
	// Header is a detached header (nil: the header is on Dev).
	Header     io.ReaderAt
	HeaderSize int64
	HeaderPath string

	Passphrase []byte
	KeyFiles   [][]byte
	VolumeKey  []byte
	ReadOnly   bool

	// Options are the format's own options, converted once by the root
	// package from its typed options (*tcrypt.Options for TCRYPT,
	// loopaes.Options for loop-AES); nil means the format's defaults.
	Options any
}

// Opener unlocks a volume and describes it. It returns promptly with the
// context's error when ctx ends during key derivation or a header search.
type Opener func(ctx context.Context, r *Request) (*Spec, error)

// DumpRequest says what a Dumper prints.
type DumpRequest struct {
	// W receives the text.
	W io.Writer
	// Device names the data device in the dump (its path), HeaderDevice
	// the detached header ("" for none).
	Device, HeaderDevice string
	// VolumeKey asks for the volume key too, as cryptsetup's
	// --dump-volume-key: it needs the secret (or Request.VolumeKey).
	VolumeKey bool
	// SaveKey, when set with VolumeKey, is given the key before anything
	// is printed (cryptsetup's --volume-key-file); KeyFile names where it
	// went, for the formats that print that instead of the key.
	SaveKey func(key []byte) error
	KeyFile string
}

// Dumper prints a volume's metadata as cryptsetup's <type>Dump does.
type Dumper func(ctx context.Context, r *Request, d *DumpRequest) error

// Format is one registered format.
type Format struct {
	Name string
	// Detect recognises the format's signature in the first 64 KiB of a
	// device; nil for formats without one.
	Detect func(head []byte) bool
	Open   Opener
	// Dump prints the metadata; nil when the format has none to print.
	Dump Dumper
}

var registry struct {
	sync.Mutex
	m map[string]Format
}

// Register adds a format; the format packages call it from init.
func Register(f Format) {
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = map[string]Format{}
	}
	registry.m[f.Name] = f
}

// Lookup returns the format called name.
func Lookup(name string) (Format, bool) {
	registry.Lock()
	defer registry.Unlock()
	f, ok := registry.m[name]
	return f, ok
}
