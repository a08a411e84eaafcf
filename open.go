package blkcrypt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"

	// The formats register their openers with internal/volspec.
	_ "github.com/blkcrypt/blkcrypt/bitlk"
	_ "github.com/blkcrypt/blkcrypt/fvault2"
	_ "github.com/blkcrypt/blkcrypt/loopaes"
	_ "github.com/blkcrypt/blkcrypt/tcrypt"
)

// Volume types, as Type returns them and OpenOptions.Type takes them.
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
	// FileVault 2), as cryptsetup and the CLI do. plain, loopaes and
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
	f, release, err := openLocked(path, o.ReadOnly)
	if err != nil {
		return nil, err
	}
	var hf *os.File
	var hrelease func()
	if o.Header != "" && sameFile(f, o.Header) {
		o.Header = "" // the device itself: its lock covers the header
	}
	if o.Header != "" {
		// A detached header is only read here, but is locked like the
		// device so that no header change runs while the volume is open.
		if hf, hrelease, err = openLocked(o.Header, o.ReadOnly); err != nil {
			release()
			f.Close()
			return nil, err
		}
		o.HeaderDevice = hf
	}
	dev := &fileDevice{File: f, release: release, also: hf, alsoRelease: hrelease}
	v, err := open(ctx, dev, f, path, o.Header, o)
	if err != nil {
		if hf != nil {
			hrelease()
			hf.Close()
		}
		release()
		f.Close()
		return nil, err
	}
	return v, nil
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

// open dispatches on the type. raw is the device as the caller gave it
// (for its size); path and hpath name the device and header when known.
func open(ctx context.Context, dev Device, raw any, path, hpath string, o OpenOptions) (*Volume, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	size, err := DeviceSize(raw)
	if err != nil {
		return nil, err
	}
	var hsize int64
	if o.HeaderDevice != nil {
		if hsize, err = DeviceSize(o.HeaderDevice); err != nil {
			return nil, err
		}
	}
	typ := o.Type
	if typ == "" {
		meta := io.ReaderAt(dev)
		if o.HeaderDevice != nil {
			meta = o.HeaderDevice
		}
		if typ, err = DetectErr(meta); err != nil {
			return nil, err
		}
		if typ == "" {
			if marked, _ := luks1.ReencryptionInProgress(meta); marked {
				return nil, luks1.ErrReencryptInProgress
			}
			// As cryptsetup (and the CLI): a device without a signature
			// is not searched for a TrueCrypt header, which takes
			// seconds and cannot tell "no volume" from "wrong
			// passphrase", unless Type says so.
			return nil, fmt.Errorf("%w: no LUKS, BitLocker or FileVault 2 signature (plain, loop-AES and TrueCrypt/VeraCrypt have none: name their Type)", ErrNoHeader)
		}
	}
	if readOnlyByDefault(typ) && !o.ReadWrite {
		o.ReadOnly = true
	}
	var v *Volume
	switch typ {
	case "luks", TypeLUKS1, TypeLUKS2:
		v, err = openLUKS(ctx, dev, size, typ, o)
	case TypePlain:
		v, err = openPlain(dev, size, o)
	default:
		f, ok := volspec.Lookup(typ)
		if !ok {
			return nil, fmt.Errorf("%w: unknown volume type %q", ErrInvalidOptions, typ)
		}
		r := &volspec.Request{
			Dev: dev, DevSize: size, Path: path,
			Header: o.HeaderDevice, HeaderSize: hsize, HeaderPath: hpath,
			Passphrase: o.Passphrase, KeyFiles: o.KeyFiles, VolumeKey: o.VolumeKey, ReadOnly: o.ReadOnly,
			PIM: o.TCRYPT.PIM, Hidden: o.TCRYPT.Hidden, System: o.TCRYPT.System, Backup: o.TCRYPT.Backup,
			NoVeraCrypt: o.TCRYPT.NoVeraCrypt, Hash: o.TCRYPT.Hash, Cipher: o.TCRYPT.Cipher,
		}
		if typ == TypeLoopAES {
			l := o.LoopAES
			r.Hash, r.Cipher, r.KeySize, r.Offset, r.Size = l.Hash, l.Cipher, l.KeySize, l.Offset, l.Size
			if l.Skip != nil {
				r.Skip, r.SkipSet = *l.Skip, true
			}
		}
		var s *volspec.Spec
		if s, err = f.Open(ctx, r); err == nil {
			v, err = build(dev, s, o.ReadOnly)
		}
	}
	if err != nil {
		return nil, err
	}
	if typ == "luks" {
		typ = v.typ
	}
	v.typ = typ
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
	if o.Type == TypePlain && len(o.Passphrase) == 0 && len(o.KeyFiles) == 0 && len(o.VolumeKey) == 0 {
		return fmt.Errorf("%w: plain mode needs a passphrase, key file or volume key", ErrInvalidOptions)
	}
	return nil
}

// readOnlyByDefault names the formats blkcrypt opens read-only unless
// asked: their metadata (BitLocker's and FileVault 2's logs, a TrueCrypt
// hidden volume inside its outer one) can be damaged by writes that
// cryptsetup users do not expect.
func readOnlyByDefault(typ string) bool {
	return typ == TypeBITLK || typ == TypeFVAULT2 || typ == TypeTCRYPT
}

// Detect names the format whose signature dev carries ("luks1", "luks2",
// "bitlk", "fvault2"), or "" when none does or dev cannot be read.
func Detect(dev io.ReaderAt) string {
	t, _ := DetectErr(dev)
	return t
}

// DetectErr is Detect that tells a device it cannot read from one without
// a signature: a read that fails (other than at the end of a device
// shorter than the 64 KiB it looks at) is returned, so that an I/O error
// is never reported as a missing header.
func DetectErr(dev io.ReaderAt) (string, error) {
	head := make([]byte, 64<<10)
	n, err := dev.ReadAt(head, 0)
	// io.ReaderAt's end of the device is io.EOF itself; a wrapped EOF is a
	// cause (an NBD connection that ended mid-reply), not the end.
	if err != nil && err != io.EOF { //nolint:errorlint
		return "", fmt.Errorf("reading the header: %w", err)
	}
	head = head[:n]
	if len(head) >= 8 && bytes.Equal(head[:6], []byte("LUKS\xba\xbe")) {
		switch head[7] {
		case 1:
			return TypeLUKS1, nil
		case 2:
			return TypeLUKS2, nil
		}
	}
	for _, f := range volspec.Formats() {
		if f.Detect != nil && f.Detect(head) {
			return f.Name, nil
		}
	}
	return "", nil
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
