// Package cli implements the blkcrypt command. Each verb is one runX
// function over parsed options, so tests can call it without a process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
)

// Exit codes, as cryptsetup's.
const (
	ExitOK         = 0
	ExitUsage      = 1 // wrong parameters
	ExitPermission = 2 // no permission (bad passphrase)
	ExitNoMemory   = 3
	ExitDevice     = 4 // wrong device specified
	ExitBusy       = 5 // device already exists or busy
)

// exitError carries an exit code with a message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{ExitUsage, fmt.Errorf(format, a...)}
}

func deviceErr(err error) error { return &exitError{ExitDevice, err} }

// Env is the process environment a command sees.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// StdinIsTerminal reports whether passphrases can be prompted for.
	StdinIsTerminal bool
	// Prompt reads a passphrase without echo; nil when there is no terminal.
	Prompt func(prompt string) ([]byte, error)
	// StderrIsTerminal turns on progress lines for long work.
	StderrIsTerminal bool
	// Now is the clock progress lines read (time.Now when nil).
	Now func() time.Time
}

type verb struct {
	name    string
	aliases []string
	run     func(ctx context.Context, env *Env, p *parsed) error
	help    string
}

var baseVerbs []verb

// allVerbs is every verb: the base ones and those later files register.
func allVerbs() []verb { return append(append([]verb(nil), baseVerbs...), extraVerbs...) }

func init() {
	baseVerbs = []verb{
		{"demo", nil, runDemo, "make a demo volume, exercise it and show what to do next"},
		{"speed", nil, runSpeed, "ALG… — tcrypt-style speed table of capi drivers"},
		{"crypto", nil, runCrypto, "list every registered driver, like /proc/crypto"},
		{"read", nil, runRead, "DEVICE — write decrypted bytes to stdout or -o FILE"},
		{"write", nil, runWrite, "DEVICE — encrypt stdin or -i FILE into the volume"},
	}
}

// extraVerbs are registered by the files of later verbs.
var extraVerbs []verb

// Main runs blkcrypt with argv (without the program name) and returns the
// exit code.
func Main(ctx context.Context, argv []string, env *Env) int {
	if len(argv) == 0 || argv[0] == "--help" || argv[0] == "help" || argv[0] == "-h" {
		usage(env.Stdout)
		if len(argv) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	name := argv[0]
	// cryptsetup's "open --test-passphrase" is our test-passphrase.
	if name == "open" {
		for _, a := range argv[1:] {
			if a == "--test-passphrase" {
				name = "test-passphrase"
			}
		}
	}
	verbs := allVerbs()
	var v *verb
	for i := range verbs {
		if verbs[i].name == name {
			v = &verbs[i]
		}
		for _, a := range verbs[i].aliases {
			if strings.EqualFold(a, name) {
				v = &verbs[i]
			}
		}
	}
	if v == nil {
		fmt.Fprintf(env.Stderr, "blkcrypt: unknown action %q (try blkcrypt --help)\n", name)
		return ExitUsage
	}
	p, err := parseArgs(v.name, argv[1:])
	if err == nil && p.set["help"] == "true" {
		verbHelp(env.Stdout, *v)
		return ExitOK
	}
	if err != nil {
		err = &exitError{ExitUsage, err}
	} else if err = checkHeader(v.name, p); err == nil {
		err = v.run(ctx, env, p)
	}
	if err != nil {
		if msg := oneLine(err.Error()); msg != "" { // "" for an answer that is only an exit code
			fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", msg)
		}
		return exitCode(err)
	}
	return ExitOK
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.TrimSpace(s)
}

// errorExitCodes is the one table from the library's shared errors (and
// the operating system's) to cryptsetup's exit codes, checked in order.
// cryptsetup turns errno into its codes the same way: EPERM/EACCES 2
// (here a wrong passphrase; a file mode that refuses us names the wrong
// device, 4, as cryptsetup reports an unreadable device), ENOMEM 3,
// ENODEV/ENOENT 4, EBUSY 5, anything else 1. TestExitCodeTable checks that
// every exported error of the root package is here.
var errorExitCodes = []struct {
	name string
	err  error
	code int
}{
	{"ErrWrongPassphrase", blkcrypt.ErrWrongPassphrase, ExitPermission},
	{"ErrBusy", blkcrypt.ErrBusy, ExitBusy},
	{"ErrNotLUKS", blkcrypt.ErrNotLUKS, ExitDevice},
	{"ErrNoHeader", blkcrypt.ErrNoHeader, ExitDevice},
	{"ErrCorrupt", blkcrypt.ErrCorrupt, ExitDevice},
	// cryptsetup 2.6.1: "Device X is too small." is EINVAL, exit 1.
	{"ErrDeviceTooSmall", blkcrypt.ErrDeviceTooSmall, ExitUsage},
	// cryptsetup refuses to remove the last keyslot with EPERM, exit 2.
	{"ErrWouldDestroy", blkcrypt.ErrWouldDestroy, ExitPermission},
	{"ErrSlotInactive", blkcrypt.ErrSlotInactive, ExitUsage},
	{"ErrInvalidOptions", blkcrypt.ErrInvalidOptions, ExitUsage},
	{"ErrUnsupported", blkcrypt.ErrUnsupported, ExitUsage},
	{"ErrReadOnly", blkcrypt.ErrReadOnly, ExitUsage},
	{"ErrOutOfRange", blkcrypt.ErrOutOfRange, ExitUsage},
	{"ErrClosed", blkcrypt.ErrClosed, ExitUsage},
	// A resume with no reencryption in progress: wrong parameters, as reencrypt --resume-only exits.
	{"ErrNoReencryption", blkcrypt.ErrNoReencryption, ExitUsage},
	{"fs.ErrNotExist", fs.ErrNotExist, ExitDevice},
	{"EISDIR", syscall.EISDIR, ExitDevice},
	{"ENOTDIR", syscall.ENOTDIR, ExitDevice},
	{"fs.ErrPermission", fs.ErrPermission, ExitDevice},
	{"ENOMEM", syscall.ENOMEM, ExitNoMemory},
	{"EBUSY", syscall.EBUSY, ExitBusy},
}

// exitCode maps an error to cryptsetup's exit code: a code a verb chose
// (exitError), else errorExitCodes, else 1.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if uriDeviceErr(err) { // an NBD device that failed is the wrong device, as a missing file is
		return ExitDevice
	}
	for _, e := range errorExitCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return ExitUsage
}

// oneDevice returns the single positional argument.
func oneDevice(p *parsed) (string, error) {
	if len(p.args) != 1 {
		return "", usageErr("expected one DEVICE argument, got %d", len(p.args))
	}
	return p.args[0], nil
}

// readSecret reads a passphrase or key file per the cryptsetup flags. raw
// reports whether the bytes came from a key file (no newline handling).
func readSecret(env *Env, p *parsed, prompt string) (secret []byte, fromKeyFile bool, err error) {
	o := keyinput.Options{Offset: p.int("keyfile-offset", 0), Size: p.int("keyfile-size", 0), Exact: p.has("keyfile-size")}
	if o.Offset < 0 || o.Size < 0 {
		return nil, false, usageErr("negative --keyfile-offset or --keyfile-size")
	}
	if kf := p.str("key-file"); kf != "" {
		var r io.Reader = env.Stdin
		var st os.FileInfo
		if kf != "-" {
			f, err := os.Open(kf)
			if err != nil {
				return nil, false, usageErr("cannot open key file: %v", err)
			}
			defer f.Close()
			if st, err = f.Stat(); err == nil && st.IsDir() {
				return nil, false, usageErr("key file %s is a directory", kf)
			}
			r = f
		}
		o.RequireInput = keyFileIsStream(kf, st)
		b, err := keyinput.ReadKeyFile(r, o)
		if err != nil {
			return nil, false, keyReadErr(err)
		}
		if len(b) == 0 {
			return nil, false, emptyKeyFileErr(p, kf)
		}
		return b, true, nil
	}
	if env.Prompt != nil && env.StdinIsTerminal {
		b, err := env.Prompt(prompt)
		if err != nil {
			return nil, false, usageErr("reading passphrase: %v", err)
		}
		return b, false, nil
	}
	o.RequireInput = true
	b, err := keyinput.ReadPassphrase(env.Stdin, o)
	if err != nil {
		return nil, false, keyReadErr(err)
	}
	return b, false, nil
}

// readVolumeKeyFile reads a raw volume key of keySize bytes.
func readVolumeKeyFile(path string, keySize int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("cannot open volume key file: %v", err)
	}
	defer f.Close()
	limit := keySize
	if keySize < 0 {
		limit = 512 // any size: the format checks it
	}
	b, err := keyinput.ReadKeyFile(f, keyinput.Options{Size: int64(limit) + 1})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if keySize < 0 && (len(b) == 0 || len(b) > limit) {
		clear(b)
		return nil, usageErr("volume key file holds %d bytes", len(b))
	}
	if keySize >= 0 && len(b) != keySize {
		clear(b)
		return nil, usageErr("volume key file holds %d bytes, the cipher needs %d", len(b), keySize)
	}
	return b, nil
}
