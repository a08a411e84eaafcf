package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks2"
)

func init() {
	extraVerbs = append(extraVerbs,
		verb{"reencrypt", nil, runReencrypt, "DEVICE — new volume key/cipher in place, offline (LUKS2: --resilience, --hotzone-size, --resume-only, --init-only, --encrypt, --decrypt; LUKS1: cryptsetup's legacy files in the current directory, --block-size, --keep-key)"},
	)
}

func runReencrypt(ctx context.Context, env *Env, p *parsed) error {
	path, err := oneDevice(p)
	if err != nil {
		return err
	}
	if v1, err := isLUKS1Reencrypt(p, path); err != nil || v1 {
		if err != nil {
			return err
		}
		return runReencryptLUKS1(ctx, env, p, path)
	}
	switch {
	case p.bool("encrypt") && p.bool("decrypt"):
		return usageErr("--encrypt and --decrypt contradict each other")
	case p.bool("init-only") && p.bool("resume-only"):
		return usageErr("--init-only and --resume-only contradict each other")
	case p.bool("encrypt"):
		return runEncrypt(ctx, env, p, path)
	case p.bool("decrypt"):
		return runDecrypt(ctx, env, p, path)
	case p.has("reduce-device-size"):
		return usageErr("--reduce-device-size is only for --encrypt")
	}
	if t := p.str("type"); t != "" && t != "luks2" && t != "luks" {
		return usageErr("reencrypt supports LUKS2 only (LUKS1 reencryption is not supported yet)")
	}
	o := luks2.ReencryptOptions{
		Cipher:     p.str("cipher"),
		Resilience: p.str("resilience"),
		Hash:       p.str("hash"),
		InitOnly:   p.bool("init-only"),
		ResumeOnly: p.bool("resume-only"),
	}
	if p.has("key-slot") {
		s := slotOpt(p)
		if s < 0 || s >= luks2.MaxKeyslots {
			return usageErr("invalid --key-slot %d", s)
		}
		o.Slot = &s
	}
	if err := checkResilience(p, o.Resilience, o.Hash, o.ResumeOnly); err != nil {
		return err
	}
	if o.KeySize, o.SectorSize, o.HotzoneSize, err = reencSizes(p); err != nil {
		return err
	}
	if o.ResumeOnly && (o.Cipher != "" || o.KeySize != 0 || o.SectorSize != 0) {
		return usageErr("--resume-only takes the cipher, key size and sector size from the reencryption in progress")
	}
	pk, err := pbkdfOptions(p)
	if err != nil {
		return err
	}
	pk.Hash = "" // --hash is the checksum hash here, as in cryptsetup reencrypt
	o.Keyslot = luks2.KeyslotOptions{PBKDF: kdf.Options(pk)}

	f, hdev, h, err := luksDevice(ctx, p, path, false)
	if err != nil {
		return err
	}
	defer f.Close()
	h2, ok := h.(*luks2.Header)
	if !ok {
		return usageErr("reencrypt supports LUKS2 only (LUKS1 reencryption is not supported yet)")
	}
	if p.str("header") != "" {
		df, err := openDevice(path, false)
		if err != nil {
			return err
		}
		defer df.Close()
		o.Data = luks2.File{File: df}
	}
	return lockedRun(ctx, env, p, path, h2.UUID(), func(pass []byte, progress func(done, total uint64)) error {
		o.Progress = progress
		return luks2.Reencrypt(ctx, hdev, pass, o)
	})
}

// lockedRun takes cryptsetup's reencryption lock of the volume uuid, reads
// the passphrase and runs do with it and a progress callback; the error is
// mapped as reencErr maps it.
func lockedRun(ctx context.Context, env *Env, p *parsed, path, uuid string, do func(pass []byte, progress func(done, total uint64)) error) error {
	unlockReenc, err := luks2.LockReencryption(uuid)
	if err != nil {
		return err
	}
	defer unlockReenc()
	pass, _, err := readSecret(env, p, "Enter passphrase for "+path+": ")
	if err != nil {
		return err
	}
	defer clear(pass)
	progress, finish := reencProgress(env, p, path)
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
	case errors.Is(err, luks2.ErrNoReencryption):
		return usageErr("device reencryption not in progress")
	case errors.Is(err, luks2.ErrReencryptInProgress) && errors.Is(err, luks2.ErrInvalidOptions):
		return usageErr("%v", err)
	}
	return err
}

// checkResilience checks --resilience and --hash; datashift is what
// --encrypt with --reduce-device-size uses, and a resumed run may name it.
func checkResilience(p *parsed, res, hash string, resume bool) error {
	switch res {
	case "", "checksum", "journal", "none":
	case "datashift":
		if !resume && !p.has("reduce-device-size") {
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

// reencSizes reads --key-size (bytes returned), --sector-size and
// --hotzone-size.
func reencSizes(p *parsed) (keySize, sectorSize int, hotzone uint64, err error) {
	if p.has("key-size") {
		bits := p.int("key-size", 0)
		if bits <= 0 || bits%8 != 0 || bits > 4096 {
			return 0, 0, 0, usageErr("invalid --key-size %d (bits, a multiple of 8)", bits)
		}
		keySize = int(bits / 8)
	}
	if p.has("sector-size") {
		ss := p.int("sector-size", 0)
		if ss < 512 || ss > 4096 || ss&(ss-1) != 0 {
			return 0, 0, 0, usageErr("invalid --sector-size %d (512, 1024, 2048 or 4096)", ss)
		}
		sectorSize = int(ss)
	}
	if hz := p.str("hotzone-size"); hz != "" {
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
// the first hotzone, when the data size is known.
func reencProgress(env *Env, p *parsed, path string) (func(done, total uint64), func()) {
	var pr *progress
	var last uint64
	return func(done, total uint64) {
			if pr == nil {
				pr = newProgress(env, p, path, "reencrypted", int64(total))
				last = 0
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
func runEncrypt(ctx context.Context, env *Env, p *parsed, path string) error {
	if t := p.str("type"); t != "" && t != "luks2" {
		return usageErr("reencrypt --encrypt supports --type luks2 only (LUKS1 encryption is not supported yet)")
	}
	hpath := p.str("header")
	o := luks2.EncryptOptions{
		Cipher:     p.str("cipher"),
		Resilience: p.str("resilience"),
		Hash:       p.str("hash"),
		UUID:       p.str("uuid"),
		Label:      p.str("label"),
		InitOnly:   p.bool("init-only"),
		ResumeOnly: p.bool("resume-only"),
	}
	if err := checkResilience(p, o.Resilience, o.Hash, p.bool("resume-only")); err != nil {
		return err
	}
	var err error
	if o.KeySize, o.SectorSize, o.HotzoneSize, err = reencSizes(p); err != nil {
		return err
	}
	if p.has("reduce-device-size") {
		if o.ReduceDeviceSize, err = strconv.ParseUint(p.str("reduce-device-size"), 10, 64); err != nil {
			return usageErr("invalid --reduce-device-size")
		}
		if hpath != "" {
			return usageErr("--reduce-device-size with --header (a backward data shift with a detached header) is not supported")
		}
	}
	if hpath == "" && o.ReduceDeviceSize == 0 {
		return usageErr("encryption without detached header (--header) is not possible without data device size reduction (--reduce-device-size)")
	}
	if p.has("offset") {
		sec := p.int("offset", -1)
		if sec < 0 {
			return usageErr("invalid --offset")
		}
		o.Offset = uint64(sec) * 512
	}
	if p.has("key-slot") {
		o.Keyslot.Slot = slotOpt(p)
		if o.Keyslot.Slot < 0 || o.Keyslot.Slot >= luks2.MaxKeyslots {
			return usageErr("invalid --key-slot %d", o.Keyslot.Slot)
		}
	} else {
		o.Keyslot.Slot = luks2.AnySlot
	}
	pk, err := pbkdfOptions(p)
	if err != nil {
		return err
	}
	pk.Hash = ""
	o.Keyslot.PBKDF = kdf.Options(pk)

	df, err := blkcrypt.OpenFileLocked(path, false)
	if err != nil {
		return err
	}
	defer df.Close()
	data := luks2.File{File: df.File}
	if hpath != "" {
		_, serr := os.Stat(hpath)
		missing := errors.Is(serr, os.ErrNotExist)
		if missing && p.bool("resume-only") {
			return deviceErr(fmt.Errorf("header %s does not exist", hpath))
		}
		hf, err := openHeaderFile(hpath, missing)
		if err != nil {
			return err
		}
		defer hf.Close()
		if missing {
			// Nothing written (bad options, no passphrase): no file left.
			defer func() {
				if st, err := os.Stat(hpath); err == nil && st.Size() == 0 {
					os.Remove(hpath)
				}
			}()
		}
		o.Header = luks2.File{File: hf.File}
	}
	// The library says whether it resumes or starts (and refuses what it
	// would refuse) before a passphrase is asked for: a run in progress
	// is resumed with its passphrase; a new one asks for the new
	// passphrase (twice on a terminal), as luksFormat does.
	plan, err := luks2.PlanEncrypt(ctx, data, &o)
	if err != nil {
		return encryptErr(ctx, path, err)
	}
	var pass []byte
	if plan.Resume {
		pass, _, err = readSecret(env, p, "Enter passphrase for "+path+": ")
	} else {
		pass, err = newPassphrase(env, p, "", p.str("key-file") != "")
	}
	if err != nil {
		return err
	}
	defer clear(pass)
	unlockReenc, err := luks2.LockReencryption(plan.UUID)
	if err != nil {
		return err
	}
	defer unlockReenc()
	var finish func()
	o.Progress, finish = reencProgress(env, p, path)
	err = luks2.Encrypt(ctx, data, pass, o)
	if err == nil {
		finish()
	}
	return encryptErr(ctx, path, err)
}

// encryptErr maps an encryption's errors as reencErr does, and a device
// that holds LUKS already to cryptsetup's message.
func encryptErr(ctx context.Context, path string, err error) error {
	if errors.Is(err, luks2.ErrAlreadyLUKS) {
		return usageErr("device %s is already a LUKS device", path)
	}
	return reencErr(ctx, err)
}

// runDecrypt is reencrypt --decrypt: the data of a LUKS2 volume with a
// detached header becomes plaintext in place.
func runDecrypt(ctx context.Context, env *Env, p *parsed, path string) error {
	if p.has("reduce-device-size") {
		return usageErr("--reduce-device-size is only for --encrypt")
	}
	hpath := p.str("header")
	if hpath == "" {
		return usageErr("LUKS2 decryption requires --header option")
	}
	o := luks2.DecryptOptions{
		Resilience: p.str("resilience"),
		Hash:       p.str("hash"),
		Slot:       slotOpt(p),
		InitOnly:   p.bool("init-only"),
		ResumeOnly: p.bool("resume-only"),
	}
	if o.Resilience == "datashift" {
		return usageErr("--resilience datashift is only for --encrypt with --reduce-device-size")
	}
	if err := checkResilience(p, o.Resilience, o.Hash, p.bool("resume-only")); err != nil {
		return err
	}
	ks, ss, hz, err := reencSizes(p)
	if err != nil {
		return err
	}
	if ks != 0 || ss != 0 || p.str("cipher") != "" {
		return usageErr("--decrypt takes no --cipher, --key-size or --sector-size")
	}
	o.HotzoneSize = hz
	pk, err := pbkdfOptions(p)
	if err != nil {
		return err
	}
	pk.Hash = ""
	o.Keyslot = luks2.KeyslotOptions{PBKDF: kdf.Options(pk)}
	if _, err := os.Stat(hpath); errors.Is(err, os.ErrNotExist) {
		return runDecryptExport(ctx, env, p, path, hpath, o)
	}
	f, hdev, h, err := luksDevice(ctx, p, path, false)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, ok := h.(*luks2.Header); !ok {
		return usageErr("LUKS1 decryption is not supported yet")
	}
	df, err := openDevice(path, false)
	if err != nil {
		return err
	}
	defer df.Close()
	data := luks2.File{File: df}
	// The library says whether it resumes, starts or refuses before a
	// passphrase is asked for.
	plan, err := luks2.PlanDecrypt(ctx, hdev, data, o)
	if err != nil {
		return decryptErr(ctx, err)
	}
	return lockedRun(ctx, env, p, path, plan.UUID, func(pass []byte, progress func(done, total uint64)) error {
		o.Progress = progress
		return luks2.Decrypt(ctx, hdev, data, pass, o) // the plan refused an attached header
	})
}

// decryptErr maps a decryption's errors as reencErr does, and a header on
// the data device without a new header file to cryptsetup's message.
func decryptErr(ctx context.Context, err error) error {
	if errors.Is(err, luks2.ErrDecryptAttached) {
		return usageErr("LUKS2 decryption is supported with detached header device only (with data offset set to 0)")
	}
	return reencErr(ctx, err)
}

// runDecryptExport is reencrypt --decrypt --header FILE where FILE does
// not exist and DEVICE holds the header: as cryptsetup 2.6 does, the
// header is exported to FILE and the data is moved to the start of the
// device as it is decrypted.
func runDecryptExport(ctx context.Context, env *Env, p *parsed, path, hpath string, o luks2.DecryptOptions) error {
	if o.ResumeOnly {
		return deviceErr(fmt.Errorf("header %s does not exist", hpath))
	}
	if o.Resilience != "" && o.Resilience != "checksum" && o.Resilience != "datashift-checksum" {
		return usageErr("decryption with the header on the device uses --resilience datashift-checksum")
	}
	df, err := blkcrypt.OpenFileLocked(path, false)
	if err != nil {
		return err
	}
	defer df.Close()
	data := luks2.File{File: df.File}
	// No header device yet: the plan reads the header to export on data.
	plan, err := luks2.PlanDecrypt(ctx, nil, data, o)
	switch {
	case errors.Is(err, luks2.ErrReencryptInProgress):
		return usageErr("%v: on %s itself", luks2.ErrReencryptInProgress, path)
	case err != nil:
		return usageErr("device %s does not exist or access denied, and %s holds no LUKS2 header to export", hpath, path)
	}
	if err := confirm(env, p, fmt.Sprintf("Header file %s does not exist. Do you want to initialize LUKS2 decryption of device %s and export LUKS2 header to file %s?", hpath, path, hpath), ExitUsage, "Operation aborted."); err != nil {
		return err
	}
	hf, err := openHeaderFile(hpath, true)
	if err != nil {
		return err
	}
	defer hf.Close()
	err = lockedRun(ctx, env, p, path, plan.UUID, func(pass []byte, progress func(done, total uint64)) error {
		o.Progress = progress
		return luks2.Decrypt(ctx, luks2.File{File: hf.File}, data, pass, o)
	})
	// Nothing was exported (a wrong passphrase, bad options): no file.
	if st, serr := os.Stat(hpath); serr == nil && st.Size() == 0 {
		os.Remove(hpath)
	}
	return err
}

// openHeaderFile opens the header file hpath read-write with the device
// lock, first creating it (empty, mode 0600) when create is set, as
// cryptsetup's --encrypt and --decrypt do; a file created here is removed
// again when it cannot be opened.
func openHeaderFile(hpath string, create bool) (*blkcrypt.LockedFile, error) {
	if create {
		nf, err := os.OpenFile(hpath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, deviceErr(fmt.Errorf("cannot create header file %s: %w", hpath, err))
		}
		nf.Close()
	}
	hf, err := blkcrypt.OpenFileLocked(hpath, false)
	if err != nil && create {
		os.Remove(hpath)
	}
	return hf, err
}
