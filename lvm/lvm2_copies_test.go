package lvm

import (
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// readPVAt reads the PV on a loop device.
func (e *lvm2Env) readPV(i int) *PV {
	e.t.Helper()
	f, err := os.Open(e.Loops[i])
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		e.t.Fatal(err)
	}
	pv, err := ReadPV(f, size)
	if err != nil {
		e.t.Fatal(err)
	}
	return pv
}

// region reads n bytes at off of loop device i.
func (e *lvm2Env) region(i int, off, n int64) []byte {
	e.t.Helper()
	f, err := os.Open(e.Loops[i])
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// put writes b at off of loop device i.
func (e *lvm2Env) put(i int, off int64, b []byte) {
	e.t.Helper()
	f, err := os.OpenFile(e.Loops[i], os.O_RDWR, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

// textAt returns the device offset of the committed text of the metadata
// area at areaOff, from its raw location.
func (e *lvm2Env) textAt(i int, areaOff uint64) int64 {
	h := e.region(i, int64(areaOff), 64)
	return int64(areaOff + binary.LittleEndian.Uint64(h[40:]))
}

func (e *lvm2Env) seqno(vg string) uint64 {
	return mustUint(e.t, strings.TrimSpace(e.Run("vgs", "--noheadings", "-o", "vg_seqno", vg)))
}

// TestLVM2MetadataCopies: a PV made with two metadata areas (the second
// at the device's end) and a PV with one. Both of the first PV's copies
// are read; when an area holds an older copy (its bytes put back from
// before an lvcreate) the newest seqno wins, on one PV and across PVs;
// a copy whose text fails its checksum is set aside with the reason and
// the other copy used; with none left Open says ErrNoMetadata and why.
func TestLVM2MetadataCopies(t *testing.T) {
	e := newLVM2(t, 16, 16)
	a, b := e.Loops[0], e.Loops[1]
	e.Run("pvcreate", "-y", "--pvmetadatacopies", "2", a)
	e.Run("pvcreate", "-y", "--bootloaderareasize", "512k", b)
	e.Run("vgcreate", "-s", "1m", "vgc", a, b)
	e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "1", "-n", "first", "vgc")

	pv := e.readPV(0)
	if len(pv.MetadataAreas) != 2 {
		t.Fatalf("%d metadata areas, pvcreate --pvmetadatacopies 2 made 2", len(pv.MetadataAreas))
	}
	old := e.seqno("vgc")
	for i, m := range pv.MetadataAreas {
		if m.Err != nil || m.Seqno != old || m.VGName != "vgc" {
			t.Fatalf("area %d: %+v; vgs says seqno %d", i, m, old)
		}
	}
	if uuid := strings.TrimSpace(e.Run("pvs", "--noheadings", "-o", "pv_uuid", a)); pv.UUID != uuid {
		t.Fatalf("PV uuid %s, pvs says %s", pv.UUID, uuid)
	}
	// The bootloader area of the second PV is where pvs says.
	ba := strings.Split(strings.TrimSpace(e.Run("pvs", "--noheadings", "--separator", "|", "--units", "b", "--nosuffix", "-o", "pv_ba_start,pv_ba_size", b)), "|")
	if pvB := e.readPV(1); len(ba) != 2 || len(pvB.BootloaderAreas) != 1 ||
		pvB.BootloaderAreas[0] != (Area{mustUint(t, ba[0]), mustUint(t, ba[1])}) || len(e.readPV(0).BootloaderAreas) != 0 {
		t.Fatalf("bootloader areas %v and %v, pvs says %v and none", pvB.BootloaderAreas, e.readPV(0).BootloaderAreas, ba)
	}
	m1, m2 := pv.MetadataAreas[0].Area, pv.MetadataAreas[1].Area
	saved1 := e.region(0, int64(m1.Offset), int64(m1.Size))
	mb := e.readPV(1).MetadataAreas[0].Area
	savedB := e.region(1, int64(mb.Offset), int64(mb.Size))

	e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "1", "-n", "second", "vgc")
	newer := e.seqno("vgc")
	if newer <= old {
		t.Fatalf("seqno %d after lvcreate, %d before", newer, old)
	}
	// Put the older copy back in the first area of each PV.
	e.put(0, int64(m1.Offset), saved1)
	pv = e.readPV(0)
	if pv.MetadataAreas[0].Seqno != old || pv.MetadataAreas[1].Seqno != newer || pv.Seqno != newer {
		t.Fatalf("areas at seqno %d and %d, chosen %d; want %d, %d, %d",
			pv.MetadataAreas[0].Seqno, pv.MetadataAreas[1].Seqno, pv.Seqno, old, newer, newer)
	}
	e.put(1, int64(mb.Offset), savedB)
	if _, err := e.open(1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		which  []int
		second bool
	}{{[]int{0, 1}, true}, {[]int{1, 0}, true}, {[]int{1}, false}} {
		vg, err := e.open(c.which...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = vg.LV("second")
		if (err == nil) != c.second {
			t.Fatalf("devices %v: VG seqno %d, LV second: %v", c.which, vg.Seqno, err)
		}
	}

	// A bad text checksum in the second area: the first (older) is used.
	t2 := e.textAt(0, m2.Offset)
	byteAt := e.region(0, t2+10, 1)
	e.put(0, t2+10, []byte{byteAt[0] ^ 0x20})
	pv = e.readPV(0)
	if err := pv.MetadataAreas[1].Err; err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("a flipped text byte: %v", err)
	}
	if pv.Seqno != old {
		t.Fatalf("chosen seqno %d, the one good copy is %d", pv.Seqno, old)
	}
	// And in the first: nothing left on that PV.
	t1 := e.textAt(0, m1.Offset)
	byteAt = e.region(0, t1+10, 1)
	e.put(0, t1+10, []byte{byteAt[0] ^ 0x20})
	if pv = e.readPV(0); pv.Metadata != nil {
		t.Fatal("metadata chosen from two bad copies")
	}
	_, err := e.open(0)
	if !errors.Is(err, ErrNoMetadata) || !strings.Contains(err.Error(), "checksum") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open with both copies bad: %v", err)
	}
	t.Log(err)
}

// TestLVM2Wrap makes lvm2 write its metadata into a 32 KiB area until a
// copy wraps around the end of the circular buffer, then reads it: the
// seqno and the LVs must be lvm2's.
func TestLVM2Wrap(t *testing.T) {
	e := newLVM2(t, 64)
	a := e.Loops[0]
	e.Run("pvcreate", "-y", "--metadatasize", "32k", "--dataalignment", "4k", a)
	e.Run("vgcreate", "-s", "1m", "vgw", a)
	wrapped := false
	for i := 0; i < 60 && !wrapped; i++ {
		e.Run("lvcreate", "-an", "-Zn", "-y", "-l", "1", "-n", "l"+strconv.Itoa(i), "vgw")
		pv := e.readPV(0)
		m := pv.MetadataAreas[0]
		if m.Err != nil {
			t.Fatalf("after %d lvcreates: %v", i+1, m.Err)
		}
		wrapped = m.Wrapped
	}
	if !wrapped {
		t.Fatal("lvm2 never wrapped its metadata in 60 updates of a 32 KiB area")
	}
	vg, err := e.open()
	if err != nil {
		t.Fatal(err)
	}
	if want := e.seqno("vgw"); vg.Seqno != want {
		t.Fatalf("seqno %d, vgs says %d", vg.Seqno, want)
	}
	names := strings.Fields(e.Run("lvs", "--noheadings", "-o", "lv_name", "vgw"))
	if len(names) != len(vg.LVs()) {
		t.Fatalf("%d LVs read from the wrapped text, lvs lists %d", len(vg.LVs()), len(names))
	}
	for _, n := range names {
		if _, err := vg.LV(n); err != nil {
			t.Fatal(err)
		}
	}
}
