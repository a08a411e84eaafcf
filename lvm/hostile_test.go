package lvm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// checkOneLine fails unless err is set, says want, and is one line.
func checkOneLine(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want an error with %q", what, want)
	}
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "lvm: ") {
		t.Fatalf("%s: %q, want one line starting \"lvm: \" with %q", what, err, want)
	}
}

// TestHostileMetadata feeds ParseMetadata texts that lvm2 would never
// write: each must fail with one line saying what is wrong, without a
// panic and without allocating what the text claims.
func TestHostileMetadata(t *testing.T) {
	lin, str := stdLVs()[0], stdLVs()[1]
	cases := []struct {
		name, text, want string
	}{
		{"overlapping segments", stdText(1, synthLV("ov", linearSeg(0, 3, "pv0", 0), linearSeg(2, 2, "pv0", 50))), "overlaps"},
		{"a gap between segments", stdText(1, synthLV("gap", linearSeg(0, 3, "pv0", 0), linearSeg(4, 2, "pv0", 50))), "in no segment"},
		{"a first segment after 0", stdText(1, synthLV("late", linearSeg(1, 3, "pv0", 0))), "extents 0-0 are in no segment"},
		{"two LVs on the same extents", stdText(1, lin, synthLV("dup", linearSeg(0, 4, "pv0", 2))), "mapped by lin and dup"},
		{"one LV twice on the same extents", stdText(1, synthLV("self", linearSeg(0, 3, "pv0", 0), linearSeg(3, 3, "pv0", 1))), "mapped by self twice"},
		{"extents beyond the PV", stdText(1, synthLV("far", linearSeg(0, 3, "pv0", 198))), "beyond its 200 extents"},
		{"a huge extent count", stdText(1, synthLV("huge", linearSeg(0, 4294967295, "pv0", 0))), "beyond its 200 extents"},
		{"an extent count over 32 bits", stdText(1, synthLV("huge", linearSeg(0, 1<<40, "pv0", 0))), "out of range"},
		{"a huge start extent", stdText(1, synthLV("huge", linearSeg(4294967295, 1, "pv0", 0))), "in no segment"},
		{"a negative extent", stdText(1, synthLV("neg", linearSeg(0, 3, "pv0", -1))), "bad extent -1"},
		{"a huge stripe count", strings.Replace(stdText(1, str), "stripe_count = 3", "stripe_count = 4294967295", 1), "stripes lists 6 values"},
		{"stripes that do not divide", stdText(1, synthLV("odd", stripedSeg(0, 5, 8, "pv0", 20, "pv0", 30))), "do not divide"},
		{"a stripe size of 0", stdText(1, synthLV("zero", stripedSeg(0, 4, 0, "pv0", 20, "pv0", 30))), "stripe_size is 0"},
		{"partial chunks", stdText(1, synthLV("part", stripedSeg(0, 4, 24, "pv0", 20, "pv0", 30))), "whole number"},
		{"a stripe on nothing", stdText(1, synthLV("ghost", linearSeg(0, 1, "pv9", 0))), "neither a PV nor an LV"},
		{"a wrong segment_count", strings.Replace(stdText(1, lin), "segment_count = 2", "segment_count = 1000000", 1), "segment_count is 1000000 but there are 2"},
		{"an extent count of 0", stdText(1, synthLV("empty", linearSeg(0, 0, "pv0", 0))), "extent_count is 0"},
		{"a huge pe_count", strings.Replace(stdText(1), "pe_count = 200", "pe_count = 99999999999", 1), "out of range"},
		{"an extent size of 0", strings.Replace(stdText(1), "extent_size = 8", "extent_size = 0", 1), "extent_size is 0"},
		{"pe_start overflowing", strings.Replace(stdText(1), "pe_start = 128", "pe_start = 18014398509481983", 1), "overflow"},
		{"a PV twice", strings.Replace(stdText(1), "physical_volumes {", "physical_volumes {\npv0 { id = \""+fakeUUID("zz")+"\"\npe_start = 128\npe_count = 1 }", 1), "given twice"},
		{"an LV twice", stdText(1, lin, lin), "given twice"},
		{"a key twice", strings.Replace(stdText(1), "seqno = 1", "seqno = 1\nseqno = 9", 1), `"seqno" given twice`},
		{"no segment type", strings.Replace(stdText(1, lin), "type = \"striped\"", "", 1), `"type" missing`},
		{"a non-numeric extent count", strings.Replace(stdText(1, lin), "extent_count = 3", "extent_count = \"3\"", 1), "not an integer"},
		{"a wrong contents", strings.Replace(stdText(1), "Text Format Volume Group", "Text Format", 1), "contents is"},
		{"version 2", strings.Replace(stdText(1), "version = 1", "version = 2", 1), "format version 2"},
		{"no VG section", "contents = \"Text Format Volume Group\"\nversion = 1\n", "no volume group section"},
		{"a short PV uuid", strings.Replace(stdText(1), synthPVUUID, "abc", 1), "not an lvm2 uuid"},
		{"an integer over 64 bits", strings.Replace(stdText(1), "seqno = 1", "seqno = 99999999999999999999", 1), "bad integer"},
		{"an unterminated string", `vg { id = "abc`, "unterminated string"},
		{"an unterminated section", "vg {\nid = 1\n", "unexpected end of text"},
		{"a missing '='", "vg {\nid 1\n}", "expected '=' or '{'"},
		{"a stray '}'", "}", "unexpected \"}\""},
		{"a stray ']'", "a = ]", "expected a value"},
		{"an empty name", `"" = 1`, "empty name"},
		{"a name with a newline", "\"a\nb\" = 1", "control character"},
		{"a bad VG uuid", strings.Replace(stdText(1), synthVGUUID, "synthV-0000-1111-2222-3333-4444-vgvg%g", 1), "not an lvm2 uuid"},
		{"deep nesting", strings.Repeat("a {\n", 100000), "nested more than 32 deep"},
		{"many values", "a = [" + strings.Repeat("1,", maxItems+1) + "]", "more than 524288 nodes and values"},
		{"many sections", strings.Repeat("a{}", maxItems+1), "more than 524288 nodes and values"},
	}
	for _, c := range cases {
		_, err := ParseMetadata([]byte(c.text))
		checkOneLine(t, c.name, err, c.want)
	}
	// The standard text itself is fine, and so is lvm2's quoting.
	vg, err := ParseMetadata([]byte(stdText(1, stdLVs()...)))
	if err != nil {
		t.Fatal(err)
	}
	if len(vg.LVs()) != 2 || vg.ExtentSize != 4096 {
		t.Fatalf("%+v", vg)
	}
	if _, err := vg.OpenLV("lin"); !errors.Is(err, ErrMissingPV) {
		t.Fatalf("OpenLV without devices: %v", err)
	}
	q := strings.Replace(stdText(1), `device = "/dev/synth"`, `device = "/dev/a\"b\\c"`, 1)
	if vg, err = ParseMetadata([]byte(q)); err != nil || vg.PVs[0].DeviceHint != `/dev/a"b\c` {
		t.Fatalf("escaped quotes: %v %q", err, vg.PVs[0].DeviceHint)
	}
	if _, err := ParseMetadata([]byte(strings.Repeat("a {\n", 31) + strings.Repeat("}\n", 31))); err == nil || !strings.Contains(err.Error(), "contents") {
		t.Fatalf("31 levels of nesting should parse and then lack contents: %v", err)
	}
}

// TestHostilePV damages the label, the PV header, the metadata area
// header and the text location of a synthetic PV, and gives Open PV
// layouts that would put extents over metadata or past the device. Each
// is one line, no panic, and no allocation of a size read from the disk.
func TestHostilePV(t *testing.T) {
	text := stdText(3, stdLVs()...)
	type tc struct {
		name string
		mod  func(s *synthPV)
		want string
	}
	noPV := []tc{
		{"zeros", func(s *synthPV) { s.img = make([]byte, stdSize) }, "no LVM2 physical volume label"},
		{"a bad label checksum", func(s *synthPV) { s.label()[100] ^= 1 }, "bad checksum"},
		{"a label for another sector", func(s *synthPV) {
			binary.LittleEndian.PutUint64(s.label()[8:], 5)
			s.sealLabel()
		}, "says sector 5"},
		{"another label type", func(s *synthPV) { copy(s.label()[24:], "LVM1 001"); s.sealLabel() }, "of type"},
		{"a device of 100 bytes", func(s *synthPV) { s.img = s.img[:100] }, "smaller than a sector"},
	}
	for _, c := range noPV {
		s := stdSynth(text)
		c.mod(s)
		_, err := ReadPV(s.reader(), int64(len(s.img)))
		checkOneLine(t, c.name, err, c.want)
		if !errors.Is(err, ErrNoPV) {
			t.Fatalf("%s: %v is not ErrNoPV", c.name, err)
		}
	}
	header := []tc{
		{"a PV header offset past the sector", func(s *synthPV) {
			binary.LittleEndian.PutUint32(s.label()[20:], 500)
			s.sealLabel()
		}, "outside the label sector"},
		{"area lists without an end", func(s *synthPV) {
			l := s.label()
			for i := 32 + pvHeaderSize; i < sectorSize; i++ {
				l[i] = 0xff
			}
			s.sealLabel()
		}, "runs past the label sector"},
		{"an unprintable uuid", func(s *synthPV) { s.label()[40] = 0; s.sealLabel() }, "not an lvm2 uuid"},
	}
	for _, c := range header {
		s := stdSynth(text)
		c.mod(s)
		_, err := ReadPV(s.reader(), int64(len(s.img)))
		checkOneLine(t, c.name, err, c.want)
	}
	// Damage confined to the metadata area: ReadPV succeeds, the area
	// says why it was set aside, Open says there is no metadata.
	rlocn := func(off, size uint64) func(s *synthPV) {
		return func(s *synthPV) {
			mh := s.mdaHeader(0)
			binary.LittleEndian.PutUint64(mh[40:], off)
			binary.LittleEndian.PutUint64(mh[48:], size)
			s.sealMDA(0)
		}
	}
	area := []tc{
		{"a bad area header checksum", func(s *synthPV) { s.mdaHeader(0)[100] ^= 1 }, "bad checksum"},
		{"a bad magic", func(s *synthPV) { s.mdaHeader(0)[5] ^= 1; s.sealMDA(0) }, "bad magic"},
		{"version 2", func(s *synthPV) { s.mdaHeader(0)[20] = 2; s.sealMDA(0) }, "version 2"},
		{"a wrong start", func(s *synthPV) {
			binary.LittleEndian.PutUint64(s.mdaHeader(0)[24:], 8192)
			s.sealMDA(0)
		}, "says it starts at byte 8192"},
		{"an area larger than the PV header's", func(s *synthPV) {
			binary.LittleEndian.PutUint64(s.mdaHeader(0)[32:], 1<<40)
			s.sealMDA(0)
		}, "gives a size of 1099511627776 bytes"},
		{"a text size of 2^40", rlocn(512, 1<<40), "outside the"},
		{"a text offset past the area", rlocn(stdMDASize+512, 100), "outside the"},
		{"a text inside the header", rlocn(100, 100), "outside the"},
		{"a bad text checksum", func(s *synthPV) { s.img[stdMDAOff+600] ^= 1 }, "checksum"},
		{"an ignored area", func(s *synthPV) {
			s.mdaHeader(0)[60] = rawLocnIgnored
			s.sealMDA(0)
		}, "ignored"},
		{"an empty area (an orphan PV)", rlocn(0, 0), "empty"},
		{"a text that does not parse", func(s *synthPV) { s.setText(0, 512, "vgs {") }, "unexpected end of text"},
		{"a text without seqno", func(s *synthPV) { s.setText(0, 512, `vgs { id = "`+synthVGUUID+`" }`) }, `"seqno" missing`},
	}
	for _, c := range area {
		s := stdSynth(text)
		c.mod(s)
		pv, err := ReadPV(s.reader(), stdSize)
		if err != nil {
			t.Fatalf("%s: ReadPV: %v", c.name, err)
		}
		if pv.Metadata != nil {
			t.Fatalf("%s: metadata chosen", c.name)
		}
		_, err = Open(s.dev())
		checkOneLine(t, c.name, err, c.want)
		if !errors.Is(err, ErrNoMetadata) {
			t.Fatalf("%s: %v is not ErrNoMetadata", c.name, err)
		}
	}
	// Layouts whose extents would reach LVM metadata or leave the device.
	layout := []struct{ name, text, want string }{
		{"extents beyond the device", synthText(3, stdExtent, stdPEStart, 250, 2048), "beyond the device's 1048576 bytes"},
		{"extents over the label", synthText(3, stdExtent, 0, 10, 2048), "overlap the label"},
		{"extents over the metadata area", synthText(3, stdExtent, 64, 10, 2048), "overlap the metadata area"},
	}
	for _, c := range layout {
		s := stdSynth(c.text)
		_, err := Open(s.dev())
		checkOneLine(t, c.name, err, c.want)
	}
	// A bootloader area (PV header extension) inside the extents.
	ba := stdSynth(text)
	ext := ba.label()[32+pvHeaderSize+16*4:]
	binary.LittleEndian.PutUint32(ext, 2)
	binary.LittleEndian.PutUint64(ext[8:], 70000)
	binary.LittleEndian.PutUint64(ext[16:], 4096)
	ba.sealLabel()
	_, err := Open(ba.dev())
	checkOneLine(t, "extents over a bootloader area", err, "overlap the bootloader area at byte 70000")
	// And one that never ends.
	for i := 32 + pvHeaderSize + 16*4 + 8; i < sectorSize; i++ {
		ba.label()[i] = 0xee
	}
	ba.sealLabel()
	_, err = ReadPV(ba.reader(), stdSize)
	checkOneLine(t, "an endless bootloader area list", err, "bootloader area list runs past")
	// Open's own checks.
	s := stdSynth(text)
	_, err = Open(s.dev(), s.dev())
	checkOneLine(t, "the same PV twice", err, "are the same PV")
	other := stdSynth(strings.Replace(text, synthPVUUID, "otherA-0000-1111-2222-3333-4444-pvpvpv", 1))
	_, err = Open(other.dev())
	checkOneLine(t, "a PV not in its own metadata", err, "is not in volume group vgs")
	_, err = Open()
	checkOneLine(t, "no devices", err, "no devices")
	// A text of the right checksum but hostile content fails Open.
	bad := stdSynth(stdText(3, synthLV("ov", linearSeg(0, 3, "pv0", 0), linearSeg(2, 2, "pv0", 50))))
	_, err = Open(bad.dev())
	checkOneLine(t, "overlapping segments through Open", err, "overlaps")
	// And a clean one works, closing and reading past the end included.
	vg, err := Open(stdSynth(text).dev())
	if err != nil {
		t.Fatal(err)
	}
	d, err := vg.OpenLV("lin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadAt(make([]byte, 1), -1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read at -1: %v", err)
	}
	if n, err := d.ReadAt(make([]byte, 1), 5*4096); n != 0 || err == nil {
		t.Fatalf("read at the end: %d, %v", n, err)
	}
	d.Close()
	if err := d.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if !bytes.Equal(stdSynth(text).img, stdSynth(text).img) {
		t.Fatal("the synthetic builder is not deterministic")
	}
}
