package integrity

import (
	"bytes"
	"errors"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
)

// lentWrite writes data and tags at first through WriteLentSectors from a
// buffer that the ready callback fills only as it is asked for blocks, as
// an encryptor still running would: a block the volume read before
// asking would be zeros. It checks that ready asks in growing steps up to
// every block and that the buffer holds the blocks again afterwards.
func lentWrite(t *testing.T, v *Volume, data, tags []byte, first uint64) error {
	t.Helper()
	bs, ts := v.SectorSize(), v.TagSize()
	n := len(data) / bs
	lent, lentTags := make([]byte, len(data)), make([]byte, len(tags))
	have := 0
	err := v.WriteLentSectors(lent, lentTags, first, func(k int) error {
		if k < have || k > n {
			t.Errorf("ready(%d) after ready(%d), of %d blocks", k, have, n)
		}
		copy(lent[have*bs:k*bs], data[have*bs:k*bs])
		copy(lentTags[have*ts:k*ts], tags[have*ts:k*ts])
		have = max(have, k)
		return nil
	})
	if err == nil && have != n {
		t.Errorf("ready was asked for %d of %d blocks", have, n)
	}
	if !bytes.Equal(lent[:have*bs], data[:have*bs]) || !bytes.Equal(lentTags[:have*ts], tags[:have*ts]) {
		t.Errorf("the lent blocks are not given back as they were")
	}
	return err
}

// TestWriteLentSectors: writes through WriteLentSectors leave the device
// byte for byte as WriteSectors (the journal's sections built by copy)
// leaves it: after every write, for partial and whole sections, commits
// wrapping the ring and several commits in one call, in every mode and
// with a journal MAC or an encrypted journal (which takes the copy).
func TestWriteLentSectors(t *testing.T) {
	for _, c := range []struct {
		name string
		fo   FormatOptions
		mode Mode
	}{
		{"4096", FormatOptions{SectorSize: 4096, JournalSectors: 3 * 264}, ModeJournal},
		{"512-interleave64", FormatOptions{InterleaveSectors: 64, JournalSectors: 2 * 88}, ModeJournal},
		{"jmac", FormatOptions{SectorSize: 2048, JournalMAC: "hmac(sha256)", JournalMACKey: []byte("jkey"), JournalSectors: 3 * 120}, ModeJournal},
		{"ctr-aes", FormatOptions{SectorSize: 1024, JournalCrypt: "ctr(aes)", JournalCryptKey: make([]byte, 16), JournalSectors: 2 * 168}, ModeJournal},
		{"cbc-aes", FormatOptions{JournalCrypt: "cbc-aes", JournalCryptKey: make([]byte, 32), JournalSectors: 2 * 88}, ModeJournal},
		{"direct", FormatOptions{SectorSize: 4096}, ModeDirect},
		{"bitmap", FormatOptions{InterleaveSectors: 64}, ModeBitmap},
	} {
		t.Run(c.name, func(t *testing.T) {
			fo := c.fo
			fo.RawTags, fo.TagSize = true, 28
			base, _ := formatMem(t, 4<<20, fo)
			opts := Options{Mode: c.mode, JournalMAC: fo.JournalMAC, JournalMACKey: fo.JournalMACKey,
				JournalCrypt: fo.JournalCrypt, JournalCryptKey: fo.JournalCryptKey}
			devs := [2]*powercut.Device{powercut.New(base.Current()), powercut.New(base.Current())}
			var vs [2]*Volume
			for i, d := range devs {
				v, err := Open(d, opts)
				if err != nil {
					t.Fatal(err)
				}
				vs[i] = v
			}
			g := vs[0].Geometry()
			e, cap := uint64(g.SectionEntries), uint64(g.JournalSections*g.SectionEntries)
			bs, ts := uint64(g.BlockSize()), uint64(g.TagSize)
			for i, w := range []struct{ first, n uint64 }{
				{0, e},             // one whole section
				{e + 3, 2*e + 1},   // whole and partial sections, wrapping
				{7, 1},             // one block
				{2, 2*cap + e + 5}, // several commits
				{5 * e, e - 1},     // a partial section
				{vs[0].Blocks() - 2*e, 2 * e},
			} {
				data, tags := pattern(int(w.n*bs), uint64(20+i)), pattern(int(w.n*ts), uint64(40+i))
				if err := vs[0].WriteSectors(data, tags, w.first); err != nil {
					t.Fatal(err)
				}
				if err := lentWrite(t, vs[1], data, tags, w.first); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(devs[0].Current(), devs[1].Current()) {
					t.Fatalf("write %d (%d blocks at %d): the device differs from WriteSectors'", i, w.n, w.first)
				}
			}
			for i, v := range vs {
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
				if i == 1 && !bytes.Equal(devs[0].Current(), devs[1].Current()) {
					t.Fatal("after Close: the device differs from WriteSectors'")
				}
			}
		})
	}
}

// TestWriteLentSectorsErrors: an error from ready stops the write with it
// and gives the lent blocks back; a volume with a tag algorithm refuses.
func TestWriteLentSectorsErrors(t *testing.T) {
	dev, _ := formatMem(t, 1<<20, FormatOptions{RawTags: true, TagSize: 28, SectorSize: 4096, JournalSectors: 3 * 264})
	v, err := Open(dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	e := v.Geometry().SectionEntries
	data, tags := pattern(3*e*4096, 1), pattern(3*e*28, 2)
	lent := bytes.Clone(data)
	stop := errors.New("stop")
	if err := v.WriteLentSectors(lent, tags, 0, func(k int) error {
		if k > e {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Fatalf("ready's error: got %v", err)
	}
	if !bytes.Equal(lent, data) {
		t.Fatal("the lent blocks are not given back after an error")
	}
	if err := v.WriteLentSectors(lent, nil, 0, nil); err == nil {
		t.Fatal("lent sectors without tags: no error")
	}
	hv, err := Open(mustFormat(t, FormatOptions{Algorithm: "crc32c"}), Options{Algorithm: "crc32c"})
	if err != nil {
		t.Fatal(err)
	}
	defer hv.Close()
	if err := hv.WriteLentSectors(make([]byte, 512), make([]byte, 4), 0, nil); err == nil {
		t.Fatal("lent sectors on a volume with a tag algorithm: no error")
	}
}

func mustFormat(t *testing.T, o FormatOptions) *powercut.Device {
	dev, _ := formatMem(t, 1<<20, o)
	return dev
}

// TestPowerCutLent: journal commits written from lent buffers (each whole
// section as its metadata, then its blocks straight from the buffer) keep
// every block and its tag together across a power cut at any point: after
// the replay (and without it, read-only) each block holds with its tag a
// pair some write gave it, never older than a write that returned before
// the cut.
func TestPowerCutLent(t *testing.T) {
	fo := FormatOptions{RawTags: true, TagSize: 28, SectorSize: 4096, JournalSectors: 2 * 264, InterleaveSectors: 256}
	basedev, _ := formatMem(t, 1<<20, fo)
	dev := powercut.New(basedev.Current())
	v, err := Open(dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := v.Geometry()
	e := uint64(g.SectionEntries)
	bs, ts := g.BlockSize(), g.TagSize
	blocks := v.Blocks()
	pair := func(data, tags []byte, k uint64) string {
		return string(data[k*uint64(bs):(k+1)*uint64(bs)]) + string(tags[k*uint64(ts):(k+1)*uint64(ts)])
	}
	// versions[b]: block b's (data, tag) pairs, oldest first; from[b]:
	// the operation count after which its newest version must be there.
	versions := make([][]string, blocks)
	zeroData, zeroTags := make([]byte, bs), make([]byte, ts)
	for b := range versions {
		versions[b] = []string{pair(zeroData, zeroTags, 0)}
	}
	type mark struct{ block, ver, at uint64 }
	var marks []mark
	for i, w := range []struct{ first, n uint64 }{{1, 2 * e}, {e, 2*e + e/2}} {
		data, tags := pattern(int(w.n)*bs, uint64(60+i)), pattern(int(w.n)*ts, uint64(70+i))
		if err := lentWrite(t, v, data, tags, w.first); err != nil {
			t.Fatal(err)
		}
		for k := uint64(0); k < w.n; k++ {
			b := w.first + k
			versions[b] = append(versions[b], pair(data, tags, k))
			marks = append(marks, mark{b, uint64(len(versions[b]) - 1), uint64(dev.Ops())})
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	images := 0
	for k := 0; k <= dev.Ops(); k++ {
		minVer := make([]uint64, blocks)
		for _, m := range marks {
			if m.at <= uint64(k) {
				minVer[m.block] = max(minVer[m.block], m.ver)
			}
		}
		for _, im := range dev.CutAfter(k).Images(uint64(k), 4) {
			images++
			for _, ro := range []bool{true, false} {
				cv, err := Open(powercut.New(im.Bytes()), Options{ReadOnly: ro})
				if err != nil {
					t.Fatalf("cut after %d (%s), read-only %v: open: %v", k, im.Survivors, ro, err)
				}
				data, tags := make([]byte, cv.Size()), make([]byte, int(blocks)*ts)
				if err := cv.ReadSectors(data, tags, 0); err != nil {
					t.Fatalf("cut after %d (%s), read-only %v: %v", k, im.Survivors, ro, err)
				}
				for b := uint64(0); b < blocks; b++ {
					got, ok := pair(data, tags, b), false
					for ver := minVer[b]; ver < uint64(len(versions[b])); ver++ {
						ok = ok || got == versions[b][ver]
					}
					if !ok {
						t.Fatalf("cut after %d (%s), read-only %v: block %d and its tag are no pair written from version %d on", k, im.Survivors, ro, b, minVer[b])
					}
				}
				cv.Close()
			}
		}
	}
	t.Logf("%d operations, %d images", dev.Ops(), images)
	if images < 10 {
		t.Fatalf("only %d images", images)
	}
}
