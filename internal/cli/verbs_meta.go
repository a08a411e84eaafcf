package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/keyslot"
)

// cryptsetup's header-maintenance verbs: isLuks, luksUUID, config, erase,
// token, repair. Each is flag handling over one method of the LUKS handle.

// silent is an exit code without a message, for verbs whose answer is the
// exit code (isLuks prints nothing unless -v).
func silent(code int) error { return &exitError{code, errors.New("")} }

// done prints cryptsetup's -v success line.
func (f verboseFlag) done(env *Env) {
	if f.Verbose {
		fmt.Fprintln(env.Stdout, "Command successful.")
	}
}

// notLUKS turns a header that does not read into cryptsetup's answer for
// these verbs: not a valid LUKS device, exit 1 (a missing or unreadable
// file keeps its exit 4 from openDevice).
func notLUKS(err error, dev, version string) error {
	var ee *exitError
	if errors.As(err, &ee) || errors.Is(err, blkcrypt.ErrBusy) {
		return err
	}
	if errors.Is(err, blkcrypt.ErrNoHeader) || errors.Is(err, blkcrypt.ErrCorrupt) || errors.Is(err, blkcrypt.ErrUnsupported) || errors.Is(err, blkcrypt.ErrDeviceTooSmall) {
		return usageErr("device %s is not a valid LUKS%s device", dev, version)
	}
	return err
}

// open2 is open for the LUKS2-only verbs.
func (f luksFlags) open2(ctx context.Context, dev string, readOnly bool) (*blkcrypt.LUKS, error) {
	h, err := f.open(ctx, dev, nil, readOnly)
	if err != nil {
		return nil, notLUKS(err, dev, "2")
	}
	hd, err := h.Header(ctx)
	if err == nil && hd.Version() != 2 {
		err = usageErr("device %s is not a valid LUKS2 device", dev)
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

type isLuksOptions struct {
	Type string `flag:"type" help:"only this LUKS version answers 0" def:"luks1 or luks2"`
	headerFlag
	verboseFlag
}

func runIsLuks(ctx context.Context, env *Env, o *isLuksOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	h, err := luksFlags{Type: o.Type, headerFlag: o.headerFlag}.open(ctx, dev, nil, true)
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) && ee.code == ExitDevice {
			return err // missing: cryptsetup says so even without -v
		}
		if o.Verbose {
			return notLUKS(err, dev, "")
		}
		return silent(exitCode(notLUKS(err, dev, "")))
	}
	h.Close()
	o.done(env)
	return nil
}

type uuidOptions struct {
	UUID *string `flag:"uuid" help:"set this UUID" def:"print the UUID"`
	luksFlags
	verboseFlag
	batchFlag
}

func runUUID(ctx context.Context, env *Env, o *uuidOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	h, err := o.open(ctx, dev, nil, o.UUID == nil)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	if o.UUID == nil {
		hd, err := h.Header(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, hd.UUID())
		return nil
	}
	if !blkcrypt.ValidUUID(*o.UUID) {
		return usageErr("wrong LUKS UUID format provided")
	}
	// cryptsetup asks through its confirm callback (a refusal is -EPERM).
	if err := o.confirm(env, "Do you really want to change UUID of device?", ExitPermission, abortedMsg); err != nil {
		return err
	}
	if _, err := h.SetUUID(ctx, *o.UUID); err != nil {
		return err
	}
	o.done(env)
	return nil
}

// parsePriority maps --priority as cryptsetup spells it.
func parsePriority(s string) (keyslot.Priority, error) {
	switch s {
	case "ignore":
		return keyslot.PriorityIgnore, nil
	case "normal":
		return keyslot.PriorityNormal, nil
	case "prefer":
		return keyslot.PriorityPrefer, nil
	}
	return 0, usageErr("option --priority can be only ignore/normal/prefer")
}

type configOptions struct {
	Label     *string `flag:"label" help:"LUKS2 label" def:"cleared"`
	Subsystem *string `flag:"subsystem" help:"LUKS2 subsystem" def:"cleared"`
	Priority  *string `flag:"priority" help:"keyslot priority: ignore, normal or prefer" def:"unchanged"`
	KeySlot   *int64  `flag:"key-slot" short:"S" help:"the keyslot --priority sets"`
	luksFlags
	verboseFlag
}

func runConfig(ctx context.Context, env *Env, o *configOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	var prio keyslot.Priority
	if o.Priority != nil {
		if prio, err = parsePriority(*o.Priority); err != nil {
			return err
		}
		if o.KeySlot == nil {
			return usageErr("keyslot specification is required")
		}
	}
	if o.Priority == nil && o.Label == nil && o.Subsystem == nil {
		return usageErr("option --priority, --label or --subsystem is missing")
	}
	h, err := o.open2(ctx, dev, false)
	if err != nil {
		return err
	}
	defer h.Close()
	// As cryptsetup: the priority first, then label and subsystem together
	// (the one not given is cleared, as crypt_set_label clears it).
	if o.Priority != nil {
		if err := h.SetPriority(ctx, int(*o.KeySlot), prio); err != nil {
			if errors.Is(err, blkcrypt.ErrInvalidOptions) { // a keyslot out of range or inactive
				return usageErr("%v", err)
			}
			return err
		}
	}
	if o.Label != nil || o.Subsystem != nil {
		if err := h.SetLabel(ctx, deref(o.Label), deref(o.Subsystem)); err != nil {
			return err
		}
	}
	o.done(env)
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

type luksVerbOptions struct {
	luksFlags
	verboseFlag
}

type eraseOptions struct {
	luksVerbOptions
	batchFlag
}

func runErase(ctx context.Context, env *Env, o *eraseOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	h, err := o.open(ctx, dev, nil, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	if err := o.confirm(env, eraseWarning(dev), ExitPermission, abortedKeyslotsMsg); err != nil {
		return err
	}
	// Confirmed (or batch mode, or not asked on a non-terminal, as
	// cryptsetup): the library needs Force.
	if err := h.Erase(ctx, blkcrypt.EraseOptions{Force: true}); err != nil {
		return err
	}
	o.done(env)
	return nil
}

func runRepair(ctx context.Context, env *Env, o *luksVerbOptions, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	h, err := o.open(ctx, dev, nil, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	if _, err := h.Repair(ctx); err != nil {
		return err
	}
	o.done(env)
	return nil
}

type tokenOptions struct {
	TokenID        *int64 `flag:"token-id" help:"the token's number (0-31): the one to remove or export, or the one add and import write" def:"the first free id (add, import)"`
	JSONFile       string `flag:"json-file" help:"the token's JSON file" def:"stdin (import), stdout (export)"`
	KeySlot        *int64 `flag:"key-slot" short:"S" help:"assign the token to this keyslot" def:"none (import), every keyslot (add)"`
	KeyDescription string `flag:"key-description" help:"add: kernel keyring key description"`
	Replace        bool   `flag:"token-replace" help:"import/add: replace an existing token"`
	luksVerbOptions
}

func runToken(ctx context.Context, env *Env, o *tokenOptions, args []string) error {
	if len(args) != 2 {
		return usageErr("usage: token add|remove|import|export DEVICE")
	}
	action, dev := args[0], args[1]
	switch action {
	case "add", "remove", "import", "export":
	default:
		return usageErr("invalid token action %q", action)
	}
	t := blkcrypt.TokenOptions{Replace: o.Replace}
	if o.KeySlot != nil {
		t.Keyslots = []int{int(*o.KeySlot)}
	}
	if o.TokenID != nil {
		if *o.TokenID < 0 || *o.TokenID >= blkcrypt.MaxTokens {
			return usageErr("invalid token id %d", *o.TokenID)
		}
		t.ID = blkcrypt.Slot(int(*o.TokenID))
	}
	if (action == "remove" || action == "export") && t.ID == nil {
		return usageErr("token %s requires --token-id", action)
	}
	h, err := o.open2(ctx, dev, action == "export")
	if err != nil {
		return err
	}
	defer h.Close()
	tokens, err := h.Tokens(ctx)
	if err != nil {
		return err
	}
	switch action {
	case "export":
		b, err := h.ExportToken(ctx, *t.ID)
		if err != nil {
			return usageErr("failed to get token %d for export", *t.ID)
		}
		if o.JSONFile != "" && o.JSONFile != "-" {
			return os.WriteFile(o.JSONFile, b, 0o600)
		}
		_, err = env.Stdout.Write(b)
		return err
	case "remove":
		if _, ok := tokens[*t.ID]; !ok {
			return usageErr("token %d is not in use", *t.ID)
		}
		if err := h.RemoveToken(ctx, *t.ID); err != nil {
			return err
		}
		o.done(env)
		return nil
	}
	var n int
	if action == "add" {
		// cryptsetup's built-in keyring token: a description of a kernel
		// keyring key that holds the passphrase, assigned to --key-slot or
		// to every keyslot.
		if o.KeyDescription == "" {
			return usageErr("option --key-description is mandatory for token add action")
		}
		n, err = h.AddKeyringToken(ctx, o.KeyDescription, t)
	} else {
		var r io.Reader = env.Stdin
		if o.JSONFile != "" && o.JSONFile != "-" {
			fh, err := os.Open(o.JSONFile)
			if err != nil {
				return usageErr("cannot open json file: %v", err)
			}
			defer fh.Close()
			r = fh
		}
		// cryptsetup reads at most the largest metadata area.
		tok, rerr := io.ReadAll(io.LimitReader(r, 4<<20))
		if rerr != nil {
			return usageErr("reading the token: %v", rerr)
		}
		n, err = h.ImportToken(ctx, tok, t)
	}
	if err != nil {
		if t.ID != nil {
			if _, taken := tokens[*t.ID]; taken && !t.Replace {
				return usageErr("token %d in use", *t.ID)
			}
		}
		// A refused token is bad input (exit 1), though the rule that
		// refuses it is a metadata rule (whose error also says corrupt).
		if errors.Is(err, blkcrypt.ErrInvalidOptions) {
			return usageErr("%v", err)
		}
		return err
	}
	if o.Verbose {
		fmt.Fprintf(env.Stdout, "Token %d created.\n", n)
	}
	o.done(env)
	return nil
}
