package blkcrypt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/blkcrypt/blkcrypt/bitlk"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/loopaes"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/tcrypt"

	// The other formats register their openers and dumpers with
	// internal/volspec (bitlk too, imported above for its clear key).
	_ "github.com/blkcrypt/blkcrypt/fvault2"
)

// The format registry: every format Open opens, in one table. Each entry
// says how the format is named (OpenOptions.Type, cryptsetup's --type),
// whether it is detected (by signature only, cryptsetup's policy: plain,
// loop-AES and TCRYPT are never guessed), whether it opens read-only by
// default, and how it is opened and dumped. Its typed options
// (TCRYPTOptions, LoopAESOptions, PlainOptions, IntegrityOptions) are converted once, here,
// into what the format package takes. Open, OpenDevice, DetectType and
// DumpVolume all go through it, and so does the command line.

// VolumeType describes one format blkcrypt opens.
type VolumeType struct {
	// Name is the type as OpenOptions.Type, Volume.Type and cryptsetup's
	// --type spell it ("luks1", "tcrypt", …). OpenOptions.Type also takes
	// "luks" for either LUKS version.
	Name string
	// Description names the format for people ("TrueCrypt/VeraCrypt").
	Description string
	// Signature reports whether the format is detected: only formats
	// with a signature are, when OpenOptions.Type is "".
	Signature bool
	// ReadOnlyByDefault formats open read-only unless OpenOptions.ReadWrite
	// asks for writes.
	ReadOnlyByDefault bool
	// Dump reports whether DumpVolume prints this format (plain has no
	// metadata to print).
	Dump bool
}

// volumeFormat is a registry entry: the public description and the
// functions behind it.
type volumeFormat struct {
	VolumeType
	// open unlocks the volume; dump prints its metadata (nil: none).
	open func(ctx context.Context, c *openCall) (*Volume, error)
	dump func(ctx context.Context, c *openCall, d *volspec.DumpRequest, o DumpVolumeOptions) error
	// spec names the internal/volspec format the entry delegates to
	// (detection, opening, dumping), and options converts the typed
	// options for it.
	spec    string
	options func(o *OpenOptions) any
	// secretOptional reports whether the volume whose metadata meta holds
	// opens without any secret (nil: never).
	secretOptional func(meta io.ReaderAt) bool
}

// openCall is one Open or DumpVolume on a device: the data device and its
// size, the detached header when there is one, their names when known, and
// the options.
type openCall struct {
	dev          Device
	size         int64
	path, hpath  string
	header       io.ReaderAt
	hsize        int64
	o            OpenOptions
	resolvedType string
}

// meta is where the metadata is read: the detached header, or the device.
func (c *openCall) meta() io.ReaderAt {
	if c.header != nil {
		return c.header
	}
	return c.dev
}

// request is the volspec request of the call for format f.
func (c *openCall) request(f *volumeFormat) *volspec.Request {
	r := &volspec.Request{
		Dev: c.dev, DevSize: c.size, Path: c.path,
		Header: c.header, HeaderSize: c.hsize, HeaderPath: c.hpath,
		Passphrase: c.o.Passphrase, KeyFiles: c.o.KeyFiles, VolumeKey: c.o.VolumeKey, ReadOnly: c.o.ReadOnly,
	}
	if f.options != nil {
		r.Options = f.options(&c.o)
	}
	return r
}

// formats is the registry, in detection order.
var formats = []*volumeFormat{
	{VolumeType: VolumeType{Name: TypeLUKS1, Description: "LUKS1", Signature: true, Dump: true}, open: openLUKSCall, dump: dumpLUKS},
	{VolumeType: VolumeType{Name: TypeLUKS2, Description: "LUKS2", Signature: true, Dump: true}, open: openLUKSCall, dump: dumpLUKS},
	{VolumeType: VolumeType{Name: TypePlain, Description: "plain dm-crypt"}, open: openPlainCall},
	{VolumeType: VolumeType{Name: TypeLoopAES, Description: "loop-AES", Dump: true}, spec: "loopaes", options: loopAESRequest},
	{VolumeType: VolumeType{Name: TypeTCRYPT, Description: "TrueCrypt/VeraCrypt", ReadOnlyByDefault: true, Dump: true}, spec: "tcrypt", options: tcryptRequest},
	{VolumeType: VolumeType{Name: TypeBITLK, Description: "BitLocker", Signature: true, ReadOnlyByDefault: true, Dump: true}, spec: "bitlk", secretOptional: bitlkClearKey},
	{VolumeType: VolumeType{Name: TypeFVAULT2, Description: "FileVault 2", Signature: true, ReadOnlyByDefault: true, Dump: true}, spec: "fvault2"},
	integrityFormat, // registry_integrity.go
}

// anyLUKS is the "luks" Type: either version, whichever the header is.
var anyLUKS = &volumeFormat{VolumeType: VolumeType{Name: "luks", Description: "LUKS1 or LUKS2", Signature: true, Dump: true}, open: openLUKSCall, dump: dumpLUKS}

// VolumeTypes lists the formats blkcrypt opens, LUKS first, in the order
// detection tries those with a signature.
func VolumeTypes() []VolumeType {
	out := make([]VolumeType, len(formats))
	for i, f := range formats {
		out[i] = f.VolumeType
	}
	return out
}

// LookupVolumeType returns the format a Type names ("luks" is either
// version and has no entry of its own).
func LookupVolumeType(name string) (VolumeType, bool) {
	f := lookupFormat(name)
	if f == nil || f == anyLUKS {
		return VolumeType{}, false
	}
	return f.VolumeType, true
}

func lookupFormat(name string) *volumeFormat {
	if name == "luks" {
		return anyLUKS
	}
	for _, f := range formats {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// readOnlyByDefault reports whether the format typ names opens read-only
// unless asked: BitLocker's and FileVault 2's metadata and a TrueCrypt
// hidden volume inside its outer one can be damaged by writes cryptsetup
// users do not expect.
func readOnlyByDefault(typ string) bool {
	f := lookupFormat(typ)
	return f != nil && f.ReadOnlyByDefault
}

// DetectType names the format of dev by its signature, the one detection
// policy of Open, DumpVolume and the command line (cryptsetup's): LUKS1,
// LUKS2, BitLocker, FileVault 2 or dm-integrity (blkid's DM_integrity). A device without a signature is
// ErrNoHeader (plain, loop-AES and TrueCrypt/VeraCrypt have none and are
// never guessed: a TrueCrypt search takes seconds and cannot tell "no
// volume" from "wrong passphrase"), or luks1.ErrReencryptInProgress when a
// LUKS1 reencryption has marked it; a read that fails is that error. It
// returns ctx's error once ctx has ended.
func DetectType(ctx context.Context, dev io.ReaderAt) (string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if dev == nil {
		return "", fmt.Errorf("%w: a nil device", ErrInvalidOptions)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	typ, err := DetectErr(dev)
	if cerr := ctx.Err(); cerr != nil && err != nil {
		return "", fmt.Errorf("%w (%w)", cerr, err)
	}
	if err != nil || typ != "" {
		return typ, err
	}
	if marked, uuid := luks1.ReencryptionInProgress(dev); marked {
		return "", fmt.Errorf("%w, LUKS-%s.log", luks1.ErrReencryptInProgress, uuid)
	}
	return "", fmt.Errorf("%w: no LUKS, BitLocker, FileVault 2 or dm-integrity signature (plain, loop-AES and TrueCrypt/VeraCrypt have none: name their type)", ErrNoHeader)
}

// Detect names the format whose signature dev carries ("luks1", "luks2",
// "bitlk", "fvault2", "integrity"), or "" when none does or dev cannot be read.
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
	return detectHead(head[:n]), nil
}

// detectHead tries the signature of every format that has one, in the
// registry's order.
func detectHead(head []byte) string {
	for _, f := range formats {
		if !f.Signature {
			continue
		}
		switch {
		case f.Name == TypeLUKS1 || f.Name == TypeLUKS2:
			if len(head) >= 8 && bytes.Equal(head[:6], []byte("LUKS\xba\xbe")) &&
				(head[7] == 1 && f.Name == TypeLUKS1 || head[7] == 2 && f.Name == TypeLUKS2) {
				return f.Name
			}
		case f == integrityFormat:
			if isIntegrity(head) {
				return f.Name
			}
		case f.spec != "":
			if s, ok := volspec.Lookup(f.spec); ok && s.Detect != nil && s.Detect(head) {
				return f.Name
			}
		}
	}
	return ""
}

// resolve settles the call's type: o.Type, or what DetectType finds on
// the metadata device; then the read-only default, and o.Prepare.
func (c *openCall) resolve(ctx context.Context) (*volumeFormat, error) {
	typ := c.o.Type
	if typ == "" {
		var err error
		if typ, err = DetectType(ctx, c.meta()); err != nil {
			return nil, err
		}
	}
	f := lookupFormat(typ)
	if f == nil {
		return nil, fmt.Errorf("%w: unknown volume type %q", ErrInvalidOptions, typ)
	}
	c.resolvedType = typ
	c.o.SecretOptional = f.secretOptional != nil && f.secretOptional(c.meta())
	if prep := c.o.Prepare; prep != nil {
		keep := c.o
		if err := prep(typ, &c.o); err != nil {
			return nil, err
		}
		// The device is open: what chose it stays as it was, and only a
		// read-only volume may be asked for now.
		c.o.Type, c.o.Header, c.o.HeaderDevice, c.o.Prepare = keep.Type, keep.Header, keep.HeaderDevice, keep.Prepare
		c.o.ReadOnly = c.o.ReadOnly || keep.ReadOnly
		if c.o.ReadOnly && c.o.ReadWrite {
			return nil, fmt.Errorf("%w: ReadOnly and ReadWrite together", ErrInvalidOptions)
		}
	}
	if f.ReadOnlyByDefault && !c.o.ReadWrite {
		c.o.ReadOnly = true
	}
	if typ == TypePlain && !hasSecret(c.o) {
		return nil, errPlainSecret
	}
	return f, nil
}

// bitlkClearKey reports whether a BitLocker volume has a clear-key
// protector (its protection suspended), which opens it without a secret.
func bitlkClearKey(meta io.ReaderAt) bool {
	m, err := bitlk.Read(meta)
	return err == nil && m.HasClearKey()
}

func hasSecret(o OpenOptions) bool {
	return len(o.Passphrase) != 0 || len(o.KeyFiles) != 0 || len(o.VolumeKey) != 0
}

var errPlainSecret = fmt.Errorf("%w: plain mode needs a passphrase, key file or volume key", ErrInvalidOptions)

// openSpec opens a format of internal/volspec.
func (f *volumeFormat) openSpec(ctx context.Context, c *openCall) (*Volume, error) {
	s, ok := volspec.Lookup(f.spec)
	if !ok {
		return nil, fmt.Errorf("%w: volume type %q is not registered", ErrUnsupported, f.Name)
	}
	spec, err := s.Open(ctx, c.request(f))
	if err != nil {
		return nil, err
	}
	return build(c.dev, spec, c.o.ReadOnly)
}

func openLUKSCall(ctx context.Context, c *openCall) (*Volume, error) {
	return openLUKS(ctx, c.dev, c.size, c.resolvedType, c.o)
}

func openPlainCall(_ context.Context, c *openCall) (*Volume, error) {
	return openPlain(c.dev, c.size, c.o)
}

// tcryptRequest converts TCRYPTOptions into the search options of package
// tcrypt, once (the opener adds the secrets and the context).
func tcryptRequest(o *OpenOptions) any {
	t := o.TCRYPT
	return &tcrypt.Options{
		PIM: t.PIM, Hash: t.Hash, Cipher: t.Cipher,
		Hidden: t.Hidden, System: t.System, Backup: t.Backup, NoVeraCrypt: t.NoVeraCrypt,
	}
}

// loopAESRequest converts LoopAESOptions into package loopaes's, once:
// Skip defaults to Offset, as in cryptsetup.
func loopAESRequest(o *OpenOptions) any {
	l := o.LoopAES
	r := loopaes.Options{Cipher: l.Cipher, Hash: l.Hash, KeySize: l.KeySize, Offset: l.Offset, Skip: l.Offset, Size: l.Size, ReadOnly: o.ReadOnly}
	if l.Skip != nil {
		r.Skip = *l.Skip
	}
	return r
}

// DumpVolumeOptions choose what DumpVolume prints.
type DumpVolumeOptions struct {
	// Open names the type ("" detects it, as Open does) and carries what
	// a dump may need: the passphrase and TCRYPTOptions to find a
	// TrueCrypt/VeraCrypt header, LoopAESOptions and the key file to
	// describe a loop-AES volume, the secret for VolumeKey, a detached
	// Header. Its Prepare is called as Open calls it. The device is always
	// opened read-only, with the shared lock.
	Open OpenOptions
	// Device is the name the dump prints for the device; "" means the
	// path (DumpVolume) or "device" (DumpVolumeDevice).
	Device string
	// Format chooses luksDump's JSON forms (LUKS only).
	Format DumpFormat
	// VolumeKey prints the volume key too, as cryptsetup's
	// --dump-volume-key: it needs the secret.
	VolumeKey bool
	// VolumeKeyFile, with VolumeKey, is a file the key is written to
	// (mode 0600) before anything is printed, as cryptsetup's
	// --volume-key-file; BitLocker's dump then names the file instead of
	// printing the key, as bitlkDump does.
	VolumeKeyFile string
}

// DumpVolume prints the metadata of the volume at path (a file, a block
// device, or a URI of a registered scheme) to w as cryptsetup prints it:
// luksDump, tcryptDump, bitlkDump, fvault2Dump, integritysetup dump, and a
// description of a loop-AES volume, which has no header. The type is o.Open.Type or
// detected as Open detects it. A format without metadata (plain) is
// ErrUnsupported. Nothing is written to the device.
func DumpVolume(ctx context.Context, path string, w io.Writer, o DumpVolumeOptions) error {
	o.Open.ReadOnly, o.Open.ReadWrite = true, false
	if o.Device == "" {
		o.Device = path
	}
	dev, hpath, err := openPath(ctx, path, &o.Open)
	if err != nil {
		return err
	}
	defer dev.Close()
	return dumpOn(ctx, dev, dev, path, hpath, w, o)
}

// DumpVolumeDevice is DumpVolume over a device the caller opened (and
// o.Open.HeaderDevice for a detached header). It takes no lock.
func DumpVolumeDevice(ctx context.Context, dev io.ReaderAt, w io.Writer, o DumpVolumeOptions) error {
	if dev == nil {
		return fmt.Errorf("%w: a nil device", ErrInvalidOptions)
	}
	o.Open.ReadOnly, o.Open.ReadWrite = true, false
	if o.Device == "" {
		o.Device = "device"
	}
	return dumpOn(ctx, adaptDevice(dev), dev, "", "", w, o)
}

func dumpOn(ctx context.Context, dev Device, raw any, path, hpath string, w io.Writer, o DumpVolumeOptions) error {
	c, err := newCall(ctx, dev, raw, path, hpath, o.Open)
	if err != nil {
		return err
	}
	f, err := c.resolve(ctx)
	if err != nil {
		return err
	}
	d := &volspec.DumpRequest{W: w, Device: o.Device, HeaderDevice: hpath}
	if o.VolumeKey {
		d.VolumeKey = true
		if o.VolumeKeyFile != "" {
			d.KeyFile = o.VolumeKeyFile
			d.SaveKey = func(key []byte) error {
				if err := os.WriteFile(o.VolumeKeyFile, key, 0o600); err != nil {
					return fmt.Errorf("%w: cannot write volume key file: %w", ErrInvalidOptions, err)
				}
				return nil
			}
		}
	}
	switch {
	case f.dump != nil:
		return f.dump(ctx, c, d, o)
	case f.spec != "" && f.Dump:
		s, ok := volspec.Lookup(f.spec)
		if !ok || s.Dump == nil {
			return fmt.Errorf("%w: volume type %q is not registered", ErrUnsupported, f.Name)
		}
		return s.Dump(ctx, c.request(f), d)
	}
	return fmt.Errorf("%w: %s volumes have no metadata to dump", ErrUnsupported, f.Description)
}

// dumpLUKS is luksDump through the LUKS handle.
func dumpLUKS(ctx context.Context, c *openCall, d *volspec.DumpRequest, o DumpVolumeOptions) error {
	h, err := OpenLUKSDevice(ctx, c.dev, LUKSOptions{Type: c.resolvedType, ReadOnly: true, HeaderDevice: c.header})
	if err != nil {
		return err
	}
	defer h.Close()
	do := DumpOptions{Format: o.Format, Device: d.Device}
	if d.VolumeKey {
		pass := c.o.Passphrase
		if len(c.o.KeyFiles) > 0 {
			pass = c.o.KeyFiles[0]
		}
		key, _, err := h.VolumeKey(ctx, pass, KeyOptions{Keyslot: c.o.Keyslot, VolumeKey: c.o.VolumeKey})
		if err != nil {
			return err
		}
		defer clear(key)
		if d.SaveKey != nil {
			if err := d.SaveKey(key); err != nil {
				return err
			}
		}
		do.VolumeKey = key
	}
	return h.Dump(ctx, d.W, do)
}
