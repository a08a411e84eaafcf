package blkcrypt

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// Volume types, as Type returns them and OpenOptions.Type takes them: the
// names of the format registry (see VolumeTypes).
const (
	TypeLUKS1   = "luks1"
	TypeLUKS2   = "luks2"
	TypePlain   = "plain"
	TypeTCRYPT  = "tcrypt"
	TypeBITLK   = "bitlk"
	TypeFVAULT2 = "fvault2"
	TypeLoopAES = "loopaes"
)

// OpenOptions choose how a volume is unlocked. The zero value of every
// field is the safe default: detect the type, try every keyslot, open
// read-write the formats whose metadata blkcrypt writes as cryptsetup does
// (LUKS, plain, loop-AES) and read-only the others (BitLocker, FileVault 2,
// TrueCrypt/VeraCrypt) unless ReadWrite asks.
type OpenOptions struct {
	// Type is one of the Type constants, "luks" for either LUKS version,
	// or "" to detect the formats with a signature (LUKS, BitLocker,
	// FileVault 2, dm-integrity), as cryptsetup and the CLI do. plain, loopaes and
	// tcrypt (TrueCrypt/VeraCrypt) have none and must be named.
	Type string
	// Passphrase is the passphrase (LUKS, TCRYPT, FileVault 2), the
	// password or recovery password (BitLocker), or the passphrase that
	// plain mode hashes.
	Passphrase []byte
	// ReadOnly opens the device read-only and takes a shared lock instead
	// of an exclusive one.
	ReadOnly bool
	// ReadWrite allows writes to a BitLocker, FileVault 2 or
	// TrueCrypt/VeraCrypt volume, which open read-only otherwise (the
	// CLI's --bitlk-read-write, --fvault2-read-write, --tcrypt-read-write).
	// It contradicts ReadOnly.
	ReadWrite bool
	// KeyFiles are the contents of key files: a LUKS passphrase
	// (KeyFiles[0]), TrueCrypt/VeraCrypt key files (all of them), a
	// BitLocker startup key (.BEK), a loop-AES key file (decrypted), or a
	// plain-mode key used as it is (its first Plain.KeySize bytes).
	KeyFiles [][]byte
	// VolumeKey, when set, is used instead of a passphrase: for LUKS it
	// must match the header digest.
	VolumeKey []byte
	// Keyslot restricts a LUKS unlock to one keyslot; nil tries every
	// usable one (see Slot).
	Keyslot *int
	// Header is a detached header file (LUKS, TCRYPT); the data stays on
	// the device. HeaderDevice is the same for OpenDevice.
	Header       string
	HeaderDevice io.ReaderAt
	// TCRYPT chooses the TrueCrypt/VeraCrypt header and search.
	TCRYPT TCRYPTOptions
	// Plain is the geometry of a plain dm-crypt volume.
	Plain PlainOptions
	// LoopAES is the geometry of a loop-AES volume.
	LoopAES LoopAESOptions
	// Integrity is the algorithms and keys of a standalone dm-integrity
	// volume (registry_integrity.go).
	Integrity IntegrityOptions
	// Prepare, when set, is called once the volume type is known (named
	// by Type or detected) and before any key is derived, with that type:
	// it may fill in the secrets and that type's options, so that a
	// program asks only for what the format needs (a passphrase, a
	// loop-AES key file, nothing for a clear-key BitLocker volume). The
	// device is already open by then: changes to Type, Header,
	// HeaderDevice and Prepare are ignored, and ReadOnly may only be set.
	// An error it returns is Open's.
	Prepare func(typ string, o *OpenOptions) error
	// SecretOptional is set by Open (and DumpVolume) before Prepare is
	// called, when the volume opens without any secret: a BitLocker volume
	// with a clear key (its protection suspended). Prepare then need not
	// ask for one. Its value on entry is ignored.
	SecretOptional bool
	// Reencrypt, for LUKS2, starts a reencryption with these options (or
	// resumes the one in progress, which must agree with them) and keeps
	// the reencryption lock; Volume.Reencrypt then runs it while the
	// volume is in use. Slot is taken from Keyslot. A LUKS2 volume with a
	// reencryption in progress opens without it too, following the
	// segments as cryptsetup's open does (see reencrypt_online.go).
	Reencrypt *ReencryptOptions
}

// Slot returns a pointer to n, for OpenOptions.Keyslot.
func Slot(n int) *int { return &n }

// TCRYPTOptions are cryptsetup's --type tcrypt parameters.
type TCRYPTOptions struct {
	PIM                    uint32 // VeraCrypt's personal iterations multiplier
	Hidden, System, Backup bool   // which header (--tcrypt-hidden, …)
	NoVeraCrypt            bool   // --disable-veracrypt
	// Hash and Cipher narrow the search to matching derivations and chains.
	Hash, Cipher string
}

// LoopAESOptions are cryptsetup's --type loopaes parameters.
type LoopAESOptions struct {
	Cipher  string // base cipher; "" means aes
	Hash    string // overrides the hash of the key lines
	KeySize int    // bytes per key part; 0 means 16
	// Offset is where the data starts and Skip the IV offset, in 512-byte
	// sectors; Skip nil means Offset, as in cryptsetup.
	Offset uint64
	Skip   *uint64
	Size   uint64 // 512-byte sectors; 0 means to the end of the device
}

// Open unlocks the volume at path (a file, a block device, or a URI of a
// registered scheme: see RegisterURIScheme) and returns its
// decrypted view. The device, and a detached header, are locked as
// cryptsetup locks them (exclusive for read-write, shared for read-only)
// until the Volume is closed; a held lock is ErrBusy. Open returns
// promptly with ctx's error when ctx ends during key derivation or a header
// search. For a URI device ctx stays with the device: when it ends, each
// request in flight gets a short grace (an NBD client's 500 ms) and fails
// after it, and the device does not reconnect.
func Open(ctx context.Context, path string, o OpenOptions) (*Volume, error) {
	if err := checkOpen(&o); err != nil {
		return nil, err
	}
	if IsURI(path) {
		return openURIVolume(ctx, path, o)
	}
	dev, hpath, err := openPath(ctx, path, &o)
	if err != nil {
		return nil, err
	}
	v, err := open(ctx, dev, dev, path, hpath, o)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return v, nil
}

// openPath opens the device at path (a file, a block device or a URI) and
// the detached header o.Header, both locked as Open locks them, and sets
// o.HeaderDevice. Closing the device releases both. hpath is the header's
// path, "" for none (or for o.Header naming the device itself).
func openPath(ctx context.Context, path string, o *OpenOptions) (dev Device, hpath string, err error) {
	if IsURI(path) {
		u, err := OpenURI(ctx, path, o.ReadOnly)
		if err != nil {
			return nil, "", err
		}
		d := &uriDevice{URIDevice: u}
		if o.Header != "" {
			if d.also, d.alsoRelease, err = openLocked(o.Header, o.ReadOnly); err != nil {
				u.Close()
				return nil, "", err
			}
			o.HeaderDevice = d.also
		}
		return d, o.Header, nil
	}
	f, release, err := openLocked(path, o.ReadOnly)
	if err != nil {
		return nil, "", err
	}
	d := &fileDevice{File: f, release: release}
	if o.Header != "" && sameFile(f, o.Header) {
		o.Header = "" // the device itself: its lock covers the header
	}
	if o.Header != "" {
		// A detached header is only read here, but is locked like the
		// device so that no header change runs while the volume is open.
		if d.also, d.alsoRelease, err = openLocked(o.Header, o.ReadOnly); err != nil {
			d.Close()
			return nil, "", err
		}
		o.HeaderDevice = d.also
	}
	return d, o.Header, nil
}

// sameFile reports whether path names the file f has open.
func sameFile(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// openLocked opens path and takes its lock.
func openLocked(path string, readOnly bool) (*os.File, func(), error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if st.IsDir() {
		return nil, nil, fmt.Errorf("%s is a directory: %w", path, errNotDevice)
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, nil, err
	}
	release, err := lockFile(f, !readOnly)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, release, nil
}

// errNotDevice is a path that names neither a file nor a block device (a
// directory); it matches ErrInvalidOptions.
var errNotDevice = volspec.Sub("not a file or block device", volspec.ErrInvalidOptions)

// fileDevice is a locked data file, and the detached header file (also
// locked) kept until Close. Close unlocks before it closes: a child process
// forked at that moment shares the open file, and would otherwise hold the
// lock until its exec.
type fileDevice struct {
	*os.File
	release     func()
	also        *os.File
	alsoRelease func()
}

func (d *fileDevice) Close() error {
	d.release()
	err := d.File.Close()
	if d.also != nil {
		d.alsoRelease()
		d.also.Close()
	}
	return err
}

// OpenDevice is Open over a device already open. It uses the device's
// Sync and Close when it has them, and finds its size through a
// Size() int64 or Size() (int64, error) method, Stat, or Seek; an *os.File
// works as it is. The device is opened read-only when it is not an
// io.WriterAt. OpenDevice takes no lock: the caller owns the device.
func OpenDevice(ctx context.Context, dev io.ReaderAt, o OpenOptions) (*Volume, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: a nil device", ErrInvalidOptions)
	}
	if err := checkOpen(&o); err != nil {
		return nil, err
	}
	d := adaptDevice(dev)
	if d.w == nil {
		o.ReadOnly = true
	}
	var vd Device = d
	if f, ok := dev.(*os.File); ok {
		vd = f
	}
	return open(ctx, vd, dev, "", "", o)
}

// adapted gives any io.ReaderAt the Device methods.
type adapted struct {
	r io.ReaderAt
	w io.WriterAt
}

func adaptDevice(dev io.ReaderAt) *adapted {
	a := &adapted{r: dev}
	a.w, _ = dev.(io.WriterAt)
	return a
}

func (a *adapted) ReadAt(p []byte, off int64) (int, error) { return a.r.ReadAt(p, off) }

func (a *adapted) WriteAt(p []byte, off int64) (int, error) {
	if a.w == nil {
		return 0, ErrReadOnly
	}
	return a.w.WriteAt(p, off)
}

func (a *adapted) Sync() error {
	if s, ok := a.r.(interface{ Sync() error }); ok {
		return s.Sync()
	}
	return nil
}

func (a *adapted) Close() error {
	if c, ok := a.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// DeviceSize finds the size of a device: a Size() int64 or
// Size() (int64, error) method, an *os.File's (a regular file's size, a
// block device's end), Stat for a regular file, or seeking to the end.
func DeviceSize(dev any) (int64, error) {
	switch d := dev.(type) {
	case *os.File:
		return luksutil.File{File: d}.Size()
	case *fileDevice:
		return luksutil.File{File: d.File}.Size()
	case *adapted:
		return DeviceSize(d.r)
	case interface{ Size() (int64, error) }:
		return d.Size()
	case interface{ Size() int64 }:
		return d.Size(), nil
	}
	if s, ok := dev.(interface{ Stat() (os.FileInfo, error) }); ok {
		if st, err := s.Stat(); err == nil && st.Mode().IsRegular() {
			return st.Size(), nil
		}
	}
	if s, ok := dev.(io.Seeker); ok {
		return s.Seek(0, io.SeekEnd)
	}
	return 0, fmt.Errorf("%w: cannot tell the size of a %T (give it a Size method)", ErrInvalidOptions, dev)
}

// newCall measures the device and the detached header of an Open or a
// DumpVolume. raw is the device as the caller gave it (for its size);
// path and hpath name the device and header when known.
func newCall(ctx context.Context, dev Device, raw any, path, hpath string, o OpenOptions) (*openCall, error) {
	size, err := DeviceSize(raw)
	if err != nil {
		return nil, err
	}
	c := &openCall{dev: dev, size: size, path: path, hpath: hpath, header: o.HeaderDevice, o: o}
	if o.HeaderDevice != nil {
		if c.hsize, err = DeviceSize(o.HeaderDevice); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// open opens through the registry: the type named or detected, its
// read-only default, Prepare, then the format's opener.
func open(ctx context.Context, dev Device, raw any, path, hpath string, o OpenOptions) (*Volume, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := newCall(ctx, dev, raw, path, hpath, o)
	if err != nil {
		return nil, err
	}
	f, err := c.resolve(ctx)
	if err != nil {
		return nil, err
	}
	var v *Volume
	if f.open != nil {
		v, err = f.open(ctx, c)
	} else {
		v, err = f.openSpec(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	if f != anyLUKS {
		v.typ = f.Name
	}
	return v, nil
}

// checkOpen refuses contradicting options and, for a type named in
// advance, settles read-only before the device is opened (and so takes
// the shared lock).
func checkOpen(o *OpenOptions) error {
	if o.ReadOnly && o.ReadWrite {
		return fmt.Errorf("%w: ReadOnly and ReadWrite together", ErrInvalidOptions)
	}
	if readOnlyByDefault(o.Type) && !o.ReadWrite {
		o.ReadOnly = true
	}
	if o.Type == TypePlain && o.Prepare == nil && !hasSecret(*o) {
		return errPlainSecret
	}
	return nil
}

// build makes the Volume a format described: one Volume whose sector map
// is the format's cipher, or its cascade (which dm-crypt stacks as one
// device per cipher; here one read-modify-write and one lock per request
// serve all layers).
func build(dev Device, s *volspec.Spec, readOnly bool) (*Volume, error) {
	if s.ReadOnly {
		readOnly = true
	}
	var d Device = dev
	if s.Wrap != nil {
		d = s.Wrap(dev)
	}
	m, err := newCascade(s.Layers)
	if err == nil {
		var v *Volume
		if v, err = newVolume(d, m, s.Offset, s.Size, readOnly); err == nil {
			v.note = s.Note
			return v, nil
		}
	}
	for _, c := range s.Layers {
		c.Wipe()
	}
	return nil, err
}

// Type is the volume's type, spelled as the Type constants.
func (v *Volume) Type() string {
	if v == nil {
		return ""
	}
	return v.typ
}

// Note is a warning the format left about the volume (a guessed TrueCrypt
// system partition, a BitLocker size mismatch), or "".
func (v *Volume) Note() string {
	if v == nil {
		return ""
	}
	return v.note
}

// Verify that every alias still has the method sets the root relies on.
var (
	_ = luks1.Read
	_ = luks2.Read
)

// LockedFile is a file opened with OpenFileLocked; Close drops the lock.
type LockedFile struct {
	*os.File
	release func()
}

// Close unlocks and closes the file.
func (f *LockedFile) Close() error {
	f.release()
	return f.File.Close()
}

// OpenFileLocked opens path as Open does, read-only or read-write, and takes
// the same lock (ErrBusy when it is held): for tools that change a header
// (add-key, kill-slot, header-restore) so that they exclude a running
// volume and cryptsetup.
func OpenFileLocked(path string, readOnly bool) (*LockedFile, error) {
	f, release, err := openLocked(path, readOnly)
	if err != nil {
		return nil, err
	}
	return &LockedFile{f, release}, nil
}
