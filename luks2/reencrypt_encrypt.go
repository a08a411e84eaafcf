package luks2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/sector"
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
	// Keyslot configures the keyslot (Slot AnySlot means 0) and its KDF.
	Keyslot   KeyslotOptions
	InitOnly  bool
	StopAfter int
	Progress  func(done, total uint64)
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

// Encrypt turns the plaintext on data into a LUKS2 volume in place, or
// resumes such a run (then opts other than the passphrase, Header,
// HotzoneSize, StopAfter and Progress are taken from the metadata). On
// ctx's end it stops between hotzones, resumable by either tool.
func Encrypt(ctx context.Context, data Device, passphrase []byte, o EncryptOptions) error {
	hdev := o.Header
	if hdev == nil {
		hdev = data
	}
	if len(passphrase) == 0 {
		return fmt.Errorf("%w: empty passphrase", ErrInvalidOptions)
	}
	if h, err := ReadContext(ctx, hdev); err == nil {
		if st := h.ReencryptionStatus(); st != nil && st.Mode == "encrypt" {
			if o.InitOnly {
				return fmt.Errorf("%w: cannot initialise it again", ErrReencryptInProgress)
			}
			return h.resumeModal(ctx, hdev, data, passphrase, modalOpts{o.HotzoneSize, AnySlot, o.StopAfter, o.Progress, o.Resilience, o.Hash})
		}
		return fmt.Errorf("%w", ErrAlreadyLUKS)
	}
	if holdsLUKS(hdev) || holdsLUKS(data) {
		return fmt.Errorf("%w", ErrAlreadyLUKS)
	}
	var err error
	if o.Header == nil {
		err = encryptShiftInit(data, passphrase, o)
	} else {
		err = encryptDetachedInit(o.Header, data, passphrase, o)
	}
	if err != nil || o.InitOnly {
		return err
	}
	h, err := ReadContext(ctx, hdev)
	if err != nil {
		return err
	}
	return h.resumeModal(ctx, hdev, data, passphrase, modalOpts{o.HotzoneSize, AnySlot, o.StopAfter, o.Progress, "", ""})
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
	if o.Keyslot.Slot == AnySlot {
		o.Keyslot.Slot = 0
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
	dgs := root.get("digests")
	reSlot := -1
	for i := 0; i < MaxKeyslots; i++ {
		if h.md.keyslots[i] == nil {
			reSlot = i
			break
		}
	}
	if reSlot < 0 {
		return nil, fmt.Errorf("%w: no keyslot is left for the reencryption keyslot", ErrNoFreeSlot)
	}
	insertSorted(root.get("keyslots"), strconv.Itoa(reSlot), ks)
	vd, err := verificationData(oldKey, key, ks, prev, fin, moved)
	if err != nil {
		return nil, err
	}
	defer clear(vd)
	vd[1] = 0x30 + ver
	rd, err := newDigest(vd, pbkdf, nil)
	if err != nil {
		return nil, err
	}
	rd.get("keyslots").arr = append(rd.get("keyslots").arr, jstr(strconv.Itoa(reSlot)))
	insertSorted(dgs, strconv.Itoa(nextFree(dgs, -1)), rd)
	dgs.raw = nil
	setRequirement(root, true)
	if ver != reencDigestVer {
		// setRequirement added the version 2 name last: rename it.
		m := root.get("config").get("requirements").get("mandatory")
		m.arr[len(m.arr)-1] = jstr(fmt.Sprintf("online-reencrypt-v%d", ver))
	}
	return root, nil
}

func reencKeyslotJSON(area *jval, mode, dir string) *jval {
	return jobj(jmember{"area", area}, jmember{"type", jstr("reencrypt")}, jmember{"key_size", jint(1)},
		jmember{"mode", jstr(mode)}, jmember{"direction", jstr(dir)}, jmember{"priority", jint(0)})
}

// resilienceArea builds the reencrypt keyslot area for checksum, journal or
// none over the largest free gap of h's keyslots area.
func (h *Header) resilienceArea(res, hash string, block int) (*jval, error) {
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
	off, n := h.maxGap(nil)
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
func encryptShiftInit(data Device, passphrase []byte, o EncryptOptions) error {
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
	return h.writeOut(mem, root, data, uint64(len(mem.Buf)), func() error {
		if err := copyRange(data, 0, movedOff, shift); err != nil {
			return fmt.Errorf("moving the first %d bytes of data: %w", shift, err)
		}
		return nil
	})
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
func encryptDetachedInit(hdev, data Device, passphrase []byte, o EncryptOptions) error {
	if o.ReduceDeviceSize != 0 {
		return fmt.Errorf("%w: encryption with a detached header and a reduced device size (a backward data shift) is not supported", ErrUnsupported)
	}
	key, err := encryptParams(&o)
	if err != nil {
		return err
	}
	defer clear(key)
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
	area, err := h.resilienceArea(o.Resilience, o.Hash, o.SectorSize)
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
	return h.writeOut(mem, root, hdev, h.HeaderSize(), nil)
}

// modalOpts are the run-time options of a resumed encryption or
// decryption; Resilience and Hash, when set, must match the stored ones.
type modalOpts struct {
	hotzone    uint64
	slot       int
	stopAfter  int
	progress   func(done, total uint64)
	resilience string
	hash       string
}

// modal is a loaded encryption or decryption.
type modal struct {
	ks                int
	mode, dir, res    string
	hash              string
	block             int
	areaOff, areaSize uint64
	shift             uint64
	prev, fin, moved  *jval
	dig, digReenc     int
	dataOff, oldOff   uint64 // physical start of the new and the old data
	movedOff          uint64
	movedLen          uint64
	cipher            string
	ss                int
	iv                uint64
	size              uint64 // logical data bytes
	dynamic           bool   // the data runs to the device's end
	b                 uint64 // boundary: new data is [0,b) forward, [b,size) backward
	crashed           bool
	hotOff, hotLen    uint64
	finishOnly        bool
	fwdShift          bool // decrypt forward with a moved first segment (datashift-checksum)
	movedDone         bool // fwdShift: the moved first segment is plaintext too
	reqVer            byte // the reencryption requirement's version (2, or 3 for fwdShift)
	key               []byte
	c                 *sector.Cipher
}

func (m *modal) wipe() {
	clear(m.key)
	if m.c != nil {
		m.c.Wipe()
	}
}

// seg builds a segment of the new (isNew) or old kind at logical offset
// off: crypt for the encrypted side, linear for the plaintext side.
func (m *modal) seg(isNew bool, off uint64, size *uint64, hot bool) *jval {
	var flags []string
	if hot {
		flags = []string{flagInReencrypt}
	}
	base := m.oldOff
	if isNew {
		base = m.dataOff
	}
	if isNew == (m.mode == "encrypt") {
		return segJSON(base+off, size, m.iv+off/512, m.cipher, m.ss, flags...)
	}
	return linSeg(base+off, size, flags...)
}

func (m *modal) tail(from uint64) *uint64 {
	if m.dynamic {
		return nil
	}
	return u64p(m.size - from)
}

// live lists the live segments for the boundary b with a hotzone [o,o+n)
// (n 0: none), as cryptsetup 2.6 builds them for the layout.
func (m *modal) live(o, n uint64) []*jval {
	var out []*jval
	switch {
	case m.fwdShift: // decrypt, forward, moved first segment
		moved := func() *jval { return segJSON(m.movedOff, u64p(m.movedLen), m.iv, m.cipher, m.ss) }
		switch {
		case n > 0 && o == 0:
			out = append(out, m.seg(true, 0, u64p(n), true), m.seg(true, n, nil, false))
		case n > 0:
			out = append(out, moved())
			if o > m.movedLen {
				out = append(out, m.seg(true, m.movedLen, u64p(o-m.movedLen), false))
			}
			out = append(out, m.seg(true, o, u64p(n), true))
			if o+n < m.size {
				out = append(out, m.seg(false, o+n, m.tail(o+n), false))
			}
		case m.movedDone:
			out = append(out, m.seg(true, 0, nil, false))
		default:
			out = append(out, moved())
			var sz *uint64
			if m.b < m.size {
				sz = u64p(m.b - m.movedLen)
			}
			if m.b > m.movedLen {
				out = append(out, m.seg(true, m.movedLen, sz, false))
			}
			if m.b < m.size {
				out = append(out, m.seg(false, m.b, m.tail(m.b), false))
			}
		}
	case m.moved != nil: // encrypt, backward, datashift
		lo := o
		if n == 0 {
			lo = m.b
		}
		if lo > 0 {
			out = append(out, linSeg(m.movedOff, u64p(m.movedLen)))
		}
		if lo > m.movedLen {
			out = append(out, linSeg(m.oldOff+m.movedLen, u64p(lo-m.movedLen)))
		}
		if n > 0 {
			out = append(out, m.seg(true, o, u64p(n), true))
			if o+n < m.size {
				out = append(out, m.seg(true, o+n, u64p(m.size-o-n), false))
			}
		} else if m.b == 0 {
			out = append(out, m.seg(true, 0, nil, false))
		} else {
			out = append(out, m.seg(true, m.b, u64p(m.size-m.b), false))
		}
	case m.dir == "forward":
		if n > 0 {
			if o > 0 {
				out = append(out, m.seg(true, 0, u64p(o), false))
			}
			out = append(out, m.seg(true, o, u64p(n), true))
			if o+n < m.size {
				out = append(out, m.seg(false, o+n, m.tail(o+n), false))
			}
		} else {
			var sz *uint64
			if m.b < m.size {
				sz = u64p(m.b)
			}
			out = append(out, m.seg(true, 0, sz, false))
			if m.b < m.size {
				out = append(out, m.seg(false, m.b, m.tail(m.b), false))
			}
		}
	default: // backward in place
		lo := o
		if n == 0 {
			lo = m.b
		}
		if lo > 0 {
			out = append(out, m.seg(false, 0, u64p(lo), false))
		}
		if n > 0 {
			out = append(out, m.seg(true, o, u64p(n), true))
			if o+n < m.size {
				out = append(out, m.seg(true, o+n, m.tail(o+n), false))
			}
		} else {
			out = append(out, m.seg(true, m.b, m.tail(m.b), false))
		}
	}
	return out
}

// root is h's metadata with the live segments for a hotzone [o,o+n) (n 0:
// the boundary m.b), the backups after them (previous, final, moved, as
// cryptsetup's steps append them) and the digest naming every crypt one.
func (h *Header) modalRoot(m *modal, o, n uint64) *jval {
	list := append(m.live(o, n), m.prev.clone(), m.fin.clone())
	if m.moved != nil {
		list = append(list, m.moved.clone())
	}
	return h.rootWithSegments(list, m.dig)
}

// rootWithSegments is h's metadata with segments numbered from 0 in list
// order and digest dig naming every crypt one (the only key of an encrypt
// or decrypt).
func (h *Header) rootWithSegments(list []*jval, dig int) *jval {
	root := h.md.root.clone()
	segs := jobj()
	var cryptIDs []string
	for i, s := range list {
		id := strconv.Itoa(i)
		segs.obj = append(segs.obj, jmember{id, s})
		if jsGet(s, "type") == "crypt" {
			cryptIDs = append(cryptIDs, id)
		}
	}
	root.set("segments", segs)
	dgs := root.get("digests")
	d := dgs.get(strconv.Itoa(dig))
	d.set("segments", jarrStr(cryptIDs...))
	d.raw = nil
	dgs.raw = nil
	return root
}

// reencMode is the stored reencryption mode ("" when none).
func (h *Header) reencMode() string {
	if st := h.ReencryptionStatus(); st != nil {
		return st.Mode
	}
	return ""
}

// loadModal reads a stored encryption or decryption and unlocks its key.
func (h *Header) loadModal(ctx context.Context, dev, data Device, passphrase []byte, slot int) (*modal, error) {
	m := &modal{ks: h.reencKeyslot()}
	ks := h.md.root.get("keyslots").get(strconv.Itoa(m.ks))
	area := ks.get("area")
	m.mode, m.dir, m.res = jsGet(ks, "mode"), jsGet(ks, "direction"), jsGet(area, "type")
	k := h.md.keyslots[m.ks]
	m.areaOff, m.areaSize = k.AreaOffset, k.AreaSize
	m.digReenc = k.Digest
	switch m.res {
	case "checksum":
		var err error
		if m.hash, m.block, err = checksumParams(area); err != nil {
			return nil, err
		}
	case "journal", "none":
	case "datashift", "datashift-checksum":
		v, err := strconv.ParseUint(jsGet(area, "shift_size"), 10, 64)
		if err != nil || v == 0 || v%512 != 0 {
			return nil, fmt.Errorf("%w: %s without a valid shift_size", ErrCorruptHeader, m.res)
		}
		m.shift = v
		if m.res == "datashift-checksum" {
			if m.hash, m.block, err = checksumParams(area); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("%w: %s with resilience %q (cryptsetup's decryption of a volume with its header on the data device) is not supported yet", ErrUnsupported, m.mode, m.res)
	}
	pid, prev := h.segmentByFlag(flagPrevious)
	fid, fin := h.segmentByFlag(flagFinal)
	mid, moved := h.segmentByFlag(flagMoved)
	if prev == nil || fin == nil {
		return nil, fmt.Errorf("%w: reencryption without backup segments", ErrCorruptHeader)
	}
	m.prev, m.fin, m.moved = prev, fin, moved
	ps, fs := h.md.segments[pid], h.md.segments[fid]
	layout := fmt.Sprintf("%s/%s/%s/%v", m.mode, m.dir, m.res, moved != nil)
	switch layout {
	case "encrypt/forward/checksum/false", "encrypt/forward/journal/false", "encrypt/forward/none/false",
		"decrypt/backward/checksum/false", "decrypt/backward/journal/false", "decrypt/backward/none/false",
		"encrypt/backward/datashift/true":
	case "decrypt/forward/datashift-checksum/true":
		m.fwdShift = true
	default:
		return nil, fmt.Errorf("%w: %s %s with resilience %s (moved segment: %v) is not supported", ErrUnsupported, m.mode, m.dir, m.res, moved != nil)
	}
	crypt, plain := fs, ps
	m.dig = h.digestOfSegment(fid)
	if m.mode == "decrypt" {
		crypt, plain = ps, fs
		m.dig = h.digestOfSegment(pid)
	}
	if crypt.Type != "crypt" || plain.Type != "linear" {
		return nil, fmt.Errorf("%w: %s with backup segments of type %q and %q", ErrCorruptHeader, m.mode, ps.Type, fs.Type)
	}
	if m.dig < 0 {
		return nil, fmt.Errorf("%w: the encrypted backup segment has no digest", ErrCorruptHeader)
	}
	m.cipher, m.ss, m.iv = crypt.Encryption, crypt.SectorSize, crypt.IVTweak
	m.dataOff, m.oldOff = fs.Offset, ps.Offset
	devSize, err := data.Size()
	if err != nil {
		return nil, err
	}
	m.reqVer = reencDigestVer
	if contains1(h.Requirements(), "online-reencrypt-v3") {
		m.reqVer = 3
	}
	if m.fwdShift {
		ms := h.md.segments[mid]
		if ms.Type != "crypt" || ms.Dynamic || ms.Offset != 0 || ms.Size == 0 || ms.Size > m.shift || fs.Offset != 0 || ps.Offset != m.shift || m.reqVer != 3 {
			return nil, fmt.Errorf("%w: a decryption data shift layout blkcrypt does not know (previous at %d, final at %d, moved %d bytes at %d, shift %d)", ErrUnsupported, ps.Offset, fs.Offset, ms.Size, ms.Offset, m.shift)
		}
		m.movedOff, m.movedLen = ms.Offset, ms.Size
		if uint64(devSize) <= ps.Offset+ms.Size {
			return nil, fmt.Errorf("%w: no data area after offset %d", ErrDeviceTooSmall, ps.Offset)
		}
		m.dynamic = ps.Dynamic
		m.size = uint64(devSize) - ps.Offset
		if !ps.Dynamic {
			m.size = ps.Size
		}
	} else if moved != nil {
		ms := h.md.segments[mid]
		if ms.Type != "linear" || ms.Dynamic || ps.Dynamic || ps.Offset != 0 || fs.Offset != m.shift || ms.Size != m.shift {
			return nil, fmt.Errorf("%w: a data shift layout blkcrypt does not know (previous at %d, final at %d, moved %d bytes, shift %d)", ErrUnsupported, ps.Offset, fs.Offset, ms.Size, m.shift)
		}
		m.movedOff, m.movedLen = ms.Offset, ms.Size
		m.size = ps.Size
		if m.size < m.shift || m.movedOff+m.movedLen > uint64(devSize) || m.shift+m.size > m.movedOff {
			return nil, fmt.Errorf("%w: the data shift layout does not fit the %d-byte device", ErrCorruptHeader, devSize)
		}
	} else {
		if fs.Offset != ps.Offset {
			return nil, fmt.Errorf("%w: an %s that moves data without a moved segment", ErrUnsupported, m.mode)
		}
		if uint64(devSize) <= m.oldOff {
			return nil, fmt.Errorf("%w: no data area after offset %d", ErrDeviceTooSmall, m.oldOff)
		}
		m.dynamic = ps.Dynamic
		m.size = uint64(devSize) - m.oldOff
		if !ps.Dynamic {
			m.size = ps.Size
		}
	}
	m.size -= m.size % uint64(m.ss)

	// Where are we: a hotzone in reencryption, or the boundary.
	var pos uint64
	oldType := "linear"
	if m.mode == "decrypt" {
		oldType = "crypt"
	}
	oldEnd, oldSeen := uint64(0), false
	firstOld, firstLater := m.size, m.size
	movedPending := false
	ids := h.segmentIDs()
	for _, id := range ids {
		s := h.md.segments[id]
		if isBackupFlags(s.Flags) {
			continue
		}
		n := s.Size
		if s.Dynamic {
			n = m.size - min(pos, m.size)
		}
		switch {
		case contains1(s.Flags, flagInReencrypt):
			m.crashed, m.hotOff, m.hotLen = true, pos, n
		case s.Type == oldType:
			if !oldSeen {
				firstOld = pos
			}
			if pos == 0 {
				movedPending = true
			} else if firstLater == m.size {
				firstLater = pos
			}
			oldSeen, oldEnd = true, pos+n
		}
		pos += n
	}
	switch {
	case m.fwdShift:
		// [moved part, old][plaintext][old after the shift]: the boundary
		// is where the old data after the plaintext starts.
		m.b = firstLater
		m.movedDone = !movedPending && !(m.crashed && m.hotOff == 0)
		if m.crashed && m.hotOff > 0 {
			m.b = m.hotOff
		}
	case m.dir == "forward":
		m.b = firstOld
		if m.crashed {
			m.b = m.hotOff
		}
	default:
		m.b = oldEnd
		if m.crashed {
			m.b = m.hotOff + m.hotLen
		}
	}
	if m.crashed && (m.hotLen == 0 || m.hotOff+m.hotLen > m.size) {
		return nil, fmt.Errorf("%w: in-reencryption segment outside the data area", ErrCorruptHeader)
	}
	done := m.finished()
	// cryptsetup's own decryption finish removes the keyslots before the
	// rest (one commit each): after a cut there, only metadata is left.
	if m.mode == "decrypt" && done && !m.crashed && len(h.md.digests[m.dig].Keyslots) == 0 {
		m.finishOnly = true
		return m, nil
	}
	var lastErr error = ErrWrongPassphrase
	for _, id := range h.byPriorityAll(slot) {
		ksl := h.md.keyslots[id]
		if ksl.Type != "luks2" || ksl.Digest != m.dig {
			continue
		}
		key, err := h.openKeyslot(ctx, dev, ksl, passphrase)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !errors.Is(err, ErrWrongPassphrase) {
				lastErr = err
			}
			continue
		}
		m.key = key
		break
	}
	if m.key == nil {
		return nil, lastErr
	}
	var oldKey, newKey []byte = nil, m.key
	if m.mode == "decrypt" {
		oldKey, newKey = m.key, nil
	}
	if err := h.checkReencDigest(m.reqVer, m.digReenc, oldKey, newKey, ks, prev, fin, moved); err != nil {
		m.wipe()
		return nil, err
	}
	if m.c, err = sector.New(m.cipher, m.key, sector.Options{SectorSize: m.ss, IVOffset: m.iv}); err != nil {
		m.wipe()
		return nil, fmt.Errorf("%w: cipher: %w", ErrUnsupported, err)
	}
	return m, nil
}

// checkReencDigest checks the reencryption digest digReenc against the
// keys and the stored parameters (cryptsetup's check before any resume).
func (h *Header) checkReencDigest(ver byte, digReenc int, oldKey, newKey []byte, ks, prev, fin, moved *jval) error {
	vd, err := verificationData(oldKey, newKey, ks, prev, fin, moved)
	if err != nil {
		return err
	}
	defer clear(vd)
	vd[1] = 0x30 + ver // cryptsetup's digest covers the requirement version
	d := h.md.digests[digReenc]
	if d == nil {
		return fmt.Errorf("%w: the reencryption digest is missing (repair it with cryptsetup reencrypt --repair)", ErrCorruptHeader)
	}
	if ok, err := digestOK(d, vd); err != nil || !ok {
		return fmt.Errorf("%w: reencryption metadata is invalid (its digest does not match)", ErrCorruptHeader)
	}
	return nil
}

// checksumParams reads the hash and block size of a checksum area.
func checksumParams(area *jval) (string, int, error) {
	hash, block := jsGet(area, "hash"), 0
	if _, err := hashByName(hash); err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if v := area.get("sector_size"); v != nil && v.kind == jNum {
		block = int(v.getInt64())
	}
	if block < 512 || block > 4096 || block&(block-1) != 0 {
		return "", 0, fmt.Errorf("%w: checksum block size %d", ErrUnsupported, block)
	}
	return hash, block, nil
}

// segmentIDs lists the segment ids in ascending order.
func (h *Header) segmentIDs() []int {
	var ids []int
	for id := range h.md.segments {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// resumeModal checks the resume options and runs a loaded encryption or
// decryption to its end (or to a stop).
func (h *Header) resumeModal(ctx context.Context, dev, data Device, passphrase []byte, o modalOpts) error {
	st := h.ReencryptionStatus()
	if o.resilience != "" && o.resilience != st.Resilience {
		return fmt.Errorf("%w: %w: it uses resilience %q, not %q", ErrInvalidOptions, ErrReencryptInProgress, st.Resilience, o.resilience)
	}
	if o.hash != "" && st.Resilience == "checksum" && o.hash != st.Hash {
		return fmt.Errorf("%w: %w: it uses checksum hash %q, not %q", ErrInvalidOptions, ErrReencryptInProgress, st.Hash, o.hash)
	}
	m, err := h.loadModal(ctx, dev, data, passphrase, o.slot)
	if err != nil {
		return err
	}
	defer m.wipe()
	return h.modalRun(ctx, dev, data, m, o)
}

// next is the hotzone after boundary m.b.
func (m *modal) next(hz uint64) (uint64, uint64) {
	switch {
	case m.fwdShift:
		if m.b < m.size {
			return m.b, min(m.shift, m.size-m.b)
		}
		return 0, m.movedLen
	case m.moved != nil:
		s := m.shift
		switch {
		case m.b >= 2*s:
			return m.b - s, s
		case m.b > s:
			return s, m.b - s
		default:
			return 0, m.b
		}
	case m.dir == "forward":
		return m.b, min(hz, m.size-m.b)
	default:
		n := min(hz, m.b)
		return m.b - n, n
	}
}

func (m *modal) hotzoneMax(hz uint64) uint64 {
	if hz == 0 {
		hz = defaultHotzone
	}
	align := uint64(m.ss)
	switch m.res {
	case "checksum":
		hf, _ := hashByName(m.hash)
		hz = min(hz, m.areaSize/uint64(hf().Size())*uint64(m.block))
		align = max(align, uint64(m.block))
	case "journal":
		hz = min(hz, m.areaSize)
	}
	return hz - hz%align
}

// src is where the old data of logical offset off is.
func (m *modal) src(off uint64) uint64 {
	if m.moved != nil && off < m.movedLen {
		return m.movedOff + off
	}
	return m.oldOff + off
}

// transform turns old data of logical offset off into new, in place.
func (m *modal) transform(b []byte, off uint64) error {
	if m.mode == "encrypt" {
		return m.c.EncryptSectors(b, b, off/512)
	}
	return m.c.DecryptSectors(b, b, off/512)
}

// protection is the resilience data kept for the hotzone at off: none
// for a data shift (its source stays intact), checksums for the moved
// first segment of a datashift-checksum decryption (done in place).
func (m *modal) protection(off uint64) string {
	switch m.res {
	case "datashift":
		return ""
	case "datashift-checksum":
		if off == 0 {
			return "checksum"
		}
		return ""
	}
	return m.res
}

// protect writes the hotzone's resilience data (synced).
func (m *modal) protect(dev Device, raw []byte, off uint64) error {
	r := reenc{resilience: m.protection(off), hash: m.hash, block: m.block, areaOff: m.areaOff}
	return r.protect(dev, raw)
}

// recoverHotzone finishes a crashed hotzone from its resilience data.
func (m *modal) recoverHotzone(dev, data Device) error {
	if res := m.protection(m.hotOff); res != "" {
		return recoverInPlace(dev, data, res, m.hash, m.block, m.areaOff, m.areaSize, int64(m.dataOff+m.hotOff), m.hotOff, m.hotLen, m.transform)
	}
	buf := make([]byte, m.hotLen)
	defer clear(buf)
	if _, err := readFull(data, buf, int64(m.src(m.hotOff))); err != nil {
		return fmt.Errorf("reading the hotzone: %w", err)
	}
	if err := m.transform(buf, m.hotOff); err != nil {
		return err
	}
	if _, err := data.WriteAt(buf, int64(m.dataOff+m.hotOff)); err != nil {
		return fmt.Errorf("recovering the hotzone: %w", err)
	}
	return data.Sync()
}

// recoverInPlace finishes a crashed in-place hotzone of n bytes at
// physical offset off (logical lo) from its checksums (a block still
// matching the old data's checksum is redone) or its journal (all of it
// redone from the old data), then syncs. fix turns old data of logical
// offset x into new, in place.
func recoverInPlace(dev, data Device, res, hash string, block int, areaOff, areaSize uint64, off int64, lo, n uint64, fix func(b []byte, x uint64) error) error {
	buf := make([]byte, n)
	defer clear(buf)
	switch res {
	case "checksum":
		hf, _ := hashByName(hash)
		hs := hf().Size()
		count := int(n) / block
		if uint64(count*hs) > areaSize {
			return fmt.Errorf("%w: hotzone too large for the checksum area", ErrCorruptHeader)
		}
		sums := make([]byte, count*hs)
		if _, err := dev.ReadAt(sums, int64(areaOff)); err != nil {
			return fmt.Errorf("reading reencryption checksums: %w", err)
		}
		if _, err := readFull(data, buf, off); err != nil {
			return fmt.Errorf("reading the hotzone: %w", err)
		}
		for i := 0; i < count; i++ {
			blk := buf[i*block : (i+1)*block]
			hh := hf()
			hh.Write(blk)
			if !luksutil.ConstantTimeEqual(hh.Sum(nil), sums[i*hs:(i+1)*hs]) {
				continue // already new
			}
			if err := fix(blk, lo+uint64(i*block)); err != nil {
				return err
			}
			if _, err := data.WriteAt(blk, off+int64(i*block)); err != nil {
				return fmt.Errorf("recovering the hotzone: %w", err)
			}
		}
	case "journal":
		if n > areaSize {
			return fmt.Errorf("%w: hotzone larger than the journal", ErrCorruptHeader)
		}
		if _, err := readFull(dev, buf, int64(areaOff)); err != nil {
			return fmt.Errorf("reading the reencryption journal: %w", err)
		}
		if err := fix(buf, lo); err != nil {
			return err
		}
		if _, err := data.WriteAt(buf, off); err != nil {
			return fmt.Errorf("recovering the hotzone: %w", err)
		}
	default:
		return fmt.Errorf("%w: an interrupted hotzone with resilience %q cannot be recovered", ErrUnsupported, res)
	}
	return data.Sync()
}

// advance moves the boundary past a finished hotzone [off, off+n).
func (m *modal) advance(off, n uint64) {
	switch {
	case m.fwdShift && off == 0:
		m.movedDone = true
	case m.dir == "forward":
		m.b = off + n
	default:
		m.b = off
	}
}

// progress is the bytes done so far.
func (m *modal) progress() uint64 {
	if m.fwdShift {
		done := m.b - m.movedLen
		if m.movedDone {
			done += m.movedLen
		}
		return done
	}
	if m.dir == "forward" {
		return m.b
	}
	return m.size - m.b
}

func (m *modal) finished() bool {
	if m.fwdShift {
		return m.movedDone
	}
	if m.dir == "forward" {
		return m.b >= m.size
	}
	return m.b == 0
}

// modalRun runs the hotzones: for checksum and journal, resilience data
// (synced), metadata naming the hotzone, the new data (synced), metadata
// moving the boundary; for datashift the same without resilience data;
// for none only the data, with metadata at a stop or the end.
func (h *Header) modalRun(ctx context.Context, dev, data Device, m *modal, o modalOpts) error {
	if m.finishOnly {
		return h.modalFinish(dev, data, m)
	}
	if m.crashed {
		if err := m.recoverHotzone(dev, data); err != nil {
			return err
		}
		m.advance(m.hotOff, m.hotLen)
		if err := h.commit(dev, h.modalRoot(m, 0, 0)); err != nil {
			return err
		}
		m.crashed = false
	}
	hz := m.hotzoneMax(o.hotzone)
	if hz == 0 && m.moved == nil {
		return fmt.Errorf("%w: no room for a hotzone", ErrNoFreeSlot)
	}
	none := m.res == "none"
	steps := 0
	// A reader goroutine fetches the next hotzone while this one is
	// written. In every layout the sources still to come are disjoint from
	// the destinations of the hotzones before them (in place: each hotzone
	// its own range; shifted: the destinations move away from the sources
	// by the shift, and the moved copy is read last and written nowhere),
	// so what it reads is what the run would read then.
	next := make(chan chunk, 1)
	stop := make(chan struct{})
	defer func() {
		close(stop)
		for c := range next {
			clear(c.raw)
		}
	}()
	go m.readAhead(data, m.plan(hz), next, stop)
	for !m.finished() {
		stopped := ctx.Err()
		if stopped == nil && o.stopAfter > 0 && steps >= o.stopAfter {
			stopped = errStopAfter
		}
		if stopped != nil {
			if none && steps > 0 {
				if err := data.Sync(); err != nil {
					return err
				}
				if err := h.commit(dev, h.modalRoot(m, 0, 0)); err != nil {
					return err
				}
			}
			if stopped == errStopAfter {
				return nil
			}
			return stopped
		}
		off, n := m.next(hz)
		c, ok := <-next
		if !ok || c.off != off || uint64(len(c.raw)) != n {
			return fmt.Errorf("internal error: hotzone reader out of step")
		}
		raw := c.raw
		if c.err != nil {
			clear(raw)
			return fmt.Errorf("reading the hotzone at %d: %w", m.src(off), c.err)
		}
		err := h.modalStep(dev, data, m, raw, off, n, none)
		clear(raw)
		if err != nil {
			return err
		}
		steps++
		if o.progress != nil {
			o.progress(m.progress(), m.size)
		}
	}
	if err := data.Sync(); err != nil {
		return err
	}
	return h.modalFinish(dev, data, m)
}

// plan lists the hotzones left from the boundary.
func (m *modal) plan(hz uint64) [][2]uint64 {
	c := *m
	var out [][2]uint64
	for !c.finished() {
		off, n := c.next(hz)
		out = append(out, [2]uint64{off, n})
		c.advance(off, n)
	}
	return out
}

// chunk is one hotzone of an --encrypt/--decrypt run read ahead of its turn.
type chunk struct {
	off uint64
	raw []byte
	err error
}

// readAhead reads each planned hotzone's old data into a new buffer and
// sends it on next, in order, until the plan ends, a read fails or stop
// closes; it closes next when done.
func (m *modal) readAhead(data Device, plan [][2]uint64, next chan<- chunk, stop <-chan struct{}) {
	defer close(next)
	for _, p := range plan {
		select {
		case <-stop:
			return
		default:
		}
		b := make([]byte, p[1])
		_, err := readFull(data, b, int64(m.src(p[0])))
		select {
		case next <- chunk{p[0], b, err}:
		case <-stop:
			clear(b)
			return
		}
		if err != nil {
			return
		}
	}
}

// modalStep does one hotzone whose old data is raw: resilience data and
// the metadata naming it (not for none), the new data (synced, not for
// none), and the metadata moving the boundary (when not the last).
func (h *Header) modalStep(dev, data Device, m *modal, raw []byte, off, n uint64, none bool) error {
	if !none {
		if m.protection(off) != "" {
			if err := m.protect(dev, raw, off); err != nil {
				return fmt.Errorf("writing reencryption resilience data: %w", err)
			}
		}
		if err := h.commit(dev, h.modalRoot(m, off, n)); err != nil {
			return err
		}
	}
	if err := m.transform(raw, off); err != nil {
		return err
	}
	if _, err := data.WriteAt(raw, int64(m.dataOff+off)); err != nil {
		return fmt.Errorf("writing the hotzone at %d: %w", m.dataOff+off, err)
	}
	m.advance(off, n)
	if !none {
		if err := data.Sync(); err != nil {
			return err
		}
		if !m.finished() {
			if err := h.commit(dev, h.modalRoot(m, 0, 0)); err != nil {
				return err
			}
		}
	}
	return nil
}

// modalFinish drops the reencryption metadata in one commit (for
// decryption also the keyslots and digests: the header then describes
// plaintext), then overwrites the moved plaintext copy with random data
// and wipes the dropped keyslot areas.
//
// The last hotzone of a data shift is not committed as done: until this
// commit its metadata names it in reencryption, with the moved copy as its
// source, which either tool recovers (cryptsetup 2.6.1 cannot resume the
// state after a committed last hotzone, its own included). So the copy is
// wiped only after the commit; a cut in between leaves it on the device.
func (h *Header) modalFinish(dev, data Device, m *modal) error {
	root := h.md.root.clone()
	segs := jobj()
	fin := m.fin.clone()
	fin.del("flags")
	segs.obj = append(segs.obj, jmember{"0", fin})
	root.set("segments", segs)
	var wipe [][2]uint64
	ksObj := root.get("keyslots")
	for id, k := range h.md.keyslots {
		if id == m.ks || (m.mode == "decrypt" && k.Digest == m.dig) {
			sid := strconv.Itoa(id)
			ksObj.del(sid)
			dropKeyslotRefs(root, sid)
			wipe = append(wipe, [2]uint64{k.AreaOffset, k.AreaSize})
		}
	}
	dgs := root.get("digests")
	dgs.del(strconv.Itoa(m.digReenc))
	if m.mode == "decrypt" {
		dgs.del(strconv.Itoa(m.dig))
	} else {
		d := dgs.get(strconv.Itoa(m.dig))
		d.set("segments", jarrStr("0"))
		d.raw = nil
	}
	dgs.raw = nil
	setRequirement(root, false)
	dropRequirement(root, "online-reencrypt-v3")
	if err := h.commit(dev, root); err != nil {
		return err
	}
	if m.fwdShift {
		// The last shift bytes held old ciphertext; cryptsetup overwrites
		// them with random data too.
		devSize, err := data.Size()
		if err != nil {
			return err
		}
		if err := randomFill(data, uint64(devSize)-m.shift, m.shift); err != nil {
			return fmt.Errorf("wiping the end of the device: %w", err)
		}
	}
	if m.moved != nil && m.mode == "encrypt" {
		if err := randomFill(data, m.movedOff, m.movedLen); err != nil {
			return fmt.Errorf("wiping the moved plaintext copy: %w", err)
		}
	}
	for _, w := range wipe {
		if w[1] > 0 && w[1] <= MaxKeyslotsSize {
			if err := luksutil.WipeArea(dev, int64(w[0]), int(w[1])); err != nil {
				return fmt.Errorf("wiping a keyslot area: %w", err)
			}
		}
	}
	return nil
}

// randomFill overwrites n bytes at off with random data, then syncs.
func randomFill(dev Device, off, n uint64) error {
	buf := make([]byte, min(n, 1<<20))
	for done := uint64(0); done < n; {
		b := buf[:min(uint64(len(buf)), n-done)]
		if err := luksutil.Random(b); err != nil {
			return err
		}
		if _, err := dev.WriteAt(b, int64(off+done)); err != nil {
			return err
		}
		done += uint64(len(b))
	}
	return dev.Sync()
}

// dropRequirement removes name from the mandatory requirements.
func dropRequirement(root *jval, name string) {
	cfg := root.get("config")
	req := cfg.get("requirements")
	if req == nil {
		return
	}
	m := req.get("mandatory")
	if m == nil || m.kind != jArr {
		return
	}
	var keep []string
	for _, e := range m.arr {
		if e.kind == jStr && e.s != name {
			keep = append(keep, e.s)
		}
	}
	if len(keep) == len(m.arr) {
		return
	}
	cfg.raw, req.raw = nil, nil
	if len(keep) == 0 {
		req.del("mandatory")
		if len(req.obj) == 0 {
			cfg.del("requirements")
		}
		return
	}
	req.set("mandatory", jarrStr(keep...))
}
