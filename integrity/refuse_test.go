package integrity

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
)

func TestRefusals(t *testing.T) {
	dev, sb := formatMem(t, 1<<20, FormatOptions{Algorithm: "crc32c"})
	img := dev.Current()
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), img...)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name string
		img  []byte
		opts Options
		want string
		is   error
	}{
		{"no magic", mod(func(b []byte) { b[0] = 'X' }), Options{Algorithm: "crc32c"}, "no dm-integrity superblock", ErrNotIntegrity},
		{"version 7", mod(func(b []byte) { b[8] = 7 }), Options{Algorithm: "crc32c"}, "version 7", nil},
		{"inline", mod(func(b []byte) { b[8] = 6; b[24] |= FlagInline }), Options{Algorithm: "crc32c"}, "inline", ErrUnsupported},
		{"sector size", mod(func(b []byte) { b[28] = 4 }), Options{Algorithm: "crc32c"}, "sector size", nil},
		{"tag size 0", mod(func(b []byte) { b[10], b[11] = 0, 0 }), Options{Algorithm: "crc32c"}, "tag size 0", nil},
		{"no journal", mod(func(b []byte) { copy(b[12:16], []byte{0, 0, 0, 0}) }), Options{Algorithm: "crc32c"}, "journal_sections is 0", nil},
		{"too big", mod(func(b []byte) { b[16+3] = 1 }), Options{Algorithm: "crc32c"}, "smaller than the layout", nil},
		{"wrong tag size", img, Options{Algorithm: "crc32c", TagSize: 8}, "does not match", nil},
		{"wrong sector size", img, Options{Algorithm: "crc32c", SectorSize: 4096}, "does not match", nil},
		{"journal crypt", img, Options{Algorithm: "crc32c", JournalCrypt: "xts(aes)", JournalCryptKey: make([]byte, 32)}, "journal encryption", ErrUnsupported},
		{"journal mac not there", img, Options{Algorithm: "crc32c", JournalMAC: "hmac(sha256)", JournalMACKey: []byte("k")}, "no journal MAC", nil},
		{"unknown algorithm", img, Options{Algorithm: "md5"}, "md5", ErrUnsupported},
		{"hmac without key", img, Options{Algorithm: "hmac-sha256"}, "needs a key", nil},
		{"garbage journal", mod(func(b []byte) { b[SuperblockArea+504] ^= 1 }), Options{Algorithm: "crc32c"}, "no valid commit id", ErrJournal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]byte(nil), tc.img...)
			d := powercut.New(tc.img)
			_, err := Open(d, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("%v is not %v", err, tc.is)
			}
			if !bytes.Equal(d.Current(), before) {
				t.Fatal("a refused open wrote")
			}
		})
	}
	// Format refuses a device with data, unless forced.
	if _, err := Format(powercut.New(img), FormatOptions{}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("format over a volume: %v", err)
	}
	if _, err := Format(powercut.New(img), FormatOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	// Writes to a read-only volume, and ranges beyond the end.
	v, err := Open(powercut.New(img), Options{Algorithm: "crc32c", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WriteSectors(make([]byte, 512), nil, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only write: %v", err)
	}
	if err := v.ReadSectors(make([]byte, 1024), nil, v.Blocks()-1); err == nil {
		t.Fatal("read beyond the end accepted")
	}
	if _, err := v.ReadAt(make([]byte, 10), v.Size()+1); err == nil {
		t.Fatal("ReadAt beyond the end accepted")
	}
	_ = sb
}

// TestSectionDevice: a volume inside a window of a larger device (as a
// LUKS2 AEAD segment holds one) never touches bytes outside it.
func TestSectionDevice(t *testing.T) {
	outer := powercut.New(bytes.Repeat([]byte{0xAA}, 3<<20))
	sec := &SectionDevice{Dev: outer, Offset: 1 << 20, Length: 1 << 20}
	if _, err := Format(sec, FormatOptions{RawTags: true, TagSize: 28, SectorSize: 4096, Force: true}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(sec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	last := v.Blocks() - 1
	if err := v.WriteSectors(pattern(4096, 4), pattern(28, 5), last); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	cur := outer.Current()
	if !bytes.Equal(cur[:1<<20], bytes.Repeat([]byte{0xAA}, 1<<20)) || !bytes.Equal(cur[2<<20:], bytes.Repeat([]byte{0xAA}, 1<<20)) {
		t.Fatal("the volume wrote outside its window")
	}
}
