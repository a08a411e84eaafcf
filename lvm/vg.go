package lvm

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
)

var (
	// ErrNotFound: the VG has no LV of that name.
	ErrNotFound = errors.New("no such logical volume")
	// ErrUnsupported: OpenLV met a segment type other than linear or
	// striped (thin, thin-pool, raid*, mirror, cache, snapshot, vdo,
	// integrity, writecache, …), a striped area on another LV, or an LV
	// that is a component of another (a thin pool's data, a RAID image,
	// a snapshot's origin or COW store). The message names the type.
	ErrUnsupported = errors.New("unsupported logical volume")
	// ErrMissingPV: OpenLV needs a PV for which Open was given no device;
	// the message names it by metadata name, uuid and last device path.
	ErrMissingPV = errors.New("physical volume missing")
	// ErrReadOnly: WriteAt on an LV whose LV or VG status lacks WRITE or
	// one of whose devices is not an io.WriterAt or is marked ReadOnly.
	ErrReadOnly = errors.New("logical volume is read-only")
	// ErrOutOfRange: a read or write at a negative offset, or a write
	// that would run past the LV's end (nothing is written then).
	ErrOutOfRange = errors.New("offset out of range")
	// ErrClosed: the LVDevice was closed.
	ErrClosed = errors.New("logical volume closed")
)

// PVDevice is one device Open is given: a whole disk, a partition, a
// decrypted LUKS volume, an image file.
type PVDevice struct {
	// Name is how errors and VGPV.Device call it ("/dev/sda3",
	// "luks-root"); it need not be a path.
	Name string
	// Dev reads the device. LVs on it are writable only when it is an
	// io.WriterAt too, and LVDevice.Sync calls its Sync() error if it
	// has one. Open reads it; nothing in this package closes it.
	Dev  io.ReaderAt
	Size int64
	// ReadOnly makes the LVs on this device read-only even when Dev is
	// an io.WriterAt (an *os.File opened O_RDONLY still is one).
	ReadOnly bool
}

type pvDev struct {
	name string
	r    io.ReaderAt
	w    io.WriterAt // nil when Dev is not one
	size int64
	pv   *PV
}

// Open reads each device's PV label and metadata (ReadPV), takes the
// newest valid metadata copy among them all (the highest seqno), and
// matches every device to the PV of the metadata with the same uuid.
// PVs of the VG may be missing: the LVs that need them are refused by
// OpenLV (ErrMissingPV). A device that is no PV (ErrNoPV), PVs of two
// different VGs, the same PV twice, a device that is not a PV of the VG,
// or a PV whose extents lie beyond its device or over its label or
// metadata areas, is an error.
func Open(devs ...PVDevice) (*VG, error) {
	if len(devs) == 0 {
		return nil, errors.New("lvm: no devices given")
	}
	pds := make([]*pvDev, len(devs))
	var newest *pvDev
	for i, d := range devs {
		if d.Dev == nil {
			return nil, fmt.Errorf("lvm: %s: no device", d.Name)
		}
		pv, err := readPV(d.Dev, d.Size)
		if err != nil {
			return nil, fmt.Errorf("lvm: %s: %w", d.Name, err)
		}
		pd := &pvDev{name: d.Name, r: d.Dev, size: d.Size, pv: pv}
		if w, ok := d.Dev.(io.WriterAt); ok && !d.ReadOnly {
			pd.w = w
		}
		for _, o := range pds[:i] {
			if o.pv.uuid == pv.uuid {
				return nil, fmt.Errorf("lvm: %s and %s are the same PV %s", o.name, d.Name, pv.UUID)
			}
		}
		pds[i] = pd
		if pv.Metadata == nil {
			continue
		}
		if newest != nil && newest.pv.VGUUID != pv.VGUUID {
			return nil, fmt.Errorf("lvm: %s holds volume group %s (%s) and %s holds %s (%s)",
				newest.name, newest.pv.VGName, newest.pv.VGUUID, d.Name, pv.VGName, pv.VGUUID)
		}
		if newest == nil || pv.Seqno > newest.pv.Seqno {
			newest = pd
		}
	}
	if newest == nil {
		var why []string
		for _, pd := range pds {
			for _, m := range pd.pv.MetadataAreas {
				switch {
				case m.Err != nil:
					why = append(why, fmt.Sprintf("%s area at byte %d: %v", pd.name, m.Offset, m.Err))
				case m.Ignored:
					why = append(why, fmt.Sprintf("%s area at byte %d: ignored", pd.name, m.Offset))
				case m.Empty:
					why = append(why, fmt.Sprintf("%s area at byte %d: empty (a PV in no VG)", pd.name, m.Offset))
				}
			}
			if len(pd.pv.MetadataAreas) == 0 {
				why = append(why, pd.name+": no metadata areas")
			}
		}
		return nil, fmt.Errorf("lvm: %w: %s", ErrNoMetadata, strings.Join(why, "; "))
	}
	vg, err := parseMetadata(newest.pv.Metadata)
	if err != nil {
		return nil, fmt.Errorf("lvm: %s (seqno %d): %w", newest.name, newest.pv.Seqno, err)
	}
	vg.devs = map[string]*pvDev{}
	for _, pd := range pds {
		k := -1
		for i := range vg.PVs {
			if stripUUID(vg.PVs[i].UUID) == pd.pv.uuid {
				k = i
				break
			}
		}
		if k < 0 {
			return nil, fmt.Errorf("lvm: %s: PV %s is not in volume group %s", pd.name, pd.pv.UUID, vg.Name)
		}
		if err := checkLayout(vg, &vg.PVs[k], pd); err != nil {
			return nil, fmt.Errorf("lvm: %s (%s): %w", pd.name, vg.PVs[k].Name, err)
		}
		vg.PVs[k].Device = pd.name
		vg.devs[vg.PVs[k].Name] = pd
	}
	return vg, nil
}

// checkLayout makes sure a PV's extents lie on its device and away from
// its label and metadata areas, so that no write through an LV can reach
// LVM metadata, whatever the metadata text says.
func checkLayout(vg *VG, p *VGPV, pd *pvDev) error {
	start := p.PEStart
	end := start + int64(p.PECount)*vg.ExtentSize // ParseMetadata checked the overflow
	if p.PECount == 0 {
		return nil
	}
	if end > pd.size {
		return fmt.Errorf("extents end at byte %d, beyond the device's %d bytes", end, pd.size)
	}
	label := int64(pd.pv.LabelSector) * sectorSize
	if start < label+sectorSize && label < end {
		return fmt.Errorf("extents from byte %d overlap the label at byte %d", start, label)
	}
	overlap := func(what string, a Area) error {
		// a.Offset+a.Size may be a hostile overflow; compare without it.
		if a.Offset < uint64(end) && (a.Size > uint64(start) || a.Offset > uint64(start)-a.Size) {
			return fmt.Errorf("extents at bytes %d-%d overlap the %s area at byte %d of %d bytes", start, end-1, what, a.Offset, a.Size)
		}
		return nil
	}
	for _, m := range pd.pv.MetadataAreas {
		if err := overlap("metadata", m.Area); err != nil {
			return err
		}
	}
	for _, b := range pd.pv.BootloaderAreas {
		if err := overlap("bootloader", b); err != nil {
			return err
		}
	}
	return nil
}

// LVs returns the VG's logical volumes in metadata order, hidden ones
// included (Visible false), as copies.
func (vg *VG) LVs() []*LV {
	out := make([]*LV, len(vg.lvs))
	for i, lv := range vg.lvs {
		out[i] = lv.clone()
	}
	return out
}

// LV returns a copy of the LV called name, or ErrNotFound.
func (vg *VG) LV(name string) (*LV, error) {
	lv, ok := vg.byName[name]
	if !ok {
		return nil, fmt.Errorf("lvm: %s/%s: %w", vg.Name, name, ErrNotFound)
	}
	return lv.clone(), nil
}

func (lv *LV) clone() *LV {
	c := *lv
	c.n = nil
	c.Status = append([]string(nil), lv.Status...)
	c.Segments = make([]Segment, len(lv.Segments))
	for i, s := range lv.Segments {
		s.Stripes = append([]Stripe(nil), s.Stripes...)
		c.Segments[i] = s
	}
	return &c
}

// LVDevice is an open logical volume: reads and writes at LV offsets go
// to the PV extents its linear and striped segments map. It is safe for
// concurrent use when the PV devices are. Close does not close the PV
// devices, which belong to the caller.
type LVDevice struct {
	name     string
	size     int64
	segs     []mapSeg
	devs     []*pvDev // distinct, for Sync
	readOnly error    // why writes are refused, nil when they are not
	closed   atomic.Bool
}

// mapSeg is one segment in bytes: length bytes from start in the LV; one
// area (linear) or several taking chunk-byte turns (striped).
type mapSeg struct {
	start, length int64
	chunk         int64
	areas         []mapArea
}

type mapArea struct {
	dev  *pvDev
	base int64 // byte offset on the device of the area's first extent
}

// OpenLV opens the LV called name as a device. Only linear and striped
// segments on PVs are mapped (stripe_size chunks taken round-robin
// across the stripes, as dm-striped does); any other segment type, a
// stripe on another LV, or an LV that is a component of another is
// ErrUnsupported, and an LV needing a PV that Open was not given is
// ErrMissingPV.
func (vg *VG) OpenLV(name string) (*LVDevice, error) {
	lv, ok := vg.byName[name]
	if !ok {
		return nil, fmt.Errorf("lvm: %s/%s: %w", vg.Name, name, ErrNotFound)
	}
	full := vg.Name + "/" + lv.Name
	for _, s := range lv.Segments {
		if s.Type != "striped" && s.Type != "linear" {
			return nil, fmt.Errorf("lvm: %s: %w: segment at extents %d-%d is of type %s (only linear and striped are mapped)",
				full, ErrUnsupported, s.StartExtent, s.StartExtent+s.ExtentCount-1, safe(s.Type))
		}
	}
	if lv.UsedBy != "" {
		t := "unknown"
		if u := vg.byName[lv.UsedBy]; len(u.Segments) > 0 {
			t = safe(u.Segments[0].Type)
		}
		return nil, fmt.Errorf("lvm: %s: %w: it is used by %s (type %s) as its %s", full, ErrUnsupported, lv.UsedBy, t, lv.UsedAs)
	}
	d := &LVDevice{name: full, size: lv.Size}
	seen := map[*pvDev]bool{}
	for _, s := range lv.Segments {
		ms := mapSeg{
			start:  int64(s.StartExtent) * vg.ExtentSize, // ≤ lv.Size: no overflow
			length: int64(s.ExtentCount) * vg.ExtentSize,
		}
		if len(s.Stripes) > 1 {
			ms.chunk = s.StripeSize
		}
		for _, st := range s.Stripes {
			if st.LV != "" {
				return nil, fmt.Errorf("lvm: %s: %w: segment at extents %d-%d is striped on logical volume %s, not on a PV",
					full, ErrUnsupported, s.StartExtent, s.StartExtent+s.ExtentCount-1, safe(st.LV))
			}
			pd := vg.devs[st.PV]
			if pd == nil {
				p := vg.pv(st.PV)
				return nil, fmt.Errorf("lvm: %s: %w: it needs %s (uuid %s, last seen as %s), which was not given",
					full, ErrMissingPV, p.Name, p.UUID, safe(p.DeviceHint))
			}
			ms.areas = append(ms.areas, mapArea{dev: pd, base: vg.pv(st.PV).PEStart + int64(st.StartExtent)*vg.ExtentSize})
			if !seen[pd] {
				seen[pd] = true
				d.devs = append(d.devs, pd)
				if pd.w == nil && d.readOnly == nil {
					d.readOnly = fmt.Errorf("lvm: %s: %w: %s is read-only", full, ErrReadOnly, pd.name)
				}
			}
		}
		d.segs = append(d.segs, ms)
	}
	switch {
	case !has(vg.Status, "WRITE"):
		d.readOnly = fmt.Errorf("lvm: %s: %w: the volume group's status lacks WRITE", full, ErrReadOnly)
	case !has(lv.Status, "WRITE"):
		d.readOnly = fmt.Errorf("lvm: %s: %w: its status lacks WRITE", full, ErrReadOnly)
	}
	return d, nil
}

func (vg *VG) pv(name string) *VGPV {
	for i := range vg.PVs {
		if vg.PVs[i].Name == name {
			return &vg.PVs[i]
		}
	}
	return nil // ParseMetadata resolved every stripe's PV
}

// Name is "vg/lv".
func (d *LVDevice) Name() string { return d.name }

// ReadOnly reports whether WriteAt is refused.
func (d *LVDevice) ReadOnly() bool { return d.readOnly != nil }

// Size returns the LV's size in bytes.
func (d *LVDevice) Size() (int64, error) {
	if d.closed.Load() {
		return 0, fmt.Errorf("lvm: %s: %w", d.name, ErrClosed)
	}
	return d.size, nil
}

// ReadAt reads len(p) bytes at LV offset off, io.ReaderAt style: fewer
// only at the LV's end, with io.EOF.
func (d *LVDevice) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, fmt.Errorf("lvm: %s: %w", d.name, ErrClosed)
	}
	if off < 0 {
		return 0, fmt.Errorf("lvm: %s: %w: read at %d", d.name, ErrOutOfRange, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= d.size {
		return 0, io.EOF
	}
	var eof error
	if int64(len(p)) > d.size-off {
		p, eof = p[:d.size-off], io.EOF
	}
	n, err := d.do(p, off, false)
	if err != nil {
		return n, err
	}
	return n, eof
}

// WriteAt writes p at LV offset off. A write that would run past the
// LV's end writes nothing: ErrOutOfRange.
func (d *LVDevice) WriteAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, fmt.Errorf("lvm: %s: %w", d.name, ErrClosed)
	}
	if d.readOnly != nil {
		return 0, d.readOnly
	}
	if off < 0 || off > d.size || int64(len(p)) > d.size-off {
		return 0, fmt.Errorf("lvm: %s: %w: write of %d bytes at %d, the LV has %d", d.name, ErrOutOfRange, len(p), off, d.size)
	}
	return d.do(p, off, true)
}

// do maps [off, off+len(p)) piece by piece: up to a segment's end for a
// linear segment, up to a chunk's end for a striped one.
func (d *LVDevice) do(p []byte, off int64, write bool) (int, error) {
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		i := sort.Search(len(d.segs), func(i int) bool { return d.segs[i].start+d.segs[i].length > pos })
		s := &d.segs[i] // pos < size, so some segment holds it
		rel := pos - s.start
		a, phys, n := s.areas[0], s.areas[0].base+rel, s.length-rel
		if s.chunk > 0 {
			chunk, within := rel/s.chunk, rel%s.chunk
			k := int64(len(s.areas))
			a = s.areas[chunk%k]
			phys = a.base + (chunk/k)*s.chunk + within
			n = s.chunk - within
		}
		n = min(n, int64(len(p)-done))
		buf := p[done : done+int(n)]
		var err error
		if write {
			var w int
			w, err = a.dev.w.WriteAt(buf, phys)
			if err == nil && w < len(buf) {
				err = io.ErrShortWrite
			}
		} else {
			err = readFull(a.dev.r, buf, phys)
		}
		if err != nil {
			verb := "reading"
			if write {
				verb = "writing"
			}
			return done, fmt.Errorf("lvm: %s: %s %d bytes at byte %d of %s: %w", d.name, verb, n, phys, a.dev.name, err)
		}
		done += int(n)
	}
	return done, nil
}

// Sync calls Sync on every PV device of the LV that has one.
func (d *LVDevice) Sync() error {
	if d.closed.Load() {
		return fmt.Errorf("lvm: %s: %w", d.name, ErrClosed)
	}
	for _, pd := range d.devs {
		if s, ok := pd.r.(interface{ Sync() error }); ok {
			if err := s.Sync(); err != nil {
				return fmt.Errorf("lvm: %s: syncing %s: %w", d.name, pd.name, err)
			}
		}
	}
	return nil
}

// Close ends the use of the LV; the PV devices stay open. A second Close
// is ErrClosed.
func (d *LVDevice) Close() error {
	if d.closed.Swap(true) {
		return fmt.Errorf("lvm: %s: %w", d.name, ErrClosed)
	}
	return nil
}
