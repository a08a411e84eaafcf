package lvm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets for the two parsers that read untrusted bytes: the
// metadata text parser (with the VG checks behind it) and the PV reader
// (label, PV header, metadata area headers, the circular buffer), run on
// devices of up to 1 MiB and followed through Open and OpenLV. The seed
// corpora in testdata/fuzz are synthetic (synth_test.go's builder, which
// TestLVM2ReadsSynthetic checks against lvm2); TestWriteFuzzSeeds writes
// them again with BLKCRYPT_WRITE_SEEDS=1.

// checkErr fails on an error that is more than one line or lacks the
// package prefix: every error must be fit to show as it is.
func checkErr(t *testing.T, err error) {
	t.Helper()
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "lvm: ") {
		t.Fatalf("error is not one \"lvm: \" line: %q", msg)
	}
}

// checkVG holds a parsed VG to what ParseMetadata promises.
func checkVG(t *testing.T, vg *VG) {
	t.Helper()
	if vg.ExtentSize <= 0 {
		t.Fatalf("extent size %d", vg.ExtentSize)
	}
	pvs := map[string]VGPV{}
	for _, p := range vg.PVs {
		pvs[p.Name] = p
	}
	for _, lv := range vg.LVs() {
		var next uint64
		for _, s := range lv.Segments {
			if s.StartExtent != next || s.ExtentCount == 0 {
				t.Fatalf("%s: segment %v after extent %d", lv.Name, s, next)
			}
			next += s.ExtentCount
			for _, st := range s.Stripes {
				if p, ok := pvs[st.PV]; ok && st.StartExtent+s.ExtentCount/uint64(len(s.Stripes)) > p.PECount {
					t.Fatalf("%s: stripe beyond %s", lv.Name, p.Name)
				}
			}
		}
		if next != lv.Extents || lv.Size != int64(lv.Extents)*vg.ExtentSize {
			t.Fatalf("%s: %d extents, %d bytes, segments end at %d", lv.Name, lv.Extents, lv.Size, next)
		}
	}
}

func FuzzMetadataText(f *testing.F) {
	f.Add([]byte(stdText(1, stdLVs()...)))
	f.Fuzz(func(t *testing.T, b []byte) {
		vg, err := ParseMetadata(b)
		if err != nil {
			checkErr(t, err)
			return
		}
		checkVG(t, vg)
		for _, lv := range vg.LVs() {
			_ = lv.String()
			if _, err := vg.OpenLV(lv.Name); err == nil {
				t.Fatalf("%s opened without devices", lv.Name)
			} else {
				checkErr(t, err)
			}
		}
	})
}

func FuzzPV(f *testing.F) {
	f.Add(compactSynth(false).img)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<20 {
			return
		}
		pv, err := ReadPV(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			checkErr(t, err)
			return
		}
		if pv.Metadata == nil {
			return
		}
		img := &memDev{b: append([]byte(nil), b...)}
		vg, err := Open(PVDevice{Name: "fuzz", Dev: img, Size: int64(len(b))})
		if err != nil {
			checkErr(t, err)
			return
		}
		checkVG(t, vg)
		// Write through every LV that opens: no byte outside the PV's
		// extents may change (the label and metadata stay as they are).
		p := vg.PVs[0]
		for _, q := range vg.PVs {
			if q.Device != "" {
				p = q
			}
		}
		for _, lv := range vg.LVs() {
			d, err := vg.OpenLV(lv.Name)
			if err != nil {
				checkErr(t, err)
				continue
			}
			size, _ := d.Size()
			buf := bytes.Repeat([]byte{0xa5}, int(min(size, 1<<20)))
			if _, err := d.WriteAt(buf, size-int64(len(buf))); err != nil {
				t.Fatal(err)
			}
			if _, err := d.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			d.Close()
		}
		start, end := int64(0), int64(0) // no extents: nothing may change
		if p.PECount > 0 {
			start, end = p.PEStart, p.PEStart+int64(p.PECount)*vg.ExtentSize
		}
		if !bytes.Equal(img.b[:start], b[:start]) || !bytes.Equal(img.b[end:], b[end:]) {
			t.Fatal("a write through an LV changed bytes outside the PV's extents")
		}
	})
}

// compactSynth is a whole PV in 10 KiB for the FuzzPV seeds: the label in
// sector 1, a 4 KiB metadata area at 2048, eight one-sector extents from
// byte 6144; a linear LV and a striped one of 512-byte chunks.
func compactSynth(wrap bool) *synthPV {
	s := newSynth(10240, 6144, Area{2048, 4096})
	text := synthText(5, 1, 12, 8, 20,
		synthLV("lin", linearSeg(0, 2, "pv0", 0), linearSeg(2, 1, "pv0", 7)),
		synthLV("str", stripedSeg(0, 4, 1, "pv0", 2, "pv0", 4)))
	off := uint64(mdaHeaderSize)
	if wrap {
		off = 4096 - 300
	}
	s.setText(0, off, text)
	return s
}

// TestWriteFuzzSeeds checks that the committed seeds are what the builder
// makes, and writes them again with BLKCRYPT_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	seeds := map[string][]byte{
		"FuzzPV/compact":                compactSynth(false).img,
		"FuzzPV/compact-wrapped":        compactSynth(true).img,
		"FuzzMetadataText/standard":     []byte(stdText(1, stdLVs()...)),
		"FuzzMetadataText/lvm2-unusual": []byte(unusualText()),
	}
	for name, b := range seeds {
		path := filepath.Join("testdata", "fuzz", name)
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if os.Getenv("BLKCRYPT_WRITE_SEEDS") == "1" {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (BLKCRYPT_WRITE_SEEDS=1 writes the seeds)", err)
		}
		if string(got) != content {
			t.Fatalf("%s is not what the builder makes (BLKCRYPT_WRITE_SEEDS=1 writes it again)", path)
		}
	}
	// The seeds must be read as meant, or the fuzzer starts nowhere.
	for _, wrap := range []bool{false, true} {
		s := compactSynth(wrap)
		vg, err := Open(PVDevice{Name: "seed", Dev: s.reader(), Size: int64(len(s.img))})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"lin", "str"} {
			if _, err := vg.OpenLV(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	vg, err := ParseMetadata([]byte(unusualText()))
	if err != nil {
		t.Fatal(err)
	}
	lv, err := vg.LV("thin")
	if err != nil || lv.Segments[0].Type != "thin" {
		t.Fatalf("%v %v", lv, err)
	}
}

// unusualText is a metadata text with what lvm2's syntax allows beyond
// the standard text: a thin pool and a thin LV, single quotes, escaped
// double quotes, bare words, floats, octal, comments everywhere, an empty
// list, and the tidy layout of a vgcfgbackup file (header first).
func unusualText() string {
	return `# comment before anything
contents = "Text Format Volume Group"
version = 1
description = "with \"quotes\" and \\ backslash"
creation_time = 1767225600
vgs {
	id = 'synthV-0000-1111-2222-3333-4444-vgvgvg'
	seqno = 010 # octal, as strtoll reads it
	status = [RESIZEABLE, "READ", 'WRITE']
	flags = []
	extent_size = 8
	ratio = 1.5
	physical_volumes { pv0 { id = "` + synthPVUUID + `" pe_start = 128 pe_count = 200 } }
	logical_volumes {
		pool { id = "` + fakeUUID("pool") + `" status = ["READ","WRITE","VISIBLE"] segment_count = 1
			segment1 { start_extent = 0 extent_count = 2 type = "thin-pool" metadata = "pool_tmeta" pool = "pool_tdata" transaction_id = 1 chunk_size = 128 }
		}
		thin { id = "` + fakeUUID("thin") + `" status = ["READ","WRITE","VISIBLE"] segment_count = 1
			segment1 { start_extent = 0 extent_count = 4 type = "thin" thin_pool = "pool" device_id = 1 }
		}
		pool_tmeta { segment_count = 1 segment1 { start_extent = 0 extent_count = 1 type = "striped" stripe_count = 1 stripes = ["pv0", 0] } }
		pool_tdata { segment_count = 1 segment1 { start_extent = 0 extent_count = 2 type = "striped" stripe_count = 1 stripes = ["pv0", 1] } }
	}
}
`
}
