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
func loopAESOptions(r *bindRequest, o *blkcrypt.OpenOptions) error {
	f := r.f
	l := blkcrypt.LoopAESOptions{Cipher: f.Cipher, Hash: f.Hash}
	if strings.ContainsAny(l.Cipher, "-:") {
		return usageErr("--cipher for loop-AES is the base cipher only (e.g. aes), not %q", l.Cipher)
	}
	var err error
	if l.KeySize, err = keyBits(f.KeySize, loopaes.DefaultKeySize*8, 8192); err != nil {
		return err
	}
	if l.Offset, err = sectors("offset", f.Offset); err != nil {
		return err
	}
	skip, err := sectors("skip", f.Skip)
	if err != nil {
		return err
	}
	if l.Size, err = sectors("size", f.Size); err != nil {
		return err
	}
	if f.Skip != nil {
		l.Skip = &skip
	}
	if f.KeyFile == "" {
		return usageErr("option --key-file is required for loop-AES (a decrypted key file; - for stdin)")
	}
	kf, _, err := r.readSecret("")
	if err != nil {
		return err
	}
	r.keep(kf)
	o.LoopAES, o.KeyFiles = l, [][]byte{kf}
	return nil
}
