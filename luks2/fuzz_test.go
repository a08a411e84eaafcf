package luks2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
)

const fuzzDevSize = 320 << 10

// FuzzLUKS2Header takes a binary header followed by JSON area text. The
// harness fixes the primary checksum (so mutations reach the JSON parser
// and validator) and mirrors the copy as the secondary on every other
// input. Nothing may panic; metadata that validates must serialise to JSON
// that validates again and serialises identically.
func FuzzLUKS2Header(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 64<<10 {
			b = b[:64<<10]
		}
		buf := make([]byte, fuzzDevSize)
		copy(buf, b)
		if len(b) >= BinHeaderSize {
			bin, _ := ParseBinHeader(buf)
			hs := bin.HdrSize
			if hs >= MinHeaderSize && hs <= fuzzDevSize/2 && bin.ChecksumAlg == "sha256" {
				sum, _ := checksum("sha256", buf[:BinHeaderSize], buf[BinHeaderSize:hs])
				copy(buf[offCsum:], sum)
				if len(b)%2 == 0 && 2*hs <= fuzzDevSize {
					copy(buf[hs:2*hs], buf[:hs])
					copy(buf[hs:], MagicSecondary[:])
					binary.BigEndian.PutUint64(buf[hs+offHdrOffset:], hs)
					sum, _ := checksum("sha256", buf[hs:hs+BinHeaderSize], buf[hs+BinHeaderSize:2*hs])
					copy(buf[hs+offCsum:], sum)
				}
				checkStable(t, buf[BinHeaderSize:hs])
			}
		} else {
			checkStable(t, append(b, make([]byte, 128)...))
		}
		dev := luksutil.NewMemDevice(0, buf)
		h, err := Read(dev)
		if err != nil {
			return
		}
		_ = h.Cipher() + h.UUID() + h.Label()
		_, _, _ = h.DataOffset(), h.DataSize(1<<40), h.KeySize()
		_ = h.Keyslots()
		_ = h.Tokens()
		_ = h.Writable()
	})
}

// checkStable: parse → serialise → parse → serialise gives the same text.
func checkStable(t *testing.T, area []byte) {
	md, err := parseArea(area)
	if err != nil {
		return
	}
	text := marshalMetadata(md.root)
	if len(text) >= len(area) {
		t.Fatalf("validated JSON (%d bytes) re-serialises larger than its area", len(text))
	}
	area2 := make([]byte, len(area))
	copy(area2, text)
	md2, err := parseArea(area2)
	if err != nil {
		t.Fatalf("re-serialised metadata does not validate: %v\n%s", err, text)
	}
	if text2 := marshalMetadata(md2.root); !bytes.Equal(text, text2) {
		t.Fatalf("metadata not stable:\n%s\n%s", text, text2)
	}
}

func fuzzSeeds(tb testing.TB) [][]byte {
	var out [][]byte
	fast := luksutil.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Iterations: 1000}}
	for i, o := range []FormatOptions{
		{Detached: true, KeyslotsSize: 33 * 4096, Label: "seed"},
		{Detached: true, KeyslotsSize: 33 * 4096, Cipher: "aes-cbc-essiv:sha256", SectorSize: 512},
	} {
		dev := luksutil.NewMemDevice(1<<20, nil)
		o.Keyslot = fast
		key := bytes.Repeat([]byte{byte(i + 1)}, 32)
		h, err := Format(dev, key, []byte("seed"), o)
		if err != nil {
			tb.Fatal(err)
		}
		if i == 1 {
			h.SetToken(dev, 2, []byte(`{"type":"x","keyslots":["0"],"data":"a\"b"}`))
			h.SetPriority(dev, 0, PriorityPrefer)
		}
		end := BinHeaderSize + bytes.IndexByte(dev.Buf[BinHeaderSize:DefaultMetadataSize], 0)
		out = append(out, append([]byte(nil), dev.Buf[:end]...))
	}
	return out
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzLUKS2Header when
// BLKCRYPT_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("BLKCRYPT_WRITE_SEEDS") != "1" {
		t.Skip("set BLKCRYPT_WRITE_SEEDS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzLUKS2Header")
	os.MkdirAll(dir, 0o755)
	for i, s := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
