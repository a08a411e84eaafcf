package cli

import (
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/loopaes"
)

// loop-AES volumes (--type loopaes), as cryptsetup's loopaesOpen: the key
// file (--key-file, already gpg-decrypted; - for stdin) holds 1, 64 or 65
// key lines; --key-size 128/192/256 (default 128) is the size of each
// key, --hash overrides the hash of the lines, --offset is where the data
// starts and --skip the IV offset (default: --offset), both in 512-byte
// sectors. There is no header, so any key file "opens" the volume: loop-AES
// cannot tell a wrong key. dump describes what the key file makes
// (loopaes.Dump).

// loopAESOptions binds the --type loopaes flags: o.LoopAES and the key
// file, alike for opening and dumping.
func loopAESOptions(env *Env, p *parsed, _, _ string, o *blkcrypt.OpenOptions, wipe *[][]byte, _ bool) error {
	l := blkcrypt.LoopAESOptions{Cipher: p.str("cipher"), Hash: p.str("hash")}
	if strings.ContainsAny(l.Cipher, "-:") {
		return usageErr("--cipher for loop-AES is the base cipher only (e.g. aes), not %q", l.Cipher)
	}
	bits := p.int("key-size", loopaes.DefaultKeySize*8)
	if bits <= 0 || bits%8 != 0 || bits > 8192 {
		return usageErr("--key-size %d is not a positive multiple of 8 bits", bits)
	}
	l.KeySize = int(bits / 8)
	var skip uint64
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"offset", &l.Offset}, {"skip", &skip}, {"size", &l.Size}} {
		n := p.int(f.name, 0)
		if n < 0 {
			return usageErr("--%s must not be negative", f.name)
		}
		*f.dst = uint64(n)
	}
	if p.has("skip") {
		l.Skip = &skip
	}
	if p.str("key-file") == "" {
		return usageErr("option --key-file is required for loop-AES (a decrypted key file; - for stdin)")
	}
	kf, _, err := readSecret(env, p, "")
	if err != nil {
		return err
	}
	*wipe = append(*wipe, kf)
	o.LoopAES, o.KeyFiles = l, [][]byte{kf}
	return nil
}
