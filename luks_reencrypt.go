package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// Offline reencryption through the LUKS handle (cryptsetup reencrypt on an
// inactive device): a new volume key, cipher, key size or sector size
// (Reencrypt, LUKS2's one engine or LUKS1's legacy run, chosen by the
// header's version), decryption (Decrypt), and the encryption of a
// plaintext device (Encrypt, a package function: there is no header to
// open yet). Each run holds the header's lock (and the data device's, when
// the header is detached) and, for LUKS2, cryptsetup's reencryption lock
// of the volume for its whole length; it writes nothing before every check
// that can refuse it has passed; a crash or a context end at any point
// leaves a state that blkcrypt and cryptsetup resume. The online form, a
// reencryption while the volume is served, is OpenOptions.Reencrypt with
// Volume.Reencrypt.

// Reencryption errors besides ErrNoReencryption (reencrypt_online.go).
var (
	// ErrReencryptInProgress means a reencryption of another kind, or an
	// init of one already started (LUKS2, matching ErrBusy and with the
	// resume options ErrInvalidOptions), or a LUKS1 device marked by a
	// reencryption whose log is not in the directory given (matching
	// ErrInvalidOptions, as cryptsetup refuses it).
	ErrReencryptInProgress = luks2.ErrReencryptInProgress
	// ErrLUKS1ReencryptInProgress is the LUKS1 case of the above: the
	// device's magic is cryptsetup's LUKS\xde\xad until the run finishes.
	ErrLUKS1ReencryptInProgress = luks1.ErrReencryptInProgress
	// ErrAlreadyLUKS means Encrypt of a device that holds a LUKS header
	// (without an encryption in progress); it matches ErrInvalidOptions.
	ErrAlreadyLUKS = luks2.ErrAlreadyLUKS
	// ErrDecryptAttached means Decrypt of a volume whose header is on its
	// data device without DecryptOptions.ExportHeader; it matches
	// ErrUnsupported.
	ErrDecryptAttached = luks2.ErrDecryptAttached
)

// LUKSReencryptOptions configure LUKS.Reencrypt. The zero value gives the
// volume a new key for the same cipher, key size and sector size, keeping
// the keyslot the passphrase opens (which must then be the only one), with
// cryptsetup's defaults: checksum resilience (sha256) and 32 MiB hotzones
// for LUKS2, 4 MiB blocks for LUKS1.
type LUKSReencryptOptions struct {
	// Cipher is the new data cipher ("" keeps the current one).
	Cipher string
	// KeySize is the new volume key size in bytes (0 keeps the current).
	KeySize int
	// SectorSize is the new LUKS2 encryption sector size (0 keeps the
	// current one); LUKS1 takes 0 or 512 only.
	SectorSize int
	// Resilience is LUKS2's protection of the hotzone in flight:
	// "checksum" (default), "journal" or "none". LUKS1 takes "".
	Resilience string
	// Hash is LUKS2's checksum hash (default sha256) and the new LUKS1
	// header's hash (default sha256, whatever the old one used).
	Hash string
	// HotzoneSize caps the bytes of a LUKS2 step (default 32 MiB).
	HotzoneSize uint64
	// BlockSize is the bytes of a LUKS1 step (default 4 MiB; 1-64 MiB).
	BlockSize int
	// Keyslot is the keyslot to keep (cryptsetup's --key-slot): only its
	// passphrase is asked for and it alone gets a keyslot of the new key;
	// the other keyslots go at the end. nil (the zero value) is any
	// keyslot, which must then be the volume's only one unless
	// Passphrases names the others (LUKS1). Resuming a LUKS2 run, it names
	// a keyslot of the old or the new key.
	Keyslot *int
	// Passphrases are more keyslots' passphrases, by keyslot number: a
	// LUKS1 run keeps every keyslot named here or by Keyslot (cryptsetup
	// asks for each keyslot's passphrase). LUKS2 takes none.
	Passphrases map[int][]byte
	// PBKDF is the KDF of the new keyslots (LUKS1: PBKDF2 only) and of
	// the LUKS2 reencryption digest.
	PBKDF PBKDFOptions
	// KeepKey (LUKS1) keeps the volume key: only the header and the
	// keyslots are rewritten, the data is not touched.
	KeepKey bool
	// InitOnly (LUKS2) writes the reencryption metadata and stops;
	// ResumeOnly refuses to start a new run (ErrNoReencryption).
	InitOnly, ResumeOnly bool
	// Dir is the directory of LUKS1's log and header files ("" is the
	// current directory, as for cryptsetup).
	Dir string
	// StopAfter, above zero, stops cleanly after that many steps (tests,
	// an interrupted run); LUKS1 then returns luks1.ErrReencryptStopped.
	StopAfter int
	// Progress, when set, is called after each step with the bytes of the
	// data area done and its size.
	Progress func(done, total uint64)
}

// ReencryptPlan is what Reencrypt would do, as PlanReencrypt reads it.
type ReencryptPlan struct {
	// Version is the header's LUKS version: the run is LUKS2's engine or
	// LUKS1's legacy reencryption.
	Version int
	// UUID is the volume's.
	UUID string
	// Resume is set when a run is in progress (LUKS2 metadata, or a LUKS1
	// log in the directory) and Reencrypt resumes it: the passphrase is
	// then one that opens the run's keys, and no others are needed.
	Resume bool
	// Keyslots are the keyslots a new LUKS1 run keeps when given their
	// passphrases (the active ones); empty otherwise.
	Keyslots []int
	// Log is the LUKS1 log file's path ("" for LUKS2).
	Log string
}

// PlanReencrypt says what Reencrypt would do with o, refusing what it would
// refuse from the header alone before a passphrase is asked for: ResumeOnly
// without a run (ErrNoReencryption), InitOnly on a run in progress, another
// kind of run (encrypt, decrypt: ErrReencryptInProgress), a marked LUKS1
// device without its log (ErrLUKS1ReencryptInProgress). Shared lock;
// nothing is written.
func (h *LUKS) PlanReencrypt(ctx context.Context, o LUKSReencryptOptions) (ReencryptPlan, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var p ReencryptPlan
	err := h.locked(ctx, false, func() error {
		var err error
		p, err = h.planReencrypt(ctx, o)
		return err
	})
	return p, err
}

// planReencrypt is PlanReencrypt under the lock.
func (h *LUKS) planReencrypt(ctx context.Context, o LUKSReencryptOptions) (ReencryptPlan, error) {
	if marked, uuid := luks1.ReencryptionInProgress(h.dev); marked {
		if err := h.checkType(1); err != nil {
			return ReencryptPlan{}, err
		}
		p := ReencryptPlan{Version: 1, UUID: uuid, Log: luks1Log(o.Dir, uuid)}
		if _, err := os.Stat(p.Log); err != nil {
			return p, fmt.Errorf("%w: no %q to resume from", ErrLUKS1ReencryptInProgress, p.Log)
		}
		p.Resume = true
		return p, nil
	}
	hd, err := readHeader(ctx, h.dev)
	if err != nil {
		return ReencryptPlan{}, err
	}
	if err := h.checkType(hd.Version()); err != nil {
		return ReencryptPlan{}, err
	}
	p := ReencryptPlan{Version: hd.Version(), UUID: hd.UUID()}
	switch hh := hd.(type) {
	case *luks1.Header:
		p.Log = luks1Log(o.Dir, p.UUID)
		if _, err := os.Stat(p.Log); err == nil {
			p.Resume = true
		} else {
			p.Keyslots = hh.ActiveKeyslots()
		}
	case *luks2.Header:
		st := hh.ReencryptionStatus()
		p.Resume = st != nil
		switch {
		case st != nil && st.Mode != "reencrypt" && (o.Cipher != "" || o.KeySize != 0 || o.SectorSize != 0):
			return p, fmt.Errorf("%w: %w: an %s in progress keeps its cipher, key size and sector size", ErrInvalidOptions, ErrReencryptInProgress, st.Mode)
		case st != nil && o.InitOnly:
			return p, fmt.Errorf("%w: cannot initialise it again", ErrReencryptInProgress)
		}
	}
	if o.ResumeOnly && !p.Resume {
		return p, ErrNoReencryption
	}
	return p, nil
}

// luks1Log is the path of a LUKS1 run's log in dir.
func luks1Log(dir, uuid string) string {
	if dir == "" {
		dir = "."
	}
	logN, _, _, _ := luks1.ReencryptFiles(uuid)
	return filepath.Join(dir, logN)
}

// checkType refuses a header of another version than the handle's Type.
func (h *LUKS) checkType(version int) error {
	if got := fmt.Sprintf("luks%d", version); h.typ != "" && h.typ != "luks" && h.typ != got {
		return fmt.Errorf("%w: the device holds %s, not %s", ErrNotLUKS, got, h.typ)
	}
	return nil
}

// Reencrypt gives the volume a new key (and the cipher, key size or sector
// size o asks for) in place, or resumes the run in progress, whether
// blkcrypt or cryptsetup started it: LUKS2 through its one reencryption
// engine (the new keyslot gets passphrase and the tokens of the keyslot it
// opens, as cryptsetup moves them), LUKS1 through cryptsetup's legacy
// offline reencryption with its log and header files in o.Dir. passphrase
// opens o.Keyslot (or any keyslot). When ctx ends the run stops between
// steps with ctx's error, resumable by either tool.
func (h *LUKS) Reencrypt(ctx context.Context, passphrase []byte, o LUKSReencryptOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return h.locked(ctx, true, func() error {
		p, err := h.planReencrypt(ctx, o)
		if err != nil {
			return err
		}
		if p.Version == 1 {
			return h.reencryptLUKS1(ctx, passphrase, o)
		}
		if len(o.Passphrases) > 0 {
			return fmt.Errorf("%w: Passphrases is for LUKS1; a LUKS2 run keeps one keyslot", ErrInvalidOptions)
		}
		if o.KeepKey || o.BlockSize != 0 {
			return fmt.Errorf("%w: KeepKey and BlockSize are for LUKS1", ErrInvalidOptions)
		}
		unlock, err := luks2.LockReencryption(p.UUID)
		if err != nil {
			return err
		}
		defer unlock()
		data, closeData, err := h.dataDevice(ctx)
		if err != nil {
			return err
		}
		defer closeData()
		lo := luks2.ReencryptOptions{
			Cipher: o.Cipher, KeySize: o.KeySize, SectorSize: o.SectorSize,
			Resilience: o.Resilience, Hash: o.Hash, HotzoneSize: o.HotzoneSize,
			Slot: o.Keyslot, Keyslot: luks2.KeyslotOptions{PBKDF: o.PBKDF},
			InitOnly: o.InitOnly, ResumeOnly: o.ResumeOnly, StopAfter: o.StopAfter,
			Progress: o.Progress,
		}
		if data != h.dev {
			lo.Data = data
		}
		return luks2.Reencrypt(ctx, h.dev, passphrase, lo)
	})
}

// reencryptLUKS1 is Reencrypt of a LUKS1 volume, under the handle's lock.
func (h *LUKS) reencryptLUKS1(ctx context.Context, passphrase []byte, o LUKSReencryptOptions) error {
	switch {
	case h.detached:
		return fmt.Errorf("%w: reencryption of a LUKS1 volume with a detached header", ErrUnsupported)
	case o.InitOnly:
		return fmt.Errorf("%w: InitOnly is for LUKS2 only", ErrInvalidOptions)
	case o.Resilience != "" || o.HotzoneSize != 0:
		return fmt.Errorf("%w: resilience and hotzone size are for LUKS2 only; LUKS1 uses a block size", ErrInvalidOptions)
	case o.SectorSize != 0 && o.SectorSize != luks1.SectorSize:
		return fmt.Errorf("%w: LUKS1 has 512-byte sectors only", ErrInvalidOptions)
	case o.PBKDF.Type != "" && o.PBKDF.Type != kdf.PBKDF2:
		return fmt.Errorf("%w: LUKS1 keyslots use pbkdf2 only", ErrInvalidOptions)
	}
	if k := o.Keyslot; k != nil && (*k < 0 || *k >= luks1.NumKeyslots) {
		return fmt.Errorf("%w: %d (LUKS1 has keyslots 0-%d)", luksutil.ErrInvalidSlot, *k, luks1.NumKeyslots-1)
	}
	dir := o.Dir
	if dir == "" {
		dir = "."
	}
	lo := luks1.ReencryptOptions{
		Cipher: o.Cipher, KeySize: o.KeySize, Hash: o.Hash, KeepKey: o.KeepKey,
		Keyslot: luks1.KeyslotOptions{PBKDF: o.PBKDF}, BlockSize: o.BlockSize,
		Dir: luks1.DirFS(dir), StopAfter: o.StopAfter, Progress: o.Progress,
		Passphrases: map[int][]byte{},
	}
	for s, pass := range o.Passphrases {
		lo.Passphrases[s] = pass
	}
	if passphrase != nil {
		lo.Passphrases[keyslot.Number(o.Keyslot)] = passphrase
	}
	return luks1.Reencrypt(ctx, h.dev, lo)
}

// dataDevice is the data device of a handle with a detached header,
// opened (and locked, for a file) here, or else the header's device; the
// caller calls done when finished with it.
func (h *LUKS) dataDevice(ctx context.Context) (dev luksutil.Device, done func(), err error) {
	switch {
	case !h.detached:
		return h.dev, func() {}, nil
	case h.data != nil:
		return h.data, func() {}, nil
	case h.dataPath == "":
		return nil, nil, fmt.Errorf("%w: the handle has a detached header but no data device", ErrInvalidOptions)
	case IsURI(h.dataPath):
		d, err := OpenURI(ctx, h.dataPath, h.readOnly)
		if err != nil {
			return nil, nil, err
		}
		return d, func() { d.Close() }, nil
	}
	f, err := OpenFileLocked(h.dataPath, h.readOnly)
	if err != nil {
		return nil, nil, err
	}
	return luksutil.File{File: f.File}, func() { f.Close() }, nil
}

// DecryptOptions configure LUKS.Decrypt. The zero value decrypts a LUKS2
// volume with a detached header in place, backward from its end, under
// checksum resilience, with any keyslot's passphrase.
type DecryptOptions struct {
	// Resilience is "checksum" (default), "journal" or "none" for a
	// detached header; "datashift-checksum" (the only one) with
	// ExportHeader.
	Resilience string
	// Hash is the checksum hash (default sha256).
	Hash string
	// HotzoneSize caps the bytes of a step.
	HotzoneSize uint64
	// Keyslot is the keyslot to open; nil (the zero value) is any.
	Keyslot *int
	// PBKDF is the KDF of the reencryption digest.
	PBKDF PBKDFOptions
	// ExportHeader is a new file (made with mode 0600; it must not exist)
	// that a volume whose header is on the data device gets its header
	// exported to, as cryptsetup reencrypt --decrypt --header FILE does;
	// the data then moves to the start of the device as it is decrypted.
	ExportHeader string
	// InitOnly writes the decryption metadata and stops; ResumeOnly
	// refuses to start a new run.
	InitOnly, ResumeOnly bool
	// StopAfter, above zero, stops cleanly after that many steps.
	StopAfter int
	// Progress, when set, is called after each step.
	Progress func(done, total uint64)
}

// DecryptPlan is what Decrypt would do (Resume, Export, UUID).
type DecryptPlan = luks2.DecryptPlan

func (o DecryptOptions) luks2() luks2.DecryptOptions {
	return luks2.DecryptOptions{
		Resilience: o.Resilience, Hash: o.Hash, HotzoneSize: o.HotzoneSize, Slot: o.Keyslot,
		Keyslot: luks2.KeyslotOptions{PBKDF: o.PBKDF}, InitOnly: o.InitOnly, ResumeOnly: o.ResumeOnly,
		StopAfter: o.StopAfter, Progress: o.Progress,
	}
}

// PlanDecrypt says what Decrypt would do, refusing what it would refuse
// from the headers alone, before a passphrase is asked for: another kind
// of run in progress (ErrReencryptInProgress), ResumeOnly without a run
// (ErrNoReencryption), a header on the data device without ExportHeader
// (ErrDecryptAttached), LUKS1 (ErrUnsupported). Shared lock; nothing is
// written.
func (h *LUKS) PlanDecrypt(ctx context.Context, o DecryptOptions) (DecryptPlan, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var p DecryptPlan
	err := h.locked(ctx, false, func() error {
		var err error
		p, err = h.planDecrypt(ctx, o)
		return err
	})
	return p, err
}

func (h *LUKS) planDecrypt(ctx context.Context, o DecryptOptions) (DecryptPlan, error) {
	if err := h.decryptable(ctx, o); err != nil {
		return DecryptPlan{}, err
	}
	if o.ExportHeader != "" {
		return luks2.PlanDecrypt(ctx, nil, h.dev, o.luks2())
	}
	data, done, err := h.dataDevice(ctx)
	if err != nil {
		return DecryptPlan{}, err
	}
	defer done()
	return luks2.PlanDecrypt(ctx, h.dev, data, o.luks2())
}

// decryptable refuses LUKS1 and an ExportHeader that cannot be made.
func (h *LUKS) decryptable(ctx context.Context, o DecryptOptions) error {
	if marked, _ := luks1.ReencryptionInProgress(h.dev); marked {
		return ErrLUKS1ReencryptInProgress
	}
	hd, err := readHeader(ctx, h.dev)
	if err != nil {
		return err
	}
	if err := h.checkType(hd.Version()); err != nil {
		return err
	}
	if hd.Version() != 2 {
		return fmt.Errorf("%w: decryption of a LUKS1 volume (convert it to LUKS2 first)", ErrUnsupported)
	}
	if o.ExportHeader == "" {
		return nil
	}
	switch {
	case h.detached:
		return fmt.Errorf("%w: ExportHeader is for a header on the data device; this handle has a detached one", ErrInvalidOptions)
	case o.ResumeOnly:
		return fmt.Errorf("%w: header %s does not exist yet", ErrNoReencryption, o.ExportHeader)
	}
	if _, err := os.Lstat(o.ExportHeader); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: the header file %s to export to exists already", ErrInvalidOptions, o.ExportHeader)
	}
	return nil
}

// Decrypt turns the LUKS2 volume into plaintext in place, or resumes the
// decryption in progress (PlanDecrypt says which), as cryptsetup 2.6's
// reencrypt --decrypt does: a detached header with the data at offset 0 is
// decrypted backward from the end; a header on the data device is first
// exported to o.ExportHeader and the data moves to the start of the
// device. passphrase opens o.Keyslot (or any keyslot). At the end the
// header holds no keyslots and one linear segment. When ctx ends the run
// stops between steps, resumable by either tool.
func (h *LUKS) Decrypt(ctx context.Context, passphrase []byte, o DecryptOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return h.locked(ctx, true, func() error {
		p, err := h.planDecrypt(ctx, o)
		if err != nil {
			return err
		}
		unlock, err := luks2.LockReencryption(p.UUID)
		if err != nil {
			return err
		}
		defer unlock()
		if o.ExportHeader == "" {
			data, done, err := h.dataDevice(ctx)
			if err != nil {
				return err
			}
			defer done()
			return luks2.Decrypt(ctx, h.dev, data, passphrase, o.luks2())
		}
		hf, err := createHeaderFile(o.ExportHeader)
		if err != nil {
			return err
		}
		defer removeIfEmpty(hf, o.ExportHeader)
		return luks2.Decrypt(ctx, luks2.File{File: hf.File}, h.dev, passphrase, o.luks2())
	})
}

// createHeaderFile makes the new header file path (empty, mode 0600, as
// cryptsetup makes it) and opens it with the device lock.
func createHeaderFile(path string) (*LockedFile, error) {
	nf, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create header file %s: %w", path, err)
	}
	nf.Close()
	hf, err := OpenFileLocked(path, false)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return hf, nil
}

// removeIfEmpty closes a header file made here and removes it when nothing
// was written to it (a refusal, a wrong passphrase): a failed run leaves
// no file behind.
func removeIfEmpty(hf *LockedFile, path string) {
	st, err := hf.Stat()
	hf.Close()
	if err == nil && st.Size() == 0 {
		os.Remove(path)
	}
}

// EncryptOptions configure Encrypt. The zero values give cryptsetup 2.6's
// defaults for reencrypt --encrypt: aes-xts-plain64 with a 512-bit key and
// 512-byte sectors, keyslot 0, checksum resilience (sha256) for a detached
// header.
type EncryptOptions struct {
	Cipher     string
	KeySize    int // bytes
	SectorSize int
	// ReduceDeviceSize (bytes) makes room for the header on the data
	// device: the header and the data shift are half of it each, and the
	// plaintext is the device minus all of it (it must have been shrunk).
	ReduceDeviceSize uint64
	// Offset is the data offset in 512-byte sectors (cryptsetup's
	// --offset); 0 is the default.
	Offset uint64
	// Header is a detached header file, made (mode 0600) when it does not
	// exist; "" puts the header on the data device, which needs
	// ReduceDeviceSize.
	Header string
	// Resilience is "checksum" (default), "journal" or "none" with a
	// detached header; "datashift" (the only one) on the data device.
	Resilience  string
	Hash        string
	HotzoneSize uint64
	UUID, Label string
	// Keyslot is the keyslot's number; nil (the zero value) is keyslot 0.
	Keyslot *int
	// PBKDF is the keyslot's KDF.
	PBKDF PBKDFOptions
	// InitOnly writes the metadata and stops; ResumeOnly refuses to start
	// a new run.
	InitOnly, ResumeOnly bool
	StopAfter            int
	Progress             func(done, total uint64)
}

// EncryptPlan is what Encrypt would do (Resume, UUID).
type EncryptPlan = luks2.EncryptPlan

func (o EncryptOptions) luks2() luks2.EncryptOptions {
	return luks2.EncryptOptions{
		Cipher: o.Cipher, KeySize: o.KeySize, SectorSize: o.SectorSize,
		ReduceDeviceSize: o.ReduceDeviceSize, Offset: o.Offset * 512,
		Resilience: o.Resilience, Hash: o.Hash, HotzoneSize: o.HotzoneSize, UUID: o.UUID, Label: o.Label,
		Keyslot:  luks2.KeyslotOptions{Slot: o.Keyslot, PBKDF: o.PBKDF},
		InitOnly: o.InitOnly, ResumeOnly: o.ResumeOnly, StopAfter: o.StopAfter, Progress: o.Progress,
	}
}

// PlanEncrypt says whether Encrypt would start or resume an encryption of
// the device at path (a file, a block device or a URI), refusing what it
// would refuse from the devices alone, before a passphrase is asked for:
// a LUKS header without an encryption in progress (ErrAlreadyLUKS),
// another kind of run (ErrReencryptInProgress), ResumeOnly without a run
// (ErrNoReencryption). A run in progress is resumed with the volume's
// passphrase; a new one takes a new passphrase. Nothing is written (a
// missing o.Header is not made).
func PlanEncrypt(ctx context.Context, path string, o EncryptOptions) (EncryptPlan, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var p EncryptPlan
	err := withEncryptDevices(ctx, path, o, false, func(data, hdr luksutil.Device) error {
		lo := o.luks2()
		if hdr != nil {
			lo.Header = hdr
		}
		var err error
		p, err = luks2.PlanEncrypt(ctx, data, &lo)
		return err
	})
	return p, err
}

// Encrypt turns the plaintext on the device at path into a LUKS2 volume in
// place, with one keyslot for passphrase, or resumes the encryption in
// progress (PlanEncrypt says which), as cryptsetup 2.6's reencrypt
// --encrypt does: with o.ReduceDeviceSize the header goes to the start of
// the device and the data moves up (datashift); with o.Header it goes to
// that file. Resuming, the options other than the passphrase, Header,
// HotzoneSize, StopAfter and Progress come from the metadata. The device
// and the header file are locked for the whole run, and the volume's
// reencryption lock taken. When ctx ends the run stops between steps,
// resumable by either tool. A header file made here is removed again when
// the run fails before writing it.
func Encrypt(ctx context.Context, path string, passphrase []byte, o EncryptOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(passphrase) == 0 {
		return fmt.Errorf("%w: an empty passphrase", ErrInvalidOptions)
	}
	return withEncryptDevices(ctx, path, o, true, func(data, hdr luksutil.Device) error {
		lo := o.luks2()
		if hdr != nil {
			lo.Header = hdr
		}
		p, err := luks2.PlanEncrypt(ctx, data, &lo)
		if err != nil {
			return err
		}
		unlock, err := luks2.LockReencryption(p.UUID)
		if err != nil {
			return err
		}
		defer unlock()
		return luks2.Encrypt(ctx, data, passphrase, lo)
	})
}

// withEncryptDevices opens and locks the data device at path and the
// header file of o (made when missing and create is set; an empty
// stand-in when missing otherwise) and runs f on them; hdr is nil when
// the header goes on the data device.
func withEncryptDevices(ctx context.Context, path string, o EncryptOptions, create bool, f func(data, hdr luksutil.Device) error) error {
	var data luksutil.Device
	if IsURI(path) {
		d, err := OpenURI(ctx, path, false)
		if err != nil {
			return err
		}
		defer d.Close()
		data = d
	} else {
		df, err := OpenFileLocked(path, false)
		if err != nil {
			return err
		}
		defer df.Close()
		data = luksutil.File{File: df.File}
	}
	if o.Header == "" {
		return f(data, nil)
	}
	_, serr := os.Stat(o.Header)
	switch missing := errors.Is(serr, fs.ErrNotExist); {
	case missing && o.ResumeOnly:
		return fmt.Errorf("%w: header %s does not exist", ErrNoReencryption, o.Header)
	case missing && !create:
		return f(data, luksutil.NewMemDevice(0, nil))
	case missing:
		hf, err := createHeaderFile(o.Header)
		if err != nil {
			return err
		}
		defer removeIfEmpty(hf, o.Header)
		return f(data, luksutil.File{File: hf.File})
	}
	hf, err := OpenFileLocked(o.Header, false)
	if err != nil {
		return err
	}
	defer hf.Close()
	return f(data, luksutil.File{File: hf.File})
}
