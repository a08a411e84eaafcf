package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// reencSizeFlags are the new geometry of a reencryption (serve
// --reencrypt takes them too).
type reencSizeFlags struct {
	KeySize     *int64 `flag:"key-size" short:"s" help:"key size in bits" def:"the current key size"`
	SectorSize  *int64 `flag:"sector-size" help:"encryption sector size in bytes" def:"the current sector size"`
	HotzoneSize string `flag:"hotzone-size" help:"bytes per step (units k, m, g)" def:"32M (2M with --resilience none)"`
}

type reencryptOptions struct {
	luksFlags
	keyFileFlags
	KeySlot    *int64 `flag:"key-slot" short:"S" help:"the keyslot to keep; the others are removed at the end" def:"the only keyslot"`
	Cipher     string `flag:"cipher" short:"c" help:"cipher specification, e.g. aes-xts-plain64" def:"the current cipher"`
	Hash       string `flag:"hash" short:"h" help:"the checksum hash of --resilience checksum" def:"sha256"`
	Resilience string `flag:"resilience" help:"checksum, journal or none; datashift with --reduce-device-size" def:"checksum"`
	reencSizeFlags
	InitOnly   bool `flag:"init-only" help:"write the reencryption metadata and stop"`
	ResumeOnly bool `flag:"resume-only" help:"only resume a reencryption in progress"`
	Encrypt    bool `flag:"encrypt" help:"encrypt a plaintext device in place (LUKS2)"`
	Decrypt    bool `flag:"decrypt" help:"decrypt the device in place (LUKS2 with --header)"`
	Offline    bool `flag:"force-offline-reencrypt" help:"accepted for cryptsetup compatibility (the reencrypt verb works offline; serve --reencrypt online)"`
	// --encrypt's new volume.
	ReduceDeviceSize *byteSize `flag:"reduce-device-size" help:"--encrypt: room for the header at the start of the device (twice the data shift); the plaintext must have been shrunk by it" def:"0 (needs --header)"`
	Offset           *int64    `flag:"offset" help:"--encrypt: the data offset in 512-byte sectors" def:"half of --reduce-device-size; 0 with --header"`
	UUID             string    `flag:"uuid" help:"--encrypt: the new volume's UUID" def:"random"`
	Label            string    `flag:"label" help:"--encrypt: the new volume's label"`
	pbkdfFlags
	progressFlags
	batchFlag
	luks1ReencryptFlags
}

func runReencrypt(ctx context.Context, env *Env, opts *reencryptOptions, args []string) error {
	path, err := oneArg(args)
	if err != nil {
		return err
	}
	switch {
	case opts.Encrypt && opts.Decrypt:
		return usageErr("--encrypt and --decrypt contradict each other")
	case opts.InitOnly && opts.ResumeOnly:
		return usageErr("--init-only and --resume-only contradict each other")
	}
	// The library tells the version; LUKS1 has no detached reencryption,
	// so the device itself says whether it is LUKS1.
	v1 := !blkcrypt.IsURI(path) && isLUKS1(ctx, path)
	switch t := opts.Type; {
	case t == "luks1" && !v1 && !opts.Encrypt:
		return usageErr("device %s is not a LUKS1 device", path)
	case t == "luks2" && v1:
		return usageErr("device %s holds LUKS1, not luks2", path)
	case v1:
		return runReencryptLUKS1(ctx, env, opts, path)
	case opts.Encrypt:
		return runEncrypt(ctx, env, opts, path)
	case t != "" && t != "luks2" && t != "luks":
		return usageErr("reencrypt supports LUKS1 and LUKS2 only")
	case opts.Decrypt:
		return runDecrypt(ctx, env, opts, path)
	case opts.ReduceDeviceSize != nil:
		return usageErr("--reduce-device-size is only for --encrypt")
	}
	o := blkcrypt.LUKSReencryptOptions{
		Cipher:     opts.Cipher,
		Resilience: opts.Resilience,
		Hash:       opts.Hash,
		InitOnly:   opts.InitOnly,
		ResumeOnly: opts.ResumeOnly,
	}
	if o.Keyslot, err = reencSlot(opts.KeySlot, luks2.MaxKeyslots); err != nil {
		return err
	}
	if err := checkResilience(o.Resilience, o.Hash, o.ResumeOnly, false); err != nil {
		return err
	}
	if o.KeySize, o.SectorSize, o.HotzoneSize, err = opts.sizes(); err != nil {
		return err
	}
	if o.ResumeOnly && (o.Cipher != "" || o.KeySize != 0 || o.SectorSize != 0) {
		return usageErr("--resume-only takes the cipher, key size and sector size from the reencryption in progress")
	}
	// --hash is the checksum hash here, as in cryptsetup reencrypt.
	if o.PBKDF, err = opts.pbkdfFlags.options(""); err != nil {
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, path, blkcrypt.LUKSOptions{Header: opts.Header})
	if err != nil {
		return err
	}
	defer h.Close()
	// The library refuses what it would refuse before the passphrase is
	// asked for.
	if _, err := h.PlanReencrypt(ctx, o); err != nil {
		return reencErr(ctx, err)
	}
	return withPassphrase(ctx, env, opts, path, func(pass []byte, progress func(done, total uint64)) error {
		o.Progress = progress
		return h.Reencrypt(ctx, pass, o)
	})
}

// reencSlot is --key-slot, checked against the version's keyslot count.
func reencSlot(n *int64, max int) (*int, error) {
	if n == nil {
		return nil, nil
	}
	if *n < 0 || *n >= int64(max) {
		return nil, usageErr("invalid --key-slot %d", *n)
	}
	return blkcrypt.Slot(int(*n)), nil
}

// isLUKS1 reports whether path holds a LUKS1 header, or one marked by a
// LUKS1 reencryption in progress (which only LUKS1 reencryption can
// finish).
func isLUKS1(ctx context.Context, path string) bool {
	h, err := blkcrypt.OpenLUKS(ctx, path, blkcrypt.LUKSOptions{Type: "luks1", ReadOnly: true})
	if err != nil {
		return false
	}
	h.Close()
	return true
}

// withPassphrase reads the passphrase and runs do with it and a progress
// callback; the error is mapped as reencErr maps it.
func withPassphrase(ctx context.Context, env *Env, opts *reencryptOptions, path string, do func(pass []byte, progress func(done, total uint64)) error) error {
	pass, _, err := opts.keyFileFlags.read(env, false, "Enter passphrase for "+path+": ")
	if err != nil {
		return err
	}
	defer clear(pass)
	progress, finish := opts.reencProgress(env, path, false)
	if err = do(pass, progress); err == nil {
		finish()
	}
	return reencErr(ctx, err)
}

// reencErr maps the library's reencryption errors to cryptsetup's
// messages and exit codes.
func reencErr(ctx context.Context, err error) error {
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Stopped between hotzones: the metadata says where.
		return usageErr("reencryption interrupted (%v); resume it with reencrypt --resume-only", ctx.Err())
	case errors.Is(err, blkcrypt.ErrNoReencryption):
		return usageErr("device reencryption not in progress")
	case errors.Is(err, blkcrypt.ErrReencryptInProgress) && errors.Is(err, blkcrypt.ErrInvalidOptions):
		return usageErr("%v", err)
	}
	return err
}

// checkResilience checks --resilience and --hash; datashift is what
// --encrypt with --reduce-device-size (reduce) uses, and a resumed run may
// name it.
func checkResilience(res, hash string, resume, reduce bool) error {
	switch res {
	case "", "checksum", "journal", "none":
	case "datashift":
		if !resume && !reduce {
			return usageErr("--resilience datashift is only for --encrypt with --reduce-device-size")
		}
	default:
		return usageErr("unknown --resilience %q (checksum, journal, none or datashift)", res)
	}
	if hash != "" && res != "" && res != "checksum" {
		return usageErr("--hash is only for --resilience checksum")
	}
	return nil
}

// sizes reads --key-size (bytes returned), --sector-size and
// --hotzone-size.
func (f reencSizeFlags) sizes() (keySize, sectorSize int, hotzone uint64, err error) {
	if keySize, err = keyBits(f.KeySize, 0, 4096); err != nil {
		return 0, 0, 0, err
	}
	if f.SectorSize != nil {
		ss := *f.SectorSize
		if ss < 512 || ss > 4096 || ss&(ss-1) != 0 {
			return 0, 0, 0, usageErr("invalid --sector-size %d (512, 1024, 2048 or 4096)", ss)
		}
		sectorSize = int(ss)
	}
	if hz := f.HotzoneSize; hz != "" {
		if hotzone, err = parseSize(hz); err != nil {
			return 0, 0, 0, usageErr("--hotzone-size: %v", err)
		}
		if hotzone == 0 {
			return 0, 0, 0, usageErr("--hotzone-size must not be zero")
		}
	}
	return keySize, sectorSize, hotzone, nil
}

// reencProgress is the progress callback of a run: the line starts with
// the first report, when the data size is known. A LUKS1 run (fromFirst)
// counts from where its first report says it is, a LUKS2 run from 0.
func (opts *reencryptOptions) reencProgress(env *Env, path string, fromFirst bool) (func(done, total uint64), func()) {
	var pr *progress
	var last uint64
	return func(done, total uint64) {
			if pr == nil {
				pr = opts.progressFlags.start(env, opts.Batch, path, "reencrypted", int64(total))
				last = 0
				if fromFirst {
					last = done
				}
			}
			pr.add(int64(done - last))
			last = done
		}, func() {
			pr.finish()
		}
}

// runEncrypt is reencrypt --encrypt: a plaintext device becomes LUKS2 in
// place, with the header at its start (--reduce-device-size, datashift) or
// in --header FILE (created when missing); a run in progress is resumed.
func runEncrypt(ctx context.Context, env *Env, opts *reencryptOptions, path string) error {
	if t := opts.Type; t != "" && t != "luks2" {
		return usageErr("reencrypt --encrypt supports --type luks2 only (LUKS1 encryption is not supported yet)")
	}
	hpath := opts.Header
	o := blkcrypt.EncryptOptions{
		Cipher:     opts.Cipher,
		Resilience: opts.Resilience,
		Hash:       opts.Hash,
		UUID:       opts.UUID,
		Label:      opts.Label,
		Header:     hpath,
		InitOnly:   opts.InitOnly,
		ResumeOnly: opts.ResumeOnly,
	}
	if err := checkResilience(o.Resilience, o.Hash, o.ResumeOnly, opts.ReduceDeviceSize != nil); err != nil {
		return err
	}
	var err error
	if o.KeySize, o.SectorSize, o.HotzoneSize, err = opts.sizes(); err != nil {
		return err
	}
	if opts.ReduceDeviceSize != nil {
		o.ReduceDeviceSize = uint64(*opts.ReduceDeviceSize)
		if hpath != "" {
			return usageErr("--reduce-device-size with --header (a backward data shift with a detached header) is not supported")
		}
	}
	if hpath == "" && o.ReduceDeviceSize == 0 {
		return usageErr("encryption without detached header (--header) is not possible without data device size reduction (--reduce-device-size)")
	}
	if opts.Offset != nil {
		if *opts.Offset < 0 {
			return usageErr("invalid --offset")
		}
		o.Offset = uint64(*opts.Offset)
	}
	if o.Keyslot, err = reencSlot(opts.KeySlot, luks2.MaxKeyslots); err != nil {
		return err
	}
	if o.PBKDF, err = opts.pbkdfFlags.options(""); err != nil {
		return err
	}
	if hpath != "" && o.ResumeOnly {
		if _, err := os.Stat(hpath); errors.Is(err, os.ErrNotExist) {
			return deviceErr(fmt.Errorf("header %s does not exist", hpath))
		}
	}
	// The library says whether it resumes or starts (and refuses what it
	// would refuse) before a passphrase is asked for: a run in progress
	// is resumed with its passphrase; a new one asks for the new
	// passphrase (twice on a terminal), as luksFormat does.
	plan, err := blkcrypt.PlanEncrypt(ctx, path, o)
	if err != nil {
		return encryptErr(ctx, path, err)
	}
	var pass []byte
	if plan.Resume {
		pass, _, err = opts.keyFileFlags.read(env, false, "Enter passphrase for "+path+": ")
	} else {
		pass, err = newSecret(env, opts.keyFileFlags, newKeyFlags{}, "", opts.KeyFile != "")
	}
	if err != nil {
		return err
	}
	defer clear(pass)
	var finish func()
	o.Progress, finish = opts.reencProgress(env, path, false)
	err = blkcrypt.Encrypt(ctx, path, pass, o)
	if err == nil {
		finish()
	}
	return encryptErr(ctx, path, err)
}

// encryptErr maps an encryption's errors as reencErr does, and a device
// that holds LUKS already to cryptsetup's message.
func encryptErr(ctx context.Context, path string, err error) error {
	if errors.Is(err, blkcrypt.ErrAlreadyLUKS) {
		return usageErr("device %s is already a LUKS device", path)
	}
	return reencErr(ctx, err)
}

// runDecrypt is reencrypt --decrypt: the data of a LUKS2 volume with a
// detached header becomes plaintext in place.
func runDecrypt(ctx context.Context, env *Env, opts *reencryptOptions, path string) error {
	if opts.ReduceDeviceSize != nil {
		return usageErr("--reduce-device-size is only for --encrypt")
	}
	hpath := opts.Header
	if hpath == "" {
		return usageErr("LUKS2 decryption requires --header option")
	}
	o := blkcrypt.DecryptOptions{
		Resilience: opts.Resilience,
		Hash:       opts.Hash,
		InitOnly:   opts.InitOnly,
		ResumeOnly: opts.ResumeOnly,
	}
	if opts.KeySlot != nil {
		o.Keyslot = blkcrypt.Slot(int(*opts.KeySlot))
	}
	if err := checkResilience(o.Resilience, o.Hash, false, false); err != nil {
		return err
	}
	ks, ss, hz, err := opts.sizes()
	if err != nil {
		return err
	}
	if ks != 0 || ss != 0 || opts.Cipher != "" {
		return usageErr("--decrypt takes no --cipher, --key-size or --sector-size")
	}
	o.HotzoneSize = hz
	if o.PBKDF, err = opts.pbkdfFlags.options(""); err != nil {
		return err
	}
	if _, err := os.Stat(hpath); errors.Is(err, os.ErrNotExist) {
		return runDecryptExport(ctx, env, opts, path, hpath, o)
	}
	h, err := blkcrypt.OpenLUKS(ctx, path, blkcrypt.LUKSOptions{Header: hpath})
	if err != nil {
		return err
	}
	defer h.Close()
	// The library says whether it resumes, starts or refuses before a
	// passphrase is asked for.
	if _, err := h.PlanDecrypt(ctx, o); err != nil {
		return decryptErr(ctx, err)
	}
	return withPassphrase(ctx, env, opts, path, func(pass []byte, progress func(done, total uint64)) error {
		o.Progress = progress
		return h.Decrypt(ctx, pass, o)
	})
}

// decryptErr maps a decryption's errors as reencErr does, and a header on
// the data device without a new header file to cryptsetup's message.
func decryptErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, blkcrypt.ErrDecryptAttached):
		return usageErr("LUKS2 decryption is supported with detached header device only (with data offset set to 0)")
	case errors.Is(err, blkcrypt.ErrUnsupported):
		return usageErr("%v", err)
	}
	return reencErr(ctx, err)
}

// runDecryptExport is reencrypt --decrypt --header FILE where FILE does
// not exist and DEVICE holds the header: as cryptsetup 2.6 does, the
// header is exported to FILE and the data is moved to the start of the
// device as it is decrypted.
func runDecryptExport(ctx context.Context, env *Env, opts *reencryptOptions, path, hpath string, o blkcrypt.DecryptOptions) error {
	if o.ResumeOnly {
		return deviceErr(fmt.Errorf("header %s does not exist", hpath))
	}
	if o.Resilience != "" && o.Resilience != "checksum" && o.Resilience != "datashift-checksum" {
		return usageErr("decryption with the header on the device uses --resilience datashift-checksum")
	}
	o.ExportHeader = hpath
	noHeader := usageErr("device %s does not exist or access denied, and %s holds no LUKS2 header to export", hpath, path)
	h, err := blkcrypt.OpenLUKS(ctx, path, blkcrypt.LUKSOptions{})
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) || errors.Is(err, blkcrypt.ErrBusy):
		return err
	case err != nil:
		return noHeader
	}
	defer h.Close()
	switch _, err := h.PlanDecrypt(ctx, o); {
	case errors.Is(err, blkcrypt.ErrReencryptInProgress):
		return usageErr("%v: on %s itself", blkcrypt.ErrReencryptInProgress, path)
	case err != nil:
		return noHeader
	}
	if err := opts.confirm(env, fmt.Sprintf("Header file %s does not exist. Do you want to initialize LUKS2 decryption of device %s and export LUKS2 header to file %s?", hpath, path, hpath), ExitUsage, "Operation aborted."); err != nil {
		return err
	}
	return withPassphrase(ctx, env, opts, path, func(pass []byte, progress func(done, total uint64)) error {
		o.Progress = progress
		return h.Decrypt(ctx, pass, o)
	})
}
