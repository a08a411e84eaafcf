package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/plain"
)

// openDevice opens DEVICE, refusing directories with a clear message.
func openDevice(path string, readOnly bool) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, deviceErr(fmt.Errorf("device %s does not exist or access denied", path))
	}
	if st.IsDir() {
		return nil, deviceErr(fmt.Errorf("device %s is a directory", path))
	}
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, deviceErr(fmt.Errorf("cannot open device %s: %w", path, err))
	}
	return f, nil
}

// checkDevice refuses, in cryptsetup's words (exit 4), a DEVICE that is
// missing, a directory or does not open, before a verb opens it through
// the library. A URI device is checked when it is dialled.
func checkDevice(path string, readOnly bool) error {
	if blkcrypt.IsURI(path) {
		return nil
	}
	f, err := openDevice(path, readOnly)
	if err == nil {
		f.Close()
	}
	return err
}

// bindRequest is what a format's binding reads: the verb's open flags,
// the device and the type the library named or detected, and where the
// key buffers it reads go to be wiped.
type bindRequest struct {
	env       *Env
	f         *openFlags
	path, typ string
	mode      bindMode
	wipe      *[][]byte
	// secretOptional: the library found the volume opens without a
	// secret (OpenOptions.SecretOptional).
	secretOptional bool
}

// bindMode is what the options are for: opening, or `dump`, which needs a
// secret only with --dump-volume-key (TCRYPT always: its header is found
// only with the passphrase) and where --volume-key-file is where the key
// goes, not a key to use.
type bindMode int

const (
	bindOpen    bindMode = iota
	bindDump             // dump without --dump-volume-key
	bindDumpKey          // dump --dump-volume-key
)

// keep records a key buffer to be wiped when the verb ends.
func (r *bindRequest) keep(b ...[]byte) { *r.wipe = append(*r.wipe, b...) }

// readSecret is keyFileFlags.read of the request's flags; the key file of
// --type plain and loopaes is the key itself.
func (r *bindRequest) readSecret(prompt string) ([]byte, bool, error) {
	return r.f.keyFileFlags.read(r.env, r.f.Type == "plain" || r.f.Type == "loopaes", prompt)
}

// typeBinding is the command line's half of the format registry
// (blkcrypt.VolumeTypes): it turns the flags of one --type into that
// format's typed options and secrets in o, once.
type typeBinding func(r *bindRequest, o *blkcrypt.OpenOptions) error

// typeBindings has an entry for every --type the registry opens; "luks"
// is either LUKS version.
var typeBindings = map[string]typeBinding{
	"luks":      secretOptions,
	"luks1":     secretOptions,
	"luks2":     secretOptions,
	"plain":     plainOptions,
	"loopaes":   loopAESOptions,
	"tcrypt":    tcryptOpenOptions,
	"bitlk":     secretOptions,
	"fvault2":   secretOptions,
	"integrity": integrityOptions, // type_integrity.go
}

// typeDumpers print a format's metadata for `dump --type T` (or a detected
// type) through blkcrypt.DumpVolume; LUKS is dumped by runDump through the
// LUKS handle.
var typeDumpers = map[string]func(env *Env, o *typedDumpOptions, path string) error{
	"tcrypt":    dumpType,
	"bitlk":     dumpType,
	"fvault2":   dumpType,
	"loopaes":   dumpType,
	"integrity": dumpType,
}

// detectTypeContext names the format whose signature path carries, or
// ""; it gives up on a URI device when ctx ends (a signal must not wait on an NBD server that stalls).
func detectTypeContext(ctx context.Context, path string) string {
	if blkcrypt.IsURI(path) {
		return detectURI(ctx, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	t, _ := blkcrypt.DetectType(ctx, f)
	return t
}

// volumeType is the type the flags ask for: --type, or what the header
// (--header, else the --partition of DEVICE, else DEVICE) carries.
func (f *openFlags) volumeType(ctx context.Context, part *string, path string) string {
	if f.Type != "" {
		return f.Type
	}
	if f.Header != "" {
		return detectTypeContext(ctx, f.Header)
	}
	if part != nil {
		return partitionType(ctx, part, path)
	}
	return detectTypeContext(ctx, path)
}

// openVolume unlocks DEVICE (its partition part when not nil) per the
// flags and returns the decrypted view: the flags become
// blkcrypt.OpenOptions, the library does the rest. adjust, when not nil,
// has the last say on the options (serve --reencrypt adds its
// reencryption).
func openVolume(ctx context.Context, env *Env, f *openFlags, part *string, path string, readOnly bool, adjust func(*blkcrypt.OpenOptions)) (*blkcrypt.Volume, error) {
	if err := checkDevice(path, true); err != nil {
		return nil, err
	}
	dp, err := partitionFlag{part}.openPartition(ctx, path, readOnly) // nil without --partition
	if err != nil {
		return nil, err
	}
	v, err := unlockOn(ctx, env, f, path, dp, readOnly, adjust)
	if err != nil && dp != nil {
		dp.Close()
	}
	return v, err
}

// checkType refuses a --type the registry does not know.
func checkType(typ string) error {
	if _, ok := typeBindings[typ]; typ != "" && !ok {
		return usageErr("unknown or unsupported --type %q", typ)
	}
	return nil
}

// readWriteFlag settles a read-only-by-default format (BitLocker,
// FileVault 2, TCRYPT): writable with --TYPE-read-write, read-only (and
// said so when writes were wanted) without.
func (f *openFlags) readWriteFlag(env *Env, typ string, readOnly bool, o *blkcrypt.OpenOptions) {
	vt, ok := blkcrypt.LookupVolumeType(typ)
	if !ok || !vt.ReadOnlyByDefault || readOnly {
		return
	}
	if f.readWrite(typ) {
		o.ReadWrite = true
		return
	}
	if env != nil {
		fmt.Fprintf(env.Stderr, "%s volume opened read-only (add --%s-read-write to allow writes).\n", strings.ToUpper(typ), typ)
	}
	o.ReadOnly = true
}

// openOptions are the library's options for the flags: the type, the
// header, the key slot, and the Prepare step that binds the format's
// flags and secrets once the library knows the type (tokenPass, when not
// nil, is the passphrase of a LUKS2 token, used instead of asking).
// prepared is set to the type Prepare was called for.
func (f *openFlags) openOptions(env *Env, path string, readOnly bool, tokenPass []byte, wipe *[][]byte, prepared *string) blkcrypt.OpenOptions {
	o := blkcrypt.OpenOptions{Type: f.Type, ReadOnly: readOnly, Header: f.Header, Keyslot: slotPtr(f.KeySlot)}
	if vt, ok := blkcrypt.LookupVolumeType(f.Type); ok && vt.ReadOnlyByDefault && !readOnly && f.readWrite(f.Type) {
		o.ReadWrite = true // before the open: a writable volume takes the exclusive lock
	}
	o.Prepare = func(t string, q *blkcrypt.OpenOptions) error {
		if prepared != nil {
			*prepared = t
		}
		bind, ok := typeBindings[t]
		if !ok {
			return usageErr("unknown or unsupported --type %q", t)
		}
		f.readWriteFlag(env, t, readOnly, q)
		if tokenPass != nil && strings.HasPrefix(t, "luks") {
			q.Passphrase = tokenPass
			return nil
		}
		return bind(&bindRequest{env: env, f: f, path: path, typ: t, mode: bindOpen, wipe: wipe, secretOptional: q.SecretOptional}, q)
	}
	return o
}

// unlockOn unlocks DEVICE, or the partition dp of it when dp is not nil
// (the Volume then owns dp and closes it). The library opens the device
// once, names or detects its type (the one detection policy), and then
// asks, through Prepare, for that type's options and secrets.
func unlockOn(ctx context.Context, env *Env, f *openFlags, path string, dp *diskPartition, readOnly bool, adjust func(*blkcrypt.OpenOptions)) (*blkcrypt.Volume, error) {
	typ := f.Type
	if err := checkType(typ); err != nil {
		return nil, err
	}
	var wipe [][]byte
	defer func() { wipeAll(wipe) }()
	// The token step (verbs_token.go), before the device is opened and
	// locked: a passphrase a LUKS2 token yields is used instead of asking.
	tf := f.tokenFlags
	var tokenPass []byte
	switch {
	case typ != "" && !strings.HasPrefix(typ, "luks"):
		if tf.TokenOnly {
			return nil, usageErr("--token-only: a --type %s volume has no tokens", typ)
		}
	case blkcrypt.IsURI(path) && !tf.asked():
		// A URI device is not dialled twice for tokens nobody asked for.
	default:
		keyGiven := f.KeyFile != "" || f.VolumeKeyFile != ""
		pass, err := tokenPassphrase(ctx, env, tf, path, f.Header, dp, keyGiven)
		if err != nil {
			return nil, err
		}
		if pass != nil {
			tokenPass = pass
			wipe = append(wipe, pass)
		}
	}
	prepared := ""
	o := f.openOptions(env, path, readOnly, tokenPass, &wipe, &prepared)
	if adjust != nil {
		adjust(&o)
	}
	var v *blkcrypt.Volume
	var err error
	if dp != nil {
		v, err = blkcrypt.OpenDevice(ctx, dp, o)
	} else {
		v, err = blkcrypt.Open(ctx, path, o)
	}
	if err != nil {
		return nil, openErr(ctx, path, dp, typ, prepared, err)
	}
	if n := v.Note(); n != "" {
		fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", n)
	}
	return v, nil
}

// openErr words an Open error as cryptsetup does: a device the library's
// detection found no signature on is "not a valid LUKS device" (exit 4),
// as is a LUKS header missing where --type names LUKS.
func openErr(ctx context.Context, path string, part *diskPartition, named, prepared string, err error) error {
	var x *exitError
	if errors.As(err, &x) {
		return err // from Prepare: reading the secrets
	}
	if named == "" && prepared == "" {
		// Open ended before the type was known: opening or detecting.
		switch {
		case errors.Is(err, blkcrypt.ErrNoHeader) && part != nil:
			return deviceErr(fmt.Errorf("%s is not a valid LUKS, BitLocker or FileVault device (use --type plain for plain dm-crypt)", part))
		case errors.Is(err, blkcrypt.ErrNoHeader):
			return deviceErr(fmt.Errorf("device %s is not a valid LUKS device (use --type plain for plain dm-crypt)", path))
		case errors.Is(err, luks1.ErrReencryptInProgress):
			return fmt.Errorf("device %s: %w", path, err)
		case errors.Is(err, blkcrypt.ErrBusy), errors.Is(err, blkcrypt.ErrInvalidOptions),
			errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
			return err
		case ctx.Err() != nil, blkcrypt.IsURI(path):
			// exitCode sorts a URI's errors: a malformed one is a usage
			// error, a device that fails the wrong device.
			return fmt.Errorf("device %s: %w", path, err)
		}
		// The header could not be read (an I/O error): the device's fault.
		return deviceErr(fmt.Errorf("device %s: %w", path, err))
	}
	if errors.Is(err, blkcrypt.ErrNotLUKS) && strings.HasPrefix(named, "luks") {
		return deviceErr(fmt.Errorf("device %s is not a valid LUKS device: %w", path, err))
	}
	return err
}

// secretOptions reads the key for LUKS, BitLocker and FileVault 2:
// --volume-key-file, or the passphrase (prompt, stdin or --key-file). A
// BitLocker volume with a clear key needs none unless a key file is given.
// A dump needs a secret only for --dump-volume-key, and its
// --volume-key-file is where the key goes.
func secretOptions(r *bindRequest, o *blkcrypt.OpenOptions) error {
	if r.mode == bindDump {
		return nil
	}
	if vk := r.f.VolumeKeyFile; vk != "" && r.mode == bindOpen {
		key, err := readVolumeKeyFile(vk, -1)
		if err != nil {
			return err
		}
		r.keep(key)
		o.VolumeKey = key
		return nil
	}
	if r.f.KeyFile == "" && r.secretOptional {
		return nil
	}
	prompt := "Enter passphrase: "
	if r.typ == "bitlk" || r.typ == "fvault2" {
		prompt = fmt.Sprintf("Enter passphrase for %s: ", r.path)
	}
	secret, fromFile, err := r.readSecret(prompt)
	if err != nil {
		return err
	}
	r.keep(secret)
	if fromFile && r.typ == "bitlk" {
		o.KeyFiles = [][]byte{secret} // a startup key, or a password in a file
		return nil
	}
	o.Passphrase = secret
	return nil
}

// sectors is an optional count of 512-byte sectors, refused when negative.
func sectors(name string, v *int64) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 0 {
		return 0, usageErr("--%s must not be negative", name)
	}
	return uint64(*v), nil
}

// keyBits is --key-size in bytes: def bits when absent, else a positive
// multiple of 8 bits no larger than max. Every verb that takes the flag
// checks it here.
func keyBits(v *int64, def, max int64) (int, error) {
	if v == nil {
		return int(def / 8), nil
	}
	if bits := *v; bits <= 0 || bits%8 != 0 || bits > max {
		return 0, usageErr("invalid --key-size %d (bits, a positive multiple of 8, at most %d)", bits, max)
	}
	return int(*v / 8), nil
}

func plainOptions(r *bindRequest, o *blkcrypt.OpenOptions) error {
	f := r.f
	po := blkcrypt.PlainOptions{Cipher: f.Cipher, Hash: f.Hash, SectorSize: 512, LargeIV: f.IVLargeSectors}
	if f.SectorSize != nil {
		po.SectorSize = int(*f.SectorSize)
	}
	var err error
	if po.Offset, err = sectors("offset", f.Offset); err != nil {
		return err
	}
	if po.Skip, err = sectors("skip", f.Skip); err != nil {
		return err
	}
	if po.Size, err = sectors("size", f.Size); err != nil {
		return err
	}
	if po.KeySize, err = keyBits(f.KeySize, plain.DefaultKeySize*8, 4096); err != nil {
		return err
	}
	o.Plain = po
	if vk := f.VolumeKeyFile; vk != "" {
		key, err := readVolumeKeyFile(vk, po.KeySize)
		if err != nil {
			return err
		}
		r.keep(key)
		o.VolumeKey = key
		return nil
	}
	secret, fromFile, err := r.readSecret("Enter passphrase: ")
	if err != nil {
		return err
	}
	r.keep(secret)
	if fromFile && f.KeyFile != "-" {
		// A key file given by path is the key itself (cryptsetup ignores
		// --hash for it).
		if len(secret) < po.KeySize {
			return usageErr("key file holds %d bytes, the cipher needs %d", len(secret), po.KeySize)
		}
		o.KeyFiles = [][]byte{secret}
		return nil
	}
	h := po.Hash
	if h == "" {
		h = plain.DefaultHash
	}
	if fromFile && h == "plain" && len(secret) > po.KeySize {
		secret = secret[:po.KeySize]
	}
	if _, err := plain.Key(h, nil, po.KeySize); err != nil {
		return usageErr("%v", err)
	}
	o.Passphrase = secret
	return nil
}

// dumpType prints the metadata of a TCRYPT, BitLocker, FileVault 2 or
// loop-AES volume through blkcrypt.DumpVolume: the type's flags bound as
// for opening, --dump-volume-key and its --volume-key-file.
func dumpType(env *Env, d *typedDumpOptions, path string) error {
	ctx := context.Background()
	if err := checkDevice(path, true); err != nil {
		return err
	}
	typ := d.volumeType(ctx, d.Partition, path)
	bind, ok := typeBindings[typ]
	if !ok {
		return usageErr("unknown or unsupported --type %q", typ)
	}
	var wipe [][]byte
	defer func() { wipeAll(wipe) }()
	o := blkcrypt.DumpVolumeOptions{Open: blkcrypt.OpenOptions{Type: typ, Header: d.Header}, VolumeKey: d.DumpVolumeKey}
	mode := bindDump
	if o.VolumeKey {
		o.VolumeKeyFile, mode = d.VolumeKeyFile, bindDumpKey
	}
	o.Open.Prepare = func(t string, q *blkcrypt.OpenOptions) error {
		return bind(&bindRequest{env: env, f: &d.openFlags, path: path, typ: t, mode: mode, wipe: &wipe, secretOptional: q.SecretOptional}, q)
	}
	err := blkcrypt.DumpVolume(ctx, path, env.Stdout, o)
	if err != nil && errors.Is(err, blkcrypt.ErrNoHeader) && !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
		return deviceErr(fmt.Errorf("device %s is not a valid %s device", path, strings.ToUpper(typ)))
	}
	return err
}

// rwFlags are read's and write's: the volume, where in it, and progress.
type rwFlags struct {
	openFlags
	stackFlags
	OffsetBytes *byteSize `flag:"offset-bytes" help:"read/write: byte offset into the decrypted volume" def:"0"`
	progressFlags
	batchFlag
}

// span is --offset-bytes and --length (-1 when absent), refused when
// negative.
func (f *rwFlags) span(length *byteSize) (off, n int64, err error) {
	n = -1
	if f.OffsetBytes != nil {
		off = int64(*f.OffsetBytes)
	}
	if length != nil {
		n = int64(*length)
	}
	if off < 0 || (length != nil && n < 0) {
		return 0, 0, usageErr("--offset-bytes and --length must not be negative")
	}
	return off, n, nil
}

// readOptions: the volume as any verb opens it, the span read, and where
// it goes.
type readOptions struct {
	rwFlags
	Length *byteSize `flag:"length" help:"read/write: number of bytes (write: exactly that many of the input)" def:"to the end of the volume"`
	Output string    `flag:"output" short:"o" help:"read: output file" def:"stdout"`
}

// runRead writes decrypted bytes to stdout or --output.
func runRead(ctx context.Context, env *Env, o *readOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	off, length, err := o.span(o.Length)
	if err != nil {
		return err
	}
	if err := checkOutput(env, o.Output, o.inputs(dev)); err != nil {
		return err
	}
	v, err := openTarget(ctx, env, &o.openFlags, o.stackFlags, dev, true)
	if err != nil {
		return err
	}
	defer v.Close()
	if off > v.Size() {
		return usageErr("--offset-bytes %d is past the end of the %d-byte volume", off, v.Size())
	}
	if length < 0 {
		length = v.Size() - off
	}
	if length > v.Size()-off {
		return usageErr("--offset-bytes %d + --length %d is past the end of the %d-byte volume", off, length, v.Size())
	}
	out, err := createOutput(env, o.Output)
	if err != nil {
		return err
	}
	defer out.abort()
	bw := bufio.NewWriterSize(out, 1<<20)
	pr := o.start(env, o.Batch, dev, "read", length)
	if _, err := io.Copy(bw, withProgress(ctxReader{ctx, io.NewSectionReader(v, off, length)}, pr)); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := out.commit(); err != nil {
		return err
	}
	pr.finish()
	return nil
}

// writeOptions: the volume, the span written, and where the data comes
// from.
type writeOptions struct {
	rwFlags
	Length *byteSize `flag:"length" help:"read/write: number of bytes (write: exactly that many of the input)" def:"all of the input"`
	Input  string    `flag:"input" short:"i" help:"write: input file" def:"stdin"`
}

// runWrite encrypts stdin or --input into the volume at --offset-bytes:
// all of it, or --length bytes (see writeLength).
func runWrite(ctx context.Context, env *Env, o *writeOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	off, length, err := o.span(o.Length)
	if err != nil {
		return err
	}
	var r io.Reader = env.Stdin
	inputSize := int64(-1)
	if in := o.Input; in != "" && in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return usageErr("cannot open input: %v", err)
		}
		defer f.Close()
		r = f
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			inputSize = st.Size()
		}
	}
	if o.KeyFile == "-" && r == env.Stdin {
		return usageErr("--key-file - and data on stdin cannot both be used; give the data with --input")
	}
	v, err := openTarget(ctx, env, &o.openFlags, o.stackFlags, dev, false)
	if err != nil {
		return err
	}
	n, err := writeLength(length, inputSize, off, v.Size())
	var pr *progress
	if err == nil {
		pr = o.start(env, o.Batch, dev, "written", n)
		err = copyIntoVolume(ctx, v, withProgress(r, pr), off, n)
	}
	if cerr := v.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		pr.finish()
	}
	return err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
