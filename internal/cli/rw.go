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

// typeBinding is the command line's half of the format registry
// (blkcrypt.VolumeTypes): it turns the flags of one --type into that
// format's typed options and secrets in o, once. dump says the options are
// for `dump`, which needs a secret only with --dump-volume-key (TCRYPT
// always: its header is found only with the passphrase) and where
// --volume-key-file is where the key goes, not a key to use.
type typeBinding func(env *Env, p *parsed, path, typ string, o *blkcrypt.OpenOptions, wipe *[][]byte, dump bool) error

// typeBindings has an entry for every --type the registry opens; "luks"
// is either LUKS version.
var typeBindings = map[string]typeBinding{
	"luks":    secretOptions,
	"luks1":   secretOptions,
	"luks2":   secretOptions,
	"plain":   plainOptions,
	"loopaes": loopAESOptions,
	"tcrypt":  tcryptOpenOptions,
	"bitlk":   secretOptions,
	"fvault2": secretOptions,
}

// typeDumpers print a format's metadata for `dump --type T` (or a detected
// type) through blkcrypt.DumpVolume; LUKS is dumped by runDump through the
// LUKS handle.
var typeDumpers = map[string]func(env *Env, p *parsed, path string) error{
	"tcrypt":  dumpType,
	"bitlk":   dumpType,
	"fvault2": dumpType,
	"loopaes": dumpType,
}

// detectType names the format whose signature path carries, or "".
func detectType(path string) string { return detectTypeContext(context.Background(), path) }

// detectTypeContext is detectType that gives up on a URI device when ctx
// ends (a signal must not wait on an NBD server that stalls).
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
// (--header, else DEVICE) carries.
func volumeType(p *parsed, path string) string {
	return volumeTypeContext(context.Background(), p, path)
}

// volumeTypeContext is volumeType bounded by ctx (see detectTypeContext).
func volumeTypeContext(ctx context.Context, p *parsed, path string) string {
	if t := p.str("type"); t != "" {
		return t
	}
	if h := p.str("header"); h != "" {
		return detectTypeContext(ctx, h)
	}
	// Read from the map, not p.str: checkStackFlags refused --partition
	// on every verb that does not declare it.
	if _, ok := p.set["partition"]; ok {
		return partitionType(ctx, p, path)
	}
	return detectTypeContext(ctx, path)
}

// openShared opens DEVICE read-only with the shared lock readers take, so
// that a dump never reads a header another process is changing.
func openShared(path string) (*blkcrypt.LockedFile, error) {
	f, err := openDevice(path, true)
	if err != nil {
		return nil, err
	}
	f.Close()
	return blkcrypt.OpenFileLocked(path, true)
}

// openVolume unlocks DEVICE per the flags and returns the decrypted view:
// the flags become blkcrypt.OpenOptions, the library does the rest.
func openVolume(ctx context.Context, env *Env, p *parsed, path string, readOnly bool) (*blkcrypt.Volume, error) {
	return openVolumeWith(ctx, env, p, path, readOnly, nil)
}

// openVolumeWith is openVolume with a last say on the options (serve
// --reencrypt adds its reencryption).
func openVolumeWith(ctx context.Context, env *Env, p *parsed, path string, readOnly bool, adjust func(*blkcrypt.OpenOptions)) (*blkcrypt.Volume, error) {
	if !blkcrypt.IsURI(path) {
		f, err := openDevice(path, true)
		if err != nil {
			return nil, err
		}
		f.Close()
	}
	part, err := openPartitionFlag(ctx, p, path, readOnly) // nil without --partition
	if err != nil {
		return nil, err
	}
	v, err := unlockOn(ctx, env, p, path, part, readOnly, adjust)
	if err != nil && part != nil {
		part.Close()
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
func readWriteFlag(env *Env, p *parsed, typ string, readOnly bool, o *blkcrypt.OpenOptions) {
	vt, ok := blkcrypt.LookupVolumeType(typ)
	if !ok || !vt.ReadOnlyByDefault || readOnly {
		return
	}
	if p.bool(typ + "-read-write") {
		o.ReadWrite = true
		return
	}
	if env != nil {
		fmt.Fprintf(env.Stderr, "%s volume opened read-only (add --%s-read-write to allow writes).\n", strings.ToUpper(typ), typ)
	}
	o.ReadOnly = true
}

// unlockOn unlocks DEVICE, or the partition part of it when part is not
// nil (the Volume then owns part and closes it). The library opens the
// device once, names or detects its type (the one detection policy), and
// then asks, through Prepare, for that type's options and secrets.
func unlockOn(ctx context.Context, env *Env, p *parsed, path string, part *diskPartition, readOnly bool, adjust func(*blkcrypt.OpenOptions)) (*blkcrypt.Volume, error) {
	typ := p.str("type")
	if err := checkType(typ); err != nil {
		return nil, err
	}
	o := blkcrypt.OpenOptions{Type: typ, ReadOnly: readOnly, Header: p.str("header")}
	if p.has("key-slot") {
		o.Keyslot = blkcrypt.Slot(int(p.int("key-slot", -1)))
	}
	var wipe [][]byte
	defer func() {
		for _, b := range wipe {
			clear(b)
		}
	}()
	// The token step (verbs_token.go), before the device is opened and
	// locked: a passphrase a LUKS2 token yields is used instead of asking.
	tf := fromParsed[tokenFlags](p)
	var tokenPass []byte
	switch {
	case typ != "" && !strings.HasPrefix(typ, "luks"):
		if tf.TokenOnly {
			return nil, usageErr("--token-only: a --type %s volume has no tokens", typ)
		}
	case blkcrypt.IsURI(path) && !tf.asked():
		// A URI device is not dialled twice for tokens nobody asked for.
	default:
		keyGiven := p.str("key-file") != "" || p.str("volume-key-file") != ""
		pass, err := tokenPassphrase(ctx, env, tf, path, p.str("header"), part, keyGiven)
		if err != nil {
			return nil, err
		}
		if pass != nil {
			tokenPass = pass
			wipe = append(wipe, pass)
		}
	}
	if typ != "" {
		// Before the device is opened: a writable volume takes the
		// exclusive lock.
		if vt, ok := blkcrypt.LookupVolumeType(typ); ok && vt.ReadOnlyByDefault && !readOnly && p.bool(typ+"-read-write") {
			o.ReadWrite = true
		}
	}
	prepared := ""
	o.Prepare = func(t string, q *blkcrypt.OpenOptions) error {
		prepared = t
		bind, ok := typeBindings[t]
		if !ok {
			return usageErr("unknown or unsupported --type %q", t)
		}
		readWriteFlag(env, p, t, readOnly, q)
		if tokenPass != nil && strings.HasPrefix(t, "luks") {
			q.Passphrase = tokenPass
			return nil
		}
		return bind(env, p, path, t, q, &wipe, false)
	}
	if adjust != nil {
		adjust(&o)
	}
	var v *blkcrypt.Volume
	var err error
	if part != nil {
		v, err = blkcrypt.OpenDevice(ctx, part, o)
	} else {
		v, err = blkcrypt.Open(ctx, path, o)
	}
	if err != nil {
		return nil, openErr(ctx, path, part, typ, prepared, err)
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
func secretOptions(env *Env, p *parsed, path, typ string, o *blkcrypt.OpenOptions, wipe *[][]byte, dump bool) error {
	if dump && !p.bool("dump-volume-key") {
		return nil
	}
	if vk := p.str("volume-key-file"); vk != "" && !dump {
		key, err := readVolumeKeyFile(vk, -1)
		if err != nil {
			return err
		}
		*wipe = append(*wipe, key)
		o.VolumeKey = key
		return nil
	}
	if typ == "bitlk" && p.str("key-file") == "" && bitlkClearKeyIn(p, path) {
		return nil
	}
	prompt := "Enter passphrase: "
	if typ == "bitlk" || typ == "fvault2" {
		prompt = fmt.Sprintf("Enter passphrase for %s: ", path)
	}
	secret, fromFile, err := readSecret(env, p, prompt)
	if err != nil {
		return err
	}
	*wipe = append(*wipe, secret)
	if fromFile && typ == "bitlk" {
		o.KeyFiles = [][]byte{secret} // a startup key, or a password in a file
		return nil
	}
	o.Passphrase = secret
	return nil
}

func plainOptions(env *Env, p *parsed, _, _ string, o *blkcrypt.OpenOptions, wipe *[][]byte, _ bool) error {
	po := blkcrypt.PlainOptions{
		Cipher:     p.str("cipher"),
		Hash:       p.str("hash"),
		SectorSize: int(p.int("sector-size", 512)),
		LargeIV:    p.bool("iv-large-sectors"),
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"offset", &po.Offset}, {"skip", &po.Skip}, {"size", &po.Size}} {
		n := p.int(f.name, 0)
		if n < 0 {
			return usageErr("--%s must not be negative", f.name)
		}
		*f.dst = uint64(n)
	}
	bits := p.int("key-size", plain.DefaultKeySize*8)
	if bits <= 0 || bits%8 != 0 || bits > 4096 {
		return usageErr("--key-size %d is not a positive multiple of 8 bits", bits)
	}
	po.KeySize = int(bits / 8)
	o.Plain = po
	if vk := p.str("volume-key-file"); vk != "" {
		key, err := readVolumeKeyFile(vk, po.KeySize)
		if err != nil {
			return err
		}
		*wipe = append(*wipe, key)
		o.VolumeKey = key
		return nil
	}
	secret, fromFile, err := readSecret(env, p, "Enter passphrase: ")
	if err != nil {
		return err
	}
	*wipe = append(*wipe, secret)
	if fromFile && p.str("key-file") != "-" {
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
func dumpType(env *Env, p *parsed, path string) error {
	ctx := context.Background()
	if !blkcrypt.IsURI(path) {
		f, err := openDevice(path, true) // cryptsetup's wording for a missing device
		if err != nil {
			return err
		}
		f.Close()
	}
	typ := volumeType(p, path)
	bind, ok := typeBindings[typ]
	if !ok {
		return usageErr("unknown or unsupported --type %q", typ)
	}
	var wipe [][]byte
	defer func() {
		for _, b := range wipe {
			clear(b)
		}
	}()
	o := blkcrypt.DumpVolumeOptions{Open: blkcrypt.OpenOptions{Type: typ, Header: p.str("header")}, VolumeKey: p.bool("dump-volume-key")}
	if o.VolumeKey {
		o.VolumeKeyFile = p.str("volume-key-file")
	}
	if err := bind(env, p, path, typ, &o.Open, &wipe, true); err != nil {
		return err
	}
	err := blkcrypt.DumpVolume(ctx, path, env.Stdout, o)
	if err != nil && errors.Is(err, blkcrypt.ErrNoHeader) && !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
		return deviceErr(fmt.Errorf("device %s is not a valid %s device", path, strings.ToUpper(typ)))
	}
	return err
}

// runRead writes decrypted bytes to stdout or --output.
func runRead(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	off, length := p.int("offset-bytes", 0), p.int("length", -1)
	if off < 0 || (p.has("length") && length < 0) {
		return usageErr("--offset-bytes and --length must not be negative")
	}
	if err := checkOutput(env, p.str("output"), commandInputs(p, dev)); err != nil {
		return err
	}
	v, err := openTarget(ctx, env, p, dev, true)
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
	out, err := createOutput(env, p.str("output"))
	if err != nil {
		return err
	}
	defer out.abort()
	bw := bufio.NewWriterSize(out, 1<<20)
	pr := newProgress(env, p, dev, "read", length)
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

// runWrite encrypts stdin or --input into the volume at --offset-bytes:
// all of it, or --length bytes (see writeLength).
func runWrite(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	off, length := p.int("offset-bytes", 0), p.int("length", -1)
	if off < 0 || (p.has("length") && length < 0) {
		return usageErr("--offset-bytes and --length must not be negative")
	}
	var r io.Reader = env.Stdin
	inputSize := int64(-1)
	if in := p.str("input"); in != "" && in != "-" {
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
	if p.str("key-file") == "-" && r == env.Stdin {
		return usageErr("--key-file - and data on stdin cannot both be used; give the data with --input")
	}
	v, err := openTarget(ctx, env, p, dev, false)
	if err != nil {
		return err
	}
	n, err := writeLength(length, inputSize, off, v.Size())
	var pr *progress
	if err == nil {
		pr = newProgress(env, p, dev, "written", n)
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
