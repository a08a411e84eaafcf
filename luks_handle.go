package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// ErrWouldDestroy means a call that would make data unreachable (removing
// the last keyslot, formatting over an existing header) and was not asked
// to with Force. Nothing was written. It matches ErrInvalidOptions.
var ErrWouldDestroy = volspec.Sub("refusing to destroy data without Force", volspec.ErrInvalidOptions)

// LUKSOptions choose how OpenLUKS and OpenLUKSDevice reach a LUKS header.
type LUKSOptions struct {
	// Type is "luks1", "luks2", or "" (or "luks") for either.
	Type string
	// ReadOnly refuses every change: methods that would write return
	// ErrReadOnly before deriving a key.
	ReadOnly bool
	// Header is a detached header file (OpenLUKS); the operations read and
	// change it, not the data device. HeaderDevice is the same for
	// OpenLUKSDevice.
	Header       string
	HeaderDevice io.ReaderAt
}

// KeyOptions choose the keyslots a key operation acts on and the KDF of a
// keyslot it creates. The zero value is the safe default: any keyslot that
// opens, the first free keyslot for a new one, cryptsetup's KDF defaults,
// and a refusal (ErrWouldDestroy) to remove the last keyslot.
type KeyOptions struct {
	// PBKDF is the new keyslot's KDF and its cost.
	PBKDF PBKDFOptions
	// Force allows removing the last keyslot, after which no passphrase
	// opens the volume (cryptsetup asks for confirmation there).
	Force bool
	// Keyslot restricts the passphrase that authorises the operation to
	// one keyslot; nil tries every usable one (see Slot).
	Keyslot *int
	// NewKeyslot is the number of a keyslot AddKey creates; nil takes the
	// first free one. ChangeKey ignores it: LUKS2 keeps the keyslot's
	// number, LUKS1 takes the first free one, as cryptsetup does.
	NewKeyslot *int
	// Priority is a new LUKS2 keyslot's priority; zero stores none.
	Priority keyslot.Priority
	// VolumeKey, when set, authorises AddKey instead of an existing
	// passphrase (cryptsetup's --volume-key-file). It must match the
	// header's digest.
	VolumeKey []byte
}

// keyslot is the new keyslot's options (a nil NewKeyslot: any).
func (o KeyOptions) keyslot() luksutil.KeyslotOptions {
	return luksutil.KeyslotOptions{Slot: o.NewKeyslot, PBKDF: o.PBKDF, Priority: o.Priority}
}

// LUKS is an open LUKS1 or LUKS2 header: the one handle through which the
// library changes a header, as libcryptsetup's crypt_device is. Each method
// takes the device's lock for its own duration (exclusive to change the
// header, shared to read it; ErrBusy when an open Volume or cryptsetup
// holds it), reads the header afresh under that lock, makes every check
// that can refuse before it writes anything, and leaves the old or the new
// header after a crash at any point. Every key derivation stops, with the
// context's error and nothing written, when the context ends.
//
// A LUKS is safe for concurrent use; its methods run one at a time.
type LUKS struct {
	mu       sync.Mutex
	dev      luksutil.Device // where the header lives
	lockOn   *os.File        // the file whose flock guards it, or nil
	closers  []io.Closer
	typ      string
	readOnly bool
	closed   bool
	// dataPath is the data device OpenLUKS was given (the header's own
	// file unless o.Header names another), for Resize; "" for a device.
	dataPath string
	// detached is set when the header is not on the data device
	// (LUKSOptions.Header or HeaderDevice); data is the data device of
	// OpenLUKSDevice then (OpenLUKS opens dataPath when needed).
	detached bool
	data     luksutil.Device
}

// OpenLUKS opens the LUKS header on the file or block device at path (or a
// URI of a registered scheme, or the detached header o.Header) and checks
// that it is one. It holds the file open, not locked, until Close.
func OpenLUKS(ctx context.Context, path string, o LUKSOptions) (*LUKS, error) {
	return openLUKSHandle(ctx, path, o, true)
}

// openLUKSHandle is OpenLUKS; without check it also opens a device that holds
// no header yet (RestoreLUKSHeader).
func openLUKSHandle(ctx context.Context, path string, o LUKSOptions, check bool) (*LUKS, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	h := &LUKS{typ: o.Type, readOnly: o.ReadOnly, dataPath: path, detached: o.Header != ""}
	target := path
	if o.Header != "" {
		target = o.Header
	}
	if IsURI(target) {
		d, err := OpenURI(ctx, target, o.ReadOnly)
		if err != nil {
			return nil, err
		}
		h.dev, h.closers = d, []io.Closer{d}
	} else {
		f, err := openPlainFile(target, o.ReadOnly)
		if err != nil {
			return nil, err
		}
		h.dev, h.lockOn, h.closers = luksutil.File{File: f}, f, []io.Closer{f}
		if h.detached && sameFile(f, path) {
			h.detached = false // a "detached" header that is the device itself
		}
	}
	if !check {
		return h, nil
	}
	if err := h.check(ctx); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// OpenLUKSDevice is OpenLUKS over a device the caller opened: an *os.File,
// an NBD client, memory. It is read-only unless dev is an io.WriterAt;
// its Sync is used when it has one. It takes no lock and does not close
// dev: the caller owns it.
func OpenLUKSDevice(ctx context.Context, dev io.ReaderAt, o LUKSOptions) (*LUKS, error) {
	return openLUKSDevice(ctx, dev, o, true)
}

// openLUKSDevice is OpenLUKSDevice; without check it also takes a device
// that holds no header yet (RestoreLUKSHeaderDevice).
func openLUKSDevice(ctx context.Context, dev io.ReaderAt, o LUKSOptions, check bool) (*LUKS, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if dev == nil {
		return nil, fmt.Errorf("%w: a nil device", ErrInvalidOptions)
	}
	var data luksutil.Device
	if o.HeaderDevice != nil {
		var err error
		if data, err = headerDevice(dev); err != nil {
			return nil, err
		}
		dev = o.HeaderDevice
	}
	d, err := headerDevice(dev)
	if err != nil {
		return nil, err
	}
	h := &LUKS{dev: d, typ: o.Type, readOnly: o.ReadOnly, detached: data != nil, data: data}
	if _, ok := dev.(io.WriterAt); !ok {
		h.readOnly = true
	}
	if !check {
		return h, nil
	}
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// headerDevice gives any io.ReaderAt the luksutil.Device methods.
func headerDevice(dev io.ReaderAt) (luksutil.Device, error) {
	if d, ok := dev.(luksutil.Device); ok {
		return d, nil
	}
	if f, ok := dev.(*os.File); ok {
		return luksutil.File{File: f}, nil
	}
	size, err := DeviceSize(dev)
	if err != nil {
		return nil, err
	}
	return sizedDevice{adaptDevice(dev), size}, nil
}

type sizedDevice struct {
	*adapted
	size int64
}

func (d sizedDevice) Size() (int64, error) { return d.size, nil }

// openPlainFile opens path for header work: a regular file or a block
// device, read-only or read-write, without a lock yet.
func openPlainFile(path string, readOnly bool) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory: %w", path, errNotDevice)
	}
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	return os.OpenFile(path, flag, 0)
}

// check reads the header once, under a shared lock, to refuse a device
// that holds none (or not the version asked for) at open. A LUKS1 header
// marked by a reencryption in progress opens: Reencrypt finishes it, the
// other methods refuse it (ErrLUKS1ReencryptInProgress).
func (h *LUKS) check(ctx context.Context) error {
	err := h.do(ctx, false, func(luksutil.Header) error { return nil })
	if errors.Is(err, luks1.ErrReencryptInProgress) && h.checkType(1) == nil {
		return nil
	}
	return err
}

// do runs f on the header read afresh under the device's lock.
func (h *LUKS) do(ctx context.Context, write bool, f func(hd luksutil.Header) error) error {
	return h.locked(ctx, write, func() error {
		hd, err := readHeader(ctx, h.dev)
		if err != nil {
			if marked, _ := luks1.ReencryptionInProgress(h.dev); marked {
				return luks1.ErrReencryptInProgress
			}
			return err
		}
		if err := h.checkType(hd.Version()); err != nil {
			return err
		}
		if write {
			if w, ok := hd.(interface{ Writable() error }); ok {
				if err := w.Writable(); err != nil {
					return err
				}
			}
			if h2, ok := hd.(*luks2.Header); ok && h2.ReencryptionStatus() != nil {
				return fmt.Errorf("%w: a reencryption is in progress (resume or finish it first)", ErrUnsupported)
			}
		}
		return f(hd)
	})
}

// locked runs f under the handle's mutex and the device's lock
// (exclusive when write), refusing a closed handle, an ended context and,
// for a write, a read-only handle. It reads no header: RestoreHeader
// writes one where there may be none.
func (h *LUKS) locked(ctx context.Context, write bool, f func() error) error {
	if h == nil {
		return ErrClosed
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.dev == nil {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if write && h.readOnly {
		return fmt.Errorf("%w: the LUKS handle was opened read-only", ErrReadOnly)
	}
	if h.lockOn != nil {
		release, err := lockFile(h.lockOn, write)
		if err != nil {
			return err
		}
		defer release()
	}
	return f()
}

// Header reads the header afresh, under a shared lock: its version, UUID,
// cipher, keyslots and the rest (assert *luks1.Header or *luks2.Header for
// what only one version has).
func (h *LUKS) Header(ctx context.Context) (Header, error) {
	var out Header
	err := h.do(ctx, false, func(hd luksutil.Header) error { out = hd; return nil })
	return out, err
}

// TestPassphrase reports the keyslot passphrase opens (o.Keyslot only, or
// any), as cryptsetup open --test-passphrase does, and writes nothing.
func (h *LUKS) TestPassphrase(ctx context.Context, passphrase []byte, o KeyOptions) (slot int, err error) {
	slot = -1
	err = h.do(ctx, false, func(hd luksutil.Header) error {
		key, s, err := hd.UnlockContext(ctx, h.dev, passphrase, keyslotArg(o.Keyslot))
		clear(key)
		slot = s
		return err
	})
	return slot, err
}

// AddKey adds a keyslot for newPassphrase, authorised by existing (any
// keyslot's passphrase, or o.Keyslot's) or by o.VolumeKey, and returns its
// number.
func (h *LUKS) AddKey(ctx context.Context, existing, newPassphrase []byte, o KeyOptions) (slot int, err error) {
	if len(newPassphrase) == 0 {
		return -1, fmt.Errorf("%w: an empty new passphrase", ErrInvalidOptions)
	}
	slot = -1
	err = h.do(ctx, true, func(hd luksutil.Header) error {
		if err := checkNewSlot(hd, o.NewKeyslot); err != nil {
			return err
		}
		var key []byte
		if o.VolumeKey != nil {
			if !hd.VolumeKeyDigestOK(o.VolumeKey) {
				return luksutil.ErrWrongKey
			}
			key = append([]byte(nil), o.VolumeKey...)
		} else {
			var err error
			if key, _, err = hd.UnlockContext(ctx, h.dev, existing, keyslotArg(o.Keyslot)); err != nil {
				return err
			}
		}
		defer clear(key)
		var err error
		slot, err = hd.AddKeyContext(ctx, h.dev, key, newPassphrase, o.keyslot())
		return err
	})
	return slot, err
}

// checkNewSlot refuses a requested new keyslot that is out of range or in
// use before any key is derived.
func checkNewSlot(hd luksutil.Header, k *int) error {
	if k == nil {
		return nil
	}
	n := luks1.NumKeyslots
	if hd.Version() == 2 {
		n = luks2.MaxKeyslots
	}
	if *k < 0 || *k >= n {
		return fmt.Errorf("%w: %d (LUKS%d has keyslots 0-%d)", luksutil.ErrInvalidSlot, *k, hd.Version(), n-1)
	}
	if slices.Contains(hd.ActiveKeyslots(), *k) {
		return fmt.Errorf("%w: keyslot %d", luksutil.ErrSlotInUse, *k)
	}
	return nil
}

// ChangeKey replaces the passphrase old opens (o.Keyslot only, or any) with
// newPassphrase and returns the keyslot that now holds it: the same number
// on LUKS2, the first free one on LUKS1, as cryptsetup's luksChangeKey.
// The new keyslot is written before the old one is removed, so a crash
// leaves one of the two passphrases working.
func (h *LUKS) ChangeKey(ctx context.Context, old, newPassphrase []byte, o KeyOptions) (slot int, err error) {
	if len(newPassphrase) == 0 {
		return -1, fmt.Errorf("%w: an empty new passphrase", ErrInvalidOptions)
	}
	slot = -1
	err = h.do(ctx, true, func(hd luksutil.Header) error {
		var err error
		slot, err = hd.ChangeKeyContext(ctx, h.dev, old, newPassphrase, keyslotArg(o.Keyslot), o.keyslot())
		return err
	})
	return slot, err
}

// RemoveKey removes the keyslot passphrase opens (o.Keyslot only, or any)
// and returns its number. Removing the last keyslot needs o.Force; without
// it the result is ErrWouldDestroy, nothing is written, and slot is the
// keyslot the passphrase opened (so that a caller that confirms can
// KillSlot it with Force, without deriving the key again).
func (h *LUKS) RemoveKey(ctx context.Context, passphrase []byte, o KeyOptions) (slot int, err error) {
	slot = -1
	err = h.do(ctx, true, func(hd luksutil.Header) error {
		key, s, err := hd.UnlockContext(ctx, h.dev, passphrase, keyslotArg(o.Keyslot))
		clear(key)
		if err != nil {
			return err
		}
		slot = s
		if err := lastKeyslot(hd, s, o.Force); err != nil {
			return err
		}
		return hd.RemoveKey(h.dev, s)
	})
	return slot, err
}

// KillSlot removes keyslot n without a passphrase (cryptsetup's
// luksKillSlot). The last keyslot needs o.Force (ErrWouldDestroy).
func (h *LUKS) KillSlot(ctx context.Context, n int, o KeyOptions) error {
	return h.do(ctx, true, func(hd luksutil.Header) error {
		if !slices.Contains(hd.ActiveKeyslots(), n) {
			return fmt.Errorf("%w: keyslot %d", ErrSlotInactive, n)
		}
		if err := lastKeyslot(hd, n, o.Force); err != nil {
			return err
		}
		return hd.RemoveKey(h.dev, n)
	})
}

// KillSlotWith is KillSlot authorised by a passphrase, as cryptsetup's
// luksKillSlot is when given a key file: passphrase must open an active
// keyslot other than n (ErrWrongPassphrase when none does). The check and
// the removal are one locked step; nothing is written before the check
// has passed.
func (h *LUKS) KillSlotWith(ctx context.Context, n int, passphrase []byte, o KeyOptions) error {
	return h.do(ctx, true, func(hd luksutil.Header) error {
		act := hd.ActiveKeyslots()
		if !slices.Contains(act, n) {
			return fmt.Errorf("%w: keyslot %d", ErrSlotInactive, n)
		}
		if err := lastKeyslot(hd, n, o.Force); err != nil {
			return err
		}
		opened := false
		for _, s := range act {
			if s == n {
				continue
			}
			key, _, err := hd.UnlockContext(ctx, h.dev, passphrase, s)
			clear(key)
			if opened = err == nil; opened {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if !opened {
			return fmt.Errorf("%w: the passphrase opens no keyslot other than %d", ErrWrongPassphrase, n)
		}
		return hd.RemoveKey(h.dev, n)
	})
}

// ErrSlotInactive means a keyslot that is not in use; it matches
// ErrInvalidOptions.
var ErrSlotInactive = luksutil.ErrSlotInactive

func lastKeyslot(hd luksutil.Header, slot int, force bool) error {
	act := hd.ActiveKeyslots()
	if !force && len(act) == 1 && act[0] == slot {
		return fmt.Errorf("%w: keyslot %d is the last one; without it nothing opens the volume", ErrWouldDestroy, slot)
	}
	return nil
}

// Close releases the device (OpenLUKS) or nothing (OpenLUKSDevice). It is
// safe on a nil or closed handle.
func (h *LUKS) Close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	var errs []error
	for _, c := range h.closers {
		errs = append(errs, c.Close())
	}
	h.closers = nil
	return errors.Join(errs...)
}
