package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/blkcrypt/blkcrypt"
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

// typeDumpers print a format's header for `dump --type T` (or a detected
// type); each format's file registers its own.
var typeDumpers = map[string]func(env *Env, p *parsed, path string) error{}

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
	return blkcrypt.Detect(f)
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

// unlockOn unlocks DEVICE, or the partition part of it when part is not
// nil (the Volume then owns part and closes it).
func unlockOn(ctx context.Context, env *Env, p *parsed, path string, part *diskPartition, readOnly bool, adjust func(*blkcrypt.OpenOptions)) (*blkcrypt.Volume, error) {
	typ := volumeTypeContext(ctx, p, path)
	if part != nil {
		typ = part.volumeType(p)
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
	switch typ {
	case "":
		if part != nil {
			return nil, deviceErr(fmt.Errorf("%s is not a valid LUKS, BitLocker or FileVault device (use --type plain for plain dm-crypt)", part))
		}
		// As cryptsetup, a device without a signature is not taken for
		// TrueCrypt (or plain) unless --type says so.
		if err := detectErr(ctx, path); err != nil {
			return nil, err
		}
		if err := luks1InProgressErr(p, path); err != nil {
			return nil, err
		}
		return nil, deviceErr(fmt.Errorf("device %s is not a valid LUKS device (use --type plain for plain dm-crypt)", path))
	case "plain":
		if err := plainOptions(env, p, &o, &wipe); err != nil {
			return nil, err
		}
	case "loopaes":
		if err := loopAESOptions(env, p, &o, &wipe); err != nil {
			return nil, err
		}
	case "tcrypt":
		if !p.bool("tcrypt-read-write") {
			o.ReadOnly = true
		} else if !o.ReadOnly {
			o.ReadWrite = true
		}
		if err := tcryptOpenOptions(env, p, &o, &wipe); err != nil {
			return nil, err
		}
	case "bitlk", "fvault2":
		if !readOnly && !p.bool(typ+"-read-write") {
			fmt.Fprintf(env.Stderr, "%s volume opened read-only (add --%s-read-write to allow writes).\n", strings.ToUpper(typ), typ)
			o.ReadOnly = true
		}
		if p.bool(typ+"-read-write") && !o.ReadOnly {
			o.ReadWrite = true
		}
		if err := secretOptions(env, p, path, typ, &o, &wipe); err != nil {
			return nil, err
		}
	case "luks", "luks1", "luks2":
		if err := secretOptions(env, p, path, typ, &o, &wipe); err != nil {
			return nil, err
		}
	default:
		return nil, usageErr("unknown or unsupported --type %q", typ)
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
		if errors.Is(err, blkcrypt.ErrNotLUKS) && strings.HasPrefix(typ, "luks") {
			return nil, deviceErr(fmt.Errorf("device %s is not a valid LUKS device: %w", path, err))
		}
		return nil, err
	}
	if n := v.Note(); n != "" {
		fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", n)
	}
	return v, nil
}

// secretOptions reads the key for LUKS, BitLocker and FileVault 2:
// --volume-key-file, or the passphrase (prompt, stdin or --key-file). A
// BitLocker volume with a clear key needs none unless a key file is given.
func secretOptions(env *Env, p *parsed, path, typ string, o *blkcrypt.OpenOptions, wipe *[][]byte) error {
	if vk := p.str("volume-key-file"); vk != "" {
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

func plainOptions(env *Env, p *parsed, o *blkcrypt.OpenOptions, wipe *[][]byte) error {
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
