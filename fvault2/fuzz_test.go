package fvault2

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/xts"
)

// Fuzz targets for the Core Storage parsers. The seed corpora in
// testdata/fuzz were cut from cryptsetup's fvault2 test image: its volume
// header, its decrypted metadata blocks, and a compact device holding the
// header, disk label, volume groups descriptor and encrypted metadata.
// TestWriteFuzzSeeds regenerates them with BLKCRYPT_WRITE_SEEDS=1.

// setCRC writes a block's CRC32C so that mutations get past the checksum.
func setCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[4:], 0xffffffff)
	binary.LittleEndian.PutUint32(b[0:], ^crc32.Update(0, castagnoli, b[8:]))
}

// FuzzMetadataBlock feeds a decrypted 8 KiB metadata block to the block
// parser (the XML plist search, base64, the size and UUID parsing), and
// its first 512 bytes, checksum fixed, to the volume header parser.
func FuzzMetadataBlock(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > mdBlockSize {
			return
		}
		blk := make([]byte, mdBlockSize)
		copy(blk, b)
		var p parser
		if err := p.block(blk, 4096); err == nil && p.got&2 != 0 && p.lvSize == 0 {
			t.Fatal("zero logical volume size accepted")
		}
		if p.done() == nil {
			var m Metadata
			p.fill(&m)
			var out bytes.Buffer
			Dump(&out, &m, "fuzz", nil)
		}
		hdr := append([]byte(nil), blk[:volumeHeaderSize]...)
		setCRC(hdr)
		if h, err := parseHeader(hdr); err == nil && h.blockSize == 0 {
			t.Fatal("zero block size accepted")
		}
	})
}

// FuzzRead runs the whole reader over a small device.
func FuzzRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, dev []byte) {
		if len(dev) > 1<<20 {
			return
		}
		m, err := Read(bytes.NewReader(dev))
		if err != nil {
			return
		}
		if m.FamilyUUID == "" || m.LogicalVolumeSize == 0 {
			t.Fatalf("incomplete metadata accepted: %+v", m)
		}
	})
}

// compactDevice rebuilds the fixture's metadata in 64 KiB: header and
// disk label in place, the volume groups descriptor after the label, the
// encrypted metadata blocks (their XTS tweak is their index, not their
// position) from 16 KiB, then an all-zero block.
func compactDevice(t testing.TB, raw []byte) []byte {
	le := binary.LittleEndian
	h, err := parseHeader(raw[:volumeHeaderSize])
	if err != nil {
		t.Fatal(err)
	}
	bs := int(h.blockSize)
	label := int(h.labelBlk) * bs
	vgd := label + int(le.Uint32(raw[label+220:]))
	count := int(le.Uint64(raw[vgd+8:]))
	start := int(le.Uint64(raw[vgd+32:])) * bs
	n := 0
	for n < count && !allZero(raw[start+n*mdBlockSize:start+(n+1)*mdBlockSize]) {
		n++
	}
	newStart := 16 << 10
	dev := make([]byte, newStart+(n+1)*mdBlockSize)
	copy(dev, raw[:vgd+40])
	if newStart%bs != 0 || vgd+40 > newStart {
		t.Fatalf("fixture layout: block size %d, descriptor at %d", bs, vgd)
	}
	le.PutUint64(dev[vgd+32:], uint64(newStart/bs))
	copy(dev[newStart:], raw[start:start+n*mdBlockSize])
	return dev
}

func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("BLKCRYPT_WRITE_SEEDS") != "1" {
		t.Skip("set BLKCRYPT_WRITE_SEEDS=1 to regenerate the seed corpus")
	}
	raw, err := os.ReadFile(fvault2Image(t))
	if err != nil {
		t.Fatal(err)
	}
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
	dev := compactDevice(t, raw)
	write("FuzzRead", "small", dev)
	write("FuzzMetadataBlock", "volume-header", raw[:volumeHeaderSize])
	// The decrypted metadata blocks, trailing zeros trimmed.
	h, _ := parseHeader(raw[:volumeHeaderSize])
	xc, err := xts.NewCipher(aes.NewCipher, h.mdKey[:])
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; (i+2)*mdBlockSize <= len(dev)-16<<10; i++ {
		blk := make([]byte, mdBlockSize)
		xc.Decrypt(blk, dev[16<<10+i*mdBlockSize:16<<10+(i+1)*mdBlockSize], uint64(i))
		write("FuzzMetadataBlock", fmt.Sprintf("block%d-type%04x", i, binary.LittleEndian.Uint16(blk[10:])), bytes.TrimRight(blk, "\x00"))
	}
}

// TestFuzzSeedsParse: the compact device seed reads like the fixture, and
// the block seeds hold the three block types the reader needs.
func TestFuzzSeedsParse(t *testing.T) {
	dev := readSeed(t, filepath.Join("testdata", "fuzz", "FuzzRead", "small"))
	m, err := Read(bytes.NewReader(dev))
	if err != nil {
		t.Fatal(err)
	}
	if m.FamilyUUID != wantFamily || m.LogicalVolumeOffset != wantOffset || m.PBKDF2Iterations != wantIters {
		t.Fatalf("compact device: %+v", m)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzMetadataBlock", "block*"))
	var p parser
	for _, f := range files {
		blk := make([]byte, mdBlockSize)
		copy(blk, readSeed(t, f))
		if err := p.block(blk, 4096); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if err := p.done(); err != nil {
		t.Fatal(err)
	}
}

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
