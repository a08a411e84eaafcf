package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/token"
)

// tokenFlags choose how a verb that opens a LUKS2 volume uses its tokens
// (package token): by default, as systemd-cryptsetup does, the tokens that
// need no interaction are tried first and a passphrase is asked for when
// none works; --token-only never falls back to a passphrase.
type tokenFlags struct {
	TokenOnly   bool   `flag:"token-only" help:"unlock with a LUKS2 token only, never ask for a passphrase"`
	TokenID     *int64 `flag:"token-id" help:"unlock with this token only (0-31), as cryptsetup open --token-id" def:"every token"`
	TokenType   string `flag:"token-type" help:"try only tokens of this type (systemd-tpm2, systemd-pkcs11, clevis)" def:"every type"`
	TPM2Device  string `flag:"tpm2-device" help:"TPM2 in systemd's spelling (device:/dev/tpmrm0, swtpm:host=H,port=P, swtpm:path=S)" def:"/dev/tpmrm0"`
	TPM2PINFile string `flag:"tpm2-pin-file" help:"read the TPM2 PIN from this file (one trailing newline dropped)" def:"asked on a terminal"`
	// The token's pkcs11: URI may carry pin-value or pin-source too.
	PKCS11PINFile string `flag:"pkcs11-pin-file" help:"read the PKCS#11 security token's PIN from this file (one trailing newline dropped)" def:"the URI's pin-source or pin-value, else asked on a terminal"`
}

// asked reports whether the command line names a token to use.
func (t tokenFlags) asked() bool { return t.TokenOnly || t.TokenID != nil || t.TokenType != "" }

// pin reads --tpm2-pin-file, else --pkcs11-pin-file, or nil without
// either.
func (t tokenFlags) pin() ([]byte, error) {
	file, flag := t.TPM2PINFile, "--tpm2-pin-file"
	if file == "" {
		file, flag = t.PKCS11PINFile, "--pkcs11-pin-file"
	}
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageErr("cannot read %s: %w", flag, err)
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		clear(b[n-1:])
		b = b[:n-1]
	}
	return b, nil
}

// unlockOptions are token.Unlock's options for the flags.
func (t tokenFlags) unlockOptions() (token.Options, error) {
	o := token.Options{TPM2Device: t.TPM2Device, TokenType: t.TokenType}
	if t.TokenID != nil {
		if *t.TokenID < 0 || *t.TokenID > 31 {
			return o, usageErr("--token-id %d is not in 0..31", *t.TokenID)
		}
		id := int(*t.TokenID)
		o.TokenID = &id
	}
	return o, nil
}

// unlockToken tries the tokens of the LUKS header h per the flags and
// returns the passphrase one yields (the caller wipes it), or nil when
// none does and a passphrase may be asked for instead; under --token-only
// that is an error (exit 2). A token needing a PIN gets --tpm2-pin-file,
// or a PIN asked on the terminal.
func (t tokenFlags) unlockToken(ctx context.Context, env *Env, h *blkcrypt.LUKS) ([]byte, error) {
	o, err := t.unlockOptions()
	if err != nil {
		return nil, err
	}
	if o.PIN, err = t.pin(); err != nil {
		return nil, err
	}
	defer func() { clear(o.PIN) }()
	pass, _, err := token.Unlock(ctx, h, o)
	if err != nil && o.PIN == nil && errors.Is(err, token.ErrNeedPIN) && env.Prompt != nil && env.StdinIsTerminal {
		prompt := "Please enter TPM2 PIN: "
		if strings.Contains(err.Error(), token.TypePKCS11) {
			prompt = "Please enter security token PIN: "
		}
		if o.PIN, err = env.Prompt(prompt); err != nil {
			return nil, err
		}
		pass, _, err = token.Unlock(ctx, h, o)
	}
	if err == nil {
		return pass, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if t.TokenOnly {
		return nil, &exitError{ExitPermission, fmt.Errorf("no token unlocked the volume: %w", err)}
	}
	if t.asked() && !errors.Is(err, token.ErrNoToken) && env.Stderr != nil {
		fmt.Fprintf(env.Stderr, "blkcrypt: %v\n", err)
	}
	return nil, nil
}

// tokenPassphrase is the token step before a LUKS passphrase is read:
// unless a key file or volume key was given, the tokens of the header at
// path (on part when not nil) are tried. It returns nil, nil when the
// passphrase is to be read as before (no LUKS2 header, no token works).
func tokenPassphrase(ctx context.Context, env *Env, t tokenFlags, path, header string, part *diskPartition, keyGiven bool) ([]byte, error) {
	if keyGiven {
		if t.TokenOnly {
			return nil, usageErr("--token-only cannot be used with --key-file or --volume-key-file")
		}
		return nil, nil
	}
	lo := blkcrypt.LUKSOptions{ReadOnly: true, Header: header}
	var h *blkcrypt.LUKS
	var err error
	if part != nil && header == "" {
		h, err = blkcrypt.OpenLUKSDevice(ctx, part, lo)
	} else {
		h, err = blkcrypt.OpenLUKS(ctx, path, lo)
	}
	if err != nil {
		if t.TokenOnly {
			return nil, &exitError{ExitDevice, fmt.Errorf("--token-only: %s holds no LUKS2 header: %w", path, err)}
		}
		return nil, nil
	}
	defer h.Close()
	return t.unlockToken(ctx, env, h)
}

// enrollOptions are systemd-cryptenroll's options.
type enrollOptions struct {
	UnlockKeyFile string `flag:"unlock-key-file" help:"a file holding an existing passphrase" def:"asked on the terminal"`
	TPM2Device    string `flag:"tpm2-device" help:"enroll a TPM2 token on this TPM (systemd's spelling; auto is /dev/tpmrm0)"`
	TPM2PCRs      string `flag:"tpm2-pcrs" help:"PCRs to seal to, e.g. 7 or 0+7 (\"\" for none)" def:"7"`
	TPM2WithPIN   bool   `flag:"tpm2-with-pin" help:"the TPM2 token also needs a PIN (--tpm2-pin-file, else asked twice)"`
	TPM2PINFile   string `flag:"tpm2-pin-file" help:"read the new TPM2 PIN from this file" def:"asked on a terminal"`
	RecoveryKey   bool   `flag:"recovery-key" help:"enroll a recovery key and print it"`
	// A pin-value in the URI is a secret in argv: --pkcs11-pin-file or
	// the terminal is better (systemd accepts it, and so do we).
	PKCS11TokenURI string `flag:"pkcs11-token-uri" help:"enroll a PKCS#11 security token by its pkcs11: URI (its X.509 certificate's RSA key; a pin-value in the URI shows in the process list: prefer --pkcs11-pin-file); auto is the only token present, list prints the tokens"`
	PKCS11PINFile  string `flag:"pkcs11-pin-file" help:"read the security token's PIN from this file" def:"the URI's pin-source or pin-value, else asked on a terminal"`
	WipeSlot       string `flag:"wipe-slot" help:"after enrolling, remove these keyslots: numbers, all, empty, password, recovery, tpm2, clevis (comma-separated)"`
}

// runEnroll is systemd-cryptenroll DEVICE: a TPM2 token, a PKCS#11
// token or a recovery key in a new keyslot (keyslot and token in one
// header update), then --wipe-slot. --pkcs11-token-uri list needs no
// DEVICE.
func runEnroll(ctx context.Context, env *Env, o *enrollOptions, args []string) error {
	if o.PKCS11TokenURI == "list" {
		uris, err := token.PKCS11TokenURIs("")
		if err != nil {
			return err
		}
		for _, u := range uris {
			fmt.Fprintln(env.Stdout, u)
		}
		return nil
	}
	if len(args) != 1 {
		return usageErr("enroll takes one DEVICE")
	}
	dev := args[0]
	tpm, pkcs11 := o.TPM2Device != "", o.PKCS11TokenURI != ""
	if n := btoi(tpm) + btoi(pkcs11) + btoi(o.RecoveryKey); n > 1 {
		return usageErr("only one of --tpm2-device, --pkcs11-token-uri and --recovery-key can be enrolled at once")
	}
	if !tpm && !pkcs11 && !o.RecoveryKey && o.WipeSlot == "" {
		return usageErr("nothing to do: give --tpm2-device, --pkcs11-token-uri, --recovery-key or --wipe-slot")
	}
	if pkcs11 && o.PKCS11TokenURI != "auto" {
		if _, err := token.ParsePKCS11URI(o.PKCS11TokenURI); err != nil {
			return usageErr("--pkcs11-token-uri: %w", err)
		}
	}
	var pcrs []int
	if tpm {
		var err error
		if pcrs, err = parsePCRs(o.TPM2PCRs); err != nil {
			return err
		}
	}
	if err := checkDevice(dev, false); err != nil {
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, dev, blkcrypt.LUKSOptions{})
	if err != nil {
		return deviceErr(fmt.Errorf("device %s is not a valid LUKS device: %w", dev, err))
	}
	defer h.Close()
	existing, err := existingPassphrase(env, o.UnlockKeyFile)
	if err != nil {
		return err
	}
	defer clear(existing)
	slot, err := h.TestPassphrase(ctx, existing, blkcrypt.KeyOptions{})
	if err != nil {
		return err
	}
	newSlot := -1
	eo := token.EnrollOptions{Existing: existing}
	switch {
	case tpm:
		pin, err := newTPM2PIN(env, o)
		if err != nil {
			return err
		}
		defer clear(pin)
		s, _, err := token.EnrollTPM2(ctx, h, token.TPM2EnrollOptions{EnrollOptions: eo, TPM2Device: o.TPM2Device, PCRs: pcrs, PIN: pin})
		if err != nil {
			return err
		}
		newSlot = s
		fmt.Fprintf(env.Stderr, "New TPM2 token enrolled as key slot %d.\n", s)
	case pkcs11:
		s, err := enrollPKCS11(ctx, env, h, o, eo)
		if err != nil {
			return err
		}
		newSlot = s
		fmt.Fprintf(env.Stderr, "New PKCS#11 token enrolled as key slot %d.\n", s)
	case o.RecoveryKey:
		key, s, _, err := token.EnrollRecovery(ctx, h, eo)
		if err != nil {
			return err
		}
		newSlot = s
		fmt.Fprintf(env.Stdout, "%s\n", key)
		clear(key)
		fmt.Fprintf(env.Stderr, "New recovery key enrolled as key slot %d.\n", s)
	}
	if o.WipeSlot != "" {
		return wipeSlots(ctx, env, h, o.WipeSlot, newSlot, slot)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// enrollPKCS11 enrolls the security token --pkcs11-token-uri names (auto:
// the only one present). Its PIN is --pkcs11-pin-file's, else the URI's,
// else asked on the terminal if the token needs one to show its
// certificate.
func enrollPKCS11(ctx context.Context, env *Env, h *blkcrypt.LUKS, o *enrollOptions, eo token.EnrollOptions) (int, error) {
	uri := o.PKCS11TokenURI
	if uri == "auto" {
		uris, err := token.PKCS11TokenURIs("")
		if err != nil {
			return -1, err
		}
		if len(uris) != 1 {
			return -1, usageErr("--pkcs11-token-uri auto: %d security tokens present, want exactly one (list shows them)", len(uris))
		}
		uri = uris[0]
	}
	po := token.PKCS11EnrollOptions{EnrollOptions: eo, URI: uri}
	if o.PKCS11PINFile != "" {
		pin, err := tokenFlags{PKCS11PINFile: o.PKCS11PINFile}.pin()
		if err != nil {
			return -1, err
		}
		defer clear(pin)
		po.PIN = pin
	}
	s, _, err := token.EnrollPKCS11(ctx, h, po)
	if errors.Is(err, token.ErrNeedPIN) && po.PIN == nil {
		if env.Prompt == nil || !env.StdinIsTerminal {
			return -1, usageErr("%v: give --pkcs11-pin-file or run on a terminal", err)
		}
		if po.PIN, err = env.Prompt("Please enter security token PIN: "); err != nil {
			return -1, err
		}
		defer clear(po.PIN)
		s, _, err = token.EnrollPKCS11(ctx, h, po)
	}
	return s, err
}

// existingPassphrase reads a key file (- is stdin), or asks on the
// terminal, as --key-file does.
func existingPassphrase(env *Env, file string) ([]byte, error) {
	b, _, err := keyFileFlags{KeyFile: file}.read(env, false, "Please enter current passphrase for disk: ")
	return b, err
}

// newTPM2PIN is the PIN of a new TPM2 token: nil without --tpm2-with-pin,
// else --tpm2-pin-file, else asked twice on the terminal.
func newTPM2PIN(env *Env, o *enrollOptions) ([]byte, error) {
	if !o.TPM2WithPIN {
		return nil, nil
	}
	if o.TPM2PINFile != "" {
		pin, err := tokenFlags{TPM2PINFile: o.TPM2PINFile}.pin()
		if err == nil && len(pin) == 0 {
			err = usageErr("--tpm2-pin-file %s is empty", o.TPM2PINFile)
		}
		return pin, err
	}
	if env.Prompt == nil || !env.StdinIsTerminal {
		return nil, usageErr("--tpm2-with-pin needs a terminal or --tpm2-pin-file")
	}
	a, err := env.Prompt("Please enter TPM2 PIN: ")
	if err != nil {
		return nil, err
	}
	b, err := env.Prompt("Please enter TPM2 PIN (repeat): ")
	if err != nil {
		clear(a)
		return nil, err
	}
	defer clear(b)
	if !bytes.Equal(a, b) || len(a) == 0 {
		clear(a)
		return nil, usageErr("the PINs do not match or are empty")
	}
	return a, nil
}

// parsePCRs reads systemd's PCR list: numbers joined by + or ,; "" is none.
func parsePCRs(s string) ([]int, error) {
	if s == "" {
		return []int{}, nil
	}
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 23 {
			return nil, usageErr("--tpm2-pcrs: %q is not a PCR number 0..23", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// wipeSlots removes the keyslots spec names (systemd-cryptenroll's
// --wipe-slot), never the one just enrolled, and the tokens left naming
// none of the remaining keyslots. With nothing enrolled, the slot that
// authorised the call is kept too, so the volume stays openable.
func wipeSlots(ctx context.Context, env *Env, h *blkcrypt.LUKS, spec string, enrolled, authorised int) error {
	hd, err := h.Header(ctx)
	if err != nil {
		return err
	}
	toks, err := h.Tokens(ctx)
	if err != nil {
		return err
	}
	byType := map[int]string{} // keyslot → the type of a token naming it
	for _, js := range toks {
		typ, slots := tokenSlots(js)
		for _, s := range slots {
			byType[s] = typ
		}
	}
	active := hd.ActiveKeyslots()
	var wipe []int
	for _, w := range strings.Split(spec, ",") {
		switch w = strings.TrimSpace(w); w {
		case "all":
			wipe = append(wipe, active...)
		case "empty":
			for _, s := range active {
				if _, err := h.TestPassphrase(ctx, []byte{}, blkcrypt.KeyOptions{Keyslot: &s}); err == nil {
					wipe = append(wipe, s)
				}
			}
		case "password":
			for _, s := range active {
				if _, ok := byType[s]; !ok {
					wipe = append(wipe, s)
				}
			}
		case "recovery", "tpm2", "clevis", "pkcs11", "fido2":
			typ := map[string]string{"recovery": token.TypeRecovery, "tpm2": token.TypeTPM2, "clevis": token.TypeClevis,
				"pkcs11": token.TypePKCS11, "fido2": "systemd-fido2"}[w]
			for _, s := range active {
				if byType[s] == typ {
					wipe = append(wipe, s)
				}
			}
		default:
			n, err := strconv.Atoi(w)
			if err != nil || !slices.Contains(active, n) {
				return usageErr("--wipe-slot: %q is no active keyslot or slot class", w)
			}
			wipe = append(wipe, n)
		}
	}
	slices.Sort(wipe)
	wipe = slices.Compact(wipe)
	keep := enrolled
	if keep < 0 {
		keep = authorised
	}
	for _, s := range wipe {
		if s == keep {
			continue
		}
		if err := h.KillSlot(ctx, s, blkcrypt.KeyOptions{Force: true}); err != nil {
			return fmt.Errorf("wiping keyslot %d: %w", s, err)
		}
		fmt.Fprintf(env.Stderr, "Wiped slot %d.\n", s)
	}
	// Tokens that now name no active keyslot go too.
	if hd, err = h.Header(ctx); err != nil {
		return err
	}
	left := hd.ActiveKeyslots()
	for id, js := range toks {
		_, slots := tokenSlots(js)
		if len(slots) > 0 && !slices.ContainsFunc(slots, func(s int) bool { return slices.Contains(left, s) }) {
			if err := h.RemoveToken(ctx, id); err != nil && !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				return fmt.Errorf("removing token %d: %w", id, err)
			}
		}
	}
	return nil
}

// tokenSlots is a token's type and keyslots, as far as they parse.
func tokenSlots(js []byte) (string, []int) {
	var t struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
	}
	if json.Unmarshal(js, &t) != nil {
		return "", nil
	}
	var out []int
	for _, k := range t.Keyslots {
		if n, err := strconv.Atoi(k); err == nil {
			out = append(out, n)
		}
	}
	return t.Type, out
}

// bindOptions are clevis luks bind's options.
type bindOptions struct {
	Device    string `flag:"device" help:"the LUKS2 device (clevis's -d); or the first argument"`
	KeyFile   string `flag:"key-file" short:"k" help:"a file holding an existing passphrase (- for stdin)" def:"asked on the terminal"`
	Trust     bool   `flag:"trust" short:"y" help:"trust the tang server's advertisement without asking"`
	Slot      *int64 `flag:"key-slot" short:"s" help:"the new keyslot" def:"the first free slot"`
	TokenID   *int64 `flag:"token-id" short:"t" help:"the new token's id" def:"the first free id"`
	TPM2Dev   string `flag:"tpm2-device" help:"the tpm2 pin's TPM in systemd's spelling" def:"/dev/tpmrm0"`
	Verbosity bool   `flag:"verbose" short:"v" help:"print the new keyslot"`
}

// runBind is clevis luks bind: DEVICE PIN CONFIG (or -d DEVICE PIN CONFIG).
func runBind(ctx context.Context, env *Env, o *bindOptions, args []string) error {
	if o.Device != "" {
		args = append([]string{o.Device}, args...)
	}
	if len(args) != 3 {
		return usageErr("bind takes DEVICE PIN CONFIG")
	}
	dev, pin, cfg := args[0], args[1], args[2]
	if err := checkDevice(dev, false); err != nil {
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, dev, blkcrypt.LUKSOptions{})
	if err != nil {
		return deviceErr(fmt.Errorf("device %s is not a valid LUKS device: %w", dev, err))
	}
	defer h.Close()
	existing, err := existingPassphrase(env, o.KeyFile)
	if err != nil {
		return err
	}
	defer clear(existing)
	bo := token.ClevisBindOptions{EnrollOptions: token.EnrollOptions{Existing: existing},
		ClevisOptions: token.ClevisOptions{TPM2Device: o.TPM2Dev, TrustTang: o.Trust}}
	if o.Slot != nil {
		n := int(*o.Slot)
		bo.NewKeyslot = &n
	}
	if o.TokenID != nil {
		n := int(*o.TokenID)
		bo.TokenID = &n
	}
	slot, _, err := token.BindClevis(ctx, h, pin, []byte(cfg), bo)
	if err != nil {
		return err
	}
	if o.Verbosity {
		fmt.Fprintf(env.Stdout, "%d\n", slot)
	}
	return nil
}

// unbindOptions are clevis luks unbind's options.
type unbindOptions struct {
	Device string `flag:"device" help:"the LUKS2 device (clevis's -d); or the argument"`
	Slot   *int64 `flag:"key-slot" short:"s" help:"the keyslot whose binding to remove"`
	Force  bool   `flag:"force" short:"f" help:"remove the binding even if its keyslot is the last"`
}

// runUnbind is clevis luks unbind -s SLOT DEVICE.
func runUnbind(ctx context.Context, env *Env, o *unbindOptions, args []string) error {
	if o.Device != "" {
		args = append([]string{o.Device}, args...)
	}
	if len(args) != 1 || o.Slot == nil {
		return usageErr("unbind takes -s SLOT DEVICE")
	}
	if err := checkDevice(args[0], false); err != nil {
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, args[0], blkcrypt.LUKSOptions{})
	if err != nil {
		return deviceErr(fmt.Errorf("device %s is not a valid LUKS device: %w", args[0], err))
	}
	defer h.Close()
	return token.UnbindClevis(ctx, h, int(*o.Slot), o.Force)
}

// listOptions are clevis luks list's options.
type listOptions struct {
	Device string `flag:"device" help:"the LUKS2 device (clevis's -d); or the argument"`
	Slot   *int64 `flag:"key-slot" short:"s" help:"list only this keyslot's binding" def:"every binding"`
}

// runList is clevis luks list: "SLOT: PIN 'CONFIG'" a binding.
func runList(ctx context.Context, env *Env, o *listOptions, args []string) error {
	if o.Device != "" {
		args = append([]string{o.Device}, args...)
	}
	if len(args) != 1 {
		return usageErr("list takes DEVICE")
	}
	if err := checkDevice(args[0], true); err != nil {
		return err
	}
	h, err := blkcrypt.OpenLUKS(ctx, args[0], blkcrypt.LUKSOptions{ReadOnly: true})
	if err != nil {
		return deviceErr(fmt.Errorf("device %s is not a valid LUKS device: %w", args[0], err))
	}
	defer h.Close()
	bs, err := token.ListClevis(ctx, h)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if o.Slot == nil || int64(b.Keyslot) == *o.Slot {
			fmt.Fprintln(env.Stdout, b)
		}
	}
	return nil
}

// existing is the existing passphrase of a typed key verb (add-key): a
// token's unless a key file is given, else the one k reads.
func (t tokenFlags) existing(ctx context.Context, env *Env, h *blkcrypt.LUKS, k keyFileFlags, prompt string) ([]byte, error) {
	if k.KeyFile != "" {
		if t.TokenOnly {
			return nil, usageErr("--token-only cannot be used with --key-file")
		}
	} else if pass, err := t.unlockToken(ctx, env, h); err != nil || pass != nil {
		return pass, err
	}
	pass, _, err := k.read(env, false, prompt)
	return pass, err
}

// checkDevice gives cryptsetup's wording for a missing or unopenable
// device before the LUKS handle is opened.
func checkDevice(path string, readOnly bool) error {
	f, err := openDevice(path, readOnly)
	if err != nil {
		return err
	}
	return f.Close()
}
