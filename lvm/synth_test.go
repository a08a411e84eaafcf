package lvm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// Synthetic PVs, written byte by byte from the on-disk format, for the
// cases lvm2 will not write (hostile headers and texts) and for the fuzz
// seeds. TestLVM2ReadsSynthetic has lvm2 read one, wrapped text included,
// so the builder is checked against lvm2 and not only against this
// package's reading of the format.

const (
	synthPVUUID = "synthA-0000-1111-2222-3333-4444-pvpvpv"
	synthVGUUID = "synthV-0000-1111-2222-3333-4444-vgvgvg"
)

type synthPV struct {
	img  []byte
	mdas []Area
}

// newSynth lays out a PV of size bytes: the label in sector 1, the PV
// header at 32 with one data area from peStart, and the metadata areas
// given, each with a valid header and no text yet.
func newSynth(size int, peStart uint64, mdas ...Area) *synthPV {
	s := &synthPV{img: make([]byte, size), mdas: mdas}
	l := s.img[sectorSize : 2*sectorSize]
	copy(l, labelID)
	binary.LittleEndian.PutUint64(l[8:], 1)
	binary.LittleEndian.PutUint32(l[20:], 32)
	copy(l[24:], labelType)
	h := l[32:]
	copy(h, stripUUID(synthPVUUID))
	binary.LittleEndian.PutUint64(h[idLen:], uint64(size))
	p := h[pvHeaderSize:]
	put := func(off, n uint64) {
		binary.LittleEndian.PutUint64(p, off)
		binary.LittleEndian.PutUint64(p[8:], n)
		p = p[16:]
	}
	put(peStart, 0)
	put(0, 0)
	for _, m := range mdas {
		put(m.Offset, m.Size)
	}
	put(0, 0)
	s.sealLabel()
	for i, m := range mdas {
		mh := s.img[m.Offset : m.Offset+mdaHeaderSize]
		copy(mh[4:], fmttMagic)
		binary.LittleEndian.PutUint32(mh[20:], 1)
		binary.LittleEndian.PutUint64(mh[24:], m.Offset)
		binary.LittleEndian.PutUint64(mh[32:], m.Size)
		s.sealMDA(i)
	}
	return s
}

func (s *synthPV) label() []byte { return s.img[sectorSize : 2*sectorSize] }

func (s *synthPV) sealLabel() {
	l := s.label()
	binary.LittleEndian.PutUint32(l[16:], lvmCRC(l[20:]))
}

func (s *synthPV) mdaHeader(i int) []byte {
	return s.img[s.mdas[i].Offset : s.mdas[i].Offset+mdaHeaderSize]
}

func (s *synthPV) sealMDA(i int) {
	mh := s.mdaHeader(i)
	binary.LittleEndian.PutUint32(mh, lvmCRC(mh[4:]))
}

// setText stores text (a NUL is added) at offset off of area i's circular
// buffer, wrapping past its end to just after its header as lvm2 does,
// and points the area's first raw location at it.
func (s *synthPV) setText(i int, off uint64, text string) {
	m := s.mdas[i]
	b := append([]byte(text), 0)
	pos := off
	for _, c := range b {
		if pos == m.Size {
			pos = mdaHeaderSize
		}
		s.img[m.Offset+pos] = c
		pos++
	}
	mh := s.mdaHeader(i)
	binary.LittleEndian.PutUint64(mh[40:], off)
	binary.LittleEndian.PutUint64(mh[48:], uint64(len(b)))
	binary.LittleEndian.PutUint32(mh[56:], lvmCRC(b))
	binary.LittleEndian.PutUint32(mh[60:], 0)
	s.sealMDA(i)
}

func (s *synthPV) reader() *bytes.Reader { return bytes.NewReader(s.img) }

func (s *synthPV) dev() PVDevice {
	return PVDevice{Name: "synth", Dev: s.reader(), Size: int64(len(s.img))}
}

// synthLV is one LV for synthText: name and its segment sections.
func synthLV(name string, segs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\t\t%s {\n\t\t\tid = %q\n\t\t\tstatus = [\"READ\", \"WRITE\", \"VISIBLE\"]\n\t\t\tflags = []\n\t\t\tsegment_count = %d\n", name, fakeUUID(name), len(segs))
	for i, s := range segs {
		fmt.Fprintf(&b, "\n\t\t\tsegment%d {\n%s\t\t\t}\n", i+1, s)
	}
	b.WriteString("\t\t}\n")
	return b.String()
}

// linearSeg and stripedSeg are segment bodies as lvm2 writes them.
func linearSeg(start, count int, pv string, pe int) string {
	return fmt.Sprintf("\t\t\t\tstart_extent = %d\n\t\t\t\textent_count = %d\n\n\t\t\t\ttype = \"striped\"\n\t\t\t\tstripe_count = 1\t# linear\n\n\t\t\t\tstripes = [\n\t\t\t\t\t%q, %d\n\t\t\t\t]\n",
		start, count, pv, pe)
}

func stripedSeg(start, count, stripeSectors int, areas ...any) string {
	var list []string
	for i := 0; i+1 < len(areas); i += 2 {
		list = append(list, fmt.Sprintf("\t\t\t\t\t%q, %d", areas[i], areas[i+1]))
	}
	return fmt.Sprintf("\t\t\t\tstart_extent = %d\n\t\t\t\textent_count = %d\n\n\t\t\t\ttype = \"striped\"\n\t\t\t\tstripe_count = %d\n\t\t\t\tstripe_size = %d\n\n\t\t\t\tstripes = [\n%s\n\t\t\t\t]\n",
		start, count, len(list), stripeSectors, strings.Join(list, ",\n"))
}

// synthText is a VG metadata text laid out as lvm2 stores it in a
// metadata area (the VG section first: lvm2's scan wants the text to
// begin with the VG name): VG "vgs" of one PV,
// pv0, whose extents are extentSectors long, peCount of them from
// peStartSectors, on a device of devSectors.
func synthText(seqno, extentSectors, peStartSectors, peCount, devSectors int, lvs ...string) string {
	return fmt.Sprintf(`vgs {
	id = %q
	seqno = %d
	format = "lvm2"			# informational
	status = ["RESIZEABLE", "READ", "WRITE"]
	flags = []
	extent_size = %d
	max_lv = 0
	max_pv = 0
	metadata_copies = 0

	physical_volumes {

		pv0 {
			id = %q
			device = "/dev/synth"	# Hint only

			status = ["ALLOCATABLE"]
			flags = []
			dev_size = %d
			pe_start = %d
			pe_count = %d
		}
	}

	logical_volumes {

%s	}

}
# Generated by LVM2 version 2.03.16(2) (2022-05-18): Thu Jan  1 00:00:00 2026

contents = "Text Format Volume Group"
version = 1

description = "synthetic"

creation_host = "synth"	# Linux synth
creation_time = 1767225600	# Thu Jan  1 00:00:00 2026
`, synthVGUUID, seqno, extentSectors, synthPVUUID, devSectors, peStartSectors, peCount, strings.Join(lvs, "\n"))
}

// The standard synthetic PV: 1 MiB, one metadata area at 4096 up to
// 64 KiB, extents of 4 KiB from 64 KiB, 200 of them.
const (
	stdSize    = 1 << 20
	stdMDAOff  = 4096
	stdMDASize = 65536 - 4096
	stdExtent  = 8   // sectors
	stdPEStart = 128 // sectors
	stdPECount = 200
)

func stdText(seqno int, lvs ...string) string {
	return synthText(seqno, stdExtent, stdPEStart, stdPECount, stdSize/sectorSize, lvs...)
}

func stdLVs() []string {
	return []string{
		synthLV("lin", linearSeg(0, 3, "pv0", 0), linearSeg(3, 2, "pv0", 10)),
		synthLV("str", stripedSeg(0, 6, 8, "pv0", 20, "pv0", 30, "pv0", 40)),
	}
}

func stdSynth(text string) *synthPV {
	s := newSynth(stdSize, stdPEStart*sectorSize, Area{stdMDAOff, stdMDASize})
	s.setText(0, mdaHeaderSize, text)
	return s
}

// TestSynthetic reads the standard synthetic PV, plain and with its text
// wrapped around the circular buffer's end, and checks an LV read and
// write on it, the three-stripe LV included, against offsets computed
// from the text by hand.
func TestSynthetic(t *testing.T) {
	text := stdText(7, stdLVs()...)
	for _, wrap := range []bool{false, true} {
		s := newSynth(stdSize, stdPEStart*sectorSize, Area{stdMDAOff, stdMDASize})
		off := uint64(mdaHeaderSize)
		if wrap {
			off = stdMDASize - 100
		}
		s.setText(0, off, text)
		pv, err := ReadPV(s.reader(), stdSize)
		if err != nil {
			t.Fatal(err)
		}
		if pv.UUID != synthPVUUID || pv.LabelSector != 1 || pv.Seqno != 7 || pv.VGName != "vgs" || pv.MetadataAreas[0].Wrapped != wrap {
			t.Fatalf("wrap %v: %+v", wrap, pv)
		}
		if string(pv.Metadata) != text {
			t.Fatalf("wrap %v: the text read differs from the one written", wrap)
		}
	}
	s := stdSynth(text)
	img := &memDev{b: s.img}
	vg, err := Open(PVDevice{Name: "synth", Dev: img, Size: stdSize})
	if err != nil {
		t.Fatal(err)
	}
	d, err := vg.OpenLV("str")
	if err != nil {
		t.Fatal(err)
	}
	ext := int64(stdExtent * sectorSize)
	pe := int64(stdPEStart * sectorSize)
	pat := pattern(9, 6*ext)
	if n, err := d.WriteAt(pat, 0); err != nil || n != len(pat) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	// Three stripes of one 4 KiB chunk each per extent pair: chunk c
	// goes to stripe c%3 at row c/3.
	for c := int64(0); c < 6; c++ {
		base := pe + []int64{20, 30, 40}[c%3]*ext + (c/3)*ext
		if !bytes.Equal(img.b[base:base+ext], pat[c*ext:(c+1)*ext]) {
			t.Fatalf("chunk %d is not at byte %d", c, base)
		}
	}
	d2, err := vg.OpenLV("lin")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5*ext)
	copy(img.b[pe+10*ext:], "second segment")
	if _, err := d2.ReadAt(got, 0); err != io.EOF && err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got[3*ext:], []byte("second segment")) {
		t.Fatal("the second segment is not read from extent 10")
	}
	// A read-only device: reads work, writes are ErrReadOnly.
	vg, err = Open(PVDevice{Name: "ro", Dev: bytes.NewReader(s.img), Size: stdSize})
	if err != nil {
		t.Fatal(err)
	}
	if d, err = vg.OpenLV("lin"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt([]byte{1}, 0); !d.ReadOnly() || !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a write through a bytes.Reader: %v", err)
	}
	// A writable device marked ReadOnly: the same, and nothing written.
	before := append([]byte(nil), s.img...)
	vg, err = Open(PVDevice{Name: "marked", Dev: &memDev{b: s.img}, Size: stdSize, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if d, err = vg.OpenLV("str"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt([]byte{1}, 0); !d.ReadOnly() || !errors.Is(err, ErrReadOnly) || !bytes.Equal(before, s.img) {
		t.Fatalf("a write through a device marked ReadOnly: %v", err)
	}
	// An LV whose status lacks WRITE (lvchange -p r) is read-only too.
	ro := strings.Replace(text, `status = ["READ", "WRITE", "VISIBLE"]`, `status = ["READ", "VISIBLE"]`, 1)
	vg, err = Open(PVDevice{Name: "rolv", Dev: &memDev{b: stdSynth(ro).img}, Size: stdSize})
	if err != nil {
		t.Fatal(err)
	}
	if d, err = vg.OpenLV("lin"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt([]byte{1}, 0); !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), "lacks WRITE") {
		t.Fatalf("a write to an LV without WRITE: %v", err)
	}
}

// memDev is a writable in-memory device.
type memDev struct{ b []byte }

func (m *memDev) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memDev) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(len(m.b)) {
		return 0, io.ErrShortWrite
	}
	return copy(m.b[off:], p), nil
}

// TestLVM2ReadsSynthetic puts the synthetic PV, its text wrapped, on a
// loop device and asks lvm2 what it sees: the VG, its seqno and both LVs
// with the segments the text gives. The builder and lvm2 agree, so the
// synthetic cases test the format lvm2 reads.
func TestLVM2ReadsSynthetic(t *testing.T) {
	// 4 MiB: lvm2 ignores devices under devices/pv_min_size (2 MiB);
	// the PV itself is the first 1 MiB.
	e := newLVM2(t, 4)
	s := newSynth(stdSize, stdPEStart*sectorSize, Area{stdMDAOff, stdMDASize})
	s.setText(0, stdMDASize-100, stdText(7, stdLVs()...))
	e.put(0, 0, s.img)
	if got := e.seqno("vgs"); got != 7 {
		t.Fatalf("vgs says seqno %d", got)
	}
	var rows []string
	for _, sg := range e.Segments("vgs") {
		rows = append(rows, fmt.Sprintf("%s %d %v", sg.LV, sg.StartPE, sg.Ranges))
	}
	loop := e.Loops[0]
	want := []string{
		fmt.Sprintf("lin 0 [{%s 0 2}]", loop),
		fmt.Sprintf("lin 3 [{%s 10 11}]", loop),
		fmt.Sprintf("str 0 [{%s 20 21} {%s 30 31} {%s 40 41}]", loop, loop, loop),
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lvs of the synthetic PV:\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}
