package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
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

// luks2Device is luksDevice for the LUKS2-only verbs.
func luks2Device(ctx context.Context, p *parsed, dev string, readOnly bool) (deviceFile, luksutil.Device, *luks2.Header, error) {
	f, hdev, h, err := luksDevice(ctx, p, dev, readOnly)
	if err != nil {
		return nil, nil, nil, notLUKS(err, dev, "2")
	}
	h2, ok := h.(*luks2.Header)
	if !ok {
		f.Close()
		return nil, nil, nil, usageErr("device %s is not a valid LUKS2 device", dev)
	}
	return f, hdev, h2, nil
}

func runIsLuks(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	f, _, _, err := luksDevice(ctx, p, dev, true)
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
	f.Close()
	verbose(env, p)
	return nil
}

func runUUID(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	set := p.has("uuid")
	f, hdev, h, err := luksDevice(ctx, p, dev, !set)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer f.Close()
	if !set {
		fmt.Fprintln(env.Stdout, h.UUID())
		return nil
	}
	u := p.str("uuid")
	if _, err := luksutil.CheckUUID(u); err != nil {
		return usageErr("wrong LUKS UUID format provided")
	}
	// cryptsetup asks through its confirm callback (a refusal is -EPERM).
	if err := confirm(env, p, "Do you really want to change UUID of device?", ExitPermission, abortedMsg); err != nil {
		return err
	}
	switch hh := h.(type) {
	case *luks1.Header:
		err = hh.SetUUID(hdev, u)
	case *luks2.Header:
		err = hh.SetUUID(hdev, u)
	default:
		err = usageErr("not a LUKS header")
	}
	if err == nil {
		verbose(env, p)
	}
	return err
}

// parsePriority maps --priority as cryptsetup spells it.
func parsePriority(s string) (luks2.Priority, error) {
	switch s {
	case "ignore":
		return luks2.PriorityIgnore, nil
	case "normal":
		return luks2.PriorityNormal, nil
	case "prefer":
		return luks2.PriorityPrefer, nil
	}
	return 0, usageErr("option --priority can be only ignore/normal/prefer")
}

func runConfig(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	var prio luks2.Priority
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
	f, hdev, h, err := luks2Device(ctx, p, dev, false)
	if err != nil {
		return err
	}
	defer f.Close()
	// As cryptsetup: the priority first, then label and subsystem together
	// (the one not given is cleared, as crypt_set_label clears it).
	if p.has("priority") {
		if err := h.SetPriority(hdev, int(p.int("key-slot", -1)), prio); err != nil {
			if errors.Is(err, luksutil.ErrInvalidSlot) || errors.Is(err, luksutil.ErrSlotInactive) {
				return usageErr("%v", err)
			}
			return err
		}
	}
	if p.has("label") || p.has("subsystem") {
		if err := h.SetLabel(hdev, p.str("label"), p.str("subsystem")); err != nil {
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
	f, hdev, h, err := luksDevice(ctx, p, dev, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer f.Close()
	if err := confirm(env, p, eraseWarning(dev), ExitPermission, abortedKeyslotsMsg); err != nil {
		return err
	}
	switch hh := h.(type) {
	case *luks1.Header:
		err = hh.Erase(hdev)
	case *luks2.Header:
		err = hh.Erase(hdev)
	default:
		err = usageErr("not a LUKS header")
	}
	if err == nil {
		verbose(env, p)
	}
	return err
}

func runRepair(ctx context.Context, env *Env, p *parsed) error {
	dev, err := oneDevice(p)
	if err != nil {
		return err
	}
	f, hdev, h, err := luksDevice(ctx, p, dev, false)
	if err != nil {
		return notLUKS(err, dev, "")
	}
	defer f.Close()
	if h2, ok := h.(*luks2.Header); ok && h2.NeedsRepair() {
		if err := h2.Repair(hdev); err != nil {
			return err
		}
	}
	// A LUKS1 header that reads needs nothing here: cryptsetup's LUKS1
	// repair only rewrites keyslot fields that our reader refuses anyway.
	verbose(env, p)
	return nil
}

// tokenID returns --token-id, or def when absent.
func tokenID(p *parsed, def int) (int, error) {
	if !p.has("token-id") {
		return def, nil
	}
	id := p.int("token-id", -1)
	if id < 0 || id >= luks2.MaxKeyslots {
		return 0, usageErr("invalid token id %s", p.str("token-id"))
	}
	return int(id), nil
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
	var slots []int
	if p.has("key-slot") {
		slots = []int{int(p.int("key-slot", -1))}
	}
	id, err := tokenID(p, luks2.AnyToken)
	if err != nil {
		return err
	}
	if (action == "remove" || action == "export") && id == luks2.AnyToken {
		return usageErr("token %s requires --token-id", action)
	}
	f, hdev, h, err := luks2Device(ctx, p, dev, action == "export")
	if err != nil {
		return err
	}
	defer f.Close()
	switch action {
	case "export":
		b, err := h.TokenJSON(id)
		if err != nil {
			return usageErr("failed to get token %d for export", id)
		}
		if out := p.str("json-file"); out != "" && out != "-" {
			return os.WriteFile(out, b, 0o600)
		}
		_, err = env.Stdout.Write(b)
		return err
	case "remove":
		if !slices.Contains(h.TokenIDs(), id) {
			return usageErr("token %d is not in use", id)
		}
		if err := h.RemoveToken(hdev, id); err != nil {
			return err
		}
		verbose(env, p)
		return nil
	}
	var tok []byte
	if action == "add" {
		// cryptsetup's built-in keyring token: a description of a kernel
		// keyring key that holds the passphrase. We store it as cryptsetup
		// does (assigned to --key-slot, or to every keyslot) but never read
		// the keyring ourselves.
		desc := p.str("key-description")
		if desc == "" {
			return usageErr("option --key-description is mandatory for token add action")
		}
		if slots == nil {
			slots = h.ActiveKeyslots()
		}
		tok, _ = json.Marshal(struct {
			Type string   `json:"type"`
			KS   []string `json:"keyslots"`
			Desc string   `json:"key_description"`
		}{"luks2-keyring", []string{}, desc})
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
		if tok, err = io.ReadAll(io.LimitReader(r, 4<<20)); err != nil {
			return usageErr("reading the token: %v", err)
		}
	}
	n, err := h.ImportToken(hdev, id, tok, slots, p.bool("token-replace"))
	if err != nil {
		if errors.Is(err, luksutil.ErrSlotInUse) {
			return usageErr("token %d in use", id)
		}
		// A refused token is bad input (exit 1), though the rule that
		// refuses it is a metadata rule (whose error also says corrupt).
		if errors.Is(err, luksutil.ErrInvalidSlot) || errors.Is(err, luksutil.ErrSlotInactive) || errors.Is(err, luksutil.ErrInvalidOptions) {
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

// dumpTokens prints the Tokens section as cryptsetup's luksDump does:
// each token's type, a keyring token's key description, then its keyslots
// in stored order.
func dumpTokens(w io.Writer, h *luks2.Header) {
	fmt.Fprintf(w, "Tokens:\n")
	tokens := h.Tokens()
	for _, id := range h.TokenIDs() {
		var t struct {
			Type     any   `json:"type"`
			Keyslots []any `json:"keyslots"`
			Desc     any   `json:"key_description"`
		}
		_ = json.Unmarshal(tokens[id], &t) // validated when the header was read
		typ, _ := t.Type.(string)
		if typ == "" {
			typ = "unknown"
		}
		fmt.Fprintf(w, "  %d: %s\n", id, typ)
		if d, ok := t.Desc.(string); ok && typ == "luks2-keyring" {
			fmt.Fprintf(w, "\tKey description: %s\n", d)
		}
		for _, k := range t.Keyslots {
			if s, ok := k.(string); ok {
				if _, err := strconv.Atoi(s); err == nil {
					fmt.Fprintf(w, "\tKeyslot:    %s\n", strings.TrimSpace(s))
				}
			}
		}
	}
}
