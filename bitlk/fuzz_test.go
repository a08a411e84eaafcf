package bitlk

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets for the BitLocker metadata parsers. The seed corpora in
// testdata/fuzz were cut from cryptsetup's test images (the FVE metadata
// block and validation structure of every image, compact devices holding
// a boot sector and three metadata copies, the two startup key files);
// TestWriteFuzzSeeds regenerates them with BLKCRYPT_WRITE_SEEDS=1.

// fixCRC rewrites the CRC32 of an FVE metadata area so that mutations
// reach the entry parser instead of stopping at the checksum.
func fixCRC(area []byte) {
	if len(area) < blockHeaderLen+metadataHeaderLen || !bytes.Equal(area[:8], signature) {
		return
	}
	size := int(binary.LittleEndian.Uint16(area[8:])) << 4
	if size > len(area)-8 || size < blockHeaderLen+metadataHeaderLen {
		return
	}
	binary.LittleEndian.PutUint32(area[size+4:], crc32.ChecksumIEEE(area[:size]))
}

// checkParsed runs what follows a successful parse: the layout, the
// dump, and unlocking with no secret and with a startup-key-shaped one
// (both cheap: no key stretching).
func checkParsed(t *testing.T, m *Metadata) {
	var b bytes.Buffer
	if err := Dump(&b, m, "fuzz"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "Info for BITLK") {
		t.Fatalf("dump: %q", b.String())
	}
	if l, err := m.Layout(1 << 30); err == nil {
		if l.HeaderSize <= 0 || l.HeaderSize > l.Size {
			t.Fatalf("layout accepted a header of %d bytes on a %d-byte device", l.HeaderSize, l.Size)
		}
		for _, z := range l.Zero {
			if z[0] < l.HeaderSize || z[1] > l.Size {
				t.Fatalf("layout zero region %v outside the volume", z)
			}
		}
	}
	if key, _, err := m.VolumeKey(nil); err == nil && len(key) != m.KeyBits/8 {
		t.Fatalf("clear key unlock gave %d bytes", len(key))
	}
	for i := range m.VMKs {
		if m.VMKs[i].Protection == StartupKey {
			bek := make([]byte, 156)
			binary.LittleEndian.PutUint32(bek, 156)
			binary.LittleEndian.PutUint32(bek[4:], 1)
			m.VolumeKey(bek) //nolint:errcheck // must not panic
		}
	}
}

func FuzzFVEMetadata(f *testing.F) {
	f.Fuzz(func(t *testing.T, area []byte) {
		if len(area) > fveAreaSize {
			return
		}
		for _, fix := range []bool{false, true} {
			a := area
			if fix {
				a = append([]byte(nil), area...)
				fixCRC(a)
			}
			blk, val, err := checkCopy(a)
			if err != nil {
				continue
			}
			m := &Metadata{SectorSize: 512, MetadataOffsets: [3]uint64{1 << 20, 2 << 20, 3 << 20}}
			if err := m.parseBlock(blk, val); err != nil {
				continue
			}
			checkParsed(t, m)
		}
	})
}

func FuzzRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, dev []byte) {
		if len(dev) > 1<<20 {
			return
		}
		m, err := Read(bytes.NewReader(dev))
		if err != nil {
			return
		}
		checkParsed(t, m)
	})
}

func FuzzStartupKey(f *testing.F) {
	v := &VMK{GUID: "4381f759-c4f8-4de0-bb61-fc33a831bda5"}
	m := &Metadata{GUID: "5a95db04-6ebc-4ba9-99a3-15a87a3d07b2"}
	f.Fuzz(func(t *testing.T, bek []byte) {
		key, ok, err := startupKey(bek, v, m)
		if err == nil && ok && key == nil {
			t.Fatal("no key and no error")
		}
		RecoveryKey(bek)
		passwordHash(bek)
	})
}

// compactDevice moves an image's boot sector and its three FVE metadata
// copies into a small device (copies at 2, 4 and 6 KiB, offsets and CRCs
// rewritten, nothing after the third copy).
func compactDevice(t testing.TB, raw []byte) []byte {
	m, err := Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	src := raw[m.MetadataOffsets[m.ValidCopy]:]
	size := int(binary.LittleEndian.Uint16(src[8:])) << 4
	area := append([]byte(nil), src[:size+validationLen]...)
	dev := make([]byte, 6<<10+len(area))
	copy(dev, raw[:512])
	sb := 160
	if m.ToGo {
		sb = 424
	}
	for i := 0; i < 3; i++ {
		off := uint64(2<<10) * uint64(i+1)
		binary.LittleEndian.PutUint64(dev[sb+16+8*i:], off)
		binary.LittleEndian.PutUint64(area[32+8*i:], off)
	}
	fixCRC(area)
	for i := 0; i < 3; i++ {
		copy(dev[(2<<10)*(i+1):], area)
	}
	return dev
}

func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("BLKCRYPT_WRITE_SEEDS") != "1" {
		t.Skip("set BLKCRYPT_WRITE_SEEDS=1 to regenerate the seed corpus")
	}
	dir := bitlkImages(t)
	conf := readImagesConf(t, dir)
	write := func(target, name string, b []byte) {
		d := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range sortedNames(conf) {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		m, err := Read(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		src := raw[m.MetadataOffsets[m.ValidCopy]:]
		size := int(binary.LittleEndian.Uint16(src[8:])) << 4
		base := strings.TrimSuffix(name, ".img")
		write("FuzzFVEMetadata", base, src[:size+validationLen])
		switch base {
		case "bitlk-aes-xts-128", "bitlk-togo-aes-xts-128", "bitlk-aes-cbc-elephant-128", "bitlk-aes-cbc-128-4k",
			"bitlk-aes-xts-128-startup-key-win11", "bitlk-aes-xts-128-clearkey-only", "bitlk-partially-encrypted-aes-cbc-128":
			write("FuzzRead", base, compactDevice(t, raw))
		}
	}
	for _, bek := range []string{"4381F759-C4F8-4DE0-BB61-FC33A831BDA5.BEK", "AA80A52B-9B66-47AE-B097-33F536FFBB07.BEK"} {
		b, err := os.ReadFile(filepath.Join(dir, bek))
		if err != nil {
			t.Fatal(err)
		}
		write("FuzzStartupKey", strings.TrimSuffix(bek, ".BEK"), b)
	}
	write("FuzzStartupKey", "recovery", []byte("235818-357951-253979-013365-241120-245575-342914-591910\n"))
}

// TestFuzzSeedsParse: the committed seeds are what the targets expect:
// every metadata seed and compact device parses.
func TestFuzzSeedsParse(t *testing.T) {
	for _, target := range []string{"FuzzFVEMetadata", "FuzzRead"} {
		files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
		if len(files) < 7 {
			t.Fatalf("%s: %d seeds", target, len(files))
		}
		for _, p := range files {
			if !strings.HasPrefix(filepath.Base(p), "bitlk-") {
				continue // inputs the fuzzer found: regression cases, not valid metadata
			}
			b := readSeed(t, p)
			var err error
			if target == "FuzzRead" {
				_, err = Read(bytes.NewReader(b))
			} else {
				var blk, val []byte
				if blk, val, err = checkCopy(b); err == nil {
					err = (&Metadata{}).parseBlock(blk, val)
				}
			}
			if err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
	}
}

// readSeed decodes a corpus file of one []byte value.
func readSeed(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(strings.TrimPrefix(string(b), "go test fuzz v1\n"))
	s = strings.TrimSuffix(strings.TrimPrefix(s, "[]byte("), ")")
	var out string
	if _, err := fmt.Sscanf(s, "%q", &out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(out)
}

var _ = io.Discard
