package integrity

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
)

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func formatMem(t testing.TB, size int64, o FormatOptions) (*powercut.Device, *Superblock) {
	t.Helper()
	dev := powercut.New(make([]byte, size))
	sb, err := Format(dev, o)
	if err != nil {
		t.Fatal(err)
	}
	return dev, sb
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []FormatOptions{
		{Algorithm: "crc32c"},
		{Algorithm: "crc32", SectorSize: 1024},
		{Algorithm: "sha1", SectorSize: 2048, LegacyPadding: true, LegacyHMAC: true},
		{Algorithm: "sha256", SectorSize: 4096, InterleaveSectors: 64},
		{Algorithm: "hmac-sha256", Key: []byte("0123456789abcdef0123456789abcdef"), JournalMAC: "hmac(sha256)", JournalMACKey: []byte("journal key")},
		{Algorithm: "crc32c", TagSize: 11, InterleaveSectors: 8},
		{Algorithm: "sha512", TagSize: 100, SectorSize: 4096},
		{Algorithm: "sha256", JournalCrypt: "ctr-aes", JournalCryptKey: make([]byte, 32), JournalMAC: "hmac(sha256)", JournalMACKey: []byte("j")},
	} {
		t.Run(tc.Algorithm, func(t *testing.T) {
			dev, sb := formatMem(t, 3<<20, tc)
			opts := Options{Algorithm: tc.Algorithm, Key: tc.Key, JournalMAC: tc.JournalMAC, JournalMACKey: tc.JournalMACKey,
				JournalCrypt: tc.JournalCrypt, JournalCryptKey: tc.JournalCryptKey}
			v, err := Open(dev, opts)
			if err != nil {
				t.Fatal(err)
			}
			size := v.Size()
			if size != int64(sb.ProvidedDataSectors)<<9 {
				t.Fatalf("size %d", size)
			}
			// A fresh volume reads zeros.
			all := make([]byte, size)
			if _, err := v.ReadAt(all, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(all, make([]byte, size)) {
				t.Fatal("fresh volume is not zero")
			}
			want := pattern(int(size), 1)
			for off := int64(0); off < size; {
				n := min(int64(1+rand.IntN(300000)), size-off)
				if _, err := v.WriteAt(want[off:off+n], off); err != nil {
					t.Fatalf("write at %d: %v", off, err)
				}
				off += n
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			ro := opts
			ro.ReadOnly = true
			v, err = Open(dev, ro)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.ReadAt(all, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(all, want) {
				t.Fatal("read back differs")
			}
			// A flipped bit in a block's data or its tag is that block's error.
			g := v.Geometry()
			img := dev.Current()
			blk := v.Blocks() / 3
			s := blk * uint64(g.SectorsPerBlock)
			img[int64(g.DataSector(s))<<9+5] ^= 0x10
			img[g.TagOffset(s+uint64(g.SectorsPerBlock))] ^= 1
			v, err = Open(powercut.New(img), ro)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range []uint64{blk, blk + 1} {
				buf := make([]byte, g.BlockSize())
				err := v.ReadSectors(buf, nil, b)
				var se *SectorError
				if !errors.Is(err, ErrIntegrity) || !errors.As(err, &se) || se.Block != b {
					t.Fatalf("block %d: %v", b, err)
				}
				if !bytes.Equal(buf, make([]byte, len(buf))) {
					t.Fatal("a bad block's data was returned")
				}
			}
			if err := v.ReadSectors(make([]byte, g.BlockSize()), nil, blk+2); err != nil {
				t.Fatal(err)
			}
			var d strings.Builder
			Dump(&d, sb, "x")
			t.Log(d.String())
		})
	}
}

func TestRawTags(t *testing.T) {
	dev, _ := formatMem(t, 2<<20, FormatOptions{RawTags: true, TagSize: 28, SectorSize: 4096})
	v, err := Open(dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(3*4096, 2)
	tags := pattern(3*28, 3)
	if err := v.WriteSectors(data, tags, 5); err != nil {
		t.Fatal(err)
	}
	gd, gt := make([]byte, len(data)), make([]byte, len(tags))
	if err := v.ReadSectors(gd, gt, 5); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gd, data) || !bytes.Equal(gt, tags) {
		t.Fatal("raw round trip differs")
	}
	if err := v.ReadSectors(gd, nil, 5); err == nil {
		t.Fatal("raw read without tags accepted")
	}
}
