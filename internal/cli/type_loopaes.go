package cli

import (
	"fmt"
	"os"
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
// cannot tell a wrong key.

func init() {
	typeDumpers["loopaes"] = dumpLoopAES
}

func loopAESParams(p *parsed) (loopaes.Options, error) {
	o := loopaes.Options{Cipher: p.str("cipher"), Hash: p.str("hash")}
	if strings.ContainsAny(o.Cipher, "-:") {
		return o, usageErr("--cipher for loop-AES is the base cipher only (e.g. aes), not %q", o.Cipher)
	}
	bits := p.int("key-size", loopaes.DefaultKeySize*8)
	if bits <= 0 || bits%8 != 0 || bits > 8192 {
		return o, usageErr("--key-size %d is not a positive multiple of 8 bits", bits)
	}
	o.KeySize = int(bits / 8)
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"offset", &o.Offset}, {"skip", &o.Skip}, {"size", &o.Size}} {
		n := p.int(f.name, 0)
		if n < 0 {
			return o, usageErr("--%s must not be negative", f.name)
		}
		*f.dst = uint64(n)
	}
	if !p.has("skip") {
		o.Skip = o.Offset
	}
	return o, nil
}

func loopAESOptions(env *Env, p *parsed, o *blkcrypt.OpenOptions, wipe *[][]byte) error {
	l, err := loopAESParams(p)
	if err != nil {
		return err
	}
	skip := l.Skip
	o.LoopAES = blkcrypt.LoopAESOptions{Cipher: l.Cipher, Hash: l.Hash, KeySize: l.KeySize, Offset: l.Offset, Skip: &skip, Size: l.Size}
	kf, err := loopAESKeyfile(env, p)
	if err != nil {
		return err
	}
	*wipe = append(*wipe, kf)
	o.KeyFiles = [][]byte{kf}
	return nil
}

func loopAESKeyfile(env *Env, p *parsed) ([]byte, error) {
	if p.str("key-file") == "" {
		return nil, usageErr("option --key-file is required for loop-AES (a decrypted key file; - for stdin)")
	}
	b, _, err := readSecret(env, p, "")
	return b, err
}

func dumpLoopAES(env *Env, p *parsed, path string) error {
	o, err := loopAESParams(p)
	if err != nil {
		return err
	}
	kf, err := loopAESKeyfile(env, p)
	if err != nil {
		return err
	}
	defer clear(kf)
	keys, err := loopaes.ParseKeyfile(kf)
	if err != nil {
		return err
	}
	defer func() {
		for _, k := range keys {
			clear(k)
		}
	}()
	if o.Cipher == "" {
		o.Cipher = loopaes.DefaultCipher
	}
	h := o.Hash
	if h == "" {
		h = loopaes.HashFor(o.KeySize)
	}
	key, err := loopaes.VolumeKey(keys, o.KeySize, h)
	if err != nil {
		return err
	}
	defer clear(key)
	st, err := os.Stat(path)
	if err != nil {
		return deviceErr(fmt.Errorf("device %s does not exist or access denied", path))
	}
	mode := map[int]string{1: "single-key", 64: "multi-key-v2", 65: "multi-key-v3"}[len(keys)]
	w := env.Stdout
	fmt.Fprintf(w, "LOOPAES volume information for %s (loop-AES has no on-disk header)\n", path)
	fmt.Fprintf(w, "Key file:      \t%d keys (%s)\n", len(keys), mode)
	fmt.Fprintf(w, "Cipher:        \t%s\n", loopaes.Spec(o.Cipher, len(keys)))
	fmt.Fprintf(w, "Key hash:      \t%s\n", h)
	fmt.Fprintf(w, "MK bits:       \t%d\n", len(key)*8)
	fmt.Fprintf(w, "Offset:        \t%d [512-byte sectors]\n", o.Offset)
	fmt.Fprintf(w, "Skip:          \t%d [512-byte sectors]\n", o.Skip)
	if st.Mode().IsRegular() {
		if n := st.Size()/512 - int64(o.Offset); n > 0 {
			fmt.Fprintf(w, "Size:          \t%d [512-byte sectors]\n", n)
		}
	}
	if p.bool("dump-volume-key") {
		fmt.Fprint(w, "MK dump:\t")
		for i := 0; i < len(key); i += 16 {
			if i > 0 {
				fmt.Fprint(w, "\t\t")
			}
			for _, b := range key[i:min(i+16, len(key))] {
				fmt.Fprintf(w, "%02x ", b)
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}
