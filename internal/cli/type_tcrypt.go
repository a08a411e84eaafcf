package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
	"github.com/blkcrypt/blkcrypt/tcrypt"
)

// TrueCrypt and VeraCrypt volumes (--type tcrypt), as cryptsetup's
// tcryptOpen and tcryptDump. Key files: --key-file FILE (cryptsetup gives
// it more than once; our parser keeps one) plus --tcrypt-keyfiles F1,F2,…;
// with key files the passphrase is still read from the terminal or stdin
// (possibly empty). --key-file - reads the passphrase from stdin as a key
// file. Volumes open read-only unless --tcrypt-read-write is given: writing
// to an outer volume can destroy a hidden one, which blkcrypt does not
// protect.

func init() {
	addFlags(
		flagDef{"veracrypt-pim", 0, kindInt, "tcrypt: VeraCrypt personal iterations multiplier"},
		flagDef{"veracrypt-query-pim", 0, kindBool, "tcrypt: ask for the VeraCrypt PIM"},
		flagDef{"veracrypt", 0, kindBool, "tcrypt: scan for VeraCrypt too (the default)"},
		flagDef{"disable-veracrypt", 0, kindBool, "tcrypt: TrueCrypt only"},
		flagDef{"tcrypt-hidden", 0, kindBool, "tcrypt: use the hidden volume header"},
		flagDef{"tcrypt-system", 0, kindBool, "tcrypt: system encryption header (sector 62)"},
		flagDef{"tcrypt-backup", 0, kindBool, "tcrypt: use the backup header"},
		flagDef{"tcrypt-keyfiles", 0, kindString, "tcrypt: comma-separated key files (besides --key-file)"},
		flagDef{"tcrypt-read-write", 0, kindBool, "tcrypt: allow writes (read-only by default)"},
	)
	typeDumpers["tcrypt"] = dumpTCRYPT
}

// addFlags appends flags another file has not defined already.
func addFlags(defs ...flagDef) {
	for _, d := range defs {
		if _, ok := lookupFlag(d.name, 0, ""); !ok {
			flagDefs = append(flagDefs, d)
		}
	}
}

// tcryptOptions turns the flags into search options, reading the secrets.
func tcryptOptions(env *Env, p *parsed) (*tcrypt.Options, error) {
	o := &tcrypt.Options{
		Hash:        p.str("hash"),
		Cipher:      p.str("cipher"),
		Hidden:      p.bool("tcrypt-hidden"),
		System:      p.bool("tcrypt-system"),
		Backup:      p.bool("tcrypt-backup"),
		NoVeraCrypt: p.bool("disable-veracrypt"),
	}
	if o.NoVeraCrypt && p.bool("veracrypt") {
		return nil, usageErr("--veracrypt and --disable-veracrypt cannot be combined")
	}
	if p.has("veracrypt-pim") {
		if o.NoVeraCrypt {
			return nil, usageErr("option --veracrypt-pim is supported only for VeraCrypt compatible devices")
		}
		if p.bool("veracrypt-query-pim") {
			return nil, usageErr("the options --veracrypt-pim and --veracrypt-query-pim are mutually exclusive")
		}
		n := p.int("veracrypt-pim", 0)
		if n < 0 || n > 1<<32-1 {
			return nil, usageErr("invalid PIM value: outside of range")
		}
		o.PIM = uint32(n)
	}
	if p.bool("veracrypt-query-pim") && o.NoVeraCrypt {
		return nil, usageErr("option --veracrypt-query-pim is supported only for VeraCrypt compatible devices")
	}

	var files []string
	kf := p.str("key-file")
	if kf != "" && kf != "-" {
		files = append(files, kf)
	}
	if l := p.str("tcrypt-keyfiles"); l != "" {
		for _, f := range strings.Split(l, ",") {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		b, err := tcrypt.ReadKeyfile(f)
		if err != nil {
			wipeAll(o.Keyfiles)
			return nil, usageErr("%v", err)
		}
		o.Keyfiles = append(o.Keyfiles, b)
	}

	pass, pim, err := tcryptSecrets(env, p, kf == "-")
	if err != nil {
		wipeAll(o.Keyfiles)
		return nil, err
	}
	o.Passphrase = pass
	if pim != 0 {
		o.PIM = pim
	}
	return o, nil
}

func wipeAll(bs [][]byte) {
	for _, b := range bs {
		clear(b)
	}
}

// tcryptSecrets reads the passphrase (and the PIM with
// --veracrypt-query-pim): from the terminal, or from stdin one line each,
// or with --key-file - the whole of stdin as the passphrase.
func tcryptSecrets(env *Env, p *parsed, stdinKeyFile bool) ([]byte, uint32, error) {
	q := &parsed{set: map[string]string{}, args: p.args}
	for k, v := range p.set {
		if k != "key-file" {
			q.set[k] = v
		}
	}
	if stdinKeyFile {
		q.set["key-file"] = "-"
	}
	query := p.bool("veracrypt-query-pim")
	if !query || stdinKeyFile || (env.Prompt != nil && env.StdinIsTerminal) {
		pass, _, err := readSecret(env, q, "Enter passphrase: ")
		if err != nil {
			return nil, 0, err
		}
		if !query {
			return pass, 0, nil
		}
		var line []byte
		if env.Prompt != nil && env.StdinIsTerminal {
			line, err = env.Prompt("Enter VeraCrypt PIM: ")
		} else {
			line, err = keyinput.ReadPassphrase(env.Stdin, keyinput.Options{})
		}
		if err != nil {
			clear(pass)
			return nil, 0, usageErr("reading PIM: %v", err)
		}
		pim, err := parsePIM(line)
		clear(line)
		if err != nil {
			clear(pass)
			return nil, 0, err
		}
		return pass, pim, nil
	}
	// Both from a pipe: the passphrase line, then the PIM line.
	br := bufio.NewReader(env.Stdin)
	pass, err := keyinput.ReadPassphrase(br, keyinput.Options{Offset: p.int("keyfile-offset", 0), Size: p.int("keyfile-size", 0)})
	if err != nil {
		return nil, 0, usageErr("%v", err)
	}
	line, err := keyinput.ReadPassphrase(br, keyinput.Options{})
	if err != nil {
		clear(pass)
		return nil, 0, usageErr("reading PIM: %v", err)
	}
	pim, err := parsePIM(line)
	if err != nil {
		clear(pass)
		return nil, 0, err
	}
	return pass, pim, nil
}

func parsePIM(b []byte) (uint32, error) {
	s := string(bytes.TrimSpace(b))
	if s == "" {
		return 0, usageErr("invalid PIM value: parse error")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange), err == nil && n > 1<<32-1:
		return 0, usageErr("invalid PIM value: outside of range")
	case err != nil:
		return 0, usageErr("invalid PIM value: parse error")
	case n == 0:
		return 0, usageErr("invalid PIM value: 0")
	}
	return uint32(n), nil
}

// tcryptHeader reads the TCRYPT header of DEVICE (or --header), both
// opened with the shared lock readers take; tcrypt.Locate finds a system
// volume's drive, as the library's opener does.
func tcryptHeader(p *parsed, path string, o *tcrypt.Options) (*tcrypt.Header, tcrypt.Geometry, error) {
	var g tcrypt.Geometry
	data, err := openShared(path)
	if err != nil {
		return nil, g, err
	}
	defer data.Close()
	place := tcrypt.Place{Dev: data, Path: path, HeaderPath: p.str("header"), System: p.bool("tcrypt-system")}
	if place.DevSize, err = fileSize(data.File); err != nil {
		return nil, g, err
	}
	if place.HeaderPath != "" {
		hdr, err := openShared(place.HeaderPath)
		if err != nil {
			return nil, g, err
		}
		defer hdr.Close()
		place.Header = hdr
		if place.HeaderSize, err = fileSize(hdr.File); err != nil {
			return nil, g, err
		}
	}
	src, g, done, err := tcrypt.Locate(place)
	if err != nil {
		return nil, g, deviceErr(err)
	}
	defer done()
	h, err := tcrypt.Read(src, g.HeaderDeviceSize, o)
	return h, g, err
}

func fileSize(f *os.File) (int64, error) {
	n, err := blkcrypt.DeviceSize(f)
	if err != nil {
		return 0, deviceErr(fmt.Errorf("cannot get the size of %s: %w", f.Name(), err))
	}
	return n, nil
}

// tcryptOpenOptions reads the TCRYPT secrets and options into o.
func tcryptOpenOptions(env *Env, p *parsed, o *blkcrypt.OpenOptions, wipe *[][]byte) error {
	t, err := tcryptOptions(env, p)
	if err != nil {
		return err
	}
	*wipe = append(*wipe, t.Passphrase)
	*wipe = append(*wipe, t.Keyfiles...)
	o.Passphrase, o.KeyFiles = t.Passphrase, t.Keyfiles
	o.TCRYPT = blkcrypt.TCRYPTOptions{
		PIM: t.PIM, Hidden: t.Hidden, System: t.System, Backup: t.Backup,
		NoVeraCrypt: t.NoVeraCrypt, Hash: t.Hash, Cipher: t.Cipher,
	}
	return nil
}

func dumpTCRYPT(env *Env, p *parsed, path string) error {
	o, err := tcryptOptions(env, p)
	if err != nil {
		return err
	}
	defer clear(o.Passphrase)
	defer wipeAll(o.Keyfiles)
	h, g, err := tcryptHeader(p, path, o)
	if err != nil {
		return err
	}
	defer h.Wipe()
	if p.bool("dump-volume-key") {
		h.DumpVolumeKey(env.Stdout, path, h.DataOffset(g.HeaderDeviceSize))
		return nil
	}
	meta := path
	if hp := p.str("header"); hp != "" {
		meta = hp
	}
	h.Dump(env.Stdout, meta)
	return nil
}
