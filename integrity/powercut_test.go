package integrity

import (
	"bytes"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
)

// sweepWrite is one write of the op a power-cut sweep cuts.
type sweepWrite struct {
	first uint64
	data  []byte
	flush bool // Flush after it (bitmap mode)
}

// sweep runs writes on a copy of base in mode, then cuts the recording
// after every operation and, for each cut, the images internal/powercut
// derives (nothing kept, everything kept, random survivor sets). Each
// image must open (read-only, and writable: the replay or recalculation),
// verify every block, and hold for every block either what a write gave
// it or what it held before, never older than a write that had returned
// before the cut (journal mode) or been flushed (bitmap mode).
func sweep(t *testing.T, base []byte, opts Options, writes []sweepWrite) {
	t.Helper()
	dev := powercut.New(base)
	v, err := Open(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	bs := v.SectorSize()
	blocks := v.Blocks()
	// versions[b]: the contents block b had, oldest first; marks: the
	// operation count from which a version must be there.
	versions := make([][][]byte, blocks)
	ro := opts
	ro.ReadOnly = true
	ro.Mode = ModeJournal
	bv, err := Open(powercut.New(base), ro)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]byte, v.Size())
	if err := bv.ReadSectors(all, nil, 0); err != nil {
		t.Fatal(err)
	}
	for b := range versions {
		versions[b] = [][]byte{all[b*bs : (b+1)*bs]}
	}
	type mark struct {
		block uint64
		ver   int
		at    int
	}
	var marks []mark
	for _, w := range writes {
		if err := v.WriteSectors(w.data, nil, w.first); err != nil {
			t.Fatal(err)
		}
		if w.flush {
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		at := dev.Ops()
		for k := 0; k < len(w.data)/bs; k++ {
			b := w.first + uint64(k)
			versions[b] = append(versions[b], w.data[k*bs:(k+1)*bs])
			if opts.Mode == ModeJournal || w.flush {
				marks = append(marks, mark{b, len(versions[b]) - 1, at})
			}
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	total := dev.Ops()
	t.Logf("%d operations", total)
	images := 0
	for k := 0; k <= total; k++ {
		c := dev.CutAfter(k)
		minVer := make([]int, blocks)
		for _, m := range marks {
			if m.at <= k && m.ver > minVer[m.block] {
				minVer[m.block] = m.ver
			}
		}
		for _, im := range c.Images(uint64(k), 6) {
			images++
			img := im.Bytes()
			for _, readOnly := range []bool{true, false} {
				o := opts
				o.ReadOnly = readOnly
				cv, err := Open(powercut.New(img), o)
				if err != nil {
					t.Fatalf("cut after %d (%s), read-only %v: open: %v", k, im.Survivors, readOnly, err)
				}
				got := make([]byte, cv.Size())
				if err := cv.ReadSectors(got, nil, 0); err != nil {
					t.Fatalf("cut after %d (%s), read-only %v: %v", k, im.Survivors, readOnly, err)
				}
				for b := uint64(0); b < blocks; b++ {
					blk := got[b*uint64(bs) : (b+1)*uint64(bs)]
					ok := false
					for ver := minVer[b]; ver < len(versions[b]); ver++ {
						if bytes.Equal(blk, versions[b][ver]) {
							ok = true
							break
						}
					}
					if !ok {
						t.Fatalf("cut after %d (%s), read-only %v: block %d holds none of its versions from %d on", k, im.Survivors, readOnly, b, minVer[b])
					}
				}
				cv.Close()
			}
		}
	}
	t.Logf("%d images judged", images)
}

func sweepBase(t *testing.T, o FormatOptions, size int64) ([]byte, Options) {
	dev := powercut.New(make([]byte, size))
	if _, err := Format(dev, o); err != nil {
		t.Fatal(err)
	}
	opts := Options{Algorithm: o.Algorithm, Key: o.Key, JournalMAC: o.JournalMAC, JournalMACKey: o.JournalMACKey,
		JournalCrypt: o.JournalCrypt, JournalCryptKey: o.JournalCryptKey}
	v, err := Open(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(pattern(int(v.Size()), 9), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	return dev.Current(), opts
}

// TestPowerCutJournal: journal-mode writes, one spanning sections and
// one wrapping around the ring's end (overlapping the first), keep every
// block and its tag atomic across a power cut at any point.
func TestPowerCutJournal(t *testing.T) {
	for _, o := range []FormatOptions{
		{Algorithm: "crc32c", JournalSectors: 3 * 176, InterleaveSectors: 64},
		{Algorithm: "hmac-sha256", Key: []byte("key"), JournalMAC: "hmac(sha256)", JournalMACKey: []byte("jkey"), SectorSize: 4096, JournalSectors: 4 * 40},
		{Algorithm: "crc32", JournalCrypt: "ctr(aes)", JournalCryptKey: make([]byte, 16), SectorSize: 1024, JournalSectors: 3 * 176},
		{Algorithm: "sha1", JournalCrypt: "cbc-aes", JournalCryptKey: make([]byte, 32), JournalSectors: 3 * 104, InterleaveSectors: 64},
		{Algorithm: "crc32c", JournalCrypt: "chacha20", JournalCryptKey: make([]byte, 32), SectorSize: 2048, JournalSectors: 3 * 176},
	} {
		t.Run(o.Algorithm, func(t *testing.T) {
			base, opts := sweepBase(t, o, 1<<20)
			g, _ := (&Superblock{}).geometryOf(base)
			e := g.SectionEntries
			bs := g.BlockSize()
			w1 := pattern((e+e/2)*bs, 10) // sections 0 and 1
			w2 := pattern((2*e)*bs, 11)   // sections 2, 0 (wrapping) and 1
			sweep(t, base, opts, []sweepWrite{{first: 3, data: w1}, {first: uint64(e), data: w2}})
		})
	}
}

// TestPowerCutBitmap: in bitmap mode a block always verifies after a
// power cut (its tag is recomputed where the bitmap says dirty), and
// holds old or new data; what was flushed stays.
func TestPowerCutBitmap(t *testing.T) {
	base, opts := sweepBase(t, FormatOptions{Algorithm: "sha256", InterleaveSectors: 64}, 1<<20)
	opts.Mode = ModeBitmap
	sweep(t, base, opts, []sweepWrite{
		{first: 5, data: pattern(40*512, 12), flush: true},
		{first: 30, data: pattern(200*512, 13)},
		{first: 1000, data: pattern(3*512, 14), flush: true},
	})
}

func (*Superblock) geometryOf(img []byte) (Geometry, error) {
	sb, err := ParseSuperblock(img)
	if err != nil {
		return Geometry{}, err
	}
	return sb.Geometry()
}
