package cli

import (
	"context"
	"errors"
	"fmt"
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
	TokenType   string `flag:"token-type" help:"try only tokens of this type (systemd-tpm2, systemd-pkcs11, systemd-fido2, clevis)" def:"every type"`
	TPM2Device  string `flag:"tpm2-device" help:"TPM2 in systemd's spelling (device:/dev/tpmrm0, swtpm:host=H,port=P, swtpm:path=S)" def:"/dev/tpmrm0"`
	TPM2PINFile string `flag:"tpm2-pin-file" help:"read the TPM2 PIN from this file (one trailing newline dropped)" def:"asked on a terminal"`
	// systemd-fido2 tokens are tried only when a key is named (or the
	// type asked for), as crypttab's fido2-device=.
	FIDO2Device  string `flag:"fido2-device" help:"FIDO2 security key for systemd-fido2 tokens: a /dev/hidrawN path, or auto for each key present" def:"none unless --token-type systemd-fido2"`
	FIDO2PINFile string `flag:"fido2-pin-file" help:"read the FIDO2 security key's PIN from this file (one trailing newline dropped)" def:"asked on a terminal"`
	// The token's pkcs11: URI may carry pin-value or pin-source too.
	PKCS11PINFile string `flag:"pkcs11-pin-file" help:"read the PKCS#11 security token's PIN from this file (one trailing newline dropped)" def:"the URI's pin-source or pin-value, else asked on a terminal"`
}

// asked reports whether the command line names a token to use.
func (t tokenFlags) asked() bool { return t.TokenOnly || t.TokenID != nil || t.TokenType != "" }

// pin reads --tpm2-pin-file, else --pkcs11-pin-file, else
// --fido2-pin-file, or nil without any.
func (t tokenFlags) pin() ([]byte, error) {
	file, flag := t.TPM2PINFile, "--tpm2-pin-file"
	if file == "" {
		file, flag = t.PKCS11PINFile, "--pkcs11-pin-file"
	}
	if file == "" {
		file, flag = t.FIDO2PINFile, "--fido2-pin-file"
	}
	if file == "" {
		return nil, nil
	}
	b, err := token.ReadPINFile(file)
	if err != nil {
		return nil, usageErr("cannot read %s: %w", flag, err)
	}
	return b, nil
}

// unlockOptions are token.Unlock's options for the flags.
func (t tokenFlags) unlockOptions() (token.Options, error) {
	o := token.Options{TPM2Device: t.TPM2Device, TokenType: t.TokenType, FIDO2Device: t.FIDO2Device}
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
	pass, _, err := token.UnlockWithPIN(ctx, h, o, askPIN(env))
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

// enrollOptions are systemd-cryptenroll's options (token.Enrollment).
type enrollOptions struct {
	UnlockKeyFile string  `flag:"unlock-key-file" help:"a file holding an existing passphrase" def:"asked on the terminal"`
	TPM2Device    string  `flag:"tpm2-device" help:"enroll a TPM2 token on this TPM (systemd's spelling; auto is /dev/tpmrm0)"`
	TPM2PCRs      *string `flag:"tpm2-pcrs" help:"PCRs to seal to, e.g. 7 or 0+7 (\"\" for none)" def:"7"`
	TPM2WithPIN   bool    `flag:"tpm2-with-pin" help:"the TPM2 token also needs a PIN (--tpm2-pin-file, else asked twice)"`
	TPM2PINFile   string  `flag:"tpm2-pin-file" help:"read the new TPM2 PIN from this file" def:"asked on a terminal"`
	RecoveryKey   bool    `flag:"recovery-key" help:"enroll a recovery key and print it"`
	// A pin-value in the URI is a secret in argv: --pkcs11-pin-file or
	// the terminal is better (systemd accepts it, and so do we).
	PKCS11TokenURI string `flag:"pkcs11-token-uri" help:"enroll a PKCS#11 security token by its pkcs11: URI (its X.509 certificate's RSA key; a pin-value in the URI shows in the process list: prefer --pkcs11-pin-file); auto is the only token present, list prints the tokens"`
	PKCS11PINFile  string `flag:"pkcs11-pin-file" help:"read the security token's PIN from this file" def:"the URI's pin-source or pin-value, else asked on a terminal"`
	FIDO2Device    string `flag:"fido2-device" help:"enroll a FIDO2 security key (hmac-secret): a /dev/hidrawN path, or auto for the only one present"`
	FIDO2ClientPIN string `flag:"fido2-with-client-pin" help:"the FIDO2 token needs the key's PIN to unlock (yes or no)" def:"yes"`
	FIDO2UP        string `flag:"fido2-with-user-presence" help:"the FIDO2 token needs a touch of the key to unlock (yes or no)" def:"yes"`
	FIDO2PINFile   string `flag:"fido2-pin-file" help:"read the FIDO2 security key's PIN from this file" def:"asked on a terminal when the key wants it"`
	WipeSlot       string `flag:"wipe-slot" help:"after enrolling, remove these keyslots: numbers, all, empty, password, recovery, tpm2, clevis (comma-separated)"`
}

// runEnroll is systemd-cryptenroll DEVICE (token.Enroll): a TPM2 token, a
// PKCS#11 token, a FIDO2 token or a recovery key in a new keyslot, then
// --wipe-slot.
// --pkcs11-token-uri list needs no DEVICE.
func runEnroll(ctx context.Context, env *Env, o *enrollOptions, args []string) error {
	if o.PKCS11TokenURI == "list" {
		uris, err := token.PKCS11TokenURIs("")
		for _, u := range uris {
			fmt.Fprintln(env.Stdout, u)
		}
		return err
	}
	if len(args) != 1 {
		return usageErr("enroll takes one DEVICE")
	}
	e := token.Enrollment{TPM2Device: o.TPM2Device, TPM2WithPIN: o.TPM2WithPIN, PKCS11URI: o.PKCS11TokenURI, RecoveryKey: o.RecoveryKey}
	if o.WipeSlot != "" {
		e.Wipe = strings.Split(o.WipeSlot, ",")
	}
	if o.FIDO2Device != "" {
		e.FIDO2Device = o.FIDO2Device
		for _, b := range []struct {
			flag, val string
			off       *bool
		}{{"--fido2-with-client-pin", o.FIDO2ClientPIN, &e.FIDO2NoClientPIN}, {"--fido2-with-user-presence", o.FIDO2UP, &e.FIDO2NoUserPresence}} {
			on, err := parseYesNo(b.val, true)
			if err != nil {
				return usageErr("%s: %w", b.flag, err)
			}
			*b.off = !on
		}
	}
	if o.TPM2PCRs != nil && o.TPM2Device != "" {
		pcrs, err := token.ParsePCRs(*o.TPM2PCRs)
		if err != nil {
			return usageErr("--tpm2-pcrs: %w", err)
		}
		e.TPM2PCRs = pcrs
	}
	if err := e.Check(); err != nil {
		return err
	}
	h, err := openLUKS(ctx, args[0], false)
	if err != nil {
		return err
	}
	defer h.Close()
	if e.Existing, err = existingPassphrase(env, o.UnlockKeyFile); err != nil {
		return err
	}
	defer clear(e.Existing)
	// A PIN file's PIN, else one asked on the terminal.
	if o.TPM2Device != "" && o.TPM2WithPIN && o.TPM2PINFile != "" {
		if e.TPM2PIN, err = (tokenFlags{TPM2PINFile: o.TPM2PINFile}).pin(); err != nil {
			return err
		}
		defer clear(e.TPM2PIN)
		if len(e.TPM2PIN) == 0 {
			return usageErr("--tpm2-pin-file %s is empty", o.TPM2PINFile)
		}
	}
	if e.FIDO2Device != "" && o.FIDO2PINFile != "" {
		if e.FIDO2PIN, err = (tokenFlags{FIDO2PINFile: o.FIDO2PINFile}).pin(); err != nil {
			return err
		}
		defer clear(e.FIDO2PIN)
		if len(e.FIDO2PIN) == 0 {
			return usageErr("--fido2-pin-file %s is empty", o.FIDO2PINFile)
		}
	}
	if o.PKCS11TokenURI != "" && o.PKCS11PINFile != "" {
		if e.PKCS11PIN, err = (tokenFlags{PKCS11PINFile: o.PKCS11PINFile}).pin(); err != nil {
			return err
		}
		defer clear(e.PKCS11PIN)
	}
	e.AskPIN = askPIN(env)
	r, err := token.Enroll(ctx, h, e)
	if errors.Is(err, token.ErrNeedPIN) && e.AskPIN == nil {
		if e.TPM2Device != "" {
			return usageErr("--tpm2-with-pin needs a terminal or --tpm2-pin-file")
		}
		if e.FIDO2Device != "" {
			return usageErr("%v: give --fido2-pin-file or run on a terminal", err)
		}
		return usageErr("%v: give --pkcs11-pin-file or run on a terminal", err)
	}
	if r.Keyslot >= 0 {
		if r.RecoveryKey != nil {
			fmt.Fprintf(env.Stdout, "%s\n", r.RecoveryKey)
			clear(r.RecoveryKey)
		}
		name := map[string]string{token.TypeTPM2: "TPM2 token", token.TypePKCS11: "PKCS#11 token", token.TypeFIDO2: "FIDO2 token", token.TypeRecovery: "recovery key"}[r.Type]
		fmt.Fprintf(env.Stderr, "New %s enrolled as key slot %d.\n", name, r.Keyslot)
	}
	for _, s := range r.Wiped {
		fmt.Fprintf(env.Stderr, "Wiped slot %d.\n", s)
	}
	return err
}

// parseYesNo reads a systemd boolean option's value (yes/no, true/false,
// on/off, 1/0); "" is def.
func parseYesNo(s string, def bool) (bool, error) {
	switch strings.ToLower(s) {
	case "":
		return def, nil
	case "yes", "y", "true", "t", "on", "1":
		return true, nil
	case "no", "n", "false", "f", "off", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not yes or no", s)
}

// existingPassphrase reads a key file (- is stdin), or asks on the
// terminal, as --key-file does.
func existingPassphrase(env *Env, file string) ([]byte, error) {
	b, _, err := keyFileFlags{KeyFile: file}.read(env, false, "Please enter current passphrase for disk: ")
	return b, err
}

// askPIN asks for a token's PIN on the terminal; nil without one.
func askPIN(env *Env) func(prompt string) ([]byte, error) {
	if env.Prompt == nil || !env.StdinIsTerminal {
		return nil
	}
	return env.Prompt
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
	if args = withDevice(o.Device, args); len(args) != 3 {
		return usageErr("bind takes DEVICE PIN CONFIG")
	}
	h, err := openLUKS(ctx, args[0], false)
	if err != nil {
		return err
	}
	defer h.Close()
	existing, err := existingPassphrase(env, o.KeyFile)
	if err != nil {
		return err
	}
	defer clear(existing)
	bo := token.ClevisBindOptions{EnrollOptions: token.EnrollOptions{Existing: existing},
		ClevisOptions: token.ClevisOptions{TPM2Device: o.TPM2Dev, TrustTang: o.Trust}, NewKeyslot: intPtr(o.Slot), TokenID: intPtr(o.TokenID)}
	slot, _, err := token.BindClevis(ctx, h, args[1], []byte(args[2]), bo)
	if err == nil && o.Verbosity {
		fmt.Fprintf(env.Stdout, "%d\n", slot)
	}
	return err
}

// unbindOptions are clevis luks unbind's options.
type unbindOptions struct {
	Device string `flag:"device" help:"the LUKS2 device (clevis's -d); or the argument"`
	Slot   *int64 `flag:"key-slot" short:"s" help:"the keyslot whose binding to remove"`
	Force  bool   `flag:"force" short:"f" help:"remove the binding even if its keyslot is the last"`
}

// runUnbind is clevis luks unbind -s SLOT DEVICE.
func runUnbind(ctx context.Context, env *Env, o *unbindOptions, args []string) error {
	if args = withDevice(o.Device, args); len(args) != 1 || o.Slot == nil {
		return usageErr("unbind takes -s SLOT DEVICE")
	}
	h, err := openLUKS(ctx, args[0], false)
	if err != nil {
		return err
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
	if args = withDevice(o.Device, args); len(args) != 1 {
		return usageErr("list takes DEVICE")
	}
	h, err := openLUKS(ctx, args[0], true)
	if err != nil {
		return err
	}
	defer h.Close()
	bs, err := token.ListClevis(ctx, h)
	for _, b := range bs {
		if o.Slot == nil || int64(b.Keyslot) == *o.Slot {
			fmt.Fprintln(env.Stdout, b)
		}
	}
	return err
}

// withDevice puts clevis's -d DEVICE, when given, before the arguments.
func withDevice(dev string, args []string) []string {
	if dev == "" {
		return args
	}
	return append([]string{dev}, args...)
}

// intPtr is an optional flag's number as an int.
func intPtr(n *int64) *int {
	if n == nil {
		return nil
	}
	i := int(*n)
	return &i
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

// openLUKS opens the LUKS header on dev for the token verbs, with
// cryptsetup's wording for a missing or unopenable device first.
func openLUKS(ctx context.Context, dev string, readOnly bool) (*blkcrypt.LUKS, error) {
	f, err := openDevice(dev, readOnly)
	if err != nil {
		return nil, err
	}
	f.Close()
	h, err := blkcrypt.OpenLUKS(ctx, dev, blkcrypt.LUKSOptions{ReadOnly: readOnly})
	if err != nil {
		return nil, deviceErr(fmt.Errorf("device %s is not a valid LUKS device: %w", dev, err))
	}
	return h, nil
}
