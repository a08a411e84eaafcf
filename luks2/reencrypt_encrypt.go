package luks2

import (
	"bytes"
	"context"
	"fmt"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/keyslot"
)

// Encryption and decryption in place (cryptsetup reencrypt --encrypt and
// --decrypt). They share the reencryption metadata (the "reencrypt"
// keyslot, the backup segments, the reencryption digest and the
// "online-reencrypt-v2" requirement) but one side of the data is plaintext:
// a "linear" segment, and only one volume key exists. cryptsetup 2.6 knows
// three layouts, and so does this engine:
//   - encrypt, forward, detached header: the data stays in place; the
//     hotzone's plaintext is protected by checksums or a journal;
//   - decrypt, backward, detached header (data offset 0): the same with
//     the ciphertext protected;
//   - encrypt, backward, "datashift", the header at the start of the data
//     device: the first shift bytes of plaintext are copied to the end of
//     the device (the "backup-moved-segment"), the header takes their
//     place, and each hotzone is read from its old place and written shift
//     bytes further on. The source of a hotzone is never written while it is
//     in reencryption, so a crashed hotzone is simply done again.

// EncryptOptions configure Encrypt. Zero values give cryptsetup 2.6's
// defaults for reencrypt --encrypt: aes-xts-plain64 with a 512-bit key and
// 512-byte sectors, checksum resilience (sha256) for a detached header.
type EncryptOptions struct {
	Cipher     string
	KeySize    int // bytes
	SectorSize int
	// ReduceDeviceSize (bytes) makes room for the header on the data
	// device: the header and the data shift are half of it each, and the
	// plaintext is the device minus all of it (it must have been shrunk).
	ReduceDeviceSize uint64
	// Offset is the data offset in bytes. With the header on the data
	// device it is at most ReduceDeviceSize/2; a smaller one lowers
	// ReduceDeviceSize to twice it, as cryptsetup does.
	Offset uint64
	// Header is the detached header device (nil: on the data device, which
	// needs ReduceDeviceSize). Its content is replaced.
	Header Device
	// Resilience is "checksum" (default), "journal" or "none" with a
	// detached header; "datashift" (the only one) on the data device.
	Resilience  string
	Hash        string
	HotzoneSize uint64
	UUID, Label string
	// Keyslot configures the keyslot (a nil Slot means 0) and its KDF.
	Keyslot  KeyslotOptions
	InitOnly bool
	// ResumeOnly refuses to start a new encryption (ErrNoReencryption).
	ResumeOnly bool
	StopAfter  int
	Progress   func(done, total uint64)
}

// ErrAlreadyLUKS means Encrypt of a device that already holds a LUKS
// header; it matches ErrInvalidOptions.
var ErrAlreadyLUKS = volspec.Sub("the device already holds a LUKS header", ErrInvalidOptions)

// holdsLUKS reports a LUKS1 or LUKS2 signature at the start of dev (LUKS2
// also at the secondary header offsets).
func holdsLUKS(dev Device) bool {
	buf := make([]byte, MagicLen)
	for _, off := range append([]uint64{0}, MetadataSizes...) {
		if n, _ := dev.ReadAt(buf, int64(off)); n != len(buf) {
			continue
		}
		if bytes.Equal(buf, MagicPrimary[:]) || (off != 0 && bytes.Equal(buf, MagicSecondary[:])) {
			return true
		}
	}
	return false
}

// minShift is the smallest data shift that holds the header: both
// metadata copies, the keyslot and the reencrypt keyslot's 4 KiB area.
func minShift(keyLen int) uint64 {
	return 2*DefaultMetadataSize + areaSize(keyLen) + 4096
}

// EncryptPlan is what Encrypt does with its options.
type EncryptPlan struct {
	// Resume is set when the header holds an encryption in progress,
	// which Encrypt resumes with that volume's passphrase; else Encrypt
	// starts one with a new passphrase.
	Resume bool
	// UUID is the volume's: the stored one, or (starting) EncryptOptions'
	// UUID, made when empty. The reencryption lock (LockReencryption)
	// names it.
	UUID string
}

// PlanEncrypt reads the header device of o (the data device without
// o.Header) and says what Encrypt would do, refusing what Encrypt refuses
// from the devices alone, before a passphrase is asked for and before
// anything is written: a LUKS header without an encryption in progress
// (ErrAlreadyLUKS), another reencryption in progress or InitOnly with an
// encryption in progress (ErrReencryptInProgress and ErrInvalidOptions),
// ResumeOnly without one (ErrNoReencryption). Starting, it sets o.UUID
// when empty, so that the caller takes the lock of the UUID that Encrypt
// then writes.
func PlanEncrypt(ctx context.Context, data Device, o *EncryptOptions) (EncryptPlan, error) {
	hdev := o.Header
	if hdev == nil {
		hdev = data
	}
	if h, err := ReadContext(ctx, hdev); err == nil {
		switch st := h.ReencryptionStatus(); {
		case st == nil:
			return EncryptPlan{}, fmt.Errorf("%w: a LUKS2 header without an encryption in progress", ErrAlreadyLUKS)
		case st.Mode != "encrypt":
			return EncryptPlan{}, fmt.Errorf("%w: %w: the header is in %s, not encryption", ErrInvalidOptions, ErrReencryptInProgress, st.Mode)
		case o.InitOnly:
			return EncryptPlan{}, fmt.Errorf("%w: %w: cannot initialise it again", ErrInvalidOptions, ErrReencryptInProgress)
		}
		return EncryptPlan{Resume: true, UUID: h.UUID()}, nil
	} else if ctx.Err() != nil {
		return EncryptPlan{}, ctx.Err()
	}
	if holdsLUKS(hdev) || holdsLUKS(data) {
		return EncryptPlan{}, fmt.Errorf("%w", ErrAlreadyLUKS)
	}
	if o.ResumeOnly {
		return EncryptPlan{}, ErrNoReencryption
	}
	if o.UUID == "" {
		u, err := luksutil.NewUUID()
		if err != nil {
			return EncryptPlan{}, err
		}
		o.UUID = u
	}
	return EncryptPlan{UUID: o.UUID}, nil
}

// Encrypt turns the plaintext on data into a LUKS2 volume in place, or
// resumes such a run (then opts other than the passphrase, Header,
// HotzoneSize, StopAfter and Progress are taken from the metadata; a
// Resilience or Hash that differs is refused). PlanEncrypt says which
// beforehand. On ctx's end it stops between hotzones, resumable by either
// tool.
func Encrypt(ctx context.Context, data Device, passphrase []byte, o EncryptOptions) error {
	if len(passphrase) == 0 {
		return fmt.Errorf("%w: empty passphrase", ErrInvalidOptions)
	}
	hdev := o.Header
	if hdev == nil {
		hdev = data
	}
	plan, err := PlanEncrypt(ctx, data, &o)
	if err != nil {
		return err
	}
	ro := runOpts{hotzone: o.HotzoneSize, slot: AnySlot, stopAfter: o.StopAfter, progress: o.Progress}
	if !plan.Resume {
		ctx, known := withDerivedKeys(ctx) // reencrypt_keys.go: the key made here is not derived again
		defer known.wipe()
		if o.Header == nil {
			err = encryptShiftInit(ctx, data, passphrase, o)
		} else {
			err = encryptDetachedInit(ctx, o.Header, data, passphrase, o)
		}
		if err != nil || o.InitOnly {
			return err
		}
		h, err := ReadContext(ctx, hdev)
		if err != nil {
			return err
		}
		return h.resume(ctx, hdev, data, passphrase, ro) // reencrypt_engine.go
	}
	h, err := ReadContext(ctx, hdev)
	if err != nil {
		return err
	}
	ro.resilience, ro.hash = o.Resilience, o.Hash
	return h.resume(ctx, hdev, data, passphrase, ro)
}

// encryptParams checks the cipher and makes the new volume key.
func encryptParams(o *EncryptOptions) ([]byte, error) {
	if o.Cipher == "" {
		o.Cipher = DefaultCipher
	}
	if o.KeySize == 0 {
		o.KeySize = DefaultKeySize
	}
	if o.SectorSize == 0 {
		o.SectorSize = 512
	}
	if o.SectorSize < 512 || o.SectorSize > 4096 || o.SectorSize&(o.SectorSize-1) != 0 {
		return nil, fmt.Errorf("%w: sector size %d", ErrInvalidOptions, o.SectorSize)
	}
	if err := luksutil.CheckCipher(o.Cipher, o.KeySize); err != nil {
		return nil, fmt.Errorf("%w: cipher %s with a %d-bit key: %w", ErrInvalidOptions, o.Cipher, o.KeySize*8, err)
	}
	if o.Keyslot.Slot == nil {
		o.Keyslot.Slot = keyslot.Slot(0)
	}
	key := make([]byte, o.KeySize)
	if err := luksutil.Random(key); err != nil {
		return nil, err
	}
	return key, nil
}

// formatMem formats a header of size bytes in memory (as a detached one,
// the data at dataOff) for the caller to extend and copy out.
func formatMem(size uint64, key, passphrase []byte, o EncryptOptions, dataOff uint64) (*Header, *luksutil.MemDevice, error) {
	mem := luksutil.NewMemDevice(int(size), nil)
	h, err := Format(mem, key, passphrase, FormatOptions{
		Cipher: o.Cipher, SectorSize: o.SectorSize, DataOffset: dataOff, Detached: true,
		KeyslotsSize: (size - 2*DefaultMetadataSize) / 4096 * 4096,
		UUID:         o.UUID, Label: o.Label, Keyslot: o.Keyslot,
	})
	if err != nil {
		return nil, nil, err
	}
	return h, mem, nil
}

func linSeg(off uint64, size *uint64, flags ...string) *jval {
	sz := jstr("dynamic")
	if size != nil {
		sz = ju64s(*size)
	}
	s := jobj(jmember{"type", jstr("linear")}, jmember{"offset", ju64s(off)}, jmember{"size", sz})
	if len(flags) > 0 {
		s.set("flags", jarrStr(flags...))
	}
	return s
}

func u64p(v uint64) *uint64 { return &v }

// initModalRoot adds the reencryption metadata to h's formatted root: the
// live segments, the backups (moved, previous, final, as cryptsetup's init
// orders them), the reencrypt keyslot with area, its digest over key and
// the requirement.
func (h *Header) initModalRoot(live []*jval, moved, prev, fin *jval, dig int, key, oldKey []byte, ks *jval, pbkdf PBKDFOptions) (*jval, error) {
	return h.initModalRootVer(reencDigestVer, live, moved, prev, fin, dig, key, oldKey, ks, pbkdf)
}

// initModalRootVer is initModalRoot for requirement version ver (3 is
// cryptsetup's decryption with a moved first segment).
func (h *Header) initModalRootVer(ver byte, live []*jval, moved, prev, fin *jval, dig int, key, oldKey []byte, ks *jval, pbkdf PBKDFOptions) (*jval, error) {
	list := live
	if moved != nil {
		list = append(list, moved)
	}
	root := h.rootWithSegments(append(list, prev, fin), dig)
	reSlot, err := h.freeReencSlot(-1)
	if err != nil {
		return nil, err
	}
	if err := addReencKeyslot(root, reSlot, ks, ver, oldKey, key, prev, fin, moved, pbkdf); err != nil {
		return nil, err
	}
	return root, nil
}

func reencKeyslotJSON(area *jval, mode, dir string) *jval {
	return jobj(jmember{"area", area}, jmember{"type", jstr("reencrypt")}, jmember{"key_size", jint(1)},
		jmember{"mode", jstr(mode)}, jmember{"direction", jstr(dir)}, jmember{"priority", jint(0)})
}

// resilienceArea builds the reencrypt keyslot area for checksum, journal or
// none over the largest free gap of h's keyslots area outside extra.
func (h *Header) resilienceArea(res, hash string, block int, extra []luksutil.Range) (*jval, error) {
	if res == "" {
		res = "checksum"
	}
	switch res {
	case "checksum":
		if hash == "" {
			hash = "sha256"
		}
		if _, err := hashByName(hash); err != nil {
			return nil, err
		}
	case "journal", "none":
		if hash != "" {
			return nil, fmt.Errorf("%w: a checksum hash is only for resilience checksum", ErrInvalidOptions)
		}
	case "datashift":
		return nil, fmt.Errorf("%w: resilience datashift needs the header on the data device (a reduced device size)", ErrInvalidOptions)
	default:
		return nil, fmt.Errorf("%w: unknown resilience %q", ErrInvalidOptions, res)
	}
	off, n := h.maxGap(extra)
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: no free space in the keyslots area for the reencryption data", ErrNoFreeSlot)
	case res == "journal" && n < uint64(block):
		return nil, fmt.Errorf("%w: the free keyslots area (%d bytes) is too small for a journal", ErrNoFreeSlot, n)
	}
	area := jobj(jmember{"offset", ju64s(off)}, jmember{"size", ju64s(n)}, jmember{"type", jstr(res)})
	if res == "checksum" {
		area.set("hash", jstr(hash))
		area.set("sector_size", jint(int64(block)))
	}
	return area, nil
}

// encryptShiftInit is cryptsetup's encryption with the header on the data
// device. Layout afterwards: [header: shift][plaintext from shift][gap:
// shift][the first shift bytes of plaintext]. The copy is written and
// synced first; then the keyslots area, then the metadata, so a cut before
// the metadata leaves no LUKS header, the plaintext after the shift in
// place and its first shift bytes at the end of the device.
func encryptShiftInit(ctx context.Context, data Device, passphrase []byte, o EncryptOptions) error {
	if o.Resilience != "" && o.Resilience != "datashift" {
		return fmt.Errorf("%w: with the header on the data device the resilience is datashift, not %q", ErrInvalidOptions, o.Resilience)
	}
	if o.Hash != "" {
		return fmt.Errorf("%w: resilience datashift takes no checksum hash", ErrInvalidOptions)
	}
	if o.ReduceDeviceSize == 0 {
		return fmt.Errorf("%w: encryption without a detached header needs a reduced device size", ErrInvalidOptions)
	}
	if o.ReduceDeviceSize%512 != 0 {
		return fmt.Errorf("%w: the device size reduction must be a multiple of 512 bytes", ErrInvalidOptions)
	}
	key, err := encryptParams(&o)
	if err != nil {
		return err
	}
	defer clear(key)
	shift := o.ReduceDeviceSize / 2
	if o.Offset != 0 {
		if o.Offset%512 != 0 {
			return fmt.Errorf("%w: the data offset must be a multiple of 512 bytes", ErrInvalidOptions)
		}
		if o.Offset > shift {
			return fmt.Errorf("%w: the data offset (%d bytes) must be at most half of the device size reduction (%d bytes)", ErrInvalidOptions, o.Offset, o.ReduceDeviceSize)
		}
		shift = o.Offset
	}
	if shift%uint64(o.SectorSize) != 0 || shift%4096 != 0 {
		return fmt.Errorf("%w: the data shift (%d bytes, half the reduction) must be a multiple of 4096 bytes and of the sector size", ErrInvalidOptions, shift)
	}
	if need := minShift(o.KeySize); shift < need {
		return fmt.Errorf("%w: the device size reduction (%d bytes) leaves %d bytes for the LUKS2 header, which needs %d; reduce by at least %d", ErrInvalidOptions, 2*shift, shift, need, 2*need)
	}
	devSize, err := data.Size()
	if err != nil {
		return err
	}
	// The plaintext is the device minus the reduction; its first shift
	// bytes go to the last shift bytes of the device. cryptsetup 2.6
	// cannot run a plaintext shorter than the shift.
	if uint64(devSize) < 3*shift {
		return fmt.Errorf("%w: %d bytes cannot hold a %d-byte header, a %d-byte shift and at least as much data", ErrDeviceTooSmall, devSize, shift, shift)
	}
	dataLen := uint64(devSize) - 2*shift
	if dataLen%uint64(o.SectorSize) != 0 {
		return fmt.Errorf("%w: the plaintext (%d bytes) is not a multiple of the %d-byte sector size", ErrInvalidOptions, dataLen, o.SectorSize)
	}
	movedOff := uint64(devSize) - shift

	h, mem, err := formatMem(shift, key, passphrase, o, shift)
	if err != nil {
		return err
	}
	areaOff, err := h.findArea(4096, nil)
	if err != nil {
		return fmt.Errorf("%w: no room in the header for the reencryption keyslot", ErrInvalidOptions)
	}
	area := jobj(jmember{"offset", ju64s(areaOff)}, jmember{"size", ju64s(4096)}, jmember{"type", jstr("datashift")}, jmember{"shift_size", ju64s(shift)})
	ks := reencKeyslotJSON(area, "encrypt", "backward")
	live := []*jval{linSeg(movedOff, u64p(shift))}
	if dataLen > shift {
		live = append(live, linSeg(shift, u64p(dataLen-shift)))
	}
	moved := linSeg(movedOff, u64p(shift), flagMoved)
	prev := linSeg(0, u64p(dataLen), flagPrevious)
	fin := segJSON(shift, nil, 0, o.Cipher, o.SectorSize, flagFinal)
	root, err := h.initModalRoot(live, moved, prev, fin, 0, key, nil, ks, o.Keyslot.PBKDF)
	if err != nil {
		return err
	}
	err = h.writeOut(mem, root, data, uint64(len(mem.Buf)), func() error {
		if err := copyRange(data, 0, movedOff, shift); err != nil {
			return fmt.Errorf("moving the first %d bytes of data: %w", shift, err)
		}
		return nil
	})
	if err == nil {
		rememberKey(ctx, 0, key) // Format's digest 0
	}
	return err
}

// writeOut validates root into the memory header h was formatted in, then
// runs before (when set) and copies the header's first end bytes to dst:
// the keyslots area first, then the metadata, each synced.
func (h *Header) writeOut(mem *luksutil.MemDevice, root *jval, dst Device, end uint64, before func() error) error {
	p, err := h.prepare(root, h.bin)
	if err != nil {
		return err
	}
	if err := h.write(mem, p); err != nil {
		return err
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	hs := 2 * h.bin.HdrSize
	if err := luksutil.WriteSync(dst, mem.Buf[hs:end], int64(hs)); err != nil {
		return fmt.Errorf("writing the keyslots area: %w", err)
	}
	if err := luksutil.WriteSync(dst, mem.Buf[:hs], 0); err != nil {
		return fmt.Errorf("writing the LUKS2 metadata: %w", err)
	}
	return nil
}

// copyRange copies n bytes from src to dst on dev (the ranges must not
// overlap), then syncs.
func copyRange(dev Device, src, dst, n uint64) error {
	buf := make([]byte, min(n, 4<<20))
	defer clear(buf)
	for done := uint64(0); done < n; {
		b := buf[:min(uint64(len(buf)), n-done)]
		if _, err := readFull(dev, b, int64(src+done)); err != nil {
			return err
		}
		if _, err := dev.WriteAt(b, int64(dst+done)); err != nil {
			return err
		}
		done += uint64(len(b))
	}
	return dev.Sync()
}

// encryptDetachedInit writes a new header with the reencryption metadata
// to hdev; the data device is not written.
func encryptDetachedInit(ctx context.Context, hdev, data Device, passphrase []byte, o EncryptOptions) error {
	if o.ReduceDeviceSize != 0 {
		return fmt.Errorf("%w: encryption with a detached header and a reduced device size (a backward data shift) is not supported", ErrUnsupported)
	}
	key, err := encryptParams(&o)
	if err != nil {
		return err
	}
	defer clear(key)
	if err := checkHotzone(o.HotzoneSize, o.SectorSize); err != nil {
		return err
	}
	if o.Offset%uint64(o.SectorSize) != 0 {
		return fmt.Errorf("%w: the data offset is not aligned to the %d-byte sector size", ErrInvalidOptions, o.SectorSize)
	}
	devSize, err := data.Size()
	if err != nil {
		return err
	}
	if uint64(devSize) <= o.Offset {
		return fmt.Errorf("%w: no data after offset %d", ErrDeviceTooSmall, o.Offset)
	}
	if (uint64(devSize)-o.Offset)%uint64(o.SectorSize) != 0 {
		return fmt.Errorf("%w: the data area (%d bytes) is not aligned to the %d-byte sector size", ErrInvalidOptions, uint64(devSize)-o.Offset, o.SectorSize)
	}
	h, mem, err := formatMem(DefaultDataOffset, key, passphrase, o, o.Offset)
	if err != nil {
		return err
	}
	area, err := h.resilienceArea(o.Resilience, o.Hash, o.SectorSize, nil)
	if err != nil {
		return err
	}
	ks := reencKeyslotJSON(area, "encrypt", "forward")
	live := []*jval{linSeg(o.Offset, nil)}
	prev := linSeg(o.Offset, nil, flagPrevious)
	fin := segJSON(o.Offset, nil, 0, o.Cipher, o.SectorSize, flagFinal)
	root, err := h.initModalRoot(live, nil, prev, fin, 0, key, nil, ks, o.Keyslot.PBKDF)
	if err != nil {
		return err
	}
	if err := h.writeOut(mem, root, hdev, h.HeaderSize(), nil); err != nil {
		return err
	}
	rememberKey(ctx, 0, key) // Format's digest 0
	return nil
}
