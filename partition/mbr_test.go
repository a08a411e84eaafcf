package partition

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mbrLayout is the sfdisk script of the test disks: two primaries (one
// bootable), an extended partition with three logical ones, a fourth
// primary after it. Sizes are in sectors of the disk.
const mbrLayout = `label: dos
label-id: 0x1a2b3c4d
unit: sectors

start=2048, size=4096, type=83, bootable
start=6144, size=8192, type=7
start=14336, size=40960, type=5
start=59392, size=4096, type=c
size=4096, type=83
size=8192, type=82
size=6144, type=8e
`

// checkMBRAgainstSfdisk compares our reading of img with sfdisk --json
// of tooldev: the disk identifier, and per partition its number, start,
// size, type and boot flag.
func checkMBRAgainstSfdisk(t *testing.T, tooldev, img string, o Options) *Table {
	t.Helper()
	st := sfdiskJSON(t, tooldev)
	pt := st.PartitionTable
	tb := mustRead(t, img, o)
	if pt.Label != "dos" || tb.Scheme != MBR || tb.SectorSize != pt.SectorSize {
		t.Fatalf("scheme %s, sector size %d; sfdisk says %s, %d", tb.Scheme, tb.SectorSize, pt.Label, pt.SectorSize)
	}
	if id := fmt.Sprintf("0x%08x", tb.DiskID); id != pt.ID {
		t.Errorf("disk identifier %s, sfdisk says %s", id, pt.ID)
	}
	if len(tb.Warnings) != 0 {
		t.Errorf("warnings %q", tb.Warnings)
	}
	want := map[int]int{} // number → index in sfdisk's list
	var nums []int
	for i, p := range pt.Partitions {
		n := nodeNumber(t, pt.Device, p.Node)
		want[n] = i
		nums = append(nums, n)
	}
	slices.Sort(nums)
	var got []int
	for _, p := range tb.Partitions {
		got = append(got, p.Number)
	}
	if !slices.Equal(got, nums) {
		t.Fatalf("partitions %v, sfdisk lists %v", got, nums)
	}
	ss := int64(pt.SectorSize)
	for _, p := range tb.Partitions {
		s := pt.Partitions[want[p.Number]]
		typ, err := strconv.ParseUint(s.Type, 16, 8)
		if err != nil {
			t.Fatalf("sfdisk type %q: %v", s.Type, err)
		}
		if p.Start != s.Start*ss || p.Size != s.Size*ss {
			t.Errorf("partition %d: %d bytes at %d; sfdisk says %d sectors at %d of %d bytes", p.Number, p.Size, p.Start, s.Size, s.Start, ss)
		}
		if p.MBRType != byte(typ) || p.Bootable != s.Bootable {
			t.Errorf("partition %d: type %#02x bootable %v; sfdisk says %s, %v", p.Number, p.MBRType, p.Bootable, s.Type, s.Bootable)
		}
		if p.Extended != isExtended(byte(typ)) || p.Logical != (p.Number >= 5) {
			t.Errorf("partition %d: extended %v, logical %v", p.Number, p.Extended, p.Logical)
		}
		if want := fmt.Sprintf("%08x-%02x", tb.DiskID, p.Number); p.PartUUID != want {
			t.Errorf("partition %d: PARTUUID %s, the kernel's would be %s", p.Number, p.PartUUID, want)
		}
		if !p.Type.IsZero() || !p.UUID.IsZero() || p.Name != "" || p.Attributes != 0 {
			t.Errorf("partition %d: GPT fields set on an MBR partition: %+v", p.Number, p)
		}
	}
	return tb
}

func makeMBR(t *testing.T, dev string) {
	run(t, mbrLayout, sfdisk(t), "--no-reread", "--no-tell-kernel", "-q", dev)
}

func TestMBRAgainstSfdisk512(t *testing.T) {
	img := newImage(t, "mbr512.img", 32<<20)
	makeMBR(t, img)
	tb := checkMBRAgainstSfdisk(t, img, img, Options{})
	// The layout's facts: 1-4 primary, 5-7 logical in chain order.
	if len(tb.Partitions) != 7 || tb.Partitions[4].Number != 5 || tb.Partitions[4].Start != 16384*512 ||
		tb.Partitions[5].MBRType != 0x82 || !tb.Partitions[0].Bootable || !tb.Partitions[2].Extended {
		t.Errorf("unexpected table %+v", tb.Partitions)
	}
}

// TestMBRAgainstSfdisk4096: sfdisk on a loop device of 4096-byte
// sectors writes every LBA in 4096-byte units; we read the file with
// the sector size given, and with the one DeviceSectorSize reports.
func TestMBRAgainstSfdisk4096(t *testing.T) {
	img := newImage(t, "mbr4096.img", 256<<20)
	loop := attachLoop(t, img, 4096)
	makeMBR(t, loop)
	f, err := os.Open(loop)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ss, err := DeviceSectorSize(f)
	if err != nil || ss != 4096 {
		t.Fatalf("DeviceSectorSize(%s) = %d, %v", loop, ss, err)
	}
	checkMBRAgainstSfdisk(t, loop, img, Options{SectorSize: ss})
}

// TestMBRTypeNames checks every MBR type name of ours against sfdisk's
// list.
func TestMBRTypeNames(t *testing.T) {
	out := run(t, "", sfdisk(t), "-T", "--label", "dos")
	names := map[byte]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		code, name, ok := strings.Cut(strings.TrimSpace(sc.Text()), "  ")
		if v, err := strconv.ParseUint(code, 16, 8); ok && err == nil {
			names[byte(v)] = strings.TrimSpace(name)
		}
	}
	if len(names) < 50 {
		t.Fatalf("cannot parse sfdisk -T output:\n%s", out)
	}
	for b, ours := range mbrTypeNames {
		if names[b] != ours {
			t.Errorf("type %#02x: %q, sfdisk says %q", b, ours, names[b])
		}
	}
}
