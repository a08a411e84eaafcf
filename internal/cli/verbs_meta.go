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
// token, repair. Each is flag handling over one luks1/luks2 call.
func init() {
	extraVerbs = append(extraVerbs,
		verb{"is-luks", []string{"isLuks"}, runIsLuks, "DEVICE — exit 0 if DEVICE holds a LUKS header (--type luks1|luks2)"},
		verb{"uuid", []string{"luksUUID"}, runUUID, "DEVICE — print the UUID, or set it with --uuid"},
		verb{"config", nil, runConfig, "DEVICE — set LUKS2 --label/--subsystem, or --priority of --key-slot"},
		verb{"erase", []string{"luksErase"}, runErase, "DEVICE — wipe every keyslot (the data becomes unreadable)"},
		verb{"token", nil, runToken, "add|remove|import|export DEVICE — LUKS2 tokens (--token-id, --json-file, --key-slot)"},
		verb{"repair", nil, runRepair, "DEVICE — rewrite a LUKS2 header with one damaged metadata copy"},
		// cryptsetup's per-format dump verbs are dump with the type named.
		verb{"tcrypt-dump", []string{"tcryptDump"}, typedDump("tcrypt"), "DEVICE — dump --type tcrypt"},
		verb{"bitlk-dump", []string{"bitlkDump"}, typedDump("bitlk"), "DEVICE — dump --type bitlk"},
		verb{"fvault2-dump", []string{"fvault2Dump"}, typedDump("fvault2"), "DEVICE — dump --type fvault2"},
	)
}

func typedDump(typ string) func(context.Context, *Env, *parsed) error {
	return func(ctx context.Context, env *Env, p *parsed) error {
		p.set["type"] = typ
		return runDump(ctx, env, p)
	}
}

// silent is an exit code without a message, for verbs whose answer is the
// exit code (isLuks prints nothing unless -v).
func silent(code int) error { return &exitError{code, errors.New("")} }

// verbose prints cryptsetup's -v success line.
func verbose(env *Env, p *parsed) {
	if p.bool("verbose") {
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

// openLUKS2 is openLUKS for the LUKS2-only verbs.
func openLUKS2(ctx context.Context, p *parsed, dev string, readOnly bool) (*blkcrypt.LUKS, error) {
	h, err := openLUKS(ctx, p, dev, readOnly)
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

func runIsLuks(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	h, err := openLUKS(ctx, p, dev, true)
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) && ee.code == ExitDevice {
			return err // missing: cryptsetup says so even without -v
		}
		if p.bool("verbose") {
			return notLUKS(err, dev, "")
		}
		return silent(exitCode(notLUKS(err, dev, "")))
	}
	h.Close()
	verbose(env, p)
	return nil
}

func runUUID(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	set := p.has("uuid")
	h, err := openLUKS(ctx, p, dev, !set)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	if !set {
		hd, err := h.Header(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, hd.UUID())
		return nil
	}
	u := p.str("uuid")
	if !blkcrypt.ValidUUID(u) {
		return usageErr("wrong LUKS UUID format provided")
	}
	// cryptsetup asks through its confirm callback (a refusal is -EPERM).
	if err := confirm(env, p, "Do you really want to change UUID of device?", ExitPermission, abortedMsg); err != nil {
		return err
	}
	if _, err := h.SetUUID(ctx, u); err != nil {
		return err
	}
	verbose(env, p)
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

func runConfig(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	var prio keyslot.Priority
	if p.has("priority") {
		if prio, err = parsePriority(p.str("priority")); err != nil {
			return err
		}
		if !p.has("key-slot") {
			return usageErr("keyslot specification is required")
		}
	}
	if !p.has("priority") && !p.has("label") && !p.has("subsystem") {
		return usageErr("option --priority, --label or --subsystem is missing")
	}
	h, err := openLUKS2(ctx, p, dev, false)
	if err != nil {
		return err
	}
	defer h.Close()
	// As cryptsetup: the priority first, then label and subsystem together
	// (the one not given is cleared, as crypt_set_label clears it).
	if p.has("priority") {
		if err := h.SetPriority(ctx, int(p.int("key-slot", -1)), prio); err != nil {
			if errors.Is(err, blkcrypt.ErrInvalidOptions) { // a keyslot out of range or inactive
				return usageErr("%v", err)
			}
			return err
		}
	}
	if p.has("label") || p.has("subsystem") {
		if err := h.SetLabel(ctx, p.str("label"), p.str("subsystem")); err != nil {
			return err
		}
	}
	verbose(env, p)
	return nil
}

func runErase(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	h, err := openLUKS(ctx, p, dev, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	if err := confirm(env, p, eraseWarning(dev), ExitPermission, abortedKeyslotsMsg); err != nil {
		return err
	}
	// Confirmed (or batch mode, or not asked on a non-terminal, as
	// cryptsetup): the library needs Force.
	if err := h.Erase(ctx, blkcrypt.EraseOptions{Force: true}); err != nil {
		return err
	}
	verbose(env, p)
	return nil
}

func runRepair(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	h, err := openLUKS(ctx, p, dev, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer h.Close()
	if _, err := h.Repair(ctx); err != nil {
		return err
	}
	verbose(env, p)
	return nil
}

// tokenID returns --token-id, or nil (any free id) when absent.
func tokenID(p *parsed) (*int, error) {
	if !p.has("token-id") {
		return nil, nil
	}
	id := p.int("token-id", -1)
	if id < 0 || id >= blkcrypt.MaxTokens {
		return nil, usageErr("invalid token id %s", p.str("token-id"))
	}
	return blkcrypt.Slot(int(id)), nil
}

func tokenOr(id *int) int {
	if id == nil {
		return -1
	}
	return *id
}

func runToken(ctx context.Context, env *Env, p *parsed) error {
	if len(p.args) != 2 {
		return usageErr("usage: token add|remove|import|export DEVICE")
	}
	action, dev := p.args[0], p.args[1]
	switch action {
	case "add", "remove", "import", "export":
	default:
		return usageErr("invalid token action %q", action)
	}
	o := blkcrypt.TokenOptions{Replace: p.bool("token-replace")}
	if p.has("key-slot") {
		o.Keyslots = []int{int(p.int("key-slot", -1))}
	}
	var err error
	if o.ID, err = tokenID(p); err != nil {
		return err
	}
	if (action == "remove" || action == "export") && o.ID == nil {
		return usageErr("token %s requires --token-id", action)
	}
	h, err := openLUKS2(ctx, p, dev, action == "export")
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
		b, err := h.ExportToken(ctx, *o.ID)
		if err != nil {
			return usageErr("failed to get token %d for export", *o.ID)
		}
		if out := p.str("json-file"); out != "" && out != "-" {
			return os.WriteFile(out, b, 0o600)
		}
		_, err = env.Stdout.Write(b)
		return err
	case "remove":
		if _, ok := tokens[*o.ID]; !ok {
			return usageErr("token %d is not in use", *o.ID)
		}
		if err := h.RemoveToken(ctx, *o.ID); err != nil {
			return err
		}
		verbose(env, p)
		return nil
	}
	var n int
	if action == "add" {
		// cryptsetup's built-in keyring token: a description of a kernel
		// keyring key that holds the passphrase, assigned to --key-slot or
		// to every keyslot.
		desc := p.str("key-description")
		if desc == "" {
			return usageErr("option --key-description is mandatory for token add action")
		}
		n, err = h.AddKeyringToken(ctx, desc, o)
	} else {
		var r io.Reader = env.Stdin
		if in := p.str("json-file"); in != "" && in != "-" {
			fh, err := os.Open(in)
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
		n, err = h.ImportToken(ctx, tok, o)
	}
	if err != nil {
		if _, taken := tokens[tokenOr(o.ID)]; taken && !o.Replace {
			return usageErr("token %d in use", *o.ID)
		}
		// A refused token is bad input (exit 1), though the rule that
		// refuses it is a metadata rule (whose error also says corrupt).
		if errors.Is(err, blkcrypt.ErrInvalidOptions) {
			return usageErr("%v", err)
		}
		return err
	}
	if p.bool("verbose") {
		fmt.Fprintf(env.Stdout, "Token %d created.\n", n)
	}
	verbose(env, p)
	return nil
}
