package lvm

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// VG is a volume group as its metadata text describes it, with the
// devices Open matched to its physical volumes. ParseMetadata gives one
// with no devices: it describes, and OpenLV refuses every LV for its
// missing PVs.
type VG struct {
	Name       string
	UUID       string   // lvm2's 38-character form with dashes
	Seqno      uint64   // the metadata's sequence number
	ExtentSize int64    // bytes (extent_size is stored in 512-byte sectors)
	Status     []string // e.g. RESIZEABLE, READ, WRITE
	PVs        []VGPV   // in metadata order

	lvs    []*LV
	byName map[string]*LV
	devs   map[string]*pvDev // by metadata PV name, only the devices given
}

// VGPV is one physical volume as the VG metadata names it.
type VGPV struct {
	Name       string // the metadata's key: "pv0", "pv1", …
	UUID       string // lvm2's 38-character form with dashes
	DeviceHint string // the device path lvm2 last saw it on (a hint only)
	PEStart    int64  // bytes from the start of the PV to its first extent
	PECount    uint64
	Status     []string
	Device     string // the Name of the PVDevice given for it; "" when missing
}

// LV is one logical volume of the metadata.
type LV struct {
	Name     string
	UUID     string
	Status   []string // e.g. READ, WRITE, VISIBLE
	Visible  bool     // VISIBLE in Status: hidden LVs are components
	Extents  uint64
	Size     int64 // Extents × the VG's extent size, in bytes
	Segments []Segment

	// UsedBy names the LV that uses this one (thin pool data, RAID
	// image, snapshot origin or COW store, …) and UsedAs the setting
	// that names it there; OpenLV refuses such a component.
	UsedBy string
	UsedAs string

	n *node // its section, for markComponents
}

// Segment is one segment of an LV: ExtentCount logical extents from
// StartExtent, mapped by Type. Stripes and StripeSize are set for
// "striped" (and "linear", its one-stripe spelling) only.
type Segment struct {
	StartExtent uint64
	ExtentCount uint64
	Type        string
	StripeSize  int64 // bytes; 0 with one stripe
	Stripes     []Stripe
}

// Stripe is one area of a striped segment: ExtentCount/len(Stripes)
// extents of PV from StartExtent, or, in metadata blkcrypt refuses to map,
// of another LV.
type Stripe struct {
	PV          string // metadata PV name, "" when LV is set
	LV          string
	StartExtent uint64
}

// String describes the segment the way lvs's seg_pe_ranges does, with
// metadata PV names: "extents 0-3 striped, 2 stripes of 65536 bytes:
// pv0:2-3 pv1:0-1".
func (s Segment) String() string {
	var b strings.Builder
	t := s.Type
	if t == "striped" && len(s.Stripes) == 1 {
		t = "linear" // as lvs calls it
	}
	fmt.Fprintf(&b, "extents %d-%d %s", s.StartExtent, s.StartExtent+s.ExtentCount-1, safe(t))
	if len(s.Stripes) == 0 {
		return b.String()
	}
	if len(s.Stripes) > 1 {
		fmt.Fprintf(&b, ", %d stripes of %d bytes", len(s.Stripes), s.StripeSize)
	}
	b.WriteString(":")
	per := s.ExtentCount / uint64(len(s.Stripes))
	for _, st := range s.Stripes {
		name := st.PV
		if name == "" {
			name = st.LV
		}
		fmt.Fprintf(&b, " %s:%d-%d", safe(name), st.StartExtent, st.StartExtent+per-1)
	}
	return b.String()
}

// String describes the LV in one line: name, size and its segments.
func (lv *LV) String() string {
	parts := make([]string, len(lv.Segments))
	for i, s := range lv.Segments {
		parts[i] = s.String()
	}
	return fmt.Sprintf("%s: %d bytes, %d extents; %s", lv.Name, lv.Size, lv.Extents, strings.Join(parts, "; "))
}

const (
	contentsValue = "Text Format Volume Group"
	sectorSize    = 512
)

// ParseMetadata parses one VG metadata text as lvm2 writes it (the
// trailing NUL may be there or not) and checks it: the format header
// (contents, version 1), the VG's extent size, its PVs, every LV's
// segments (contiguous from extent 0, no gap, no overlap, the count
// segment_count gives), striped areas inside their PVs, and no PV extent
// mapped by two LVs. It reads no device.
func ParseMetadata(text []byte) (*VG, error) {
	vg, err := parseMetadata(text)
	if err != nil {
		return nil, fmt.Errorf("lvm: %w", err)
	}
	return vg, nil
}

func parseMetadata(text []byte) (*VG, error) {
	root, err := parseText(text)
	if err != nil {
		return nil, err
	}
	vg, err := buildVG(root)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return vg, nil
}

// find returns the one child called key, nil when absent, an error when
// there are two: lvm2 would warn and pick one, and a text that can be read
// two ways is refused here rather than read the other way.
func (n *node) find(key string) (*node, error) {
	var got *node
	for _, c := range n.children {
		if c.key == key {
			if got != nil {
				return nil, fmt.Errorf("%q given twice (lines %d and %d)", key, got.line, c.line)
			}
			got = c
		}
	}
	return got, nil
}

func (n *node) str(key string, required bool) (string, error) {
	c, err := n.find(key)
	if err != nil {
		return "", err
	}
	if c == nil {
		if required {
			return "", fmt.Errorf("%s: %q missing", n.key, key)
		}
		return "", nil
	}
	if c.section || c.array || len(c.values) != 1 || c.values[0].kind != valString {
		return "", fmt.Errorf("%s: %q is not a string (line %d)", n.key, key, c.line)
	}
	return c.values[0].s, nil
}

// uint reads a non-negative integer no larger than max.
func (n *node) uint(key string, required bool, max uint64) (uint64, bool, error) {
	c, err := n.find(key)
	if err != nil {
		return 0, false, err
	}
	if c == nil {
		if required {
			return 0, false, fmt.Errorf("%s: %q missing", n.key, key)
		}
		return 0, false, nil
	}
	if c.section || c.array || len(c.values) != 1 || c.values[0].kind != valInt {
		return 0, false, fmt.Errorf("%s: %q is not an integer (line %d)", n.key, key, c.line)
	}
	v := c.values[0].i
	if v < 0 || uint64(v) > max {
		return 0, false, fmt.Errorf("%s: %s = %d is out of range 0-%d (line %d)", n.key, key, v, max, c.line)
	}
	return uint64(v), true, nil
}

func (n *node) strList(key string) ([]string, error) {
	c, err := n.find(key)
	if err != nil || c == nil {
		return nil, err
	}
	if c.section {
		return nil, fmt.Errorf("%s: %q is a section (line %d)", n.key, key, c.line)
	}
	out := make([]string, 0, len(c.values))
	for _, v := range c.values {
		if v.kind != valString {
			return nil, fmt.Errorf("%s: %q holds a non-string %s (line %d)", n.key, key, v.describe(), c.line)
		}
		out = append(out, v.s)
	}
	return out, nil
}

func (n *node) sub(key string) (*node, error) {
	c, err := n.find(key)
	if err != nil || c == nil {
		return nil, err
	}
	if !c.section {
		return nil, fmt.Errorf("%s: %q is not a section (line %d)", n.key, key, c.line)
	}
	return c, nil
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// mul returns a×b, false on overflow of int64.
func mul(a, b uint64) (int64, bool) {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

func buildVG(root *node) (*VG, error) {
	contents, err := root.str("contents", true)
	if err != nil {
		return nil, err
	}
	if contents != contentsValue {
		return nil, fmt.Errorf("contents is %q, not %q", contents, contentsValue)
	}
	version, _, err := root.uint("version", true, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	if version != 1 {
		return nil, fmt.Errorf("format version %d, only 1 is known", version)
	}
	// The VG is the first section of the root (lvm2's import_vsn1).
	var vgn *node
	for _, c := range root.children {
		if c.section {
			vgn = c
			break
		}
	}
	if vgn == nil {
		return nil, fmt.Errorf("no volume group section")
	}
	vg := &VG{Name: vgn.key, byName: map[string]*LV{}}
	if vg.UUID, err = vgn.str("id", true); err != nil {
		return nil, err
	}
	if !validUUID(vg.UUID) {
		return nil, fmt.Errorf("%s: id %q is not an lvm2 uuid", vg.Name, vg.UUID)
	}
	if vg.Seqno, _, err = vgn.uint("seqno", true, math.MaxUint32); err != nil {
		return nil, err
	}
	if vg.Status, err = vgn.strList("status"); err != nil {
		return nil, err
	}
	es, _, err := vgn.uint("extent_size", true, math.MaxUint32)
	if err != nil {
		return nil, err
	}
	if es == 0 {
		return nil, fmt.Errorf("%s: extent_size is 0", vg.Name)
	}
	vg.ExtentSize = int64(es) * sectorSize

	pvByName := map[string]int{}
	if pvs, err := vgn.sub("physical_volumes"); err != nil {
		return nil, err
	} else if pvs != nil {
		uuids := map[string]string{}
		for _, pn := range pvs.children {
			if !pn.section {
				continue
			}
			if _, dup := pvByName[pn.key]; dup {
				return nil, fmt.Errorf("physical volume %q given twice", pn.key)
			}
			pv := VGPV{Name: pn.key}
			if pv.UUID, err = pn.str("id", true); err != nil {
				return nil, err
			}
			if !validUUID(pv.UUID) {
				return nil, fmt.Errorf("%s: id %q is not an lvm2 uuid (32 characters of 0-9, a-z, A-Z, ! and #)", pn.key, pv.UUID)
			}
			if other, dup := uuids[stripUUID(pv.UUID)]; dup {
				return nil, fmt.Errorf("%s and %s have the same id %s", other, pn.key, pv.UUID)
			}
			uuids[stripUUID(pv.UUID)] = pn.key
			if pv.DeviceHint, err = pn.str("device", false); err != nil {
				return nil, err
			}
			if pv.Status, err = pn.strList("status"); err != nil {
				return nil, err
			}
			start, _, err := pn.uint("pe_start", true, math.MaxInt64/sectorSize)
			if err != nil {
				return nil, err
			}
			pv.PEStart = int64(start) * sectorSize
			if pv.PECount, _, err = pn.uint("pe_count", true, math.MaxUint32); err != nil {
				return nil, err
			}
			dataLen, ok := mul(pv.PECount, uint64(vg.ExtentSize))
			if !ok || dataLen > math.MaxInt64-pv.PEStart {
				return nil, fmt.Errorf("%s: %d extents of %d bytes from byte %d overflow", pn.key, pv.PECount, vg.ExtentSize, pv.PEStart)
			}
			pvByName[pn.key] = len(vg.PVs)
			vg.PVs = append(vg.PVs, pv)
		}
	}

	lvs, err := vgn.sub("logical_volumes")
	if err != nil {
		return nil, err
	}
	if lvs != nil {
		for _, ln := range lvs.children {
			if !ln.section {
				continue
			}
			if _, dup := vg.byName[ln.key]; dup {
				return nil, fmt.Errorf("logical volume %q given twice", ln.key)
			}
			if _, clash := pvByName[ln.key]; clash {
				return nil, fmt.Errorf("%q names both a physical and a logical volume", ln.key)
			}
			lv, err := buildLV(vg, ln, pvByName)
			if err != nil {
				return nil, err
			}
			vg.lvs = append(vg.lvs, lv)
			vg.byName[lv.Name] = lv
		}
		// Which LVs are components of others. Only after all LVs are
		// known: a segment may name an LV defined after it.
		for _, lv := range vg.lvs {
			if err := markComponents(vg, lv); err != nil {
				return nil, err
			}
		}
	}
	if err := checkPVOverlap(vg); err != nil {
		return nil, err
	}
	return vg, nil
}

func buildLV(vg *VG, ln *node, pvByName map[string]int) (*LV, error) {
	lv := &LV{Name: ln.key, n: ln}
	var err error
	if lv.UUID, err = ln.str("id", false); err != nil {
		return nil, err
	}
	if lv.Status, err = ln.strList("status"); err != nil {
		return nil, err
	}
	lv.Visible = has(lv.Status, "VISIBLE")
	count, _, err := ln.uint("segment_count", true, math.MaxUint32)
	if err != nil {
		return nil, err
	}
	// Every subsection of an LV is a segment, whatever its name (lvm2's
	// _read_segments).
	for _, sn := range ln.children {
		if !sn.section {
			continue
		}
		seg, err := buildSegment(vg, lv, sn, pvByName)
		if err != nil {
			return nil, err
		}
		lv.Segments = append(lv.Segments, seg)
	}
	if uint64(len(lv.Segments)) != count {
		return nil, fmt.Errorf("logical volume %s: segment_count is %d but there are %d segments", lv.Name, count, len(lv.Segments))
	}
	sort.SliceStable(lv.Segments, func(i, j int) bool { return lv.Segments[i].StartExtent < lv.Segments[j].StartExtent })
	var next uint64
	for i, s := range lv.Segments {
		switch {
		case s.StartExtent < next:
			p := lv.Segments[i-1]
			return nil, fmt.Errorf("logical volume %s: segment at extents %d-%d overlaps the one at %d-%d",
				lv.Name, s.StartExtent, s.StartExtent+s.ExtentCount-1, p.StartExtent, p.StartExtent+p.ExtentCount-1)
		case s.StartExtent > next:
			return nil, fmt.Errorf("logical volume %s: extents %d-%d are in no segment", lv.Name, next, s.StartExtent-1)
		}
		next = s.StartExtent + s.ExtentCount // both ≤ 2^32: no overflow
	}
	lv.Extents = next
	size, ok := mul(next, uint64(vg.ExtentSize))
	if !ok {
		return nil, fmt.Errorf("logical volume %s: %d extents of %d bytes overflow", lv.Name, next, vg.ExtentSize)
	}
	lv.Size = size
	return lv, nil
}

func buildSegment(vg *VG, lv *LV, sn *node, pvByName map[string]int) (Segment, error) {
	var s Segment
	var err error
	where := "logical volume " + lv.Name + " " + sn.key
	if s.StartExtent, _, err = sn.uint("start_extent", true, math.MaxUint32); err != nil {
		return s, fmt.Errorf("%s: %w", where, err)
	}
	if s.ExtentCount, _, err = sn.uint("extent_count", true, math.MaxUint32); err != nil {
		return s, fmt.Errorf("%s: %w", where, err)
	}
	if s.ExtentCount == 0 {
		return s, fmt.Errorf("%s: extent_count is 0", where)
	}
	if s.Type, err = sn.str("type", true); err != nil {
		return s, fmt.Errorf("%s: %w", where, err)
	}
	if s.Type != "striped" && s.Type != "linear" {
		// Any other type is described, not mapped; OpenLV refuses it.
		return s, nil
	}
	n, _, err := sn.uint("stripe_count", true, math.MaxUint32)
	if err != nil {
		return s, fmt.Errorf("%s: %w", where, err)
	}
	if n == 0 {
		return s, fmt.Errorf("%s: stripe_count is 0", where)
	}
	c, err := sn.find("stripes")
	if err != nil {
		return s, fmt.Errorf("%s: %w", where, err)
	}
	if c == nil || c.section {
		return s, fmt.Errorf("%s: no stripes list", where)
	}
	if uint64(len(c.values)) != 2*n {
		return s, fmt.Errorf("%s: stripe_count is %d but stripes lists %d values", where, n, len(c.values))
	}
	if s.ExtentCount%n != 0 {
		return s, fmt.Errorf("%s: %d extents do not divide into %d stripes", where, s.ExtentCount, n)
	}
	per := s.ExtentCount / n
	if n > 1 {
		ss, _, err := sn.uint("stripe_size", true, math.MaxUint32)
		if err != nil {
			return s, fmt.Errorf("%s: %w", where, err)
		}
		if ss == 0 {
			return s, fmt.Errorf("%s: stripe_size is 0", where)
		}
		s.StripeSize = int64(ss) * sectorSize
		// dm-striped refuses a stripe whose length is not a whole
		// number of chunks; so does this mapping.
		if (per*uint64(vg.ExtentSize))%uint64(s.StripeSize) != 0 {
			return s, fmt.Errorf("%s: stripes of %d extents are not a whole number of %d-byte chunks", where, per, s.StripeSize)
		}
	}
	for i := 0; i < len(c.values); i += 2 {
		name, pe := c.values[i], c.values[i+1]
		if name.kind != valString {
			return s, fmt.Errorf("%s: stripe %d: %s is not a volume name", where, i/2, name.describe())
		}
		if pe.kind != valInt || pe.i < 0 || pe.i > math.MaxUint32 {
			return s, fmt.Errorf("%s: stripe %d: bad extent %s", where, i/2, pe.describe())
		}
		st := Stripe{StartExtent: uint64(pe.i)}
		if k, ok := pvByName[name.s]; ok {
			st.PV = name.s
			pv := vg.PVs[k]
			if st.StartExtent+per > pv.PECount {
				return s, fmt.Errorf("%s: stripe %d: extents %d-%d of %s are beyond its %d extents",
					where, i/2, st.StartExtent, st.StartExtent+per-1, pv.Name, pv.PECount)
			}
		} else {
			// Checked against the LV names once all are known.
			st.LV = name.s
		}
		s.Stripes = append(s.Stripes, st)
	}
	return s, nil
}

// markComponents records, for every LV another LV's segment names (a
// striped area on an LV, a thin pool's data, a RAID image, a snapshot's
// origin, …), who uses it, so that OpenLV refuses it: writing under a
// thin pool, a RAID set or a snapshot would corrupt them.
func markComponents(vg *VG, lv *LV) error {
	for _, s := range lv.Segments {
		for _, st := range s.Stripes {
			if st.LV == "" {
				continue
			}
			if _, ok := vg.byName[st.LV]; !ok {
				return fmt.Errorf("logical volume %s: stripe on %q, which is neither a PV nor an LV", lv.Name, st.LV)
			}
		}
	}
	for _, sn := range lv.n.children {
		if !sn.section {
			continue
		}
		for _, set := range sn.children {
			if set.section || set.key == "type" || set.key == "tags" {
				continue
			}
			for _, v := range set.values {
				if v.kind != valString || v.s == lv.Name {
					continue
				}
				if used, ok := vg.byName[v.s]; ok && used.UsedBy == "" {
					used.UsedBy, used.UsedAs = lv.Name, set.key
				}
			}
		}
	}
	return nil
}

// checkPVOverlap refuses metadata in which two areas map the same PV
// extent: a write through one LV would land in the other.
func checkPVOverlap(vg *VG) error {
	type span struct {
		pv         string
		start, end uint64 // [start, end)
		lv         string
	}
	var spans []span
	for _, lv := range vg.lvs {
		for _, s := range lv.Segments {
			if len(s.Stripes) == 0 {
				continue
			}
			per := s.ExtentCount / uint64(len(s.Stripes))
			for _, st := range s.Stripes {
				if st.PV != "" {
					spans = append(spans, span{st.PV, st.StartExtent, st.StartExtent + per, lv.Name})
				}
			}
		}
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].pv != spans[j].pv {
			return spans[i].pv < spans[j].pv
		}
		return spans[i].start < spans[j].start
	})
	for i := 1; i < len(spans); i++ {
		a, b := spans[i-1], spans[i]
		if a.pv == b.pv && b.start < a.end {
			who := a.lv + " and " + b.lv
			if a.lv == b.lv {
				who = a.lv + " twice"
			}
			return fmt.Errorf("%s extents %d-%d are mapped by %s", a.pv, b.start, min(a.end, b.end)-1, who)
		}
	}
	return nil
}

// validUUID is lvm2's id check (lib/id/id.c): 32 characters of
// [0-9a-zA-Z!#] once the dashes are taken out.
func validUUID(s string) bool {
	id := stripUUID(s)
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '!' || c == '#') {
			return false
		}
	}
	return true
}

// safe returns s for an error message, quoted when it holds anything but
// printable ASCII, so that a message stays one line whatever the text.
func safe(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return strconv.Quote(s)
		}
	}
	return s
}

// stripUUID removes the dashes of lvm2's printed uuid form.
func stripUUID(s string) string { return strings.ReplaceAll(s, "-", "") }

// formatUUID prints a 32-character uuid the way lvm2 does: 6-4-4-4-4-4-6.
func formatUUID(id string) string {
	if len(id) != idLen {
		return strconv.Quote(id)
	}
	return id[0:6] + "-" + id[6:10] + "-" + id[10:14] + "-" + id[14:18] + "-" + id[18:22] + "-" + id[22:26] + "-" + id[26:32]
}
