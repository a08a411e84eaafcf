package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

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

// openVolume unlocks DEVICE per the flags and returns the decrypted view.
func openVolume(env *Env, p *parsed, path string, readOnly bool) (*blkcrypt.Volume, error) {
	typ := p.str("type")
	if typ == "" {
		if h := p.str("header"); h != "" {
			typ = detectType(h)
		} else {
			typ = detectType(path)
		}
	}
	if o, ok := typeOpeners[typ]; ok {
		return o(env, p, path, readOnly)
	}
	switch typ {
	case "plain":
		return openPlain(env, p, path, readOnly)
	case "":
		// Nothing detected: name the real problem when the device cannot
		// be opened at all (missing, a directory, no permission).
		f, err := openDevice(path, true)
		if err != nil {
			return nil, err
		}
		f.Close()
		return nil, deviceErr(fmt.Errorf("device %s is not a valid LUKS device (use --type plain for plain dm-crypt)", path))
	}
	if openLUKS != nil {
		return openLUKS(env, p, path, typ, readOnly)
	}
	return nil, usageErr("unknown or unsupported --type %q", typ)
}

// typeOpeners open the other formats (--type tcrypt, bitlk, fvault2,
// loopaes); each format's file registers itself from init.
var typeOpeners = map[string]func(env *Env, p *parsed, path string, readOnly bool) (*blkcrypt.Volume, error){}

// typeDumpers print a format's header for `dump --type T` (or a detected
// type); typeDetectors recognise a format by its on-disk signature.
var (
	typeDumpers   = map[string]func(env *Env, p *parsed, path string) error{}
	typeDetectors []func(head []byte) string // head: the first 64 KiB
)

// openLUKS is set by the LUKS verbs' file.
var openLUKS func(env *Env, p *parsed, path, typ string, readOnly bool) (*blkcrypt.Volume, error)

// detectType reads the magic at the start of the device.
func detectType(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b [8]byte
	if n, _ := f.ReadAt(b[:], 0); n < 8 {
		return ""
	}
	head := make([]byte, 64<<10)
	n, _ := f.ReadAt(head, 0)
	for _, d := range typeDetectors {
		if t := d(head[:n]); t != "" {
			return t
		}
	}
	if string(b[:6]) == "LUKS\xba\xbe" {
		switch b[7] {
		case 1:
			return "luks1"
		case 2:
			return "luks2"
		}
	}
	return ""
}

func openPlain(env *Env, p *parsed, path string, readOnly bool) (*blkcrypt.Volume, error) {
	o := blkcrypt.PlainOptions{
		Cipher:     p.str("cipher"),
		SectorSize: int(p.int("sector-size", 512)),
		LargeIV:    p.bool("iv-large-sectors"),
		ReadOnly:   readOnly,
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"offset", &o.Offset}, {"skip", &o.Skip}, {"size", &o.Size}} {
		n := p.int(f.name, 0)
		if n < 0 {
			return nil, usageErr("--%s must not be negative", f.name)
		}
		*f.dst = uint64(n)
	}
	if o.Cipher == "" {
		o.Cipher = plain.DefaultCipher
	}
	bits := p.int("key-size", plain.DefaultKeySize*8)
	if bits <= 0 || bits%8 != 0 || bits > 4096 {
		return nil, usageErr("--key-size %d is not a positive multiple of 8 bits", bits)
	}
	ks := int(bits / 8)
	var key []byte
	if vk := p.str("volume-key-file"); vk != "" {
		var err error
		if key, err = readVolumeKeyFile(vk, ks); err != nil {
			return nil, err
		}
	} else {
		secret, fromFile, err := readSecret(env, p, "Enter passphrase: ")
		if err != nil {
			return nil, err
		}
		defer clear(secret)
		h := p.str("hash")
		if h == "" {
			h = plain.DefaultHash
		}
		if fromFile && p.str("key-file") != "-" {
			// A key file given by path is the key itself (cryptsetup ignores
			// --hash for it).
			if len(secret) < ks {
				return nil, usageErr("key file holds %d bytes, the cipher needs %d", len(secret), ks)
			}
			key = append([]byte(nil), secret[:ks]...)
		} else {
			if fromFile && h == "plain" && len(secret) > ks {
				secret = secret[:ks]
			}
			if key, err = plain.Key(h, secret, ks); err != nil {
				return nil, usageErr("%v", err)
			}
		}
	}
	defer clear(key)
	f, err := openDevice(path, readOnly)
	if err != nil {
		return nil, err
	}
	v, err := blkcrypt.NewPlainVolume(f, key, o)
	if err != nil {
		f.Close()
		return nil, usageErr("%v", err)
	}
	return v, nil
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
	v, err := openVolume(env, p, dev, true)
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
	if _, err := io.Copy(bw, ctxReader{ctx, io.NewSectionReader(v, off, length)}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return out.commit()
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
	v, err := openVolume(env, p, dev, false)
	if err != nil {
		return err
	}
	n, err := writeLength(length, inputSize, off, v.Size())
	if err == nil {
		err = copyIntoVolume(ctx, v, r, off, n)
	}
	if cerr := v.Close(); err == nil {
		err = cerr
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
