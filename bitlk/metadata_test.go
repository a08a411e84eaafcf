package bitlk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func readImage(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(bitlkImages(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestMetadataCopies: damaged copies are skipped (here without the
// password: the clear-key image unlocks with no secret); with all three
// damaged the volume is refused; a change with a recomputed CRC32 passes
// Read but fails the validation hash at unlock.
func TestMetadataCopies(t *testing.T) {
	raw := readImage(t, "bitlk-aes-xts-128-clearkey-only.img")
	m, err := Read(bytes.NewReader(raw))
	if err != nil || m.ValidCopy != 0 {
		t.Fatalf("%v copy %d", err, m.ValidCopy)
	}
	want, _, err := m.VolumeKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Damage copies one by one: the next good one is used and unlocks.
	img := append([]byte(nil), raw...)
	for i := 0; i < 3; i++ {
		img[m.MetadataOffsets[i]+120] ^= 1 // inside the description
		m2, err := Read(bytes.NewReader(img))
		if i == 2 {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("all copies damaged: %v", err)
			}
			break
		}
		if err != nil || m2.ValidCopy != i+1 {
			t.Fatalf("copy %d damaged: %v (used copy %d)", i, err, m2.ValidCopy)
		}
		key, _, err := m2.VolumeKey(nil)
		if err != nil || !bytes.Equal(key, want) {
			t.Fatalf("copy %d damaged: unlock %v", i, err)
		}
	}
	// A copy in the wrong place is not used.
	img = append([]byte(nil), raw...)
	binary.LittleEndian.PutUint64(img[176:], m.MetadataOffsets[1])
	if m2, err := Read(bytes.NewReader(img)); err != nil || m2.ValidCopy != 1 {
		t.Fatalf("misplaced first copy: %v", err)
	}
	// Changed and re-checksummed: Read accepts it, unlocking does not.
	img = append([]byte(nil), raw...)
	for _, o := range m.MetadataOffsets {
		area := img[o : o+fveAreaSize]
		area[120] ^= 1
		fixCRC(area)
	}
	m2, err := Read(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m2.VolumeKey(nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("altered metadata unlocked: %v", err)
	}
}

func TestBootSector(t *testing.T) {
	raw := readImage(t, "bitlk-togo-aes-xts-128.img")
	if !Detect(raw[:64<<10]) {
		t.Fatal("To Go image not detected")
	}
	m, err := Read(bytes.NewReader(raw))
	if err != nil || !m.ToGo {
		t.Fatalf("To Go: %v", err)
	}
	// A FAT boot sector that says MSWIN4.1 but has no BitLocker GUID.
	fat := append([]byte(nil), raw[:4096]...)
	clear(fat[424:440])
	if Detect(fat) {
		t.Error("plain FAT volume detected as BitLocker To Go")
	}
	// BitLocker version 1 (Vista) boot code.
	v1 := append([]byte(nil), readImage(t, "bitlk-aes-xts-128.img")[:1<<20]...)
	copy(v1, []byte{0xeb, 0x52, 0x90})
	if _, err := Read(bytes.NewReader(v1)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("version 1: %v", err)
	}
	v1[11], v1[12] = 0, 4 // 1024-byte sectors
	copy(v1, []byte{0xeb, 0x58, 0x90})
	if _, err := Read(bytes.NewReader(v1)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("1024-byte sectors: %v", err)
	}
	if _, err := Read(bytes.NewReader(make([]byte, 4096))); !errors.Is(err, ErrNotBitLocker) {
		t.Errorf("zeros: %v", err)
	}
	if Detect(make([]byte, 100)) {
		t.Error("short head detected")
	}
}

func TestLayoutChecks(t *testing.T) {
	m := &Metadata{SectorSize: 4096, MetadataOffsets: [3]uint64{1 << 20, 2 << 20, 3 << 20}, VolumeHeaderOffset: 4 << 20, VolumeHeaderSize: 8192}
	l, err := m.Layout(8<<20 + 100)
	if err != nil {
		t.Fatal(err)
	}
	if l.Size != 8<<20 || len(l.Zero) != 4 {
		t.Fatalf("%+v", l)
	}
	for _, bad := range []func(*Metadata){
		func(m *Metadata) { m.VolumeHeaderSize = 0 },
		func(m *Metadata) { m.VolumeHeaderSize = 1000 },
		func(m *Metadata) { m.VolumeHeaderOffset = 4<<20 + 512 },
		func(m *Metadata) { m.MetadataOffsets[1] = 1<<20 + 4096 }, // overlaps copy 0
		func(m *Metadata) { m.MetadataOffsets[0] = 0 },            // overlaps the header
		func(m *Metadata) { m.MetadataOffsets[2] = 8 << 20 },      // past the end
		func(m *Metadata) { m.VolumeHeaderOffset = 1 << 63 },
	} {
		mm := *m
		bad(&mm)
		if _, err := mm.Layout(8 << 20); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%+v accepted: %v", mm, err)
		}
	}
}
