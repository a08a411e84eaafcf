package tcrypt

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Read reads the header sector Options choose from dev (size bytes) and
// searches it. For a hidden volume the TrueCrypt 6+ location (64 KiB) is
// tried first, then the pre-6.0 one (1536 bytes before the end), as
// cryptsetup does. For a system volume dev must be the whole drive (the
// header is in sector 62).
func Read(dev io.ReaderAt, size int64, o *Options) (*Header, error) {
	var locs []int64
	switch {
	case o.System:
		locs = []int64{SystemOffset}
	case o.Hidden && o.Backup:
		locs = []int64{size + HiddenBackupOffset}
	case o.Hidden:
		locs = []int64{HiddenOffset, size + HiddenOffsetOld}
	case o.Backup:
		locs = []int64{size + BackupOffset}
	default:
		locs = []int64{0}
	}
	var err error
	for _, off := range locs {
		var h *Header
		h, err = readAt(dev, size, off, o)
		if err == nil {
			return h, nil
		}
		var re *readError
		if !errors.As(err, &re) && !errors.Is(err, ErrNoHeader) && !errors.Is(err, ErrCorruptHeader) {
			return nil, err // bad options: no point in the other location
		}
	}
	return nil, err
}

type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func readAt(dev io.ReaderAt, size, off int64, o *Options) (*Header, error) {
	if off < 0 || off+SectorLen > size {
		return nil, &readError{fmt.Errorf("%w: device of %d bytes has no header sector at %d", ErrInvalid, size, off)}
	}
	buf := make([]byte, SectorLen)
	if n, err := dev.ReadAt(buf, off); n < SectorLen {
		return nil, &readError{fmt.Errorf("cannot read TCRYPT header at %d: %w", off, err)}
	}
	h, err := Search(buf, o)
	if err != nil {
		return nil, err
	}
	h.Offset = off
	h.Hidden, h.System, h.Backup = o.Hidden, o.System, o.Backup
	return h, nil
}

// VolumeKey is the key cryptsetup reports (--dump-volume-key): the dm-crypt
// key of every cipher of the chain, first to last. The caller should clear
// it.
func (h *Header) VolumeKey() []byte {
	var k []byte
	for i := range h.Chain.algs {
		dk := h.Chain.algs[i].dmKey(h.Chain.Mode, h.Keys[:])
		k = append(k, dk...)
		clear(dk)
	}
	return k
}

// DataOffset is where the encrypted data starts on the device the header
// was read from, in 512-byte sectors (cryptsetup's TCRYPT_get_data_offset).
// devSize is that device's size in bytes; old hidden volumes are placed
// from its end.
func (h *Header) DataOffset(devSize int64) uint64 {
	hiddenOld := func() uint64 {
		n := devSize - int64(h.HiddenVolumeSize) + HiddenOffsetOld
		if n < 0 {
			return 0
		}
		return uint64(n) / 512
	}
	switch {
	case h.System:
	case strings.HasPrefix(h.Chain.Mode, "xts"):
		if h.Version < 3 {
			return 1
		}
		if h.Hidden {
			if h.Version > 3 {
				return h.MKOffset / 512
			}
			return hiddenOld()
		}
	case h.Hidden:
		return hiddenOld()
	}
	return h.MKOffset / 512
}

// IVOffset is the dm-crypt IV offset in 512-byte sectors: the data offset
// for XTS, 0 for LRW, the master-key offset for CBC.
func (h *Header) IVOffset(devSize int64) uint64 {
	switch {
	case strings.HasPrefix(h.Chain.Mode, "xts"):
		return h.DataOffset(devSize)
	case strings.HasPrefix(h.Chain.Mode, "lrw"):
		return 0
	}
	return h.MKOffset / 512
}

// Layer is one dm-crypt target of a mapping.
type Layer struct {
	Spec string // e.g. "serpent-xts-plain64"
	Key  []byte
}

// Mapping is what cryptsetup's TCRYPT_activate would load into dm-crypt:
// one crypt target per cipher, stacked. Layers[0] sits on the device and
// uses the last cipher of the chain; each following layer sits on the one
// before it (offset 0) and every layer uses the same IV offset.
type Mapping struct {
	Layers   []Layer
	Offset   uint64 // data start on the data device, 512-byte sectors
	IVOffset uint64 // 512-byte sectors
	Size     uint64 // 512-byte sectors
	// Note explains a system-volume guess, as cryptsetup prints it.
	Note string
}

// Wipe clears the layer keys.
func (m *Mapping) Wipe() {
	for _, l := range m.Layers {
		clear(l.Key)
	}
}

// Geometry describes the devices a mapping is made for.
type Geometry struct {
	// HeaderDeviceSize and DataDeviceSize are in bytes; they differ when
	// the header was read from another device (--header).
	HeaderDeviceSize, DataDeviceSize int64
	// Separate means the header was read from another device than the
	// data device.
	Separate bool
	// PartitionOffset is, for a system volume, the start of the encrypted
	// partition in 512-byte sectors when the data device (or, with a
	// separate header, the header device) is known to be that partition;
	// -1 when unknown.
	PartitionOffset int64
}

// LegacyModeError is returned for chains dm-crypt cannot map (TrueCrypt
// 1.x-4.0 cascades with an outer CBC and Blowfish). cryptsetup refuses
// them the same way.
type LegacyModeError struct{ Chain, Mode string }

func (e *LegacyModeError) Error() string {
	return fmt.Sprintf("activation is not supported for this TCRYPT legacy mode (%s-%s): dm-crypt has no such mode", e.Chain, e.Mode)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *LegacyModeError) Is(target error) bool { return target == ErrUnsupported }

// Mapping computes the stacked dm-crypt mapping for the data, as
// cryptsetup's TCRYPT_activate does.
func (h *Header) Mapping(g Geometry) (*Mapping, error) {
	if h.SectorSize%512 != 0 {
		return nil, fmt.Errorf("%w: activation is not supported for %d sector size", ErrUnsupported, h.SectorSize)
	}
	if strings.HasSuffix(h.Chain.Mode, "-tcrypt") {
		return nil, &LegacyModeError{h.Chain.Name, h.Chain.Mode}
	}
	m := &Mapping{
		Offset:   h.DataOffset(g.HeaderDeviceSize),
		IVOffset: h.IVOffset(g.HeaderDeviceSize),
	}
	switch {
	case h.System:
		m.Size = 0
	case h.Hidden:
		m.Size = h.HiddenVolumeSize / 512
	default:
		m.Size = h.VolumeSize / 512
	}
	if h.System {
		switch {
		case g.PartitionOffset >= 0:
			m.Offset, m.IVOffset = 0, uint64(g.PartitionOffset)
		case !g.Separate:
			m.Size = h.VolumeSize / 512
			m.Note = "cannot determine TCRYPT system partition offset, activating whole encrypted area"
		default:
			m.Offset = 0
			m.Note = "cannot determine TCRYPT system partition offset, activating device as a system partition"
		}
	}
	devSectors := uint64(max(g.DataDeviceSize, 0)) / 512
	if m.Offset > devSectors {
		return nil, fmt.Errorf("%w: data offset %d is beyond the end of the %d-sector device", ErrInvalid, m.Offset, devSectors)
	}
	if m.Size == 0 {
		m.Size = devSectors - m.Offset
	}
	if m.Offset+m.Size > devSectors {
		return nil, fmt.Errorf("%w: device is too small: %d sectors at offset %d need %d, it has %d", ErrInvalid, m.Size, m.Offset, m.Offset+m.Size, devSectors)
	}
	if m.Size == 0 {
		return nil, fmt.Errorf("%w: empty volume", ErrInvalid)
	}
	for i := len(h.Chain.algs) - 1; i >= 0; i-- {
		a := &h.Chain.algs[i]
		m.Layers = append(m.Layers, Layer{Spec: a.name + "-" + h.Chain.Mode, Key: a.dmKey(h.Chain.Mode, h.Keys[:])})
	}
	return m, nil
}

// Ciphers makes the sector ciphers of the layers, bottom first.
func (m *Mapping) Ciphers() ([]*sector.Cipher, error) {
	var cs []*sector.Cipher
	for _, l := range m.Layers {
		c, err := sector.New(l.Spec, l.Key, sector.Options{SectorSize: 512, IVOffset: m.IVOffset})
		if err != nil {
			for _, c := range cs {
				c.Wipe()
			}
			return nil, fmt.Errorf("%w: cannot map %s: %w", ErrUnsupported, l.Spec, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// Cascade applies several sector ciphers to the same sectors: decryption
// runs Layers[0] first (the one on the device), encryption the reverse,
// exactly as stacked dm-crypt devices do.
type Cascade struct{ Layers []*sector.Cipher }

// DecryptSectors decrypts src into dst through every layer.
func (c *Cascade) DecryptSectors(dst, src []byte, firstSector uint64) error {
	for i, l := range c.Layers {
		in := dst
		if i == 0 {
			in = src
		}
		if err := l.DecryptSectors(dst, in[:len(src)], firstSector); err != nil {
			return err
		}
	}
	return nil
}

// EncryptSectors is the inverse of DecryptSectors.
func (c *Cascade) EncryptSectors(dst, src []byte, firstSector uint64) error {
	for i := len(c.Layers) - 1; i >= 0; i-- {
		in := dst
		if i == len(c.Layers)-1 {
			in = src
		}
		if err := c.Layers[i].EncryptSectors(dst, in[:len(src)], firstSector); err != nil {
			return err
		}
	}
	return nil
}

// Wipe wipes every layer.
func (c *Cascade) Wipe() {
	for _, l := range c.Layers {
		l.Wipe()
	}
}

// volumeDevice lets a Volume be the device of the next layer up.
type volumeDevice struct{ *blkcrypt.Volume }

func (v volumeDevice) Sync() error { return v.Flush() }

// NewVolume stacks one blkcrypt.Volume per layer of m over data, as
// dm-crypt stacks the devices cryptsetup creates, and returns the top one.
// Closing it closes the layers below and data.
func NewVolume(data blkcrypt.Device, m *Mapping, readOnly bool) (*blkcrypt.Volume, error) {
	cs, err := m.Ciphers()
	if err != nil {
		return nil, err
	}
	var dev blkcrypt.Device = data
	off := int64(m.Offset) * 512
	var top *blkcrypt.Volume
	for i, c := range cs {
		v, err := blkcrypt.NewVolume(dev, c, off, int64(m.Size)*512, readOnly)
		if err != nil {
			for _, c := range cs[i:] {
				c.Wipe()
			}
			if top != nil {
				top.Close()
			}
			return nil, err
		}
		top = v
		dev = volumeDevice{v}
		off = 0
	}
	return top, nil
}

// Open reads the header of a TrueCrypt or VeraCrypt volume on data (size
// bytes) and returns the decrypted view with the header. With hdr non-nil
// the header is read from there (hdrSize bytes), as with --header.
func Open(data blkcrypt.Device, size int64, hdr io.ReaderAt, hdrSize int64, o *Options, partitionOffset int64, readOnly bool) (*blkcrypt.Volume, *Header, error) {
	g := Geometry{HeaderDeviceSize: size, DataDeviceSize: size, PartitionOffset: partitionOffset}
	src := io.ReaderAt(data)
	if hdr != nil {
		src, g.HeaderDeviceSize, g.Separate = hdr, hdrSize, true
	}
	h, err := Read(src, g.HeaderDeviceSize, o)
	if err != nil {
		return nil, nil, err
	}
	m, err := h.Mapping(g)
	if err != nil {
		h.Wipe()
		return nil, nil, err
	}
	defer m.Wipe()
	v, err := NewVolume(data, m, readOnly)
	if err != nil {
		h.Wipe()
		return nil, nil, err
	}
	return v, h, nil
}
