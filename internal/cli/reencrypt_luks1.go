package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// LUKS1 reencryption: cryptsetup 2.6's legacy offline reencryption, whose
// log and header files live in the current directory (luks1.Reencrypt).

// luks1ReencryptFlags are the flags of LUKS1's legacy reencryption.
type luks1ReencryptFlags struct {
	KeepKey   bool   `flag:"keep-key" help:"LUKS1: new header and keyslots, same volume key; the data is not touched"`
	BlockSize *int64 `flag:"block-size" short:"B" help:"LUKS1: MiB reencrypted per step (1-64)" def:"4"`
	// Accepted for cryptsetup's command lines; blkcrypt always logs and
	// syncs after every block (docs/security.md, "Crash safety").
	UseFsync    bool `flag:"use-fsync" help:"accepted for cryptsetup compatibility (blkcrypt syncs after every block)"`
	WriteLog    bool `flag:"write-log" help:"accepted for cryptsetup compatibility (blkcrypt updates the log after every block)"`
	UseDirectIO bool `flag:"use-directio" help:"accepted for cryptsetup compatibility (blkcrypt syncs its writes instead)"`
}

func runReencryptLUKS1(ctx context.Context, env *Env, opts *reencryptOptions, path string) error {
	switch {
	case opts.Encrypt, opts.Decrypt:
		// cryptsetup 2.6 runs these through dm-crypt devices over a
		// cipher_null header; not done here.
		return usageErr("reencrypt --encrypt/--decrypt of LUKS1 is not supported (convert to LUKS2 first)")
	case opts.Header != "":
		return usageErr("reencrypt of a LUKS1 volume with a detached --header is not supported")
	case opts.InitOnly:
		return usageErr("--init-only is for LUKS2 only")
	case opts.Resilience != "" || opts.HotzoneSize != "":
		return usageErr("--resilience and --hotzone-size are for LUKS2 only; LUKS1 uses --block-size")
	case opts.SectorSize != nil && *opts.SectorSize != 512:
		return usageErr("LUKS1 has 512-byte sectors only")
	}
	o := blkcrypt.LUKSReencryptOptions{Cipher: opts.Cipher, Hash: opts.Hash, KeepKey: opts.KeepKey, ResumeOnly: opts.ResumeOnly}
	var err error
	if o.KeySize, err = keyBits(opts.KeySize, 0, 4096); err != nil {
		return err
	}
	if opts.BlockSize != nil {
		mb := *opts.BlockSize
		if mb < 1 || mb > 64 {
			return usageErr("only values between 1 MiB and 64 MiB allowed for reencryption block size")
		}
		o.BlockSize = int(mb) << 20
	}
	if o.PBKDF, err = opts.pbkdfFlags.options(""); err != nil {
		return err
	}
	if o.PBKDF.Type != "" && o.PBKDF.Type != kdf.PBKDF2 {
		return usageErr("LUKS1 keyslots use pbkdf2 only")
	}
	if opts.KeySlot != nil {
		slot := *opts.KeySlot
		if slot < 0 || slot >= luks1.NumKeyslots {
			return usageErr("key slot %d is invalid (LUKS1 has keyslots 0-7)", slot)
		}
		o.Keyslot = blkcrypt.Slot(int(slot))
	}

	if err := checkDevice(path, false); err != nil { // never a URI: LUKS1 was read from the file
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, path, blkcrypt.LUKSOptions{Type: "luks1"})
	if err != nil {
		return err
	}
	defer h.Close()
	// Which passphrases: resuming, one that opens both stored headers;
	// starting, one per keyslot to keep, as cryptsetup asks.
	plan, err := h.PlanReencrypt(ctx, o)
	switch {
	case errors.Is(err, blkcrypt.ErrNoReencryption):
		return usageErr("device reencryption not in progress")
	case err != nil:
		return err
	}
	if plan.Resume {
		fmt.Fprintf(env.Stderr, "Log file %s exists, resuming reencryption.\n", plan.Log)
	}
	var pass []byte
	o.Passphrases = map[int][]byte{}
	defer func() {
		clear(pass)
		for _, b := range o.Passphrases {
			clear(b)
		}
	}()
	switch {
	case opts.KeyFile != "" || plan.Resume || o.Keyslot != nil:
		prompt := "Enter any existing passphrase: "
		if o.Keyslot != nil {
			prompt = fmt.Sprintf("Enter passphrase for key slot %d: ", *o.Keyslot)
		}
		if pass, _, err = opts.keyFileFlags.read(env, false, prompt); err != nil {
			return err
		}
	default:
		// One passphrase per line when stdin is not a terminal, as
		// cryptsetup reads them: the reader must not take more than a line.
		e := *env
		e.Stdin = oneByteReader{env.Stdin}
		for _, s := range plan.Keyslots {
			pass, _, err := opts.keyFileFlags.read(&e, false, fmt.Sprintf("Enter passphrase for key slot %d: ", s))
			if err != nil {
				return err
			}
			o.Passphrases[s] = pass
		}
	}

	var finish func()
	o.Progress, finish = opts.reencProgress(env, path, true)
	err = h.Reencrypt(ctx, pass, o)
	if err == nil {
		finish()
	}
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return usageErr("reencryption interrupted (%v); run reencrypt again in this directory to resume", ctx.Err())
	case errors.Is(err, fs.ErrExist):
		return &exitError{ExitBusy, fmt.Errorf("%w (remove the LUKS-%s.* files of an old run, or run reencrypt where its log is)", err, plan.UUID)}
	}
	return err
}

// oneByteReader reads one byte per call, so a buffered reader over it
// stops at the newline it looks for instead of reading ahead.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}
