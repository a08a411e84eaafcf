package luks1

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/sector"
)

// LUKS1 offline reencryption, with cryptsetup 2.6's legacy on-disk state
// (src/utils_reencrypt_luks1.c), so that either tool resumes the other's
// interrupted run from the same directory:
//   - LUKS-<UUID>.log: one 512-byte text block (version 2, the UUID, the
//     direction, the mode, the byte offset reached in the data area and
//     the data shift), NUL padded;
//   - LUKS-<UUID>.org: a header backup of the volume as it was;
//   - LUKS-<UUID>.new: the new header (same UUID, data offset and keyslot
//     numbers, the new key), as large as the data offset;
//   - the device's magic changed to "LUKS\xde\xad" while the data area is
//     mixed, so nothing opens it by mistake.
// The data is reencrypted forward in blocks; the end restores the .new
// header over the device and removes the files.
//
// cryptsetup writes the log only at the start and the end of the data pass
// (after every block with --write-log), and never syncs it unless asked,
// so its own run is not crash-safe (its man page says so). blkcrypt always
// logs and syncs after every block and keeps one more file,
// LUKS-<UUID>.jnl, the old ciphertext of the block in flight: written and
// synced before the block is overwritten, and written back on resume when
// the log has not moved past it. That makes a blkcrypt run resumable after
// a crash at any point, by blkcrypt; cryptsetup, which ignores the journal,
// resumes it correctly unless the crash hit the block in flight.

// ReencryptOptions configure Reencrypt.
type ReencryptOptions struct {
	// Passphrases maps keyslots to their passphrases. Starting, every
	// entry must open its keyslot, and the new header gets exactly these
	// keyslots (at the same numbers), as cryptsetup does; the key AnySlot
	// opens whichever keyslot its passphrase fits, allowed only when that
	// is the one active keyslot (cryptsetup's rule for --key-file without
	// --key-slot). Resuming, one entry must open both stored headers.
	Passphrases map[int][]byte
	// Cipher is the new cipher-mode ("" keeps the current one).
	Cipher string
	// KeySize is the new volume key size in bytes (0 keeps the current).
	KeySize int
	// Hash is the new header hash; empty means sha256, whatever the old
	// header used (cryptsetup's rule).
	Hash string
	// KeepKey keeps the volume key: only the header and keyslots are
	// rewritten, the data is not touched.
	KeepKey bool
	// Keyslot sets the new keyslots' PBKDF2 cost.
	Keyslot KeyslotOptions
	// BlockSize is the bytes reencrypted per step (default 4 MiB; 1 to 64
	// MiB, a multiple of 512).
	BlockSize int
	// Dir holds the log and header files (nil: the current directory).
	Dir ReencryptDir
	// StopAfter, when above zero, stops cleanly after that many blocks.
	StopAfter int
	// Progress, when set, is called after each block with the bytes of
	// the data area done and its size.
	Progress func(done, total uint64)
}

// Reencryption errors.
var (
	// ErrReencryptInProgress means the device is marked by a LUKS1
	// reencryption (magic LUKS\xde\xad): it cannot be opened until the
	// reencryption finishes. It matches ErrInvalidOptions, as cryptsetup
	// refuses such a device with exit code 1.
	ErrReencryptInProgress = volspec.Sub("a LUKS1 reencryption is in progress; finish it by running reencrypt in the directory of its log file", luksutil.ErrInvalidOptions, volspec.ErrInvalidOptions)
	// ErrReencryptStopped means Reencrypt stopped cleanly (StopAfter);
	// running it again in the same directory resumes.
	ErrReencryptStopped = errors.New("luks1 reencryption stopped; run it again to resume")
	// ErrReencryptLog means the log or header files do not fit the device
	// or cannot be read; it matches ErrCorruptHeader (and the root's ErrCorrupt).
	ErrReencryptLog = volspec.Sub("the LUKS1 reencryption files do not fit the device", luksutil.ErrCorruptHeader, volspec.ErrCorrupt)
)

// NoMagic is the magic cryptsetup writes over a LUKS1 header while its
// data area is being reencrypted.
var NoMagic = [6]byte{'L', 'U', 'K', 'S', 0xde, 0xad}

const (
	logSize          = 512
	defaultBlockSize = 4 << 20
	pageSize         = 4096
	uuidOff          = 0xa8
)

// ReencryptionInProgress reports whether dev holds a LUKS1 header marked
// by a reencryption in progress, and its UUID (the log names it).
func ReencryptionInProgress(dev interface {
	ReadAt([]byte, int64) (int, error)
}) (bool, string) {
	var b [PhdrSize]byte
	if _, err := dev.ReadAt(b[:], 0); err != nil {
		return false, ""
	}
	if !bytes.Equal(b[:6], NoMagic[:]) || binary.BigEndian.Uint16(b[6:8]) != 1 {
		return false, ""
	}
	return true, cstr(b[uuidOff : uuidOff+40])
}

// ReencryptFiles returns the names cryptsetup gives the log and header
// files of the volume with this UUID, and blkcrypt's block journal.
func ReencryptFiles(uuid string) (log, org, new, journal string) {
	p := "LUKS-" + uuid
	return p + ".log", p + ".org", p + ".new", p + ".jnl"
}

// reencLog is the log's content.
type reencLog struct {
	uuid            string
	direction, mode int
	offset, shift   uint64
}

func (l reencLog) marshal() []byte {
	b := make([]byte, logSize)
	copy(b, fmt.Sprintf("# LUKS reencryption log, DO NOT EDIT OR DELETE.\nversion = %d\nUUID = %s\ndirection = %d\nmode = %d\noffset = %d\nshift = %d\n# EOF\n",
		2, l.uuid, l.direction, l.mode, l.offset, l.shift))
	return b
}

// parseLog reads the log as cryptsetup's parse_log does: lines up to the
// last newline before the 512th byte, '#' comments, and one "key = value"
// per line; anything else is a bad log.
func parseLog(b []byte, uuid string) (reencLog, error) {
	l := reencLog{}
	if len(b) < logSize {
		return l, fmt.Errorf("%w: the log is %d bytes, not %d", ErrReencryptLog, len(b), logSize)
	}
	s := string(b[:logSize-1])
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	lines := strings.Split(s, "\n")
	lines = lines[:len(lines)-1] // text after the last newline is not a line
	for _, line := range lines {
		if strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, " = ")
		if !ok {
			return l, fmt.Errorf("%w: wrong log format (line %q)", ErrReencryptLog, line)
		}
		v = strings.TrimSpace(v)
		var err error
		switch k {
		case "version":
			var n int
			if n, err = strconv.Atoi(v); err == nil && (n < 1 || n > 2) {
				err = fmt.Errorf("unknown version %d", n)
			}
		case "UUID":
			if v != uuid {
				err = fmt.Errorf("the log is for UUID %s, the device has %s", v, uuid)
			}
			l.uuid = v
		case "direction":
			l.direction, err = strconv.Atoi(v)
		case "mode":
			if l.mode, err = strconv.Atoi(v); err == nil && (l.mode < 0 || l.mode > 2) {
				err = fmt.Errorf("unknown mode %d", l.mode)
			}
		case "offset":
			l.offset, err = strconv.ParseUint(v, 10, 64)
		case "shift":
			l.shift, err = strconv.ParseUint(v, 10, 64)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return l, fmt.Errorf("%w: wrong log format: %w", ErrReencryptLog, err)
		}
	}
	if l.uuid == "" {
		return l, fmt.Errorf("%w: the log names no UUID", ErrReencryptLog)
	}
	return l, nil
}

// Journal: a 512-byte head (magic, offset, length, SHA-256 over the head
// fields and the data) and the block's old ciphertext at 4096.
var journalMagic = [8]byte{'B', 'K', 'C', 'L', '1', 'J', 'N', 'L'}

const journalData = 4096

func journalHead(off uint64, data []byte) []byte {
	h := make([]byte, SectorSize)
	copy(h, journalMagic[:])
	binary.BigEndian.PutUint64(h[8:], off)
	binary.BigEndian.PutUint64(h[16:], uint64(len(data)))
	s := sha256.New()
	s.Write(h[:24])
	s.Write(data)
	s.Sum(h[24:24])
	return h
}

// readJournal returns the journaled block, or ok false when the journal
// is absent, torn or not for a block.
func readJournal(f ReencryptFile) (off uint64, data []byte, ok bool) {
	h := make([]byte, SectorSize)
	if _, err := f.ReadAt(h, 0); err != nil || !bytes.Equal(h[:8], journalMagic[:]) {
		return 0, nil, false
	}
	off, n := binary.BigEndian.Uint64(h[8:]), binary.BigEndian.Uint64(h[16:])
	size, err := f.Size()
	if err != nil || n == 0 || n%SectorSize != 0 || n > uint64(size)-journalData || uint64(size) < journalData {
		return 0, nil, false
	}
	data = make([]byte, n)
	if _, err := f.ReadAt(data, journalData); err != nil {
		return 0, nil, false
	}
	if !bytes.Equal(journalHead(off, data), h) {
		return 0, nil, false
	}
	return off, data, true
}

// run is one reencryption: the device, the files and both keys.
type run struct {
	dev        Device
	dir        ReencryptDir
	o          ReencryptOptions
	uuid       string
	logN       string
	orgN, newN string
	jnlN       string
	org, nw    []byte // the header files' content
	oldH, newH *Header
	oldC, newC *sector.Cipher
	dataOff    int64
	size       uint64 // data bytes
	sameKey    bool   // old and new key and cipher equal: the data is right as it is
	log        reencLog
}

func (r *run) close() {
	if r.oldC != nil {
		r.oldC.Wipe()
	}
	if r.newC != nil {
		r.newC.Wipe()
	}
}

// Reencrypt reencrypts the LUKS1 volume on dev, or resumes the
// reencryption whose log is in o.Dir. See ReencryptOptions; a clean stop
// returns ErrReencryptStopped, a context end ctx's error, and the files
// then stay for a resume by blkcrypt or cryptsetup.
func Reencrypt(ctx context.Context, dev Device, o ReencryptOptions) error {
	if o.Dir == nil {
		o.Dir = DirFS(".")
	}
	if o.BlockSize == 0 {
		o.BlockSize = defaultBlockSize
	}
	if o.BlockSize < SectorSize || o.BlockSize > 64<<20 || o.BlockSize%SectorSize != 0 {
		return fmt.Errorf("%w: block size %d (1 to 64 MiB, in 512-byte sectors)", ErrInvalidOptions, o.BlockSize)
	}
	if len(o.Passphrases) == 0 {
		return fmt.Errorf("%w: no passphrase", ErrInvalidOptions)
	}
	head := make([]byte, pageSize)
	if _, err := dev.ReadAt(head, 0); err != nil {
		return fmt.Errorf("%w: reading the header: %w", ErrNotLUKS, err)
	}
	r := &run{dev: dev, dir: o.Dir, o: o}
	defer r.close()
	marked, uuid := ReencryptionInProgress(bytes.NewReader(head))
	var cur *Header
	if !marked {
		var err error
		if cur, err = Read(dev); err != nil {
			return err
		}
		uuid = cur.UUID()
	}
	if !nameSafe(uuid) {
		// The UUID names files: a crafted one must not reach outside Dir.
		return fmt.Errorf("%w: UUID %q cannot name the reencryption files", ErrCorruptHeader, uuid)
	}
	r.uuid = uuid
	r.logN, r.orgN, r.newN, r.jnlN = ReencryptFiles(uuid)

	lf, err := o.Dir.Open(r.logN)
	switch {
	case errors.Is(err, fs.ErrNotExist) && marked:
		return fmt.Errorf("%w: no %s here to resume from", ErrReencryptInProgress, r.logN)
	case errors.Is(err, fs.ErrNotExist):
		if err := r.start(ctx, cur); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("opening %s: %w", r.logN, err)
	default:
		st, err := r.resume(ctx, lf, cur)
		lf.Close()
		switch {
		case err != nil:
			return err
		case st == resumeFinished:
			return nil
		case st == resumeFresh:
			r.log = reencLog{}
			if err := r.start(ctx, cur); err != nil {
				return err
			}
		}
	}
	return r.copyAndFinish(ctx)
}

func nameSafe(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// unlockAll checks every passphrase against h and returns the keyslots to
// keep with their passphrases, and the volume key.
func (r *run) unlockAll(ctx context.Context, h *Header, dev Device) (map[int][]byte, []byte, error) {
	keep := map[int][]byte{}
	var key []byte
	for slot, pass := range r.o.Passphrases {
		k, s, err := h.UnlockContext(ctx, dev, pass, slot)
		if err != nil {
			clear(key)
			return nil, nil, err
		}
		if slot == AnySlot && len(h.ActiveKeyslots()) != 1 {
			clear(k)
			clear(key)
			return nil, nil, fmt.Errorf("%w: key file can be used only with --key-slot or with exactly one key slot active", ErrInvalidOptions)
		}
		if key == nil {
			key = k
		} else {
			clear(k)
		}
		keep[s] = pass
	}
	return keep, key, nil
}

// start checks everything, builds the new header in memory, and only then
// writes: the log, the header backup, the new header (each synced), the
// directory, and last the mark on the device.
func (r *run) start(ctx context.Context, cur *Header) error {
	o := r.o
	keep, oldKey, err := r.unlockAll(ctx, cur, r.dev)
	if err != nil {
		return err
	}
	defer clear(oldKey)
	cipher := o.Cipher
	if cipher == "" {
		cipher = cur.Cipher()
	}
	keySize := o.KeySize
	if keySize == 0 {
		keySize = cur.KeySize()
	}
	if o.KeepKey && (o.Cipher != "" && o.Cipher != cur.Cipher() || keySize != cur.KeySize()) {
		return fmt.Errorf("%w: --keep-key keeps the data as it is, so the cipher and key size cannot change", ErrInvalidOptions)
	}
	newKey := make([]byte, keySize)
	if o.KeepKey {
		copy(newKey, oldKey)
	} else if err := luksutil.Random(newKey); err != nil {
		return err
	}
	defer clear(newKey)
	if _, err := sector.New(cipher, newKey, sector.Options{}); err != nil {
		return fmt.Errorf("%w: cipher %s with a %d-bit key: %w", ErrInvalidOptions, cipher, keySize*8, err)
	}
	devSize, err := r.dev.Size()
	if err != nil {
		return err
	}
	if cur.p.PayloadOffset == 0 {
		return fmt.Errorf("%w: a detached LUKS1 header (data offset 0) is not supported for reencryption", ErrUnsupported)
	}
	if devSize <= cur.DataOffset() {
		return fmt.Errorf("%w: the device has no data area to reencrypt", ErrDeviceTooSmall)
	}

	// The new header, in memory, as large as the data offset.
	slots := make([]int, 0, len(keep))
	for s := range keep {
		slots = append(slots, s)
	}
	slices.Sort(slots)
	mem := luksutil.NewMemDevice(int(cur.DataOffset()), nil)
	ks := o.Keyslot
	ks.Slot = keyslot.Slot(slots[0])
	nh, err := Format(mem, newKey, keep[slots[0]], FormatOptions{
		Cipher: cipher, Hash: o.Hash, UUID: r.uuid, PayloadOffset: cur.p.PayloadOffset, Keyslot: ks,
	})
	if err != nil {
		return fmt.Errorf("creating the new header: %w", err)
	}
	for _, s := range slots[1:] {
		ks.Slot = keyslot.Slot(s)
		if _, err := nh.AddKey(mem, newKey, keep[s], ks); err != nil {
			return fmt.Errorf("creating the new header: %w", err)
		}
	}
	r.nw = mem.Buf
	// The backup: the header and keyslot areas, rounded up to 4 KiB, as
	// cryptsetup's luksHeaderBackup stores them.
	r.org = make([]byte, (cur.HeaderSize()+pageSize-1)/pageSize*pageSize)
	if _, err := r.dev.ReadAt(r.org, 0); err != nil {
		return fmt.Errorf("reading the header backup: %w", err)
	}
	r.log = reencLog{uuid: r.uuid}
	if err := r.setKeys(oldKey, newKey, cur, nh); err != nil {
		return err
	}

	// Header files without a log are no state of a run: refuse before
	// writing, as cryptsetup fails on them (it would not overwrite them).
	for _, n := range []string{r.orgN, r.newN} {
		if f, err := r.dir.Open(n); err == nil {
			f.Close()
			return fmt.Errorf("%s exists but %s does not: %w", n, r.logN, fs.ErrExist)
		}
	}
	// A journal left by an earlier run of this volume is stale now.
	if err := r.dir.Remove(r.jnlN); err != nil {
		return err
	}
	if err := r.createFile(r.logN, 0o600, r.log.marshal()); err != nil {
		return err
	}
	if err := r.createFile(r.orgN, 0o400, r.org); err != nil {
		return err
	}
	if err := r.createFile(r.newN, 0o600, r.nw); err != nil {
		return err
	}
	if err := r.dir.Sync(); err != nil {
		return fmt.Errorf("syncing the directory: %w", err)
	}
	return r.mark()
}

func (r *run) createFile(name string, perm fs.FileMode, b []byte) error {
	f, err := r.dir.Create(name, perm, int64(len(b)))
	if err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	defer f.Close()
	if err := luksutil.WriteSync(f, b, 0); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// mark writes NoMagic over the device's magic (one sector, synced).
func (r *run) mark() error {
	s := make([]byte, SectorSize)
	if _, err := r.dev.ReadAt(s, 0); err != nil {
		return err
	}
	if bytes.Equal(s[:6], NoMagic[:]) {
		return nil
	}
	copy(s, NoMagic[:])
	if err := luksutil.WriteSync(r.dev, s, 0); err != nil {
		return fmt.Errorf("marking the device: %w", err)
	}
	return nil
}

func (r *run) setKeys(oldKey, newKey []byte, oldH, newH *Header) error {
	var err error
	r.oldH, r.newH = oldH, newH
	r.dataOff = newH.DataOffset()
	devSize, err := r.dev.Size()
	if err != nil {
		return err
	}
	if devSize <= r.dataOff || oldH.DataOffset() != r.dataOff {
		return fmt.Errorf("%w: the data area does not fit the headers", ErrReencryptLog)
	}
	r.size = uint64(devSize-r.dataOff) / SectorSize * SectorSize
	r.sameKey = bytes.Equal(oldKey, newKey) && oldH.Cipher() == newH.Cipher()
	if r.oldC, err = sector.New(oldH.Cipher(), oldKey, sector.Options{}); err != nil {
		return fmt.Errorf("%w: old cipher %s: %w", ErrUnsupported, oldH.Cipher(), err)
	}
	if r.newC, err = sector.New(newH.Cipher(), newKey, sector.Options{}); err != nil {
		return fmt.Errorf("%w: new cipher %s: %w", ErrUnsupported, newH.Cipher(), err)
	}
	return nil
}

func readAll(f ReencryptFile) ([]byte, error) {
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	if n > 64<<20 {
		return nil, fmt.Errorf("%w: a %d-byte header file", ErrReencryptLog, n)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

func (r *run) readFile(name string) ([]byte, error) {
	f, err := r.dir.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrReencryptLog, name, err)
	}
	defer f.Close()
	b, err := readAll(f)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", ErrReencryptLog, name, err)
	}
	return b, nil
}

type resumeState int

const (
	resumeContinue resumeState = iota // go on from the log's offset
	resumeFinished                    // the new header was restored; the files were left
	resumeFresh                       // leftovers of a run that never marked the device
)

// resume loads the log and both headers and says how to go on.
func (r *run) resume(ctx context.Context, lf ReencryptFile, cur *Header) (st resumeState, err error) {
	// With the device unmarked (cur set), its data matches its header: data
	// is written only while the device is marked, and the mark goes only
	// when the new header is restored. So files that do not load are left
	// over from a start that never marked the device: start afresh. A
	// header equal to the .new one is a finish that had not removed every
	// file.
	leftover := func(err error) (resumeState, error) {
		if cur == nil {
			return resumeContinue, err
		}
		if nw, rerr := r.readFile(r.newN); rerr == nil && len(nw) >= PhdrSize && bytes.Equal(cur.p.Marshal(), nw[:PhdrSize]) {
			return resumeFinished, r.cleanup()
		}
		return resumeFresh, r.cleanup()
	}
	b := make([]byte, logSize)
	if _, err := lf.ReadAt(b, 0); err != nil {
		return leftover(fmt.Errorf("%w: reading %s: %w", ErrReencryptLog, r.logN, err))
	}
	if r.log, err = parseLog(b, r.uuid); err != nil {
		return leftover(err)
	}
	if r.log.mode != 0 || r.log.direction != 0 || r.log.shift != 0 {
		return resumeContinue, fmt.Errorf("%w: the log is of a LUKS1 %s (mode %d, direction %d, shift %d); only reencryption forward without a data shift is supported here",
			ErrUnsupported, map[int]string{0: "reencryption", 1: "encryption", 2: "decryption"}[r.log.mode], r.log.mode, r.log.direction, r.log.shift)
	}
	if r.nw, err = r.readFile(r.newN); err == nil {
		r.org, err = r.readFile(r.orgN)
	}
	if err != nil {
		return leftover(err)
	}
	newH, err := parse(luksutil.NewMemDevice(0, r.nw), r.nw)
	if err != nil {
		return leftover(fmt.Errorf("%w: %s: %w", ErrReencryptLog, r.newN, err))
	}
	oldH, err := parse(luksutil.NewMemDevice(0, r.org), r.org)
	if err != nil {
		return leftover(fmt.Errorf("%w: %s: %w", ErrReencryptLog, r.orgN, err))
	}
	if newH.UUID() != r.uuid || oldH.UUID() != r.uuid {
		return resumeContinue, fmt.Errorf("%w: the header files are not for UUID %s", ErrReencryptLog, r.uuid)
	}
	if cur != nil {
		switch {
		case bytes.Equal(cur.p.Marshal(), newH.p.Marshal()):
			return resumeFinished, r.cleanup()
		case !bytes.Equal(cur.p.Marshal(), oldH.p.Marshal()):
			return resumeContinue, fmt.Errorf("%w: the device's header is neither %s nor %s", ErrReencryptLog, r.orgN, r.newN)
		}
		// The old header on the device and a log: a start cut before its
		// mark, or the old header restored by hand mid-run. cryptsetup
		// goes on from the log's offset either way; so do we.
	}
	// One passphrase opens both, as cryptsetup requires to resume.
	var lastErr error = ErrWrongPassphrase
	for slot, pass := range r.o.Passphrases {
		newKey, _, err := newH.UnlockContext(ctx, luksutil.NewMemDevice(0, r.nw), pass, slot)
		if err != nil {
			lastErr = err
			continue
		}
		oldKey, _, err := oldH.UnlockContext(ctx, luksutil.NewMemDevice(0, r.org), pass, slot)
		if err != nil {
			clear(newKey)
			lastErr = err
			continue
		}
		err = r.setKeys(oldKey, newKey, oldH, newH)
		clear(oldKey)
		clear(newKey)
		if err != nil {
			return resumeContinue, err
		}
		if r.log.offset > r.size || r.log.offset%SectorSize != 0 {
			return resumeContinue, fmt.Errorf("%w: the log's offset %d is not in the %d-byte data area", ErrReencryptLog, r.log.offset, r.size)
		}
		if cur != nil {
			if err := r.mark(); err != nil {
				return resumeContinue, err
			}
		}
		return resumeContinue, r.recoverJournal()
	}
	if cur != nil && errors.Is(lastErr, ErrWrongPassphrase) {
		// A passphrase that opens the unmarked device but not its files:
		// a start cut before the files were synced.
		for slot, pass := range r.o.Passphrases {
			if k, _, err := cur.UnlockContext(ctx, r.dev, pass, slot); err == nil {
				clear(k)
				return resumeFresh, r.cleanup()
			}
		}
	}
	return resumeContinue, lastErr
}

// recoverJournal writes back the block in flight when the log has not
// passed it: its old ciphertext, so the block is reencrypted again from
// what it was.
func (r *run) recoverJournal() error {
	f, err := r.dir.Open(r.jnlN)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", r.jnlN, err)
	}
	defer f.Close()
	off, data, ok := readJournal(f)
	if !ok || off != r.log.offset || off+uint64(len(data)) > r.size {
		return nil // stale (the log moved on) or torn before the block was touched
	}
	if err := luksutil.WriteSync(r.dev, data, r.dataOff+int64(off)); err != nil {
		return fmt.Errorf("restoring the journaled block: %w", err)
	}
	return nil
}

// copyAndFinish reencrypts from the logged offset to the end, then puts
// the new header on the device and removes the files.
func (r *run) copyAndFinish(ctx context.Context) error {
	lf, err := r.dir.Open(r.logN)
	if err != nil {
		return fmt.Errorf("opening %s: %w", r.logN, err)
	}
	defer lf.Close()
	// A --keep-key run (started here or by cryptsetup) has nothing to
	// copy, whether this resume says --keep-key or not.
	if !r.sameKey {
		if err := r.copyData(ctx, lf); err != nil {
			return err
		}
	}
	if err := RestoreHeader(r.dev, r.nw); err != nil {
		return fmt.Errorf("writing the new header: %w", err)
	}
	return r.cleanup()
}

func (r *run) copyData(ctx context.Context, lf ReencryptFile) error {
	bs := uint64(r.o.BlockSize)
	buf := make([]byte, bs)
	var jf ReencryptFile
	defer func() {
		if jf != nil {
			jf.Close()
		}
	}()
	blocks := 0
	for r.log.offset < r.size {
		if err := ctx.Err(); err != nil {
			return err
		}
		if r.o.StopAfter > 0 && blocks >= r.o.StopAfter {
			return ErrReencryptStopped
		}
		n := min(bs, r.size-r.log.offset)
		b := buf[:n]
		at := r.dataOff + int64(r.log.offset)
		if _, err := r.dev.ReadAt(b, at); err != nil {
			return fmt.Errorf("reading the data area: %w", err)
		}
		if jf == nil {
			_ = r.dir.Remove(r.jnlN)
			var err error
			if jf, err = r.dir.Create(r.jnlN, 0o600, journalData+int64(bs)); err != nil {
				return fmt.Errorf("creating %s: %w", r.jnlN, err)
			}
			if err := r.dir.Sync(); err != nil {
				return err
			}
		}
		if _, err := jf.WriteAt(b, journalData); err != nil {
			return fmt.Errorf("writing %s: %w", r.jnlN, err)
		}
		if err := luksutil.WriteSync(jf, journalHead(r.log.offset, b), 0); err != nil {
			return fmt.Errorf("writing %s: %w", r.jnlN, err)
		}
		sec := r.log.offset / SectorSize
		if err := r.oldC.DecryptSectors(b, b, sec); err != nil {
			return err
		}
		if err := r.newC.EncryptSectors(b, b, sec); err != nil {
			return err
		}
		if err := luksutil.WriteSync(r.dev, b, at); err != nil {
			return fmt.Errorf("writing the data area: %w", err)
		}
		r.log.offset += n
		if err := luksutil.WriteSync(lf, r.log.marshal(), 0); err != nil {
			return fmt.Errorf("writing %s: %w", r.logN, err)
		}
		blocks++
		if r.o.Progress != nil {
			r.o.Progress(r.log.offset, r.size)
		}
	}
	clear(buf)
	return nil
}

// cleanup removes the files. The log goes last, so that a cut in between
// leaves a log the next run finds (cryptsetup removes it first, and a run
// after such a cut fails on the .org file left). The .org goes first: a
// .new left without it can only be a finish, recognised above.
func (r *run) cleanup() error {
	for _, n := range []string{r.orgN, r.jnlN, r.newN, r.logN} {
		if err := r.dir.Remove(n); err != nil {
			return fmt.Errorf("removing %s: %w", n, err)
		}
	}
	return r.dir.Sync()
}
