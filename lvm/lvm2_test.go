package lvm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/imagetest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// The tests in this file build their PVs with lvm2 itself on loop devices
// (imagetest.LVM: no LV is ever activated, and a private configuration
// sees only the test's loop devices) and take lvm2's word (lvs, pvs) for
// where each LV lives.

// lvm2Env is one test's loop devices and lvm2 configuration
// (internal/imagetest), with the readers these tests add.
type lvm2Env struct {
	*imagetest.LVM
	t *testing.T
}

// newLVM2 makes one backing file of sizeMiB per entry, attaches each to a
// free loop device (detached again by t.Cleanup whatever happens) and
// writes an lvm.conf accepting only those devices.
func newLVM2(t *testing.T, sizesMiB ...int) *lvm2Env {
	t.Helper()
	testenv.Need(t, "pvcreate", "lvm2")
	return &lvm2Env{imagetest.NewLVM(t, sizesMiB...), t}
}

// open opens every loop device read-write and gives them to Open.
func (e *lvm2Env) open(which ...int) (*VG, error) {
	e.t.Helper()
	if len(which) == 0 {
		for i := range e.Loops {
			which = append(which, i)
		}
	}
	var devs []PVDevice
	for _, i := range which {
		f, err := os.OpenFile(e.Loops[i], os.O_RDWR, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { f.Close() })
		size, err := f.Seek(0, 2)
		if err != nil {
			e.t.Fatal(err)
		}
		devs = append(devs, PVDevice{Name: e.Loops[i], Dev: f, Size: size})
	}
	return Open(devs...)
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("lvm2 printed %q where a number was expected", s)
	}
	return v
}

// readFiles returns the backing files' contents by loop device.
func (e *lvm2Env) readFiles() map[string][]byte {
	e.t.Helper()
	m := map[string][]byte{}
	for i, f := range e.Files {
		b, err := os.ReadFile(f)
		if err != nil {
			e.t.Fatal(err)
		}
		m[e.Loops[i]] = b
	}
	return m
}

// pattern is size bytes that differ at every 4-byte position and between
// LVs (seed), so a byte in the wrong place cannot match by chance.
func pattern(seed uint32, size int64) []byte {
	b := make([]byte, size)
	x := seed*2654435761 + 1
	for i := 0; i+4 <= len(b); i += 4 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i], b[i+1], b[i+2], b[i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	return b
}

// TestLVM2Layout builds a VG of two PVs with lvm2 — a linear LV, a
// striped one across both PVs, one of two segments on the same PV after
// lvextend, one spanning both PVs, a striped one extended into a second
// striped segment — and checks that blkcrypt's VG agrees with lvs and
// pvs, that a pattern written through each LV lands exactly where lvs and
// pvs say (computed independently by lvm2Place), that nothing else on the
// devices changes (labels, metadata, other LVs, free extents), that reads
// return the pattern, and that lvm2 still reads its metadata afterwards.
func TestLVM2Layout(t *testing.T) {
	e := newLVM2(t, 40, 40)
	a, b := e.Loops[0], e.Loops[1]
	e.Run("pvcreate", "-y", a, b)
	e.Run("vgcreate", "-s", "1m", "vgt", a, b)
	e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "3", "-n", "lin", "vgt", a+":0-2")
	e.Run("lvcreate", "-an", "-Zn", "-y", "-i", "2", "-I", "64k", "-l", "4", "-n", "str", "vgt", a+":3-4", b+":0-1")
	e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "2", "-n", "two", "vgt", a+":5-6")
	e.Run("lvextend", "-y", "-l", "+2", "vgt/two", a+":10-11")
	e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "5", "-n", "span", "vgt", a+":36-38", b+":2-3")
	e.Run("lvcreate", "-an", "-Zn", "-y", "-i", "2", "-I", "8k", "-l", "2", "-n", "str2", "vgt", a+":12", b+":4")
	e.Run("lvextend", "-y", "-i", "2", "-I", "8k", "-l", "+4", "vgt/str2", a+":20-21", b+":20-21")

	segs := e.Segments("vgt")
	peStart, extent := e.PVs()
	vg, err := e.open()
	if err != nil {
		t.Fatal(err)
	}
	if vg.Name != "vgt" || vg.ExtentSize != extent {
		t.Fatalf("VG %s extent %d, lvm2 says vgt extent %d", vg.Name, vg.ExtentSize, extent)
	}
	for _, p := range vg.PVs {
		if p.Device == "" || p.PEStart != peStart[p.Device] {
			t.Errorf("%s on %q: pe_start %d, pvs says %d", p.Name, p.Device, p.PEStart, peStart[p.Device])
		}
	}
	byLV := map[string][]imagetest.Segment{}
	for _, s := range segs {
		byLV[s.LV] = append(byLV[s.LV], s)
	}
	if len(byLV) != len(vg.LVs()) {
		t.Fatalf("%d LVs, lvs lists %d", len(vg.LVs()), len(byLV))
	}
	// The segments blkcrypt read must be lvs's, PV by PV.
	devOf := map[string]string{}
	for _, p := range vg.PVs {
		devOf[p.Name] = p.Device
	}
	for name, ls := range byLV {
		lv, err := vg.LV(name)
		if err != nil {
			t.Fatal(err)
		}
		if lv.Size != ls[0].LVSize || len(lv.Segments) != len(ls) {
			t.Fatalf("%s: %d bytes in %d segments, lvs says %d bytes in %d", name, lv.Size, len(lv.Segments), ls[0].LVSize, len(ls))
		}
		for i, s := range lv.Segments {
			want := ls[i]
			if s.StartExtent != want.StartPE || s.ExtentCount != want.SizePE || len(s.Stripes) != want.Stripes || (want.Stripes > 1 && s.StripeSize != want.StripeSize) {
				t.Fatalf("%s segment %d: %v; lvs: %+v", name, i, s, want)
			}
			for k, st := range s.Stripes {
				r := want.Ranges[k]
				if devOf[st.PV] != r.Dev || st.StartExtent != r.Start || st.StartExtent+s.ExtentCount/uint64(len(s.Stripes))-1 != r.End {
					t.Fatalf("%s segment %d stripe %d: %s:%d, lvs: %+v", name, i, k, devOf[st.PV], st.StartExtent, r)
				}
			}
		}
		t.Logf("%v", lv)
	}

	for seed, name := range []string{"lin", "str", "two", "span", "str2"} {
		before := e.readFiles()
		d, err := vg.OpenLV(name)
		if err != nil {
			t.Fatal(err)
		}
		size, err := d.Size()
		if err != nil || size != byLV[name][0].LVSize {
			t.Fatalf("%s: Size %d, %v; lvs says %d", name, size, err, byLV[name][0].LVSize)
		}
		pat := pattern(uint32(seed+1), size)
		// Odd-sized writes cross chunk, extent and segment boundaries
		// in the middle of a call.
		const step = 100003
		for off := int64(0); off < size; off += step {
			n, err := d.WriteAt(pat[off:min(off+step, size)], off)
			if err != nil || n != int(min(step, size-off)) {
				t.Fatalf("%s: WriteAt at %d: %d, %v", name, off, n, err)
			}
		}
		if _, err := d.WriteAt(make([]byte, 2), size-1); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("%s: a write past the end gave %v, want ErrOutOfRange", name, err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		after := e.readFiles()
		// Every LV byte where lvm2 says; everything else unchanged.
		want := map[string][]byte{}
		for dev, bs := range before {
			want[dev] = append([]byte(nil), bs...)
		}
		for off := int64(0); off < size; {
			p := imagetest.Locate(byLV[name], peStart, extent, off)
			off += int64(copy(want[p.Dev][p.Off:p.Off+p.Run], pat[off:]))
		}
		for dev := range want {
			if !bytes.Equal(want[dev], after[dev]) {
				i := 0
				for want[dev][i] == after[dev][i] {
					i++
				}
				t.Fatalf("%s: %s differs from lvm2's layout first at byte %d", name, dev, i)
			}
		}
		got := make([]byte, size)
		for off := int64(0); off < size; off += 65537 {
			if n, err := d.ReadAt(got[off:min(off+65537, size)], off); err != nil || n != int(min(65537, size-off)) {
				t.Fatalf("%s: ReadAt at %d: %d, %v", name, off, n, err)
			}
		}
		if !bytes.Equal(got, pat) {
			t.Fatalf("%s: read back differs from what was written", name)
		}
		if n, err := d.ReadAt(got[:10], size-4); n != 4 || err == nil {
			t.Fatalf("%s: read across the end: %d, %v; want 4, io.EOF", name, n, err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ReadAt(got[:1], 0); !errors.Is(err, ErrClosed) {
			t.Fatalf("%s: read after Close: %v", name, err)
		}
	}
	// lvm2 still finds its metadata whole.
	e.Run("vgck", "vgt")
	if got := e.Segments("vgt"); len(got) != len(segs) {
		t.Fatalf("lvs after the writes lists %d segments, before %d", len(got), len(segs))
	}
}

// TestLVM2MissingPV opens the VG with one of its two PVs: an LV on it
// alone works, one that needs the other is refused, naming that PV.
func TestLVM2MissingPV(t *testing.T) {
	e := newLVM2(t, 16, 16)
	a, b := e.Loops[0], e.Loops[1]
	e.Run("pvcreate", "-y", a, b)
	e.Run("vgcreate", "-s", "1m", "vgm", a, b)
	e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "2", "-n", "ona", "vgm", a)
	e.Run("lvcreate", "-an", "-Zn", "-y", "-i", "2", "-l", "2", "-n", "both", "vgm", a, b)
	vg, err := e.open(0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := vg.OpenLV("ona")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	_, err = vg.OpenLV("both")
	uuid := strings.TrimSpace(e.Run("pvs", "--noheadings", "-o", "pv_uuid", b))
	if !errors.Is(err, ErrMissingPV) || !strings.Contains(err.Error(), uuid) {
		t.Fatalf("OpenLV on a missing PV: %v; want ErrMissingPV naming %s", err, uuid)
	}
	t.Log(err)
	if _, err := vg.OpenLV("nosuch"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("OpenLV of no LV: %v", err)
	}
}

// TestLVM2Unsupported restores, with lvm2's vgcfgrestore (lvm2 writes the
// metadata and its checksums), a VG holding a thin pool and a thin LV, a
// RAID1 LV, a snapshot, and a cached LV with its cache pool, which
// lvcreate cannot make without device-mapper. lvs must list them with those segment types; OpenLV must
// refuse each with ErrUnsupported and a message naming its type, refuse
// their component LVs, and still open a plain linear LV.
func TestLVM2Unsupported(t *testing.T) {
	e := newLVM2(t, 40)
	a := e.Loops[0]
	e.Run("pvcreate", "-y", a)
	e.Run("vgcreate", "-s", "1m", "vgu", a)
	e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "2", "-n", "plain", "vgu")
	backup := filepath.Join(e.Dir, "vgu.txt")
	e.Run("vgcfgbackup", "-f", backup, "vgu")
	text, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	lin := func(name string, pe int, visible bool) string {
		st := `"READ", "WRITE"`
		if visible {
			st += `, "VISIBLE"`
		}
		return fmt.Sprintf(`
		%s {
			id = "%s"
			status = [%s]
			flags = []
			segment_count = 1
			segment1 {
				start_extent = 0
				extent_count = 1
				type = "striped"
				stripe_count = 1
				stripes = [ "pv0", %d ]
			}
		}
`, name, fakeUUID(name), st, pe)
	}
	add := fmt.Sprintf(`
		pool {
			id = "%s"
			status = ["READ", "WRITE", "VISIBLE"]
			flags = []
			segment_count = 1
			segment1 {
				start_extent = 0
				extent_count = 1
				type = "thin-pool"
				metadata = "pool_tmeta"
				pool = "pool_tdata"
				transaction_id = 1
				chunk_size = 128
				discards = "passdown"
				zero_new_blocks = 1
			}
		}
		thin1 {
			id = "%s"
			status = ["READ", "WRITE", "VISIBLE"]
			flags = []
			segment_count = 1
			segment1 {
				start_extent = 0
				extent_count = 2
				type = "thin"
				thin_pool = "pool"
				transaction_id = 0
				device_id = 1
			}
		}
		r1 {
			id = "%s"
			status = ["READ", "WRITE", "VISIBLE"]
			flags = []
			segment_count = 1
			segment1 {
				start_extent = 0
				extent_count = 1
				type = "raid1"
				device_count = 2
				region_size = 1024
				raids = [ "r1_rmeta_0", "r1_rimage_0", "r1_rmeta_1", "r1_rimage_1" ]
			}
		}
		snapshot0 {
			id = "%s"
			status = ["READ"]
			flags = []
			segment_count = 1
			segment1 {
				start_extent = 0
				extent_count = 1
				type = "snapshot"
				chunk_size = 8
				origin = "orig"
				cow_store = "cow"
			}
		}
		cached {
			id = "%s"
			status = ["READ", "WRITE", "VISIBLE"]
			flags = []
			segment_count = 1
			segment1 {
				start_extent = 0
				extent_count = 1
				type = "cache"
				cache_pool = "cpool"
				origin = "cached_corig"
			}
		}
		cpool {
			id = "%s"
			status = ["READ", "WRITE"]
			flags = []
			segment_count = 1
			segment1 {
				start_extent = 0
				extent_count = 1
				type = "cache-pool"
				data = "cpool_cdata"
				metadata = "cpool_cmeta"
				metadata_format = 2
				chunk_size = 128
				cache_mode = "writethrough"
				policy = "smq"
			}
		}
`, fakeUUID("pool"), fakeUUID("thin1"), fakeUUID("r1"), fakeUUID("snapshot0"), fakeUUID("cached"), fakeUUID("cpool")) +
		lin("cached_corig", 19, false) + lin("cpool_cdata", 20, false) + lin("cpool_cmeta", 21, false) +
		lin("pool_tmeta", 10, false) + lin("pool_tdata", 11, false) +
		lin("r1_rmeta_0", 13, false) + lin("r1_rimage_0", 14, false) + lin("r1_rmeta_1", 15, false) + lin("r1_rimage_1", 16, false) +
		lin("orig", 17, true) + lin("cow", 18, true)
	i := bytes.LastIndex(text, []byte("\t}\n\n}"))
	if i < 0 {
		t.Fatalf("vgcfgbackup's text does not end as expected:\n%s", text)
	}
	edited := append(append(append([]byte(nil), text[:i]...), add...), text[i:]...)
	if err := os.WriteFile(backup, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	e.Run("vgcfgrestore", "--force", "-f", backup, "vgu")
	types := map[string]string{}
	for _, s := range e.Segments("vgu") {
		types[s.LV] = s.Type
	}
	for lv, want := range map[string]string{"pool": "thin-pool", "thin1": "thin", "r1": "raid1", "snapshot0": "snapshot", "cached": "cache", "cpool": "cache-pool", "plain": "linear"} {
		// lvs hides snapshot0 behind its COW LV; the others it lists.
		if got, ok := types[lv]; ok && got != want || !ok && lv != "snapshot0" {
			t.Fatalf("lvs says %s is %q, want %q (lvm2 did not take the restored metadata as meant)", lv, got, want)
		}
	}
	vg, err := e.open()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ lv, want string }{
		{"thin1", "type thin"},
		{"pool", "type thin-pool"},
		{"r1", "type raid1"},
		{"snapshot0", "type snapshot"},
		{"pool_tdata", "pool (type thin-pool)"},
		{"pool_tmeta", "pool (type thin-pool)"},
		{"r1_rimage_1", "r1 (type raid1)"},
		{"orig", "snapshot0 (type snapshot) as its origin"},
		{"cow", "snapshot0 (type snapshot) as its cow_store"},
		{"cached", "type cache"},
		{"cpool", "type cache-pool"},
		{"cached_corig", "cached (type cache) as its origin"},
		{"cpool_cdata", "used by cpool (type cache-pool"}, // lvm2 writes cache-pool+METADATA_FORMAT
	} {
		_, err := vg.OpenLV(c.lv)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("OpenLV(%s): %v; want one line of ErrUnsupported with %q", c.lv, err, c.want)
		}
		t.Log(err)
	}
	d, err := vg.OpenLV("plain")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// fakeUUID makes a valid lvm2 uuid from a name, for hand-written LVs.
func fakeUUID(name string) string {
	id := []byte(strings.Repeat("x", 32))
	copy(id, strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return 'y'
	}, name))
	return formatUUID(string(id))
}
