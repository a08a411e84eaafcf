package tcrypt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/volspec"
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
		// No header fits there: the device, not the options, is at
		// fault, and the next location may still fit.
		return nil, &readError{fmt.Errorf("%w: device of %d bytes has no header sector at %d", volspec.ErrDeviceTooSmall, size, off)}
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

func init() {
	volspec.Register(volspec.Format{Name: "tcrypt", Open: open, Dump: dump})
}

// request is the search options of an opener's request: a copy of
// r.Options (*Options or Options, without secrets; nil means the defaults)
// with r's passphrase and key files and ctx.
func request(ctx context.Context, r *volspec.Request) (*Options, error) {
	o := &Options{}
	switch opt := r.Options.(type) {
	case nil:
	case *Options:
		if opt != nil {
			*o = *opt
		}
	case Options:
		*o = opt
	default:
		return nil, fmt.Errorf("%w: TCRYPT options of type %T", volspec.ErrInvalidOptions, r.Options)
	}
	o.Passphrase, o.Keyfiles, o.Context = r.Passphrase, r.KeyFiles, ctx
	return o, nil
}

// header finds and decrypts the header of the volume r names, and the
// geometry to map it with.
func header(ctx context.Context, r *volspec.Request) (*Header, Geometry, error) {
	o, err := request(ctx, r)
	if err != nil {
		return nil, Geometry{}, err
	}
	src, g, done, err := Locate(Place{Dev: r.Dev, DevSize: r.DevSize, Path: r.Path,
		Header: r.Header, HeaderSize: r.HeaderSize, HeaderPath: r.HeaderPath, System: o.System})
	if err != nil {
		return nil, g, err
	}
	defer done()
	h, err := Read(src, g.HeaderDeviceSize, o)
	return h, g, err
}

// open is the opener blkcrypt.Open uses. For a system volume whose device
// (or detached header) is a partition of a block device, the header is read
// from the whole drive and the IV offset is the partition start, as
// cryptsetup finds them through sysfs.
func open(ctx context.Context, r *volspec.Request) (*volspec.Spec, error) {
	h, g, err := header(ctx, r)
	if err != nil {
		return nil, err
	}
	defer h.Wipe()
	m, err := h.Mapping(g)
	if err != nil {
		return nil, err
	}
	defer m.Wipe()
	cs, err := m.Ciphers()
	if err != nil {
		return nil, err
	}
	return &volspec.Spec{Layers: cs, Offset: int64(m.Offset) * 512, Size: int64(m.Size) * 512, Note: m.Note}, nil
}

// dump is the dumper blkcrypt.DumpVolume uses: tcryptDump, which needs the
// passphrase to find the header. The header part names the device the
// header was read from; the volume key part the data device, as
// cryptsetup's do.
func dump(ctx context.Context, r *volspec.Request, d *volspec.DumpRequest) error {
	h, g, err := header(ctx, r)
	if err != nil {
		return err
	}
	defer h.Wipe()
	if d.VolumeKey {
		if d.SaveKey != nil {
			k := h.VolumeKey()
			err := d.SaveKey(k)
			clear(k)
			if err != nil {
				return err
			}
		}
		h.DumpVolumeKey(d.W, d.Device, h.DataOffset(g.HeaderDeviceSize))
		return nil
	}
	meta := d.Device
	if d.HeaderDevice != "" {
		meta = d.HeaderDevice
	}
	h.Dump(d.W, meta)
	return nil
}

// Place is where a TrueCrypt volume is: its device, and a separate header
// device when there is one (paths, when known, for system volumes).
type Place struct {
	Dev        io.ReaderAt
	DevSize    int64
	Path       string
	Header     io.ReaderAt // nil: the header is on Dev
	HeaderSize int64
	HeaderPath string
	System     bool // a system (boot drive) volume
}

// Locate finds where the header of the volume at p is read and the
// geometry to map it with. For a system volume whose device (or header) is
// a partition of a block device, the header is read from the whole drive,
// which Locate opens (done closes it), and the IV offset is the partition
// start, as cryptsetup finds them through sysfs; for a drive image given
// as the header and a copy of one of its partitions as the device, the
// partition is found by its size.
func Locate(p Place) (src io.ReaderAt, g Geometry, done func(), err error) {
	g = Geometry{HeaderDeviceSize: p.DevSize, DataDeviceSize: p.DevSize, PartitionOffset: -1}
	src, hdr, hdrSize := p.Dev, p.Header, p.HeaderSize
	done = func() {}
	if p.System {
		meta := p.Path
		if p.HeaderPath != "" {
			meta = p.HeaderPath
		}
		if base, start, ok := PartitionOf(meta); ok {
			f, err := os.Open(base)
			if err != nil {
				return nil, g, nil, fmt.Errorf("opening the drive %s of system partition %s: %w", base, meta, err)
			}
			n, err := luksutil.File{File: f}.Size()
			if err != nil {
				f.Close()
				return nil, g, nil, fmt.Errorf("cannot get the size of %s: %w", base, err)
			}
			g.PartitionOffset, hdr, hdrSize = start, f, n
			done = func() { f.Close() }
		}
	}
	if hdr != nil {
		src, g.HeaderDeviceSize, g.Separate = hdr, hdrSize, true
		if p.System && g.PartitionOffset < 0 {
			if start, ok := PartitionBySize(hdr, p.DevSize/512); ok {
				g.PartitionOffset = start
			}
		}
	}
	return src, g, done, nil
}

// PartitionBySize looks in the MBR or GPT partition table of a drive image
// for the one partition of the given size in 512-byte sectors, and returns
// its start.
func PartitionBySize(f io.ReaderAt, sectors int64) (int64, bool) {
	var found []int64
	mbr := make([]byte, 512)
	if _, err := f.ReadAt(mbr, 0); err != nil || mbr[510] != 0x55 || mbr[511] != 0xaa {
		return 0, false
	}
	gpt := make([]byte, 512)
	if _, err := f.ReadAt(gpt, 512); err == nil && string(gpt[:8]) == "EFI PART" {
		le := binary.LittleEndian
		lba, n, size := int64(le.Uint64(gpt[72:])), int64(le.Uint32(gpt[80:])), int64(le.Uint32(gpt[84:]))
		if size < 128 || n > 1024 {
			return 0, false
		}
		e := make([]byte, size)
		for i := int64(0); i < n; i++ {
			if _, err := f.ReadAt(e, lba*512+i*size); err != nil {
				break
			}
			first, last := int64(le.Uint64(e[32:])), int64(le.Uint64(e[40:]))
			if !bytes.Equal(e[:16], make([]byte, 16)) && last-first+1 == sectors {
				found = append(found, first)
			}
		}
	} else {
		for i := 0; i < 4; i++ {
			e := mbr[446+16*i : 462+16*i]
			start, n := int64(binary.LittleEndian.Uint32(e[8:])), int64(binary.LittleEndian.Uint32(e[12:]))
			if e[4] != 0 && e[4] != 0xee && n == sectors {
				found = append(found, start)
			}
		}
	}
	if len(found) != 1 {
		return 0, false
	}
	return found[0], true
}

// PartitionOf reports whether path is a partition of a block device, and
// then the whole device and the partition start in 512-byte sectors.
func PartitionOf(path string) (base string, start int64, ok bool) {
	if path == "" {
		return "", 0, false
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode()&os.ModeDevice == 0 {
		return "", 0, false
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", 0, false
	}
	sys := filepath.Join("/sys/class/block", filepath.Base(real))
	if _, err := os.Stat(filepath.Join(sys, "partition")); err != nil {
		return "", 0, false
	}
	b, err := os.ReadFile(filepath.Join(sys, "start"))
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return "", 0, false
	}
	parent, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "", 0, false
	}
	return filepath.Join("/dev", filepath.Base(filepath.Dir(parent))), n, true
}
