package partition

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"
)

// gptImage builds GPT disks in memory for the hostile cases: a
// protective MBR, the primary header at LBA 1 with its array at LBA 2,
// the backup header at the last LBA with its array just before it. Its
// soundness is checked by sgdisk in TestGPTImageBuilder.
type gptImage struct {
	b        []byte
	ss       int
	arrSecs  int
	lastLBA  uint64
	count    uint32
	esize    uint32
	arrBytes int
}

func newGPTImage(ss, sectors int, count, esize uint32) *gptImage {
	g := &gptImage{b: make([]byte, ss*sectors), ss: ss, lastLBA: uint64(sectors - 1), count: count, esize: esize}
	g.arrBytes = int(count * esize)
	g.arrSecs = (g.arrBytes + ss - 1) / ss
	// protective MBR
	e := g.b[446:]
	e[4] = 0xEE
	le.PutUint32(e[8:], 1)
	le.PutUint32(e[12:], uint32(min(uint64(sectors-1), 0xffffffff)))
	g.b[510], g.b[511] = 0x55, 0xAA
	first := uint64(2 + g.arrSecs)
	last := g.lastLBA - 1 - uint64(g.arrSecs)
	for _, primary := range []bool{true, false} {
		h := g.hdr(primary)
		copy(h, gptSignature)
		le.PutUint32(h[8:], 0x00010000)
		le.PutUint32(h[12:], 92)
		my, alt, arr := uint64(1), g.lastLBA, uint64(2)
		if !primary {
			my, alt, arr = g.lastLBA, 1, g.lastLBA-uint64(g.arrSecs)
		}
		le.PutUint64(h[24:], my)
		le.PutUint64(h[32:], alt)
		le.PutUint64(h[40:], first)
		le.PutUint64(h[48:], last)
		copy(h[56:72], []byte("0123456789abcdef"))
		le.PutUint64(h[72:], arr)
		le.PutUint32(h[80:], count)
		le.PutUint32(h[84:], esize)
	}
	g.seal()
	return g
}

func (g *gptImage) hdr(primary bool) []byte {
	if primary {
		return g.b[g.ss : 2*g.ss]
	}
	return g.b[int(g.lastLBA)*g.ss:][:g.ss]
}

func (g *gptImage) array(primary bool) []byte {
	h := g.hdr(primary)
	off := int(le.Uint64(h[72:])) * g.ss
	return g.b[off:][:g.arrBytes]
}

// setEntry writes entry i (0-based) into both arrays.
func (g *gptImage) setEntry(i int, typ byte, start, end uint64) {
	for _, primary := range []bool{true, false} {
		e := g.array(primary)[i*int(g.esize):]
		e[0], e[15] = typ, 1 // a non-zero type GUID
		e[16], e[31] = byte(i+1), 0x42
		le.PutUint64(e[32:], start)
		le.PutUint64(e[40:], end)
		le.PutUint16(e[56:], 'p')
	}
}

// seal recomputes the array and header CRC32s of both copies, so that a
// hostile field is seen by the checks after the CRCs.
func (g *gptImage) seal() {
	for _, primary := range []bool{true, false} {
		h := g.hdr(primary)
		n := uint64(le.Uint32(h[80:])) * uint64(le.Uint32(h[84:]))
		off := le.Uint64(h[72:]) * uint64(g.ss)
		if off+n <= uint64(len(g.b)) && off+n >= off {
			le.PutUint32(h[88:], crc32.ChecksumIEEE(g.b[off:off+n]))
		}
		g.sealHeader(primary)
	}
}

func (g *gptImage) sealHeader(primary bool) {
	h := g.hdr(primary)
	hs := le.Uint32(h[12:])
	if hs > uint32(g.ss) {
		hs = uint32(g.ss)
	}
	le.PutUint32(h[16:], 0)
	le.PutUint32(h[16:], crc32.ChecksumIEEE(h[:hs]))
}

func (g *gptImage) read(o Options) (*Table, error) {
	return Read(bytes.NewReader(g.b), int64(len(g.b)), o)
}

// TestGPTImageBuilder: the builder's disks are sound to us and to sgdisk,
// so that the hostile cases below differ from a sound disk only in what
// each one breaks.
func TestGPTImageBuilder(t *testing.T) {
	g := newGPTImage(512, 2048, 128, 128)
	g.setEntry(0, 1, 100, 199)
	g.setEntry(3, 2, 200, 299)
	g.seal()
	tb, err := g.read(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.Partitions) != 2 || tb.Partitions[1].Number != 4 || tb.Partitions[1].Start != 200*512 || len(tb.Warnings) != 0 {
		t.Fatalf("table %+v", tb)
	}
	img := newImage(t, "built.img", 0)
	writeFile(t, img, g.b)
	if v := sgdiskVerify(t, img); !v.found || !v.mainHeader || !v.backupHeader || !v.mainTable || !v.backupTable {
		t.Fatalf("sgdisk -v finds the built disk unsound: %+v\n%s", v, runAny(sgdisk(t), "-v", img))
	}
}

// TestGPTHostile: each case is a disk whose CRCs are right (or, where
// the case is a bad CRC, wrong in both copies) and whose content is
// wrong. Every one must end in ErrCorrupt with a one-line message naming
// the problem, without a panic and with bounded allocation.
func TestGPTHostile(t *testing.T) {
	for _, c := range []struct {
		name  string
		size  int64 // >0: a sparse device of this size holding the built disk's first part
		mod   func(g *gptImage)
		want  string
		noCRC bool
	}{
		{name: "overlapping entries", want: "overlap", mod: func(g *gptImage) {
			g.setEntry(0, 1, 100, 199)
			g.setEntry(1, 1, 150, 250)
		}},
		{name: "same start", want: "overlap", mod: func(g *gptImage) {
			g.setEntry(5, 1, 100, 100)
			g.setEntry(9, 1, 100, 300)
		}},
		{name: "entry beyond the disk", want: "not inside the usable LBAs", mod: func(g *gptImage) {
			g.setEntry(0, 1, 100, 1<<40)
		}},
		{name: "entry before first usable", want: "not inside the usable LBAs", mod: func(g *gptImage) {
			g.setEntry(0, 1, 1, 50)
		}},
		{name: "start after end", want: "not inside the usable LBAs", mod: func(g *gptImage) {
			g.setEntry(0, 1, 300, 200)
		}},
		{name: "huge entry count", want: "more than the 4194304 this reader allows", mod: func(g *gptImage) {
			setHdr32(g, 80, 0xffffffff)
		}},
		{name: "huge entry size", want: "more than the 4194304", mod: func(g *gptImage) {
			setHdr32(g, 84, 1<<31)
		}},
		{name: "entry size not 128×2ⁿ", want: "entry size 384", mod: func(g *gptImage) {
			setHdr32(g, 84, 384)
		}},
		{name: "entry size too small", want: "entry size 64", mod: func(g *gptImage) {
			setHdr32(g, 84, 64)
		}},
		{name: "entry array beyond the disk", want: "not inside the device", mod: func(g *gptImage) {
			setHdr32(g, 80, 16384) // 2 MiB of entries on a 1 MiB disk
		}},
		{name: "entry array in the usable area", want: "overlaps the usable LBAs", mod: func(g *gptImage) {
			setHdr64(g, 72, 100)
		}},
		{name: "header size too small", want: "header size 91", mod: func(g *gptImage) {
			setHdr32(g, 12, 91)
		}},
		{name: "header size beyond the sector", want: "header size 513", mod: func(g *gptImage) {
			setHdr32(g, 12, 513)
		}},
		{name: "usable range beyond the disk", want: "usable LBAs", mod: func(g *gptImage) {
			setHdr64(g, 48, 1<<50)
		}},
		{name: "first usable after last", want: "usable LBAs", mod: func(g *gptImage) {
			setHdr64(g, 40, 2000)
		}},
		{name: "wrong MyLBA", want: "MyLBA", mod: func(g *gptImage) {
			setHdr64(g, 24, 7)
		}},
		{name: "bad header CRCs", noCRC: true, want: "header CRC32", mod: func(g *gptImage) {
			for _, p := range []bool{true, false} {
				g.hdr(p)[16] ^= 1
			}
		}},
		{name: "bad entry array CRCs", noCRC: true, want: "entry array CRC32", mod: func(g *gptImage) {
			for _, p := range []bool{true, false} {
				g.array(p)[0] ^= 1
			}
		}},
		{name: "no GPT behind the protective MBR", noCRC: true, want: "no GPT header", mod: func(g *gptImage) {
			clear(g.hdr(true))
			clear(g.hdr(false))
		}},
		{name: "huge entry count on a huge disk", size: 1 << 42, want: "more than the 4194304", mod: func(g *gptImage) {
			setHdr32(g, 80, 0xffffffff)
		}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			g := newGPTImage(512, 2048, 128, 128)
			g.setEntry(0, 1, 40, 60)
			c.mod(g)
			if !c.noCRC {
				g.seal()
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			var err error
			if c.size > 0 {
				_, err = Read(&sparse{head: g.b[:1024+16384], size: c.size}, c.size, Options{})
			} else {
				_, err = g.read(Options{})
			}
			runtime.ReadMemStats(&m1)
			oneLine(t, err, ErrCorrupt)
			t.Log(err)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if d := m1.TotalAlloc - m0.TotalAlloc; d > 1<<20 {
				t.Errorf("Read allocated %d bytes to refuse the disk", d)
			}
		})
	}
}

func setHdr32(g *gptImage, off int, v uint32) {
	for _, p := range []bool{true, false} {
		le.PutUint32(g.hdr(p)[off:], v)
	}
}

func setHdr64(g *gptImage, off int, v uint64) {
	for _, p := range []bool{true, false} {
		le.PutUint64(g.hdr(p)[off:], v)
	}
}

// TestGPTLargestArray: the largest entry array we take (4 MiB) is read;
// one entry more is refused.
func TestGPTLargestArray(t *testing.T) {
	g := newGPTImage(512, 20000, 32768, 128)
	g.setEntry(32767, 1, 9000, 9999)
	g.seal()
	tb, err := g.read(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.Partitions) != 1 || tb.Partitions[0].Number != 32768 {
		t.Fatalf("partitions %+v", tb.Partitions)
	}
	g = newGPTImage(512, 20000, 32769, 128)
	_, err = g.read(Options{})
	oneLine(t, err, ErrCorrupt)
}

// mbrImage builds MBR disks in memory.
type mbrImage struct{ b []byte }

func newMBRImage(sectors int) *mbrImage {
	m := &mbrImage{b: make([]byte, 512*sectors)}
	m.sign(0)
	return m
}

func (m *mbrImage) sign(sector int) {
	m.b[sector*512+510], m.b[sector*512+511] = 0x55, 0xAA
}

// set writes entry slot (0-3) of the table in sector.
func (m *mbrImage) set(sector, slot int, typ byte, start, count uint32) {
	e := m.b[sector*512+446+16*slot:]
	e[4] = typ
	le.PutUint32(e[8:], start)
	le.PutUint32(e[12:], count)
	m.sign(sector)
}

func (m *mbrImage) read() (*Table, error) {
	return Read(bytes.NewReader(m.b), int64(len(m.b)), Options{})
}

// TestMBRHostile: EBR chains that loop, run on, or leave their extended
// partition, and primaries that overlap or leave the disk.
func TestMBRHostile(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(m *mbrImage)
		want string
		err  error
	}{
		{"EBR chain loops to itself", func(m *mbrImage) {
			m.set(0, 0, 0x05, 100, 900)
			m.set(100, 0, 0x83, 1, 10)
			m.set(100, 1, 0x05, 50, 20) // EBR at 150
			m.set(150, 0, 0x83, 1, 10)  //
			m.set(150, 1, 0x05, 50, 20) // links to itself
		}, "loops back to sector 150", ErrCorrupt},
		{"EBR chain loops to the first EBR", func(m *mbrImage) {
			m.set(0, 0, 0x0f, 100, 900)
			m.set(100, 0, 0x83, 1, 10)
			m.set(100, 1, 0x05, 50, 20)
			m.set(150, 0, 0x83, 1, 10)
			m.set(150, 1, 0x85, 0, 20) // a link of offset 0: the first EBR
		}, "outside extended partition 1", ErrCorrupt},
		{"EBR chain loops through a later EBR", func(m *mbrImage) {
			m.set(0, 0, 0x05, 100, 900)
			m.set(100, 1, 0x05, 50, 20)
			m.set(150, 1, 0x05, 100, 20)
			m.set(200, 1, 0x05, 50, 20) // back to 150
		}, "loops back to sector 150", ErrCorrupt},
		{"EBR outside the extended partition", func(m *mbrImage) {
			m.set(0, 0, 0x05, 100, 100)
			m.set(100, 0, 0x83, 1, 10)
			m.set(100, 1, 0x05, 500, 20)
		}, "outside extended partition 1", ErrCorrupt},
		{"logical partition outside the extended partition", func(m *mbrImage) {
			m.set(0, 0, 0x05, 100, 100)
			m.set(100, 0, 0x83, 1, 500)
		}, "is not inside extended partition 1", ErrCorrupt},
		{"logical partition over its EBR", func(m *mbrImage) {
			m.set(0, 0, 0x05, 100, 100)
			m.set(100, 0, 0x83, 0, 10)
		}, "is not inside extended partition 1", ErrCorrupt},
		{"logical partition over the next EBR", func(m *mbrImage) {
			m.set(0, 0, 0x05, 100, 100)
			m.set(100, 0, 0x83, 1, 30)
			m.set(100, 1, 0x05, 20, 20)
			m.set(120, 0, 0x83, 15, 5)
		}, "contains the EBR at sector 120", ErrCorrupt},
		{"primaries overlap", func(m *mbrImage) {
			m.set(0, 0, 0x83, 100, 100)
			m.set(0, 2, 0x83, 150, 100)
		}, "partitions 1 (sectors 100-199) and 3 (sectors 150-249) overlap", ErrCorrupt},
		{"primary beyond the disk", func(m *mbrImage) {
			m.set(0, 1, 0x83, 100, 0xffffffff)
		}, "partition 2 (sectors 100-4294967394) is not inside the device's sectors 1-1999", ErrCorrupt},
		{"primary over the MBR", func(m *mbrImage) {
			m.set(0, 0, 0x83, 0, 10)
		}, "partition 1 (sectors 0-9)", ErrCorrupt},
		{"boot indicator of a boot sector", func(m *mbrImage) {
			m.set(0, 0, 0x83, 100, 100)
			m.b[446+16] = 0x12
		}, "entry 2's boot indicator 0x12", ErrNoTable},
		{"no signature", func(m *mbrImage) {
			m.b[511] = 0
		}, "no 0x55AA signature", ErrNoTable},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			m := newMBRImage(2000)
			c.mod(m)
			_, err := m.read()
			oneLine(t, err, c.err)
			t.Log(err)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestMBRLongChain: a chain of 252 logical partitions (Linux's limit)
// is read, numbered 5 to 256; one link more is refused.
func TestMBRLongChain(t *testing.T) {
	build := func(n int) *mbrImage {
		m := newMBRImage(4 + 3*n + 10)
		m.set(0, 0, 0x05, 2, uint32(3*n+5))
		for i := 0; i < n; i++ {
			ebr := 2 + 3*i
			m.set(ebr, 0, 0x83, 1, 2)
			if i+1 < n {
				m.set(ebr, 1, 0x05, uint32(3*(i+1)), 3)
			}
		}
		return m
	}
	tb, err := build(252).read()
	if err != nil {
		t.Fatal(err)
	}
	last := tb.Partitions[len(tb.Partitions)-1]
	if len(tb.Partitions) != 253 || last.Number != 256 || !last.Logical || last.Start != int64(2+3*251+1)*512 {
		t.Fatalf("%d partitions, the last %+v", len(tb.Partitions), last)
	}
	_, err = build(253).read()
	oneLine(t, err, ErrCorrupt)
}

// TestMBRLinuxRules: what Linux's parse_extended does with unusual EBRs,
// which we follow so that numbers stay those of /dev/sdaN.
func TestMBRLinuxRules(t *testing.T) {
	m := newMBRImage(2000)
	m.set(0, 0, 0x83, 10, 10)
	m.set(0, 1, 0x85, 100, 500)
	// An EBR whose only entry is the link: no number is used.
	m.set(100, 1, 0x05, 50, 100)
	// An EBR with two data entries: both are numbered, 5 and 6.
	m.set(150, 0, 0x83, 1, 10)
	m.set(150, 1, 0x83, 20, 10)
	m.set(150, 3, 0x0f, 150, 100) // the link may be in any slot
	// Garbage in slot 3 that does not fit: ignored, with a warning.
	m.set(250, 0, 0x8e, 1, 10)
	m.set(250, 2, 0x83, 1000, 10)
	// A blank extended partition 3: no logical partitions, no warning.
	m.set(0, 2, 0x05, 700, 100)
	tb, err := m.read()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range tb.Partitions {
		got = append(got, fmtPart(p))
	}
	want := []string{"1:10+10", "2:100+500e", "3:700+100e", "5:151+10", "6:170+10", "7:251+10"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("partitions %v, want %v", got, want)
	}
	if len(tb.Warnings) != 1 || !strings.Contains(tb.Warnings[0], "entry 3 of the EBR at sector 250 is ignored") {
		t.Errorf("warnings %q", tb.Warnings)
	}
	// An extended partition is listed but is no volume.
	if _, err := tb.Open(bytes.NewReader(m.b), "2", DeviceOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("opening the extended partition: %v", err)
	}
}

func fmtPart(p Partition) string {
	s := fmt.Sprintf("%d:%d+%d", p.Number, p.Start/512, p.Size/512)
	if p.Extended {
		s += "e"
	}
	return s
}
