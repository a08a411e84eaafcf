package luks1_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// fuzzDevSize is large enough for any sane LUKS1 header geometry.
const fuzzDevSize = 4 << 20

// FuzzLUKS1Header feeds arbitrary bytes as the first sectors of a device:
// parsing must never panic, the binary header must round-trip exactly, and
// a header that validates must validate again after a write and re-read.
func FuzzLUKS1Header(f *testing.F) {
	for _, s := range seedHeaders(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 8192 {
			b = b[:8192]
		}
		p, err := luks1.ParsePhdr(b)
		if err != nil {
			if len(b) >= luks1.PhdrSize {
				t.Fatalf("parse of %d bytes failed: %v", len(b), err)
			}
			return
		}
		if !bytes.Equal(p.Marshal(), b[:luks1.PhdrSize]) {
			t.Fatal("binary header does not round-trip")
		}
		_ = p.Validate()
		buf := make([]byte, fuzzDevSize)
		copy(buf, b)
		dev := luksutil.NewMemDevice(0, buf)
		h, err := luks1.Read(dev)
		if err != nil {
			return
		}
		_ = h.Cipher() + h.UUID() + h.Hash()
		_ = h.DataSize(fuzzDevSize)
		raw := h.Phdr()
		h2, err := luks1.Read(luksutil.NewMemDevice(0, append(raw.Marshal(), make([]byte, fuzzDevSize)...)))
		if err != nil {
			t.Fatalf("valid header does not re-read: %v", err)
		}
		if h2.Phdr() != raw {
			t.Fatal("header changed across write and read")
		}
		// Unlock attempts must fail cleanly (tiny KDF costs only).
		for _, s := range h.ActiveKeyslots() {
			if ks, _ := h.Keyslot(s); ks.Iterations > 5000 {
				return
			}
		}
		if h.Phdr().MKDigestIterations <= 5000 {
			h.Unlock(dev, []byte("x"), luks1.AnySlot)
		}
	})
}

// seedHeaders makes a few valid headers (and mutations) to start from.
func seedHeaders(tb testing.TB) [][]byte {
	var out [][]byte
	for i, o := range []luks1.FormatOptions{
		{},
		{Cipher: "aes-cbc-essiv:sha256", Hash: "sha1"},
		{Cipher: "twofish-xts-plain64", Hash: "sha512", Detached: true},
		{Cipher: "aes-cbc-plain", Hash: "ripemd160", PayloadOffset: 4096},
	} {
		dev := luksutil.NewMemDevice(fuzzDevSize, nil)
		o.Keyslot = fast
		keyLen := []int{64, 32, 64, 16}[i]
		h, err := luks1.Format(dev, bytes.Repeat([]byte{byte(i)}, keyLen), []byte("seed"), o)
		if err != nil {
			tb.Fatal(err)
		}
		h.AddKey(dev, bytes.Repeat([]byte{byte(i)}, keyLen), []byte("seed2"), fast)
		out = append(out, dev.Buf[:luks1.PhdrSize])
	}
	bad := append([]byte(nil), out[0]...)
	bad[208+48*3+47] = 0x10 // stripes of keyslot 3
	out = append(out, bad)
	return out
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzLUKS1Header when
// BLKCRYPT_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("BLKCRYPT_WRITE_SEEDS") != "1" {
		t.Skip("set BLKCRYPT_WRITE_SEEDS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzLUKS1Header")
	os.MkdirAll(dir, 0o755)
	for i, s := range seedHeaders(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
