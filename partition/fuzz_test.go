package partition

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The fuzz targets read a sparse device: head at byte 0, tail at the end,
// zeros between, of a fuzzed size up to 16 TiB, so that small inputs
// stand for real disks (a GPT's backup lives at the last LBA). The seeds
// in testdata/fuzz are the first and last sectors of disks made by sgdisk
// and sfdisk (TestWriteFuzzSeeds), trimmed of zeros.

func fuzzSize(size int64, head int) int64 {
	if size < 0 {
		size = -(size + 1)
	}
	size %= 1 << 44
	if size == 0 {
		size = int64(head)
	}
	return size
}

func FuzzGPT(f *testing.F) {
	g := newGPTImage(512, 64, 4, 128)
	g.setEntry(0, 1, 5, 10)
	g.setEntry(2, 2, 11, 11)
	g.seal()
	f.Add(g.b[:3*512], g.b[len(g.b)-2*512:], int64(len(g.b)))
	f.Fuzz(func(t *testing.T, head, tail []byte, size int64) {
		size = fuzzSize(size, len(head))
		dev := &sparse{head: head, tail: tail, size: size}
		for _, ss := range []int{0, 4096} {
			checkInvariants(t, dev, size, Options{SectorSize: ss})
		}
	})
}

func FuzzMBR(f *testing.F) {
	m := newMBRImage(40)
	m.set(0, 0, 0x83, 1, 2)
	m.set(0, 1, 0x05, 3, 30)
	m.set(3, 0, 0x83, 1, 2)
	m.set(3, 1, 0x05, 5, 5)
	m.set(8, 0, 0x82, 1, 2)
	f.Add(m.b, int64(len(m.b)), uint8(0))
	f.Fuzz(func(t *testing.T, head []byte, size int64, ss uint8) {
		size = fuzzSize(size, len(head))
		dev := &sparse{head: head, size: size}
		checkInvariants(t, dev, size, Options{SectorSize: []int{0, 512, 4096}[ss%3]})
	})
}

// checkInvariants reads dev and checks what a caller relies on: a
// one-line error of a documented kind, or a table whose partitions are
// inside the device, numbered in order, not overlapping, found by Find
// and readable through Open.
func checkInvariants(t *testing.T, dev io.ReaderAt, size int64, o Options) {
	tb, err := Read(dev, size, o)
	if err != nil {
		if strings.ContainsAny(err.Error(), "\r\n") {
			t.Fatalf("error of more than one line: %q", err)
		}
		if !errors.Is(err, ErrNoTable) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error of no documented kind: %v", err)
		}
		return
	}
	for _, w := range tb.Warnings {
		if strings.ContainsAny(w, "\r\n") {
			t.Fatalf("warning of more than one line: %q", w)
		}
	}
	ss := int64(tb.SectorSize)
	if o.SectorSize != 0 && tb.SectorSize != o.SectorSize || tb.SectorSize != 512 && tb.SectorSize != 4096 {
		t.Fatalf("sector size %d with Options %+v", tb.SectorSize, o)
	}
	var vols []Partition
	last := 0
	for _, p := range tb.Partitions {
		if p.Number <= last {
			t.Fatalf("partition %d after %d", p.Number, last)
		}
		last = p.Number
		if p.Size <= 0 || p.Start < ss || p.End() > size || p.Start%ss != 0 || p.Size%ss != 0 {
			t.Fatalf("partition %d: %d bytes at %d on a %d-byte device", p.Number, p.Size, p.Start, size)
		}
		if tb.Scheme == GPT && (p.Start < 2*ss || uint64(p.Start/ss) < tb.FirstUsableLBA || uint64(p.End()/ss-1) > tb.LastUsableLBA) {
			t.Fatalf("GPT partition %d outside the usable LBAs: %+v", p.Number, p)
		}
		if p.Logical {
			inside := false
			for _, x := range tb.Partitions {
				inside = inside || x.Extended && p.Start >= x.Start && p.End() <= x.End()
			}
			if !inside {
				t.Fatalf("logical partition %d in no extended partition", p.Number)
			}
		}
		if q, err := tb.Find(strconv.Itoa(p.Number)); err != nil || q != p {
			t.Fatalf("Find(%d) = %+v, %v", p.Number, q, err)
		}
		if q, err := tb.Find("PARTUUID=" + p.PartUUID); err != nil || q.PartUUID != p.PartUUID {
			t.Fatalf("Find(PARTUUID=%s) = %+v, %v", p.PartUUID, q, err)
		}
		if p.Extended {
			continue
		}
		vols = append(vols, p)
		d, err := tb.Open(dev, strconv.Itoa(p.Number), DeviceOptions{ReadOnly: true})
		if err != nil {
			t.Fatalf("Open(%d): %v", p.Number, err)
		}
		b := make([]byte, 1)
		if _, err := d.ReadAt(b, p.Size-1); err != nil {
			t.Fatalf("partition %d: reading its last byte: %v", p.Number, err)
		}
		if n, err := d.ReadAt(b, p.Size); n != 0 || err != io.EOF {
			t.Fatalf("partition %d: reading past its end: %d, %v", p.Number, n, err)
		}
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].Start < vols[j].Start })
	for i := 1; i < len(vols); i++ {
		if vols[i].Start < vols[i-1].End() {
			t.Fatalf("partitions %d and %d overlap", vols[i-1].Number, vols[i].Number)
		}
	}
}

// seedEnv names the variable that makes TestWriteFuzzSeeds rewrite the
// committed seed corpus.
const seedEnv = "PARTITION_WRITE_SEEDS"

// TestWriteFuzzSeeds, with PARTITION_WRITE_SEEDS=1, makes the seed
// corpus with sgdisk and sfdisk. Without it, it checks that each
// committed seed is a readable table, so that fuzzing starts deep in the
// parsers rather than at the signature checks.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv(seedEnv) == "" {
		checkSeeds(t)
		return
	}
	sg, sf := sgdisk(t), sfdisk(t)
	write := func(target, name string, vals ...any) {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, v := range vals {
			switch v := v.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			case int64:
				fmt.Fprintf(&b, "int64(%d)\n", v)
			case uint8:
				fmt.Fprintf(&b, "uint8(%d)\n", v)
			}
		}
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// headTail is the disk's first sectors and last sectors, zeros
	// trimmed from the inside ends.
	headTail := func(img string, ss int, headSecs, tailSecs int) ([]byte, []byte, int64) {
		b, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		head := bytes.TrimRight(b[:headSecs*ss], "\x00")
		var tail []byte
		if tailSecs > 0 {
			tail = bytes.TrimLeft(b[len(b)-tailSecs*ss:], "\x00")
		}
		return head, tail, int64(len(b))
	}
	small := func(dev string) {
		run(t, "", sg, "-o", "-a", "1", "--resize-table=4", "-n", "1:0:+64K", "-t", "1:8309", "-c", "1:luks",
			"-n", "2:0:+128K", "-t", "2:ef00", "-c", "2:EFI", "-n", "4:0:+8K", "-t", "4:0700", "-A", "4:set:63", dev)
	}

	img := newImage(t, "a.img", 1<<20)
	small(img)
	h, tl, n := headTail(img, 512, 3, 2)
	write("FuzzGPT", "gpt512-4entries", h, tl, n)
	hd := bytes.Clone(h)
	hd[512+60] ^= 0xff
	write("FuzzGPT", "gpt512-damaged-primary", hd, tl, n)
	run(t, "", sg, "-h", "1", img) // a hybrid MBR: 0xEE beside a copy of partition 1
	h, tl, n = headTail(img, 512, 3, 2)
	write("FuzzGPT", "gpt512-hybrid", h, tl, n)

	img = newImage(t, "b.img", 1<<20)
	run(t, "", sg, "-o", "-a", "1", "-n", "1:0:+100K", "-t", "1:8300", "-c", "1:root", "-n", "3:0:+100K", "-t", "3:8200", img)
	h, _, n = headTail(img, 512, 34, 0)
	write("FuzzGPT", "gpt512-128entries-no-backup", h, []byte{}, n)

	img = newImage(t, "c.img", 1<<20)
	small(attachLoop(t, img, 4096))
	// The primary only: a 4096-byte backup with the zeros between its
	// entries and its header would make a 60 KB seed file.
	h, _, n = headTail(img, 4096, 3, 0)
	write("FuzzGPT", "gpt4096-4entries-no-backup", h, []byte{}, n)

	img = newImage(t, "d.img", 1<<20)
	run(t, "label: dos\nlabel-id: 0x1a2b3c4d\nunit: sectors\n\nstart=1, size=2, type=83, bootable\nstart=3, size=12, type=5\n"+
		"start=16, size=4, type=c\nstart=4, size=2, type=83\nstart=7, size=2, type=82\nstart=10, size=2, type=8e\n",
		sf, "--no-reread", "--no-tell-kernel", "-q", img)
	h, _, n = headTail(img, 512, 20, 0)
	write("FuzzMBR", "mbr512-3logical", h, n, uint8(1))

	img = newImage(t, "e.img", 1<<20)
	run(t, "label: dos\nunit: sectors\n\nstart=64, size=100, type=7\nstart=200, size=200, type=ef, bootable\n",
		sf, "--no-reread", "--no-tell-kernel", "-q", img)
	h, _, n = headTail(img, 512, 1, 0)
	write("FuzzMBR", "mbr512-2primary", h, n, uint8(0))
	checkSeeds(t)
}

// checkSeeds reads each committed seed as the fuzz target would and
// requires a table with partitions.
func checkSeeds(t *testing.T) {
	for _, target := range []string{"FuzzGPT", "FuzzMBR"} {
		files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no seeds for %s in testdata/fuzz (run with %s=1): %v", target, seedEnv, err)
		}
		for _, file := range files {
			vals := readSeed(t, file)
			var dev *sparse
			var o Options
			if target == "FuzzGPT" {
				size := fuzzSize(vals[2].(int64), len(vals[0].([]byte)))
				dev = &sparse{head: vals[0].([]byte), tail: vals[1].([]byte), size: size}
			} else {
				size := fuzzSize(vals[1].(int64), len(vals[0].([]byte)))
				dev = &sparse{head: vals[0].([]byte), size: size}
				o.SectorSize = []int{0, 512, 4096}[vals[2].(uint8)%3]
			}
			tb, err := Read(dev, dev.size, o)
			if err != nil || len(tb.Partitions) == 0 {
				t.Errorf("seed %s: %v", file, err)
				continue
			}
			if strings.Contains(file, "damaged") != tb.Backup {
				t.Errorf("seed %s: Backup %v", file, tb.Backup)
			}
		}
	}
}

// readSeed parses a corpus file of []byte, int64 and uint8 values.
func readSeed(t *testing.T, file string) []any {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a corpus file", file)
	}
	var vals []any
	for _, l := range lines[1:] {
		typ, arg, ok := strings.Cut(l, "(")
		arg = strings.TrimSuffix(arg, ")")
		if !ok {
			t.Fatalf("%s: bad line %q", file, l)
		}
		switch typ {
		case "[]byte":
			s, err := strconv.Unquote(arg)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			vals = append(vals, []byte(s))
		case "int64":
			v, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			vals = append(vals, v)
		case "uint8":
			v, err := strconv.ParseUint(arg, 10, 8)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			vals = append(vals, uint8(v))
		default:
			t.Fatalf("%s: type %q", file, typ)
		}
	}
	return vals
}
