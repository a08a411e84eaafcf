package blkcrypt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// The header verbs of cryptsetup besides the key ones (luks_handle.go),
// reencryption and resize, as methods of the LUKS handle: tokens, label
// and subsystem, keyslot priority, UUID, header backup and restore,
// convert, erase, repair and dump. Like the key methods, each takes the
// device's lock for its own duration, reads the header afresh under it,
// makes every check that can refuse before it writes, and leaves the old
// or the new header after a crash at any point (the luks1 and luks2
// writes it calls are ordered for that; the exceptions are named).

// The refusals of the header methods match ErrInvalidOptions, as the
// keyslot errors do: the request, not the device, is at fault.
var (
	errTokenInactive = volspec.Sub("token is not in use", volspec.ErrInvalidOptions)
	// A header backup that holds no valid LUKS header, has not the size
	// its header needs, or does not fit the device.
	errBadBackup   = volspec.Sub("unusable LUKS header backup", volspec.ErrInvalidOptions)
	errAlreadyType = volspec.Sub("the header is already of that type", volspec.ErrInvalidOptions)
)

// MaxTokens is the number of LUKS2 token ids (0 to MaxTokens-1).
const MaxTokens = luks2.MaxKeyslots

// asLUKS2 is the LUKS2 header, or ErrNotLUKS for a LUKS1 one: the verbs
// that change what only LUKS2 stores.
func asLUKS2(hd luksutil.Header) (*luks2.Header, error) {
	h2, ok := hd.(*luks2.Header)
	if !ok {
		return nil, fmt.Errorf("%w: the device holds luks%d, not luks2", ErrNotLUKS, hd.Version())
	}
	return h2, nil
}

// VolumeKey returns the volume key (wipe it after use) and the keyslot
// that opened it: with o.VolumeKey, a copy of it once it matches the
// header's digest (keyslot -1); else the key passphrase opens (o.Keyslot
// only, or any keyslot), as crypt_volume_key_get. Shared lock; writes
// nothing.
func (h *LUKS) VolumeKey(ctx context.Context, passphrase []byte, o KeyOptions) (key []byte, slot int, err error) {
	slot = -1
	err = h.do(ctx, false, func(hd luksutil.Header) error {
		if o.VolumeKey != nil {
			if !hd.VolumeKeyDigestOK(o.VolumeKey) {
				return luksutil.ErrWrongKey
			}
			key = append([]byte(nil), o.VolumeKey...)
			return nil
		}
		var err error
		key, slot, err = hd.UnlockContext(ctx, h.dev, passphrase, keyslotArg(o.Keyslot))
		return err
	})
	return key, slot, err
}

var uuidForm = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ValidUUID reports whether s is a UUID in the text form luksUUID takes
// (8-4-4-4-12 hexadecimal digits).
func ValidUUID(s string) bool { return uuidForm.MatchString(s) }

// SetUUID stores uuid (lowercased, as cryptsetup luksUUID --uuid stores
// it) as the volume UUID, or a new random one when uuid is "", and
// returns it. A malformed uuid is ErrInvalidOptions. Exclusive lock; one
// header write (LUKS2: both metadata copies in turn), so a crash leaves
// the old UUID or the new.
func (h *LUKS) SetUUID(ctx context.Context, uuid string) (string, error) {
	if uuid == "" {
		var err error
		if uuid, err = luksutil.NewUUID(); err != nil {
			return "", err
		}
	}
	if !ValidUUID(uuid) {
		return "", fmt.Errorf("%w: wrong LUKS UUID format", ErrInvalidOptions)
	}
	uuid = strings.ToLower(uuid)
	return uuid, h.do(ctx, true, func(hd luksutil.Header) error {
		switch hh := hd.(type) {
		case *luks1.Header:
			return hh.SetUUID(h.dev, uuid)
		case *luks2.Header:
			return hh.SetUUID(h.dev, uuid)
		}
		return ErrNotLUKS
	})
}

// SetLabel stores a LUKS2 label and subsystem together (cryptsetup config
// --label/--subsystem: the one not given becomes empty, as
// crypt_set_label leaves it). Each takes at most 47 bytes. LUKS1 has
// neither: ErrNotLUKS. Exclusive lock; one metadata update.
func (h *LUKS) SetLabel(ctx context.Context, label, subsystem string) error {
	return h.do(ctx, true, func(hd luksutil.Header) error {
		h2, err := asLUKS2(hd)
		if err != nil {
			return err
		}
		return h2.SetLabel(h.dev, label, subsystem)
	})
}

// SetPriority sets a LUKS2 keyslot's priority (cryptsetup config
// --priority with --key-slot): PriorityIgnore, PriorityNormal or
// PriorityPrefer, or PriorityUnset to drop the stored one. An inactive
// keyslot (ErrSlotInactive) or one out of range is ErrInvalidOptions. Exclusive
// lock; one metadata update.
func (h *LUKS) SetPriority(ctx context.Context, slot int, p keyslot.Priority) error {
	return h.do(ctx, true, func(hd luksutil.Header) error {
		h2, err := asLUKS2(hd)
		if err != nil {
			return err
		}
		return h2.SetPriority(h.dev, slot, p)
	})
}

// Tokens returns the LUKS2 tokens by id, each as cryptsetup's token
// export prints it (compact JSON). LUKS1 has none: an empty map. Shared
// lock.
func (h *LUKS) Tokens(ctx context.Context) (map[int][]byte, error) {
	out := map[int][]byte{}
	err := h.do(ctx, false, func(hd luksutil.Header) error {
		h2, ok := hd.(*luks2.Header)
		if !ok {
			return nil
		}
		for _, id := range h2.TokenIDs() {
			b, err := h2.TokenJSON(id)
			if err != nil {
				return err
			}
			out[id] = b
		}
		return nil
	})
	return out, err
}

// ExportToken returns token id as cryptsetup token export prints it
// (json-c's compact form, no newline); an id that holds no token is
// ErrInvalidOptions. Shared lock.
func (h *LUKS) ExportToken(ctx context.Context, id int) ([]byte, error) {
	var out []byte
	err := h.do(ctx, false, func(hd luksutil.Header) error {
		h2, err := asLUKS2(hd)
		if err != nil {
			return err
		}
		if !slices.Contains(h2.TokenIDs(), id) {
			return fmt.Errorf("%w: token %d", errTokenInactive, id)
		}
		out, err = h2.TokenJSON(id)
		return err
	})
	return out, err
}

// TokenOptions choose where ImportToken and AddKeyringToken store a token.
type TokenOptions struct {
	// ID is the token id; nil takes the first free one.
	ID *int
	// Keyslots are assigned to the token in the same metadata update
	// (cryptsetup's --key-slot); they must be active.
	Keyslots []int
	// Replace allows ID to name a token in use (--token-replace); without
	// it that is ErrInvalidOptions.
	Replace bool
}

// ImportToken stores token (a JSON object with a "type" string and a
// "keyslots" array, cryptsetup token import's input; the first JSON value
// counts) and returns its id. A token the LUKS2 metadata rules refuse,
// and an inactive keyslot, are ErrInvalidOptions. Exclusive lock; one
// metadata update, so a crash never leaves a token half assigned.
func (h *LUKS) ImportToken(ctx context.Context, token []byte, o TokenOptions) (int, error) {
	id := -1
	err := h.do(ctx, true, func(hd luksutil.Header) error {
		h2, err := asLUKS2(hd)
		if err != nil {
			return err
		}
		id, err = h2.ImportToken(h.dev, tokenArg(o.ID), token, o.Keyslots, o.Replace)
		return err
	})
	return id, err
}

func tokenArg(id *int) int {
	if id == nil {
		return luks2.AnyToken
	}
	return *id
}

// AddKeyringToken stores cryptsetup's built-in luks2-keyring token (token
// add --key-description): the description of a kernel keyring key that
// holds a passphrase, assigned to o.Keyslots or, when none are named, to
// every active keyslot. blkcrypt stores it as cryptsetup does but never
// reads the keyring itself. It returns the token id. Exclusive lock; one
// metadata update.
func (h *LUKS) AddKeyringToken(ctx context.Context, description string, o TokenOptions) (int, error) {
	if description == "" {
		return -1, fmt.Errorf("%w: a keyring token needs a key description", ErrInvalidOptions)
	}
	tok, err := json.Marshal(struct {
		Type string   `json:"type"`
		KS   []string `json:"keyslots"`
		Desc string   `json:"key_description"`
	}{"luks2-keyring", []string{}, description})
	if err != nil {
		return -1, err
	}
	id := -1
	err = h.do(ctx, true, func(hd luksutil.Header) error {
		h2, err := asLUKS2(hd)
		if err != nil {
			return err
		}
		slots := o.Keyslots
		if slots == nil {
			slots = h2.ActiveKeyslots()
		}
		id, err = h2.ImportToken(h.dev, tokenArg(o.ID), tok, slots, o.Replace)
		return err
	})
	return id, err
}

// RemoveToken deletes token id; an id that holds no token is
// ErrInvalidOptions. Exclusive lock; one metadata update.
func (h *LUKS) RemoveToken(ctx context.Context, id int) error {
	return h.do(ctx, true, func(hd luksutil.Header) error {
		h2, err := asLUKS2(hd)
		if err != nil {
			return err
		}
		if !slices.Contains(h2.TokenIDs(), id) {
			return fmt.Errorf("%w: token %d", errTokenInactive, id)
		}
		return h2.RemoveToken(h.dev, id)
	})
}

// EraseOptions confirm an Erase.
type EraseOptions struct {
	// Force is required: without it Erase is ErrWouldDestroy (cryptsetup
	// asks for confirmation).
	Force bool
}

// Erase removes every keyslot (cryptsetup luksErase): no passphrase opens
// the volume afterwards, only a header backup or the volume key does. It
// needs o.Force (ErrWouldDestroy otherwise, nothing written). Exclusive
// lock; the keyslots are dropped in one header write, then their areas
// are overwritten: a crash before the write leaves the volume as it was,
// after it no keyslot opens.
func (h *LUKS) Erase(ctx context.Context, o EraseOptions) error {
	return h.do(ctx, true, func(hd luksutil.Header) error {
		if !o.Force {
			return fmt.Errorf("%w: erasing every keyslot leaves no passphrase that opens the volume", ErrWouldDestroy)
		}
		switch hh := hd.(type) {
		case *luks1.Header:
			return hh.Erase(h.dev)
		case *luks2.Header:
			return hh.Erase(h.dev)
		}
		return ErrNotLUKS
	})
}

// Repair rewrites a LUKS2 header whose two metadata copies disagree or
// one of which is damaged, from the valid one (cryptsetup repair), and
// reports whether it wrote. A header that reads whole, and any LUKS1
// header that reads (cryptsetup's LUKS1 repair only mends keyslot fields
// this reader refuses), need nothing. Exclusive lock; each copy is
// written in turn, so a crash leaves at least the valid one.
func (h *LUKS) Repair(ctx context.Context) (repaired bool, err error) {
	err = h.do(ctx, true, func(hd luksutil.Header) error {
		h2, ok := hd.(*luks2.Header)
		if !ok || !h2.NeedsRepair() {
			return nil
		}
		repaired = true
		return h2.Repair(h.dev)
	})
	return repaired, err
}

// Convert converts the header in place to "luks1" or "luks2"
// (cryptsetup convert --type), refusing what the target cannot hold as
// cryptsetup refuses it (luks2.ErrNotConvertible) and a header already of
// that type (both ErrInvalidOptions), before it writes. Exclusive lock. The
// keyslots hop through free keyslot areas when there are enough, so a
// crash leaves a header that opens; otherwise there is one window, as in
// cryptsetup, where only a header backup helps (see luks2.FromLUKS1).
func (h *LUKS) Convert(ctx context.Context, to string) error {
	if to != "luks1" && to != "luks2" {
		return fmt.Errorf("%w: convert to %q (luks1 or luks2)", ErrInvalidOptions, to)
	}
	return h.do(ctx, true, func(hd luksutil.Header) error {
		if fmt.Sprintf("luks%d", hd.Version()) == to {
			return fmt.Errorf("%w: the device is already %s", errAlreadyType, to)
		}
		var err error
		switch hh := hd.(type) {
		case *luks1.Header:
			_, err = luks2.FromLUKS1(h.dev, hh)
		case *luks2.Header:
			_, err = hh.ToLUKS1(h.dev)
		}
		return err
	})
}

// backupSize is how many bytes luksHeaderBackup saves: the binary
// header(s) and the keyslot areas, rounded up to a 4096-byte page, not the
// gap before the data.
func backupSize(hd luksutil.Header) (read, total int64) {
	switch hh := hd.(type) {
	case *luks1.Header:
		return hh.HeaderSize(), (hh.HeaderSize() + 4095) / 4096 * 4096
	case *luks2.Header:
		n := int64(hh.HeaderSize())
		return n, (n + 4095) / 4096 * 4096
	}
	return hd.DataOffset(), hd.DataOffset()
}

// backup is the header backup of hd on dev, byte for byte what
// cryptsetup's luksHeaderBackup writes: the header and keyslot areas as
// the device holds them, zero-padded to a page, and for LUKS1 whose first
// keyslot starts at 4096 the bytes between the 592-byte header and it
// zeroed ("so backup cannot contain old signatures").
func backup(hd luksutil.Header, dev luksutil.Device) ([]byte, error) {
	n, total := backupSize(hd)
	buf := make([]byte, total)
	if _, err := dev.ReadAt(buf[:n], 0); err != nil {
		return nil, fmt.Errorf("reading the header: %w", err)
	}
	if h1, ok := hd.(*luks1.Header); ok && h1.Phdr().Keyslots[0].KeyMaterialOffset*luks1.SectorSize == 4096 {
		clear(buf[luks1.PhdrSize:4096])
	}
	return buf, nil
}

// BackupHeader writes the header backup to w: the exact bytes cryptsetup
// luksHeaderBackup writes (the header and every keyslot area, so it holds
// the keyslots too: keep it as safe as the passphrases). It returns the
// number of bytes written. Shared lock, held while the header is read.
func (h *LUKS) BackupHeader(ctx context.Context, w io.Writer) (int64, error) {
	var buf []byte
	err := h.do(ctx, false, func(hd luksutil.Header) error {
		var err error
		buf, err = backup(hd, h.dev)
		return err
	})
	if err != nil {
		return 0, err
	}
	n, err := w.Write(buf)
	return int64(n), err
}

// BackupHeaderFile writes the header backup to a new file at path,
// readable by its owner only (mode 0400), as luksHeaderBackup creates it.
// A path that exists is refused (os.ErrExist) and left alone; a failed
// write removes the partial file. The file is synced before it returns.
func (h *LUKS) BackupHeaderFile(ctx context.Context, path string) error {
	var buf []byte
	err := h.do(ctx, false, func(hd luksutil.Header) error {
		var err error
		buf, err = backup(hd, h.dev)
		return err
	})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return fmt.Errorf("creating the header backup file: %w", err)
	}
	if _, err = f.Write(buf); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("writing the header backup file: %w", err)
	}
	return nil
}

// RestoreOptions confirm a RestoreHeader.
type RestoreOptions struct {
	// Force allows writing the backup over a device that holds a LUKS
	// header (whose keyslots it replaces); without it that is
	// ErrWouldDestroy and nothing is written. cryptsetup asks there.
	Force bool
}

// RestoreHeader writes a header backup (luksHeaderBackup's file, or
// BackupHeader's output) over the device's header, with cryptsetup's
// checks made before anything is written: the backup holds a valid LUKS
// header and exactly the bytes it needs, and the device's header, if it
// has one, has the backup's data offset (and for LUKS1 its key size),
// else the data would be lost (ErrInvalidOptions for each); the device is large enough
// (ErrDeviceTooSmall); a device with a header needs o.Force
// (ErrWouldDestroy). Exclusive
// lock. The backup's keyslot areas go first where the current header does
// not use them, then each header copy, each step synced, so a crash
// leaves the current or the restored header working (luks1 and
// luks2.RestoreHeader).
func (h *LUKS) RestoreHeader(ctx context.Context, backup []byte, o RestoreOptions) error {
	bh, err := readBackup(ctx, backup)
	if err != nil {
		return err
	}
	return h.locked(ctx, true, func() error {
		cur, err := readHeader(ctx, h.dev)
		if err != nil {
			cur = nil // no header (or a damaged one): the backup replaces it
		}
		if cur != nil && cur.DataOffset() != bh.DataOffset() {
			return fmt.Errorf("%w: data offset differs between the backup (%d) and the device (%d)", errBadBackup, bh.DataOffset(), cur.DataOffset())
		}
		// LUKS1 also refuses a backup of another key size over its header
		// (cryptsetup's LUKS_hdr_restore).
		if cur != nil && cur.Version() == 1 && bh.Version() == 1 && cur.KeySize() != bh.KeySize() {
			return fmt.Errorf("%w: key size differs between the backup (%d bits) and the device (%d bits)", errBadBackup, 8*bh.KeySize(), 8*cur.KeySize())
		}
		if n, err := h.dev.Size(); err != nil {
			return fmt.Errorf("device size: %w", err)
		} else if n < int64(len(backup)) {
			return fmt.Errorf("%w: the device (%d bytes) is smaller than the header backup (%d bytes)", ErrDeviceTooSmall, n, len(backup))
		}
		if cur != nil && !o.Force {
			return fmt.Errorf("%w: the device holds a LUKS%d header whose keyslots the backup replaces", ErrWouldDestroy, cur.Version())
		}
		if bh.Version() == 2 {
			return luks2.RestoreHeader(h.dev, backup)
		}
		return luks1.RestoreHeader(h.dev, backup)
	})
}

// ReadHeaderBackup checks a header backup as RestoreHeader does before it
// opens the device (a valid LUKS header, exactly the size
// luksHeaderBackup gives it; ErrInvalidOptions otherwise) and returns its
// header.
func ReadHeaderBackup(ctx context.Context, backup []byte) (Header, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	bh, err := readBackup(ctx, backup)
	if err != nil {
		return nil, err
	}
	return bh, nil
}

// readBackup checks a header backup: a valid LUKS header, and the size
// luksHeaderBackup gives it.
func readBackup(ctx context.Context, backup []byte) (luksutil.Header, error) {
	bh, err := readHeader(ctx, luksutil.NewMemDevice(len(backup), backup))
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: backup file does not hold a valid LUKS header: %w", errBadBackup, err)
	}
	if _, n := backupSize(bh); int64(len(backup)) != n {
		return nil, fmt.Errorf("%w: backup file is %d bytes, its header needs %d", errBadBackup, len(backup), n)
	}
	return bh, nil
}

// RestoreLUKSHeader is RestoreHeader on the file or block device at path
// (or a URI of a registered scheme), which need not hold a header yet.
func RestoreLUKSHeader(ctx context.Context, path string, backup []byte, o RestoreOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// The backup first: a bad one is refused before the device is opened.
	if _, err := readBackup(ctx, backup); err != nil {
		return err
	}
	h, err := openLUKSHandle(ctx, path, LUKSOptions{}, false)
	if err != nil {
		return err
	}
	defer h.Close()
	return h.RestoreHeader(ctx, backup, o)
}

// RestoreLUKSHeaderDevice is RestoreLUKSHeader on a device the caller
// opened (an io.WriterAt; its Sync is used when it has one); it takes no
// lock and does not close dev.
func RestoreLUKSHeaderDevice(ctx context.Context, dev io.ReaderAt, backup []byte, o RestoreOptions) error {
	h, err := openLUKSDevice(ctx, dev, LUKSOptions{}, false)
	if err != nil {
		return err
	}
	return h.RestoreHeader(ctx, backup, o)
}

// DumpFormat selects what Dump prints.
type DumpFormat int

const (
	// DumpText is cryptsetup luksDump's text.
	DumpText DumpFormat = iota
	// DumpJSONMetadata is luksDump --dump-json-metadata: the LUKS2
	// metadata as json-c prints it (LUKS1 has none: ErrUnsupported).
	DumpJSONMetadata
	// DumpJSON is blkcrypt's own compact JSON: the LUKS2 metadata as
	// stored, or a summary of a LUKS1 header, one line.
	DumpJSON
)

// DumpOptions choose how Dump prints.
type DumpOptions struct {
	Format DumpFormat
	// Device is the name a LUKS1 text dump gives the device ("LUKS header
	// information for ...").
	Device string
	// VolumeKey, when set, makes Dump print it as luksDump
	// --dump-volume-key does, with the header fields that go with it; it
	// must match the header's digest (get it with VolumeKey).
	VolumeKey []byte
}

// Dump prints the header to w as cryptsetup luksDump does (or as o.Format
// asks). Shared lock; it writes nothing to the device.
func (h *LUKS) Dump(ctx context.Context, w io.Writer, o DumpOptions) error {
	return h.do(ctx, false, func(hd luksutil.Header) error {
		if o.VolumeKey != nil {
			if !hd.VolumeKeyDigestOK(o.VolumeKey) {
				return luksutil.ErrWrongKey
			}
			return dumpVolumeKey(w, o.Device, hd, o.VolumeKey)
		}
		switch hh := hd.(type) {
		case *luks1.Header:
			switch o.Format {
			case DumpJSONMetadata:
				return fmt.Errorf("%w: LUKS1 has no JSON metadata", ErrUnsupported)
			case DumpJSON:
				return dumpLUKS1JSON(w, hh)
			}
			return dumpLUKS1(w, o.Device, hh)
		case *luks2.Header:
			switch o.Format {
			case DumpJSONMetadata:
				_, err := w.Write(hh.PrettyJSON())
				return err
			case DumpJSON:
				_, err := fmt.Fprintf(w, "%s\n", strings.TrimRight(string(hh.JSON()), "\x00"))
				return err
			}
			return dumpLUKS2(w, hh)
		}
		return ErrNotLUKS
	})
}

// errWriter keeps the first write error, so the dumps below print with
// fmt.Fprintf and report one error at the end.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func dumpVolumeKey(out io.Writer, dev string, h luksutil.Header, key []byte) error {
	w := &errWriter{w: out}
	name, mode, _ := strings.Cut(h.Cipher(), "-")
	fmt.Fprintf(w, "LUKS header information for %s\nCipher name:   \t%s\nCipher mode:   \t%s\nPayload offset:\t%d\nUUID:          \t%s\nMK bits:       \t%d\n",
		dev, name, mode, h.DataOffset()/512, h.UUID(), h.KeySize()*8)
	fmt.Fprint(w, "MK dump:\t")
	hexDump(w, key, "\t\t")
	return w.err
}

// hexDump prints bytes as cryptsetup does: 16 per line, space separated.
func hexDump(w io.Writer, b []byte, indent string) {
	for i := 0; i < len(b); i += 16 {
		if i > 0 {
			fmt.Fprint(w, indent)
		}
		end := min(i+16, len(b))
		for j := i; j < end; j++ {
			fmt.Fprintf(w, "%02x ", b[j])
		}
		fmt.Fprintln(w)
	}
}

func dumpLUKS1(out io.Writer, dev string, h *luks1.Header) error {
	w := &errWriter{w: out}
	ph := h.Phdr()
	fmt.Fprintf(w, "LUKS header information for %s\n\n", dev)
	fmt.Fprintf(w, "Version:       \t%d\nCipher name:   \t%s\nCipher mode:   \t%s\nHash spec:     \t%s\n", ph.Version, ph.CipherName(), ph.CipherMode(), ph.HashSpec())
	fmt.Fprintf(w, "Payload offset:\t%d\nMK bits:       \t%d\n", ph.PayloadOffset, ph.KeyBytes*8)
	// cryptsetup prints the 20-byte digest on one line (crypt_log_hex
	// with no line length), the salts 16 bytes a line.
	fmt.Fprint(w, "MK digest:     \t")
	for _, c := range ph.MKDigest {
		fmt.Fprintf(w, "%02x ", c)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "MK salt:       \t")
	hexDump(w, ph.MKDigestSalt[:], "               \t")
	fmt.Fprintf(w, "MK iterations: \t%d\nUUID:          \t%s\n\n", ph.MKDigestIterations, ph.UUID())
	for i, ks := range ph.Keyslots {
		if !ks.Enabled() {
			fmt.Fprintf(w, "Key Slot %d: DISABLED\n", i)
			continue
		}
		fmt.Fprintf(w, "Key Slot %d: ENABLED\n\tIterations:         \t%d\n\tSalt:               \t", i, ks.Iterations)
		hexDump(w, ks.Salt[:], "\t                      \t")
		fmt.Fprintf(w, "\tKey material offset:\t%d\n\tAF stripes:            \t%d\n", ks.KeyMaterialOffset, ks.Stripes)
	}
	return w.err
}

func dumpLUKS1JSON(out io.Writer, h *luks1.Header) error {
	w := &errWriter{w: out}
	ph := h.Phdr()
	fmt.Fprintf(w, "{\"version\":1,\"uuid\":%q,\"cipher\":%q,\"hash\":%q,\"payload_offset\":%d,\"key_size\":%d,\"mk_iterations\":%d,\"keyslots\":{",
		ph.UUID(), h.Cipher(), ph.HashSpec(), ph.PayloadOffset, ph.KeyBytes, ph.MKDigestIterations)
	first := true
	for i, ks := range ph.Keyslots {
		if !ks.Enabled() {
			continue
		}
		if !first {
			fmt.Fprint(w, ",")
		}
		first = false
		fmt.Fprintf(w, "\"%d\":{\"iterations\":%d,\"key_material_offset\":%d,\"stripes\":%d}", i, ks.Iterations, ks.KeyMaterialOffset, ks.Stripes)
	}
	fmt.Fprintln(w, "}}")
	return w.err
}

func dumpLUKS2(out io.Writer, h *luks2.Header) error {
	w := &errWriter{w: out}
	orNone := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	cfg := h.Config()
	fmt.Fprintf(w, "LUKS header information\nVersion:       \t2\nEpoch:         \t%d\nMetadata area: \t%d [bytes]\nKeyslots area: \t%d [bytes]\n",
		h.SeqID(), h.MetadataSize(), h.KeyslotsSize())
	fmt.Fprintf(w, "UUID:          \t%s\nLabel:         \t%s\nSubsystem:     \t%s\nFlags:       \t%s\n",
		h.UUID(), orNone(h.Label(), "(no label)"), orNone(h.Subsystem(), "(no subsystem)"), orNone(strings.Join(cfg.Flags, " "), "(no flags)"))
	if len(cfg.Requirements) > 0 {
		fmt.Fprintf(w, "Requirements:\t%s\n", strings.Join(cfg.Requirements, " "))
	}
	fmt.Fprintf(w, "\nData segments:\n")
	for _, s := range h.Segments() {
		fmt.Fprintf(w, "  %d: %s\n\toffset: %d [bytes]\n", s.ID, s.Type, s.Offset)
		if s.Dynamic {
			fmt.Fprintf(w, "\tlength: (whole device)\n")
		} else {
			fmt.Fprintf(w, "\tlength: %d [bytes]\n", s.Size)
		}
		if s.Type == "crypt" {
			fmt.Fprintf(w, "\tcipher: %s\n\tsector: %d [bytes]\n", s.Encryption, s.SectorSize)
			if s.Integrity {
				fmt.Fprintf(w, "\tintegrity: %s\n", s.IntegrityType)
			}
		}
		if len(s.Flags) > 0 {
			fmt.Fprintf(w, "\tflags : %s\n", strings.Join(s.Flags, " "))
		}
	}
	fmt.Fprintf(w, "\nKeyslots:\n")
	st := h.ReencryptionStatus()
	for _, k := range h.Keyslots() {
		if st != nil && st.Keyslot == k.ID {
			dumpReencryptKeyslot(w, k, st)
			continue
		}
		fmt.Fprintf(w, "  %d: %s%s\n", k.ID, k.Type, unboundMark(h, k))
		if k.Digest < 0 {
			fmt.Fprintf(w, "\tKey:        %d bits (unbound)\n", k.KeySize*8)
		} else {
			fmt.Fprintf(w, "\tKey:        %d bits\n", k.KeySize*8)
		}
		// cryptsetup's words: "ignored", "normal", "preferred".
		prio := k.Priority.String()
		switch k.Priority {
		case luks2.PriorityInvalid:
			prio = "invalid" // a stored number other than 0-2, as cryptsetup prints it
		case keyslot.PriorityPrefer:
			prio = "preferred"
		}
		fmt.Fprintf(w, "\tPriority:   %s\n\tCipher:     %s\n\tCipher key: %d bits\n\tPBKDF:      %s\n", prio, k.AreaEncryption, k.AreaKeySize*8, strings.ToLower(k.KDF.Type))
		if strings.EqualFold(k.KDF.Type, "pbkdf2") {
			fmt.Fprintf(w, "\tHash:       %s\n\tIterations: %d\n", k.KDF.Hash, k.KDF.Iterations)
		} else {
			fmt.Fprintf(w, "\tTime cost:  %d\n\tMemory:     %d\n\tThreads:    %d\n", k.KDF.Iterations, k.KDF.MemoryKiB, k.KDF.Parallel)
		}
		fmt.Fprint(w, "\tSalt:       ")
		hexDump(w, k.KDFSalt, "\t            ")
		fmt.Fprintf(w, "\tAF stripes: %d\n\tAF hash:    %s\n\tArea offset:%d [bytes]\n\tArea length:%d [bytes]\n", k.AFStripes, k.AFHash, k.AreaOffset, k.AreaSize)
		if k.Digest >= 0 {
			fmt.Fprintf(w, "\tDigest ID:  %d\n", k.Digest)
		}
	}
	dumpTokens(w, h)
	fmt.Fprintf(w, "Digests:\n")
	for _, d := range h.Digests() {
		fmt.Fprintf(w, "  %d: %s\n\tHash:       %s\n\tIterations: %d\n\tSalt:       ", d.ID, d.Type, d.Hash, d.Iterations)
		hexDump(w, d.Salt, "\t            ")
		fmt.Fprint(w, "\tDigest:     ")
		hexDump(w, d.Value, "\t            ")
	}
	return w.err
}

// unboundMark is cryptsetup's " (unbound)" after a keyslot's type in
// luksDump, by its own rule (luks2.Header.KeyslotUnbound).
func unboundMark(h *luks2.Header, k luks2.Keyslot) string {
	if h.KeyslotUnbound(k.ID) {
		return " (unbound)"
	}
	return ""
}

// dumpReencryptKeyslot prints the reencrypt keyslot as cryptsetup's
// luksDump does.
func dumpReencryptKeyslot(w io.Writer, k luks2.Keyslot, st *luks2.ReencryptStatus) {
	fmt.Fprintf(w, "  %d: reencrypt (unbound)\n\tKey:        %d bits\n\tPriority:   ignored\n", k.ID, k.KeySize*8)
	fmt.Fprintf(w, "\tMode:       %s\n\tDirection:  %s\n\tResilience: %s\n", st.Mode, st.Direction, st.Resilience)
	if st.Resilience == "checksum" {
		fmt.Fprintf(w, "\tHash:       %s\n\tHash data:  %d [bytes]\n", st.Hash, st.HashBlock)
	}
	if st.ShiftSize != 0 {
		fmt.Fprintf(w, "\tShift size: %d[bytes]\n", st.ShiftSize)
	}
	fmt.Fprintf(w, "\tArea offset:%d [bytes]\n\tArea length:%d [bytes]\n", k.AreaOffset, k.AreaSize)
	if k.Digest >= 0 {
		fmt.Fprintf(w, "\tDigest ID:  %d\n", k.Digest)
	}
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
