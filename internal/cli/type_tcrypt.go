package cli

import (
	"bufio"
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

// tcryptOpenOptions binds the --type tcrypt flags: the header and search
// options become o.TCRYPT, the key files o.KeyFiles, the passphrase (and a
// queried PIM) are read. Opening and dumping bind alike: tcryptDump needs
// the passphrase to find the header.
func tcryptOpenOptions(r *bindRequest, o *blkcrypt.OpenOptions) error {
	f := r.f
	t := blkcrypt.TCRYPTOptions{
		Hash:        f.Hash,
		Cipher:      f.Cipher,
		Hidden:      f.TCryptHidden,
		System:      f.TCryptSystem,
		Backup:      f.TCryptBackup,
		NoVeraCrypt: f.DisableVeraCrypt,
	}
	if t.NoVeraCrypt && f.VeraCrypt {
		return usageErr("--veracrypt and --disable-veracrypt cannot be combined")
	}
	if f.VeraCryptPIM != nil {
		if t.NoVeraCrypt {
			return usageErr("option --veracrypt-pim is supported only for VeraCrypt compatible devices")
		}
		if f.VeraCryptQueryPIM {
			return usageErr("the options --veracrypt-pim and --veracrypt-query-pim are mutually exclusive")
		}
		n := *f.VeraCryptPIM
		if n < 0 || n > 1<<32-1 {
			return usageErr("%v", tcrypt.ErrPIMRange)
		}
		t.PIM = uint32(n)
	}
	if f.VeraCryptQueryPIM && t.NoVeraCrypt {
		return usageErr("option --veracrypt-query-pim is supported only for VeraCrypt compatible devices")
	}

	var files []string
	kf := f.KeyFile
	if kf != "" && kf != "-" {
		files = append(files, kf)
	}
	if l := f.TCryptKeyfiles; l != "" {
		for _, f := range strings.Split(l, ",") {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	keyfiles, err := tcrypt.ReadKeyfiles(files)
	if err != nil {
		return usageErr("%v", err)
	}
	pass, pim, err := tcryptSecrets(r.env, f, kf == "-")
	if err != nil {
		wipeAll(keyfiles)
		return err
	}
	if pim != 0 {
		t.PIM = pim
	}
	r.keep(append([][]byte{pass}, keyfiles...)...)
	o.Passphrase, o.KeyFiles, o.TCRYPT = pass, keyfiles, t
	return nil
}

func wipeAll(bs [][]byte) {
	for _, b := range bs {
		clear(b)
	}
}

// tcryptSecrets reads the passphrase (and the PIM with
// --veracrypt-query-pim): from the terminal, or from stdin one line each,
// or with --key-file - the whole of stdin as the passphrase.
func tcryptSecrets(env *Env, f *openFlags, stdinKeyFile bool) ([]byte, uint32, error) {
	k := f.keyFileFlags
	k.KeyFile = ""
	if stdinKeyFile {
		k.KeyFile = "-"
	}
	query := f.VeraCryptQueryPIM
	if !query || stdinKeyFile || (env.Prompt != nil && env.StdinIsTerminal) {
		pass, _, err := k.read(env, false, "Enter passphrase: ")
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
		pim, err := tcrypt.ParsePIM(line)
		clear(line)
		if err != nil {
			clear(pass)
			return nil, 0, usageErr("%v", err)
		}
		return pass, pim, nil
	}
	// Both from a pipe: the passphrase line, then the PIM line.
	br := bufio.NewReader(env.Stdin)
	pass, err := keyinput.ReadPassphrase(br, keyinput.Options{Offset: f.KeyfileOffset, Size: orZero(f.KeyfileSize)})
	if err != nil {
		return nil, 0, usageErr("%v", err)
	}
	line, err := keyinput.ReadPassphrase(br, keyinput.Options{})
	if err != nil {
		clear(pass)
		return nil, 0, usageErr("reading PIM: %v", err)
	}
	pim, err := tcrypt.ParsePIM(line)
	if err != nil {
		clear(pass)
		return nil, 0, usageErr("%v", err)
	}
	return pass, pim, nil
}
