package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks2"
)

func init() {
	extraVerbs = append(extraVerbs,
		verb{"reencrypt", nil, runReencrypt, "DEVICE — new volume key/cipher in place, offline (LUKS2: --resilience, --hotzone-size, --resume-only, --init-only; LUKS1: cryptsetup's legacy files in the current directory, --block-size, --keep-key)"},
	)
}

// unboundMark is cryptsetup's " (unbound)" for a keyslot whose digest
// serves no segment but backups (an unbound key, or the new key of a
// reencryption that has not started).
func unboundMark(h *luks2.Header, k luks2.Keyslot) string {
	backup := map[int]bool{}
	for _, s := range h.Segments() {
		for _, f := range s.Flags {
			if strings.HasPrefix(f, "backup-") {
				backup[s.ID] = true
			}
		}
	}
	for _, d := range h.Digests() {
		if d.ID != k.Digest {
			continue
		}
		for _, s := range d.Segments {
			if !backup[s] {
				return ""
			}
		}
	}
	return " (unbound)"
}

// dumpReencryptKeyslot prints the reencrypt keyslot as cryptsetup's
// luksDump does.
func dumpReencryptKeyslot(w io.Writer, k luks2.Keyslot, st *luks2.ReencryptStatus) {
	fmt.Fprintf(w, "  %d: reencrypt (unbound)\n\tKey:        %d bits\n\tPriority:   ignored\n", k.ID, k.KeySize*8)
	fmt.Fprintf(w, "\tMode:       %s\n\tDirection:  %s\n\tResilience: %s\n", st.Mode, st.Direction, st.Resilience)
	if st.Resilience == "checksum" {
		fmt.Fprintf(w, "\tHash:       %s\n\tHash data:  %d [bytes]\n", st.Hash, st.HashBlock)
	}
	fmt.Fprintf(w, "\tArea offset:%d [bytes]\n\tArea length:%d [bytes]\n", k.AreaOffset, k.AreaSize)
	if k.Digest >= 0 {
		fmt.Fprintf(w, "\tDigest ID:  %d\n", k.Digest)
	}
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
	case p.bool("encrypt"):
		return usageErr("reencrypt --encrypt (encrypting a plaintext device in place) is not supported yet")
	case p.bool("decrypt"):
		return usageErr("reencrypt --decrypt is not supported yet")
	case p.bool("init-only") && p.bool("resume-only"):
		return usageErr("--init-only and --resume-only contradict each other")
	}
	if t := p.str("type"); t != "" && t != "luks2" && t != "luks" {
		return usageErr("reencrypt supports LUKS2 only (LUKS1 reencryption is not supported yet)")
	}
	o := luks2.ReencryptOptions{
		Cipher:     p.str("cipher"),
		Resilience: p.str("resilience"),
		Hash:       p.str("hash"),
		Slot:       slotOpt(p),
		InitOnly:   p.bool("init-only"),
		ResumeOnly: p.bool("resume-only"),
	}
	switch o.Resilience {
	case "", "checksum", "journal", "none":
	case "datashift":
		return usageErr("--resilience datashift is only for --encrypt, which is not supported yet")
	default:
		return usageErr("unknown --resilience %q (checksum, journal or none)", o.Resilience)
	}
	if o.Hash != "" && o.Resilience != "" && o.Resilience != "checksum" {
		return usageErr("--hash is only for --resilience checksum")
	}
	if p.has("key-size") {
		bits := p.int("key-size", 0)
		if bits <= 0 || bits%8 != 0 || bits > 4096 {
			return usageErr("invalid --key-size %d (bits, a multiple of 8)", bits)
		}
		o.KeySize = int(bits / 8)
	}
	if p.has("sector-size") {
		ss := p.int("sector-size", 0)
		if ss < 512 || ss > 4096 || ss&(ss-1) != 0 {
			return usageErr("invalid --sector-size %d (512, 1024, 2048 or 4096)", ss)
		}
		o.SectorSize = int(ss)
	}
	if hz := p.str("hotzone-size"); hz != "" {
		if o.HotzoneSize, err = parseSize(hz); err != nil {
			return usageErr("--hotzone-size: %v", err)
		}
		if o.HotzoneSize == 0 {
			return usageErr("--hotzone-size must not be zero")
		}
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
	unlockReenc, err := luks2.LockReencryption(h2.UUID())
	if err != nil {
		return err
	}
	defer unlockReenc()
	pass, _, err := readSecret(env, p, "Enter passphrase for "+path+": ")
	if err != nil {
		return err
	}
	defer clear(pass)
	// The data size is known once the header is read inside Reencrypt:
	// the progress line starts with the first hotzone.
	var pr *progress
	var last uint64
	o.Progress = func(done, total uint64) {
		if pr == nil {
			pr = newProgress(env, p, path, "reencrypted", int64(total))
			last = 0
		}
		pr.add(int64(done - last))
		last = done
	}
	err = luks2.Reencrypt(ctx, hdev, pass, o)
	if err == nil {
		pr.finish()
	}
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
