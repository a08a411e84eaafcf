// Package loopaes opens loop-AES volumes the way cryptsetup's loopaesOpen
// maps them onto dm-crypt, byte-compatible with loop-AES (Jari Ruusu's
// losetup/aespipe).
//
// A loop-AES volume has no header. Its secret is a key file of 1, 64 or 65
// text lines (usually kept gpg-encrypted; decrypt it first, e.g. `gpg
// --decrypt keys.gpg | blkcrypt read --type loopaes --key-file - DEV`).
// Each line is hashed into one key part:
//
//	part i = hash(line i) truncated to the key size (16, 24 or 32 bytes)
//	         with byte 0 XORed with 0x55 (64 lines) or 0xF4 (65 lines)
//
// where the hash is SHA-256, SHA-384 or SHA-512 for 16-, 24- or 32-byte
// keys unless --hash names another (sha256, sha384, sha512, ripemd160 or
// loop-AES's spelling rmd160). The parts, concatenated, are the dm-crypt
// key:
//
//	1 line:   aes-cbc-plain64              (loop-AES single-key mode)
//	64 lines: aes:64-cbc-lmk               (multi-key-v2: key by sector mod 64)
//	65 lines: aes:64-cbc-lmk + 65th part   (multi-key-v3: the last part seeds the IV)
//
// The data starts --offset sectors into the device, and the IV sector
// numbers start at --skip (cryptsetup's default for --skip is --offset).
//
// # API
//
//	keys, err := loopaes.ParseKeyfile(text)         // the key lines
//	key, err := loopaes.VolumeKey(keys, 16, "")     // dm-crypt key; clear it after use
//	spec := loopaes.Spec("aes", len(keys))          // "aes:64-cbc-lmk" …
//	c, err := loopaes.NewCipher(text, loopaes.Options{KeySize: 16, Skip: 8})
//	v, err := blkcrypt.Open(ctx, path, blkcrypt.OpenOptions{Type: "loopaes", KeyFiles: [][]byte{text}})
package loopaes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/sector"
	"golang.org/x/crypto/ripemd160" //nolint:staticcheck // loop-AES allows rmd160
)

// Defaults, as cryptsetup's.
const (
	DefaultCipher  = "aes"
	DefaultKeySize = 16 // bytes (--key-size 128)
	MaxKeys        = 65
)

// Errors.
var (
	// ErrKeyfile means the key file is not a loop-AES key file.
	ErrKeyfile = volspec.Sub("incompatible loop-AES keyfile detected", volspec.ErrInvalidOptions)
	// ErrGPG means the key file is still gpg-encrypted.
	ErrGPG = volspec.Sub("GPG encrypted keyfile: decrypt it first (gpg --decrypt KEYFILE | blkcrypt … --key-file=-)", volspec.ErrInvalidOptions)
	// ErrInvalid means bad options (key size, hash, offsets).
	ErrInvalid = volspec.Sub("invalid loop-AES parameters", volspec.ErrInvalidOptions)
)

// ParseKeyfile splits a decrypted loop-AES key file into its key lines, as
// cryptsetup does: CR and LF end lines, empty lines are skipped, the last
// line must be terminated, every key must have the same non-zero length,
// and there must be 1, 64 or 65 of them. The returned slices share the
// memory of a copy of text that the caller should clear (clear each key).
func ParseKeyfile(text []byte) ([][]byte, error) {
	if len(text) == 0 {
		return nil, fmt.Errorf("%w: empty key file", ErrKeyfile)
	}
	n := min(100, len(text)) // cryptsetup looks at the first 100 bytes
	if len(text) < 100 {
		n = len(text) - 1
	}
	if bytes.Contains(text[:n], []byte("BEGIN PGP MESSAGE")) {
		return nil, ErrGPG
	}
	buf := bytes.Clone(text)
	for i, c := range buf {
		if c == '\n' || c == '\r' {
			buf[i] = 0
		}
	}
	var keys [][]byte
	off := 0
	for off < len(buf) && len(keys) < MaxKeys {
		start := off
		for off < len(buf) && buf[off] != 0 {
			off++
		}
		if off == len(buf) {
			clear(buf)
			return nil, fmt.Errorf("%w: key %d is not terminated by a newline", ErrKeyfile, len(keys))
		}
		keys = append(keys, buf[start:off:off])
		for off < len(buf) && buf[off] == 0 {
			off++
		}
	}
	if off != len(buf) {
		clear(buf)
		return nil, fmt.Errorf("%w: more than %d keys", ErrKeyfile, MaxKeys)
	}
	for i, k := range keys {
		if len(k) == 0 || len(k) != len(keys[0]) {
			clear(buf)
			return nil, fmt.Errorf("%w: key %d is %d bytes long, key 0 %d", ErrKeyfile, i, len(k), len(keys[0]))
		}
	}
	if c := len(keys); c != 1 && c != 64 && c != 65 {
		clear(buf)
		return nil, fmt.Errorf("%w: %d keys (want 1, 64 or 65)", ErrKeyfile, c)
	}
	return keys, nil
}

// HashFor names the default hash for a key size in bytes.
func HashFor(keySize int) string {
	switch keySize {
	case 16:
		return "sha256"
	case 24:
		return "sha384"
	case 32:
		return "sha512"
	}
	return ""
}

func hashFunc(name string) (func() hash.Hash, error) {
	switch name {
	case "sha256":
		return sha256.New, nil
	case "sha384":
		return sha512.New384, nil
	case "sha512":
		return sha512.New, nil
	case "ripemd160", "rmd160":
		return ripemd160.New, nil
	case "sha1":
		return nil, fmt.Errorf("%w: hash %s is not one loop-AES uses", ErrInvalid, name)
	}
	return nil, fmt.Errorf("%w: unknown hash %q", ErrInvalid, name)
}

// tweak is XORed into byte 0 of every key part.
func tweak(keys int) byte {
	switch keys {
	case 64:
		return 0x55
	case 65:
		return 0xf4
	}
	return 0
}

// VolumeKey hashes the key lines into the dm-crypt key: keySize bytes per
// line. hashName "" picks the hash for the key size.
func VolumeKey(keys [][]byte, keySize int, hashName string) ([]byte, error) {
	if hashName == "" {
		hashName = HashFor(keySize)
	}
	if keySize <= 0 || hashName == "" || len(keys) == 0 {
		return nil, fmt.Errorf("%w: key processing error (key size %d bits, hash %q)", ErrInvalid, keySize*8, hashName)
	}
	hf, err := hashFunc(hashName)
	if err != nil {
		return nil, err
	}
	h := hf()
	if h.Size() < keySize {
		return nil, fmt.Errorf("%w: %s gives %d bytes, the key size is %d", ErrInvalid, hashName, h.Size(), keySize)
	}
	t := tweak(len(keys))
	out := make([]byte, 0, keySize*len(keys))
	var sum []byte
	for _, k := range keys {
		h.Reset()
		h.Write(k)
		sum = h.Sum(sum[:0])
		sum[0] ^= t
		out = append(out, sum[:keySize]...)
	}
	clear(sum)
	h.Reset()
	return out, nil
}

// Spec is the dm-crypt cipher spec cryptsetup uses for a key count.
func Spec(cipher string, keys int) string {
	if keys == 1 {
		return cipher + "-cbc-plain64"
	}
	return cipher + ":64-cbc-lmk"
}

// Options are cryptsetup's loopaesOpen parameters.
type Options struct {
	// Cipher is the base cipher; "" means aes.
	Cipher string
	// KeySize is the size of each key part in bytes; 0 means 16.
	KeySize int
	// Hash overrides the hash of the key lines.
	Hash string
	// Offset is where the data starts, in 512-byte sectors (--offset).
	Offset uint64
	// Skip is the IV offset in 512-byte sectors (--skip); cryptsetup uses
	// Offset when --skip is not given, so set it to Offset then.
	Skip uint64
	// Size limits the volume to this many 512-byte sectors; 0 means up to
	// the end of the device.
	Size uint64
	// ReadOnly refuses writes.
	ReadOnly bool
}

func (o *Options) defaults() {
	if o.Cipher == "" {
		o.Cipher = DefaultCipher
	}
	if o.KeySize == 0 {
		o.KeySize = DefaultKeySize
	}
}

// NewCipher parses the key file text and makes the sector cipher.
// keyCount is the number of key lines.
func NewCipher(text []byte, o Options) (c *sector.Cipher, keyCount int, err error) {
	o.defaults()
	if o.KeySize < 0 || o.KeySize > 1024 {
		return nil, 0, fmt.Errorf("%w: key size %d bits", ErrInvalid, o.KeySize*8)
	}
	keys, err := ParseKeyfile(text)
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		for _, k := range keys {
			clear(k)
		}
	}()
	key, err := VolumeKey(keys, o.KeySize, o.Hash)
	if err != nil {
		return nil, 0, err
	}
	defer clear(key)
	c, err = sector.New(Spec(o.Cipher, len(keys)), key, sector.Options{SectorSize: 512, IVOffset: o.Skip})
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c, len(keys), nil
}

// Geometry checks o against a device of size bytes and returns the data
// range in bytes.
func Geometry(size int64, o Options) (off, n int64, err error) {
	sectors := uint64(max(size, 0)) / 512
	if o.Offset > sectors {
		return 0, 0, fmt.Errorf("%w: offset %d is beyond the end of the %d-sector device", ErrInvalid, o.Offset, sectors)
	}
	left := sectors - o.Offset
	if o.Size != 0 {
		if o.Size > left {
			return 0, 0, fmt.Errorf("%w: device is too small: %d sectors at offset %d, it has %d", ErrInvalid, o.Size, o.Offset, sectors)
		}
		left = o.Size
	}
	if left == 0 {
		return 0, 0, fmt.Errorf("%w: no data after offset %d", ErrInvalid, o.Offset)
	}
	return int64(o.Offset) * 512, int64(left) * 512, nil
}

func init() {
	volspec.Register(volspec.Format{Name: "loopaes", Open: open, Dump: dump})
}

// request is the key file text and the options of an opener's request:
// r.KeyFiles[0] (or r.Passphrase when no key file is given) and r.Options
// (Options; nil means the defaults, Skip = Offset).
func request(r *volspec.Request) ([]byte, Options, error) {
	var o Options
	switch opt := r.Options.(type) {
	case nil:
	case Options:
		o = opt
	case *Options:
		o = *opt
	default:
		return nil, o, fmt.Errorf("%w: loop-AES options of type %T", volspec.ErrInvalidOptions, r.Options)
	}
	o.ReadOnly = o.ReadOnly || r.ReadOnly
	text := r.Passphrase
	if len(r.KeyFiles) > 0 {
		text = r.KeyFiles[0]
	}
	return text, o, nil
}

// open is the opener blkcrypt.Open uses.
func open(_ context.Context, r *volspec.Request) (*volspec.Spec, error) {
	text, o, err := request(r)
	if err != nil {
		return nil, err
	}
	off, n, err := Geometry(r.DevSize, o)
	if err != nil {
		return nil, err
	}
	c, _, err := NewCipher(text, o)
	if err != nil {
		return nil, err
	}
	return &volspec.Spec{Layers: []*sector.Cipher{c}, Offset: off, Size: n}, nil
}

// dump is the dumper blkcrypt.DumpVolume uses: loop-AES has no header, so
// it describes what the key file and the options make.
func dump(_ context.Context, r *volspec.Request, d *volspec.DumpRequest) error {
	text, o, err := request(r)
	if err != nil {
		return err
	}
	o.defaults()
	keys, err := ParseKeyfile(text)
	if err != nil {
		return err
	}
	defer func() {
		for _, k := range keys {
			clear(k)
		}
	}()
	h := o.Hash
	if h == "" {
		h = HashFor(o.KeySize)
	}
	key, err := VolumeKey(keys, o.KeySize, h)
	if err != nil {
		return err
	}
	defer clear(key)
	if d.VolumeKey && d.SaveKey != nil {
		if err := d.SaveKey(key); err != nil {
			return err
		}
	}
	return Dump(d.W, d.Device, r.DevSize, len(keys), key, h, o, d.VolumeKey)
}

// Dump writes blkcrypt's description of a loop-AES volume (cryptsetup has
// no loopaesDump): the key file's mode, the cipher, the key hash h, the
// geometry of o on a device of devSize bytes (the size is left out when
// unknown, devSize <= 0) and, with withKey, the dm-crypt key.
func Dump(w io.Writer, device string, devSize int64, keys int, key []byte, h string, o Options, withKey bool) error {
	o.defaults()
	var b strings.Builder
	mode := map[int]string{1: "single-key", 64: "multi-key-v2", 65: "multi-key-v3"}[keys]
	fmt.Fprintf(&b, "LOOPAES volume information for %s (loop-AES has no on-disk header)\n", device)
	fmt.Fprintf(&b, "Key file:      \t%d keys (%s)\n", keys, mode)
	fmt.Fprintf(&b, "Cipher:        \t%s\n", Spec(o.Cipher, keys))
	fmt.Fprintf(&b, "Key hash:      \t%s\n", h)
	fmt.Fprintf(&b, "MK bits:       \t%d\n", len(key)*8)
	fmt.Fprintf(&b, "Offset:        \t%d [512-byte sectors]\n", o.Offset)
	fmt.Fprintf(&b, "Skip:          \t%d [512-byte sectors]\n", o.Skip)
	if n := devSize/512 - int64(o.Offset); devSize > 0 && n > 0 {
		fmt.Fprintf(&b, "Size:          \t%d [512-byte sectors]\n", n)
	}
	if withKey {
		b.WriteString("MK dump:\t")
		for i := 0; i < len(key); i += 16 {
			if i > 0 {
				b.WriteString("\t\t")
			}
			for _, c := range key[i:min(i+16, len(key))] {
				fmt.Fprintf(&b, "%02x ", c)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
