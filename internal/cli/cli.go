// Package cli implements the blkcrypt command: it maps cryptsetup's flags
// onto library calls. Each verb is one runX(ctx, env, opts, args) over its
// options struct, parsed once from the command line (command.go), and Main
// runs a whole command line in-process, as the tests call it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
	"github.com/blkcrypt/blkcrypt/lvm"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient"
	"github.com/blkcrypt/blkcrypt/partition"
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

// verbTable is every verb: one literal, built when asked so that a verb
// may call Main (demo does).
func verbTable() []command {
	return []command{
		typed("demo", nil, "make a demo volume, exercise it and show what to do next", runDemo),
		typed("speed", nil, "ALG… — tcrypt-style speed table of capi drivers", runSpeed),
		typed("crypto", nil, "list every registered driver, like /proc/crypto", runCrypto),
		typed("benchmark", nil, "[--cipher SPEC --key-size BITS] [--sector-size N] — cryptsetup benchmark table plus the engine break-even", runBenchmark),
		typed("read", nil, "DEVICE — write decrypted bytes to stdout or -o FILE", runRead),
		typed("write", nil, "DEVICE — encrypt stdin or -i FILE into the volume", runWrite),
		typed("serve", nil, "DEVICE|--export NAME=DEVICE,key-file=F...|--exports FILE --listen 127.0.0.1:10809|unix:/path — serve decrypted volumes over NBD", runServe),
		typed("mount", nil, mountHelp, runMount),
		typed("probe", nil, "DEVICE — the tree of a disk image as lsblk -f shows it: partitions, encryption, LVM, filesystems", runProbe),
		typed("ls", nil, "DEVICE PATH — list a directory of the filesystem in DEVICE (read-only; ext4, FAT, NTFS)", runLs),
		typed("cat", nil, "DEVICE PATH — write a file of the filesystem in DEVICE to stdout (read-only; ext4, FAT, NTFS)", runCat),
		typed("cp", nil, "DEVICE PATH DEST — copy a file or directory out of the filesystem in DEVICE, keeping mode and mtime", runCp),

		typed("format", []string{"luksFormat"}, "DEVICE — create a LUKS2 (or --type luks1) volume", runFormat),
		typed("dump", []string{"luksDump"}, "DEVICE — show the header (--json, --dump-volume-key)", runDump),
		typed("test-passphrase", nil, "DEVICE — check a passphrase without opening", runTestPassphrase),
		typed("add-key", []string{"luksAddKey"}, "DEVICE [NEW_KEY_FILE] — add a keyslot", runAddKey),
		typed("change-key", []string{"luksChangeKey"}, "DEVICE [NEW_KEY_FILE] — change a passphrase", runChangeKey),
		typed("remove-key", []string{"luksRemoveKey"}, "DEVICE — remove the keyslot a passphrase opens", runRemoveKey),
		typed("kill-slot", []string{"luksKillSlot"}, "DEVICE N — remove keyslot N", runKillSlot),
		typed("header-backup", []string{"luksHeaderBackup"}, "DEVICE --header-backup-file F — save the LUKS header and keyslot areas to a file", runHeaderBackup),
		typed("header-restore", []string{"luksHeaderRestore"}, "DEVICE --header-backup-file F — write a saved LUKS header back", runHeaderRestore),

		typed("is-luks", []string{"isLuks"}, "DEVICE — exit 0 if DEVICE holds a LUKS header (--type luks1|luks2)", runIsLuks),
		typed("uuid", []string{"luksUUID"}, "DEVICE — print the UUID, or set it with --uuid", runUUID),
		typed("config", nil, "DEVICE — set LUKS2 --label/--subsystem, or --priority of --key-slot", runConfig),
		typed("erase", []string{"luksErase"}, "DEVICE — wipe every keyslot (the data becomes unreadable)", runErase),
		typed("token", nil, "add|remove|import|export DEVICE — LUKS2 tokens (--token-id, --json-file, --key-slot)", runToken),
		typed("enroll", nil, "DEVICE — enroll a TPM2, PKCS#11 or FIDO2 token or a recovery key as systemd-cryptenroll does (--tpm2-device, --tpm2-pcrs, --tpm2-with-pin, --pkcs11-token-uri, --fido2-device, --recovery-key, --wipe-slot)", runEnroll),
		typed("bind", nil, "DEVICE PIN CONFIG — bind to a clevis pin (tang, tpm2, sss) as clevis luks bind does (-y, -k KEYFILE)", runBind),
		typed("unbind", nil, "-s SLOT DEVICE — remove a clevis binding as clevis luks unbind does", runUnbind),
		typed("list", nil, "DEVICE — list the clevis bindings as clevis luks list does", runList),
		typed("repair", nil, "DEVICE — rewrite a LUKS2 header with one damaged metadata copy", runRepair),
		// cryptsetup's per-format dump verbs are dump with the type named.
		typed("tcrypt-dump", []string{"tcryptDump"}, "DEVICE — dump --type tcrypt", typedDump("tcrypt")),
		typed("bitlk-dump", []string{"bitlkDump"}, "DEVICE — dump --type bitlk", typedDump("bitlk")),
		typed("fvault2-dump", []string{"fvault2Dump"}, "DEVICE — dump --type fvault2", typedDump("fvault2")),
		typed("convert", []string{"luksConvert"}, "DEVICE --type luks1|luks2 — convert the header in place", runConvert),
		typed("resize", nil, "IMAGE — grow or shrink the data area (--size SECTORS or --device-size BYTES)", runResize),
		typed("reencrypt", nil, "DEVICE — new volume key/cipher in place, offline (LUKS2: --resilience, --hotzone-size, --resume-only, --init-only, --encrypt, --decrypt; LUKS1: cryptsetup's legacy files in the current directory, --block-size, --keep-key)", runReencrypt),
	}
}

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
		if i := slices.Index(argv, "--test-passphrase"); i > 0 {
			name, argv = "test-passphrase", slices.Delete(slices.Clone(argv), i, i+1)
		}
	}
	c, ok := lookupCommand(name)
	if !ok {
		fmt.Fprintf(env.Stderr, "blkcrypt: unknown action %q (try blkcrypt --help)\n", name)
		return ExitUsage
	}
	p, err := parseArgs(c.name, argv[1:])
	if err == nil && p.set["help"] == "true" {
		verbHelp(env.Stdout, c)
		return ExitOK
	}
	if err != nil {
		err = &exitError{ExitUsage, err}
	} else if err = checkHeader(c.name, p); err == nil {
		err = c.call(ctx, env, p)
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
// every exported error of the root package is here. The layers' errors
// come first: an NBD device that fails (cannot connect, no such export,
// TLS refused, a broken server; a malformed URI stays a usage error), a
// partition or LV that is not there, are the wrong device, as a missing
// file is; an LV of a kind not read is a wrong parameter.
var errorExitCodes = []struct {
	name string
	err  error
	code int
}{
	{"nbdclient.ErrConnect", nbdclient.ErrConnect, ExitDevice},
	{"nbdclient.ErrConnectionLost", nbdclient.ErrConnectionLost, ExitDevice},
	{"nbdclient.ErrUnknownExport", nbdclient.ErrUnknownExport, ExitDevice},
	{"nbdclient.ErrTLS", nbdclient.ErrTLS, ExitDevice},
	{"nbdclient.ErrProtocol", nbdclient.ErrProtocol, ExitDevice},
	{"nbdclient.ErrShortReply", nbdclient.ErrShortReply, ExitDevice},
	{"nbdclient.ErrReadOnly", nbdclient.ErrReadOnly, ExitDevice},
	{"nbdclient.ErrOutOfRange", nbdclient.ErrOutOfRange, ExitDevice},
	{"partition.ErrNotFound", partition.ErrNotFound, ExitDevice},
	{"partition.ErrNoTable", partition.ErrNoTable, ExitDevice},
	{"partition.ErrAmbiguous", partition.ErrAmbiguous, ExitDevice},
	{"partition.ErrCorrupt", partition.ErrCorrupt, ExitDevice},
	{"lvm.ErrNoPV", lvm.ErrNoPV, ExitDevice},
	{"lvm.ErrNotFound", lvm.ErrNotFound, ExitDevice},
	{"lvm.ErrNoMetadata", lvm.ErrNoMetadata, ExitDevice},
	{"lvm.ErrMissingPV", lvm.ErrMissingPV, ExitDevice},
	{"lvm.ErrUnsupported", lvm.ErrUnsupported, ExitUsage},
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
	// Another reencryption in progress is ErrBusy (exit 5); a LUKS1 header
	// marked by one, encrypting LUKS, or decrypting with the header on the
	// device and no header file to export to are wrong parameters (EINVAL).
	{"ErrReencryptInProgress", blkcrypt.ErrReencryptInProgress, ExitBusy},
	{"ErrLUKS1ReencryptInProgress", blkcrypt.ErrLUKS1ReencryptInProgress, ExitUsage},
	{"ErrAlreadyLUKS", blkcrypt.ErrAlreadyLUKS, ExitUsage},
	{"ErrDecryptAttached", blkcrypt.ErrDecryptAttached, ExitUsage},
	// Sectors whose integrity tags do not match: the device is damaged.
	{"ErrIntegrity", blkcrypt.ErrIntegrity, ExitDevice},
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
	if se := (*nbdclient.ServerError)(nil); errors.As(err, &se) { // an NBD server's error reply
		return ExitDevice
	}
	for _, e := range errorExitCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return ExitUsage
}

// oneArg returns the single positional argument, DEVICE.
func oneArg(args []string) (string, error) {
	if len(args) != 1 {
		return "", usageErr("expected one DEVICE argument, got %d", len(args))
	}
	return args[0], nil
}

// keyFileFlags say where an existing passphrase or key comes from.
type keyFileFlags struct {
	KeyFile       string `flag:"key-file" short:"d" help:"read the key from a file (- for stdin)" def:"the terminal, or stdin"`
	KeyfileOffset int64  `flag:"keyfile-offset" help:"skip this many bytes of the key file" def:"0"`
	KeyfileSize   *int64 `flag:"keyfile-size" short:"l" help:"read at most this many bytes of the key file" def:"all of it"`
}

// read reads a passphrase or key file per the cryptsetup flags;
// fromKeyFile reports whether the bytes came from a key file (no newline
// handling). rawKey says the key file is a key, not a passphrase (plain,
// loop-AES), for the error an empty one gives.
func (k keyFileFlags) read(env *Env, rawKey bool, prompt string) (secret []byte, fromKeyFile bool, err error) {
	o := keyinput.Options{Offset: k.KeyfileOffset, Exact: k.KeyfileSize != nil}
	if k.KeyfileSize != nil {
		o.Size = *k.KeyfileSize
	}
	if o.Offset < 0 || o.Size < 0 {
		return nil, false, usageErr("negative --keyfile-offset or --keyfile-size")
	}
	if kf := k.KeyFile; kf != "" {
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
			return nil, false, emptyKeyFileErr(rawKey, kf)
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
