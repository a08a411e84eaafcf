package integrity

import (
	"bytes"
	"io"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
)

// fuzzVolume is a small volume with a two-section journal holding a
// commit that spans both (the seed the journal fuzzer mutates).
func fuzzVolume(f *testing.F) (img []byte, g Geometry) { return fuzzVolumeCrypt(f, "") }

// fuzzCiphers are the journal ciphers FuzzJournal picks from.
var fuzzCiphers = []string{"", "ctr(aes)", "chacha20", "cbc(aes)"}

func fuzzOpts(jc string) Options {
	o := Options{Algorithm: "crc32c", JournalCrypt: jc}
	if jc != "" {
		o.JournalCryptKey = make([]byte, 32)
	}
	return o
}

func fuzzVolumeCrypt(f *testing.F, jc string) (img []byte, g Geometry) {
	dev := powercut.New(make([]byte, 128<<10))
	o := fuzzOpts(jc)
	// 120-byte tags: 24 entries a section, so the journal is small (32 KiB).
	sb, err := Format(dev, FormatOptions{Algorithm: "crc32c", TagSize: 120, JournalSectors: 2 * 32, InterleaveSectors: 8, LegacyHMAC: true,
		JournalCrypt: o.JournalCrypt, JournalCryptKey: o.JournalCryptKey})
	if err != nil {
		f.Fatal(err)
	}
	g, _ = sb.Geometry()
	v, err := Open(dev, o)
	if err != nil {
		f.Fatal(err)
	}
	if err := v.WriteSectors(pattern(30*512, 3), nil, 7); err != nil {
		f.Fatal(err)
	}
	return dev.Current(), g
}

// FuzzSuperblock: any 4 KiB parses to a valid superblock or a one-line
// error; a valid one marshals back to itself, and opening a device that
// starts with it (read-only and writable) neither panics nor hangs.
func FuzzSuperblock(f *testing.F) {
	img, _ := fuzzVolume(f)
	f.Add(img[:SuperblockArea])
	sb, _ := ParseSuperblock(img)
	for _, fl := range []uint32{FlagDirtyBitmap, FlagRecalculating, FlagJournalMAC, FlagInline} {
		s := *sb
		s.Flags |= fl
		f.Add(s.Marshal())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := ParseSuperblock(b)
		if err != nil {
			if bytes.ContainsRune([]byte(err.Error()), '\n') {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		again, err := ParseSuperblock(sb.Marshal())
		if err != nil || *again != *sb {
			t.Fatalf("marshal round trip: %v", err)
		}
		Dump(io.Discard, sb, "fuzz")
		sb.Geometry()
		dev := make([]byte, len(img))
		copy(dev, b)
		copy(dev[SuperblockArea:], img[SuperblockArea:])
		for _, ro := range []bool{true, false} {
			v, err := Open(powercut.New(dev), Options{Algorithm: "crc32c", ReadOnly: ro})
			if err != nil {
				continue
			}
			buf := make([]byte, min(v.Size(), 64<<10))
			v.ReadAt(buf, 0)
			v.Close()
		}
	})
}

// FuzzJournal: any journal content, plain or encrypted, replays or is
// refused with an error;
// reads afterwards return data that verifies or ErrIntegrity, never a
// panic, and a writable open never writes outside the device.
func FuzzJournal(f *testing.F) {
	var imgs [][]byte
	var g Geometry
	for _, jc := range fuzzCiphers {
		img, gg := fuzzVolumeCrypt(f, jc)
		imgs, g = append(imgs, img), gg
	}
	jlen := int(g.InitialSectors-8) << 9
	for i, img := range imgs {
		f.Add(img[SuperblockArea:SuperblockArea+jlen], uint8(i))
	}
	f.Add(make([]byte, jlen), uint8(0))
	f.Fuzz(func(t *testing.T, j []byte, cipher uint8) {
		c := int(cipher) % len(fuzzCiphers)
		dev := append([]byte(nil), imgs[c]...)
		copy(dev[SuperblockArea:SuperblockArea+jlen], j)
		for _, ro := range []bool{true, false} {
			o := fuzzOpts(fuzzCiphers[c])
			o.ReadOnly = ro
			v, err := Open(powercut.New(dev), o)
			if err != nil {
				continue
			}
			buf := make([]byte, v.Size())
			v.ReadAt(buf, 0)
			v.Close()
		}
	})
}
