// Command luksadmin performs every LUKS header operation of the blkcrypt
// command through the public API alone, as an outside program would:
//
//	luksadmin [-mem] [-type luks1|luks2] IMAGE VERB [ARGS]
//
// Verbs: format [SECTOR_SIZE], test, add-key [SLOT], change-key, remove-key,
// kill-slot N, label LABEL [SUBSYSTEM], uuid [UUID], priority N
// ignore|normal|prefer, token-import [SLOT...] (JSON on stdin after the
// passphrases: none), token-export N, token-list, token-remove N, backup
// FILE, restore FILE, convert luks1|luks2, resize BYTES (a file only),
// erase, repair, dump, dump-json, volume-key, reencrypt [SLOT [CIPHER]]
// (a new volume key, keeping SLOT's passphrase or the only keyslot's; a
// LUKS1 run keeps its log files in the current directory).
//
// Passphrases are read from standard input, one per line (never from the
// command line): the existing one first, then a new one. The result goes
// to standard output (a keyslot number, a token, a dump).
//
// With -mem the image is read into memory, the operation runs on that
// memory through OpenLUKSDevice, FormatDevice or RestoreLUKSHeaderDevice,
// and the memory is written back: what a program does that keeps an image
// in memory or reaches it through its own transport.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/keyslot"
)

// memDevice is an image held in memory.
type memDevice struct{ b []byte }

func (m *memDevice) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memDevice) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, errors.New("write past the end of the image")
	}
	return copy(m.b[off:], p), nil
}

func (m *memDevice) Size() int64 { return int64(len(m.b)) }

type admin struct {
	ctx   context.Context
	path  string
	mem   *memDevice
	typ   string
	in    *bufio.Reader
	out   io.Writer
	fast  blkcrypt.PBKDFOptions
	wiped [][]byte
}

// secret reads the next passphrase line from standard input.
func (a *admin) secret() ([]byte, error) {
	line, err := a.in.ReadBytes('\n')
	if err != nil && (err != io.EOF || len(line) == 0) {
		return nil, fmt.Errorf("reading a passphrase from standard input: %w", err)
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	a.wiped = append(a.wiped, line)
	return line, nil
}

func (a *admin) open() (*blkcrypt.LUKS, error) {
	if a.mem != nil {
		return blkcrypt.OpenLUKSDevice(a.ctx, a.mem, blkcrypt.LUKSOptions{})
	}
	return blkcrypt.OpenLUKS(a.ctx, a.path, blkcrypt.LUKSOptions{})
}

func slotArg(args []string, i int) (*int, error) {
	if len(args) <= i {
		return nil, nil
	}
	n, err := strconv.Atoi(args[i])
	if err != nil {
		return nil, fmt.Errorf("keyslot %q is not a number", args[i])
	}
	return blkcrypt.Slot(n), nil
}

func (a *admin) run(verb string, args []string) error {
	if verb == "format" {
		pass, err := a.secret()
		if err != nil {
			return err
		}
		o := blkcrypt.FormatOptions{Type: a.typ, PBKDF: a.fast}
		if len(args) == 1 {
			if o.SectorSize, err = strconv.Atoi(args[0]); err != nil {
				return fmt.Errorf("sector size %q is not a number", args[0])
			}
		}
		if a.mem != nil {
			return blkcrypt.FormatDevice(a.ctx, a.mem, pass, o)
		}
		return blkcrypt.Format(a.ctx, a.path, pass, o)
	}
	if verb == "restore" {
		if len(args) != 1 {
			return errors.New("usage: restore FILE")
		}
		b, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		o := blkcrypt.RestoreOptions{Force: true}
		if a.mem != nil {
			return blkcrypt.RestoreLUKSHeaderDevice(a.ctx, a.mem, b, o)
		}
		return blkcrypt.RestoreLUKSHeader(a.ctx, a.path, b, o)
	}
	h, err := a.open()
	if err != nil {
		return err
	}
	defer h.Close()
	ko := blkcrypt.KeyOptions{PBKDF: a.fast}
	switch verb {
	case "test":
		pass, err := a.secret()
		if err != nil {
			return err
		}
		slot, err := h.TestPassphrase(a.ctx, pass, ko)
		if err == nil {
			fmt.Fprintln(a.out, slot)
		}
		return err
	case "add-key", "change-key":
		if ko.NewKeyslot, err = slotArg(args, 0); err != nil {
			return err
		}
		old, err := a.secret()
		if err != nil {
			return err
		}
		np, err := a.secret()
		if err != nil {
			return err
		}
		var slot int
		if verb == "add-key" {
			slot, err = h.AddKey(a.ctx, old, np, ko)
		} else {
			slot, err = h.ChangeKey(a.ctx, old, np, ko)
		}
		if err == nil {
			fmt.Fprintln(a.out, slot)
		}
		return err
	case "remove-key":
		pass, err := a.secret()
		if err != nil {
			return err
		}
		slot, err := h.RemoveKey(a.ctx, pass, ko)
		if err == nil {
			fmt.Fprintln(a.out, slot)
		}
		return err
	case "kill-slot":
		n, err := slotArg(args, 0)
		if err != nil || n == nil {
			return errors.New("usage: kill-slot N")
		}
		return h.KillSlot(a.ctx, *n, ko)
	case "label":
		if len(args) < 1 || len(args) > 2 {
			return errors.New("usage: label LABEL [SUBSYSTEM]")
		}
		sub := ""
		if len(args) == 2 {
			sub = args[1]
		}
		return h.SetLabel(a.ctx, args[0], sub)
	case "uuid":
		u := ""
		if len(args) == 1 {
			u = args[0]
		}
		got, err := h.SetUUID(a.ctx, u)
		if err == nil {
			fmt.Fprintln(a.out, got)
		}
		return err
	case "priority":
		n, err := slotArg(args, 0)
		if err != nil || n == nil || len(args) != 2 {
			return errors.New("usage: priority N ignore|normal|prefer")
		}
		p, ok := map[string]keyslot.Priority{"ignore": keyslot.PriorityIgnore, "normal": keyslot.PriorityNormal, "prefer": keyslot.PriorityPrefer}[args[1]]
		if !ok {
			return fmt.Errorf("unknown priority %q", args[1])
		}
		return h.SetPriority(a.ctx, *n, p)
	case "token-import":
		var slots []int
		for i := range args {
			n, err := slotArg(args, i)
			if err != nil {
				return err
			}
			slots = append(slots, *n)
		}
		tok, err := io.ReadAll(a.in)
		if err != nil {
			return err
		}
		id, err := h.ImportToken(a.ctx, tok, blkcrypt.TokenOptions{Keyslots: slots})
		if err == nil {
			fmt.Fprintln(a.out, id)
		}
		return err
	case "token-export":
		n, err := slotArg(args, 0)
		if err != nil || n == nil {
			return errors.New("usage: token-export N")
		}
		tok, err := h.ExportToken(a.ctx, *n)
		if err == nil {
			fmt.Fprintf(a.out, "%s\n", tok)
		}
		return err
	case "token-list":
		toks, err := h.Tokens(a.ctx)
		for id := 0; err == nil && id < blkcrypt.MaxTokens; id++ {
			if t, ok := toks[id]; ok {
				fmt.Fprintf(a.out, "%d %s\n", id, t)
			}
		}
		return err
	case "token-remove":
		n, err := slotArg(args, 0)
		if err != nil || n == nil {
			return errors.New("usage: token-remove N")
		}
		return h.RemoveToken(a.ctx, *n)
	case "backup":
		if len(args) != 1 {
			return errors.New("usage: backup FILE")
		}
		var b bytes.Buffer
		if _, err := h.BackupHeader(a.ctx, &b); err != nil {
			return err
		}
		return os.WriteFile(args[0], b.Bytes(), 0o600)
	case "convert":
		if len(args) != 1 {
			return errors.New("usage: convert luks1|luks2")
		}
		return h.Convert(a.ctx, args[0])
	case "erase":
		return h.Erase(a.ctx, blkcrypt.EraseOptions{Force: true})
	case "resize":
		if a.mem != nil || len(args) != 1 {
			return errors.New("usage: resize BYTES (an image file)")
		}
		n, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil {
			return fmt.Errorf("size %q is not a number", args[0])
		}
		return h.Resize(a.ctx, blkcrypt.ResizeOptions{Size: n})
	case "repair":
		fixed, err := h.Repair(a.ctx)
		if err == nil {
			fmt.Fprintln(a.out, fixed)
		}
		return err
	case "dump":
		return h.Dump(a.ctx, a.out, blkcrypt.DumpOptions{Device: a.path})
	case "dump-json":
		return h.Dump(a.ctx, a.out, blkcrypt.DumpOptions{Format: blkcrypt.DumpJSONMetadata})
	case "reencrypt":
		o := blkcrypt.LUKSReencryptOptions{PBKDF: a.fast}
		if o.Keyslot, err = slotArg(args, 0); err != nil {
			return err
		}
		if len(args) > 1 {
			o.Cipher = args[1]
		}
		pass, err := a.secret()
		if err != nil {
			return err
		}
		plan, err := h.PlanReencrypt(a.ctx, o)
		if err != nil {
			return err
		}
		if plan.Version == 2 {
			o.HotzoneSize = 1 << 20 // several steps even on a small image
		}
		var steps int
		o.Progress = func(done, total uint64) { steps++ }
		if err := h.Reencrypt(a.ctx, pass, o); err != nil {
			return err
		}
		fmt.Fprintf(a.out, "luks%d reencrypted in %d steps\n", plan.Version, steps)
		return nil
	case "volume-key":
		pass, err := a.secret()
		if err != nil {
			return err
		}
		key, _, err := h.VolumeKey(a.ctx, pass, ko)
		if err != nil {
			return err
		}
		defer clear(key)
		return h.Dump(a.ctx, a.out, blkcrypt.DumpOptions{Device: a.path, VolumeKey: key})
	}
	return fmt.Errorf("unknown verb %q", verb)
}

func main() {
	mem := flag.Bool("mem", false, "run on the image held in memory")
	typ := flag.String("type", "", "luks1 or luks2: the version format writes")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: luksadmin [-mem] [-type T] IMAGE VERB [ARGS]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a := &admin{ctx: ctx, path: flag.Arg(0), typ: *typ, in: bufio.NewReader(os.Stdin), out: os.Stdout,
		// The examples run under test: a forced PBKDF2 keeps them fast.
		fast: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}
	if *mem {
		b, err := os.ReadFile(a.path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "luksadmin:", err)
			os.Exit(1)
		}
		a.mem = &memDevice{b: b}
	}
	err := a.run(flag.Arg(1), flag.Args()[2:])
	for _, s := range a.wiped {
		clear(s)
	}
	if err == nil && a.mem != nil {
		err = os.WriteFile(a.path, a.mem.b, 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "luksadmin:", strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
