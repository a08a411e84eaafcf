package partition

import (
	"bytes"
	"encoding/binary"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// gptLayout is the sgdisk command line of the test disks: numbers with a
// gap (4 unused, 128 the last entry), names in UTF-16 beyond ASCII (é, ✓,
// a surrogate pair) and of the full 36 code units, attribute bits in
// both halves, fixed GUIDs where sgdisk takes them.
func gptLayout(dev string) []string {
	return []string{
		"-o", "-U", "5C1D2E3F-4A5B-4C6D-8E9F-A0B1C2D3E4F5",
		"-n", "1:0:+1M", "-t", "1:ef00", "-c", "1:EFI", "-u", "1:0B5E1A1D-1111-4222-8333-944455566677",
		"-n", "2:0:+2M", "-t", "2:8300", "-c", "2:boot",
		"-n", "3:0:+8M", "-t", "3:8309", "-c", "3:cryptroot", "-A", "3:set:0",
		"-n", "5:0:+1M", "-t", "5:0700", "-c", "5:Données ✓ 🔑", "-A", "5:set:2", "-A", "5:set:63",
		"-n", "6:0:+1M", "-t", "6:8200", "-c", "6:abcdefghijklmnopqrstuvwxyz0123456789",
		"-n", "128:0:+1M", "-t", "128:8e00", "-c", "128:last",
		dev,
	}
}

// checkGPTAgainstSgdisk compares our reading of img with what sgdisk says
// of tooldev (the image itself, or the loop device over it): every field
// of the header and of each partition.
func checkGPTAgainstSgdisk(t *testing.T, tooldev, img string, o Options) *Table {
	t.Helper()
	sg := sgdisk(t)
	d := parseSgdiskP(t, run(t, "", sg, "-p", tooldev))
	tb := mustRead(t, img, o)
	if tb.Scheme != GPT || tb.SectorSize != d.sectorSize {
		t.Fatalf("scheme %s, sector size %d; sgdisk says gpt, %d", tb.Scheme, tb.SectorSize, d.sectorSize)
	}
	if !strings.EqualFold(tb.DiskGUID.String(), d.diskGUID) {
		t.Errorf("disk GUID %s, sgdisk says %s", tb.DiskGUID, d.diskGUID)
	}
	if int(tb.EntryCount) != d.entries || tb.FirstUsableLBA != d.first || tb.LastUsableLBA != d.last {
		t.Errorf("entries %d, usable %d-%d; sgdisk says %d, %d-%d", tb.EntryCount, tb.FirstUsableLBA, tb.LastUsableLBA, d.entries, d.first, d.last)
	}
	if tb.Backup || len(tb.Warnings) != 0 {
		t.Errorf("a sound disk read with Backup %v, warnings %q", tb.Backup, tb.Warnings)
	}
	var nums []int
	for _, p := range tb.Partitions {
		nums = append(nums, p.Number)
	}
	if !slices.Equal(nums, d.numbers) {
		t.Fatalf("partitions %v, sgdisk lists %v", nums, d.numbers)
	}
	ss := int64(d.sectorSize)
	for _, p := range tb.Partitions {
		s := parseSgdiskI(t, run(t, "", sg, "-i", strconv.Itoa(p.Number), tooldev))
		if !strings.EqualFold(p.Type.String(), s.typeGUID) || p.TypeName() != s.typeName {
			t.Errorf("partition %d: type %s %q, sgdisk says %s %q", p.Number, p.Type, p.TypeName(), s.typeGUID, s.typeName)
		}
		if !strings.EqualFold(p.UUID.String(), s.uniqueGUID) || p.PartUUID != strings.ToLower(s.uniqueGUID) {
			t.Errorf("partition %d: GUID %s, PARTUUID %s; sgdisk says %s", p.Number, p.UUID, p.PartUUID, s.uniqueGUID)
		}
		if p.Start != int64(s.first)*ss || p.Size != int64(s.last-s.first+1)*ss {
			t.Errorf("partition %d: %d bytes at %d; sgdisk says sectors %d-%d of %d bytes", p.Number, p.Size, p.Start, s.first, s.last, ss)
		}
		if p.Attributes != s.attrs {
			t.Errorf("partition %d: attributes %016x, sgdisk says %016x", p.Number, p.Attributes, s.attrs)
		}
		if utf8.ValidString(s.name) && p.Name != s.name {
			t.Errorf("partition %d: name %q, sgdisk says %q", p.Number, p.Name, s.name)
		}
		if !utf8.ValidString(s.name) {
			// sgdisk 1.0.9 stores a character beyond the BMP as its
			// surrogate pair but prints it wrongly; the judge is then
			// the UTF-16LE sgdisk wrote, in the primary array at LBA 2.
			raw := make([]byte, 72)
			readAt(t, img, raw, 2*ss+int64(p.Number-1)*128+56)
			enc := make([]byte, 72)
			for i, u := range utf16.Encode([]rune(p.Name)) {
				binary.LittleEndian.PutUint16(enc[2*i:], u)
			}
			if !bytes.Equal(raw, enc) {
				t.Errorf("partition %d: name %q; sgdisk wrote % x", p.Number, p.Name, raw)
			}
		}
		if p.MBRType != 0 || p.Bootable || p.Extended || p.Logical {
			t.Errorf("partition %d: MBR fields set on a GPT partition: %+v", p.Number, p)
		}
	}
	return tb
}

func TestGPTAgainstSgdisk512(t *testing.T) {
	img := newImage(t, "gpt512.img", 64<<20)
	run(t, "", sgdisk(t), gptLayout(img)...)
	tb := checkGPTAgainstSgdisk(t, img, img, Options{})
	// The layout's facts, in case sgdisk and we agreed on something else.
	want := []int{1, 2, 3, 5, 6, 128}
	if len(tb.Partitions) != len(want) {
		t.Fatalf("%d partitions, want %v", len(tb.Partitions), want)
	}
	p5 := tb.Partitions[3]
	if p5.Name != "Données ✓ 🔑" || p5.Attributes != 1<<63|1<<2 || p5.Type != TypeMicrosoftBasic {
		t.Errorf("partition 5: %+v", p5)
	}
	if p3 := tb.Partitions[2]; p3.Type != TypeLinuxLUKS || p3.TypeName() != "Linux LUKS" || p3.Size != 8<<20 {
		t.Errorf("partition 3: %+v", p3)
	}
	// The sector size given is used; the other one finds nothing.
	if tb2 := mustRead(t, img, Options{SectorSize: 512}); !reflect.DeepEqual(tb2, tb) {
		t.Errorf("SectorSize 512 reads %+v, probing %+v", tb2, tb)
	}
	_, err := readImage(t, img, Options{SectorSize: 4096})
	oneLine(t, err, ErrCorrupt)
}

// TestGPTAgainstSgdisk4096 makes the table with sgdisk on a loop device
// of 4096-byte logical sectors, then reads the image file: the probe
// must find the header at byte 4096 and count every LBA in 4096 bytes.
func TestGPTAgainstSgdisk4096(t *testing.T) {
	sg := sgdisk(t)
	img := newImage(t, "gpt4096.img", 64<<20)
	loop := attachLoop(t, img, 4096)
	run(t, "", sg, gptLayout(loop)...)
	tb := checkGPTAgainstSgdisk(t, loop, img, Options{})
	if tb.SectorSize != 4096 {
		t.Fatalf("sector size %d", tb.SectorSize)
	}
	f, err := os.Open(loop)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ss, err := DeviceSectorSize(f); err != nil || ss != 4096 {
		t.Errorf("DeviceSectorSize(%s) = %d, %v; want 4096", loop, ss, err)
	}
	g, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if ss, err := DeviceSectorSize(g); err != nil || ss != 0 {
		t.Errorf("DeviceSectorSize(regular file) = %d, %v; want 0", ss, err)
	}
	_, err = readImage(t, img, Options{SectorSize: 512})
	oneLine(t, err, ErrCorrupt)

	// The primary damaged: the probe still settles on 4096 and reads
	// the backup at the last 4096-byte LBA.
	flip(t, img, 4096+60)
	tb2 := mustRead(t, img, Options{})
	if !tb2.Backup || tb2.SectorSize != 4096 || !reflect.DeepEqual(tb2.Partitions, tb.Partitions) {
		t.Errorf("damaged primary at 4096: Backup %v, sector size %d, partitions %+v", tb2.Backup, tb2.SectorSize, tb2.Partitions)
	}
}

func readAt(t testing.TB, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// flip inverts the byte at off of the file.
func flip(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// sgdiskVerdict is sgdisk -v's CRC summary ("Main header: ERROR" …); all
// OK when sgdisk prints none, and found false when it found no GPT at
// all ("Creating new GPT entries").
type sgdiskVerdict struct {
	found                                            bool
	mainHeader, backupHeader, mainTable, backupTable bool // true: OK
}

func sgdiskVerify(t testing.TB, img string) sgdiskVerdict {
	out := runAny(sgdisk(t), "-v", img)
	v := sgdiskVerdict{found: !strings.Contains(out, "Creating new GPT entries"), mainHeader: true, backupHeader: true, mainTable: true, backupTable: true}
	for _, c := range []struct {
		line string
		ok   *bool
	}{{"Main header: ERROR", &v.mainHeader}, {"Backup header: ERROR", &v.backupHeader},
		{"Main partition table: ERROR", &v.mainTable}, {"Backup partition table: ERROR", &v.backupTable}} {
		if strings.Contains(out, c.line) {
			*c.ok = false
		}
	}
	return v
}

// TestGPTDamage damages the primary or the backup GPT (a header, an
// entry array, both headers) and checks that we use the copy sgdisk -v
// finds sound, and say which was damaged.
func TestGPTDamage(t *testing.T) {
	sg := sgdisk(t)
	const size = 8 << 20
	for _, c := range []struct {
		name    string
		offs    []int64
		backup  bool   // we must read the backup
		warning string // in Warnings
		corrupt bool   // both copies gone
	}{
		{"primary header", []int64{512 + 60}, true, "primary GPT header or its entries are damaged (header CRC32", false},
		{"primary entries", []int64{1024 + 40}, true, "entry array CRC32", false},
		{"primary signature", []int64{512}, true, "primary GPT header is missing", false},
		{"backup header", []int64{size - 512 + 60}, false, "backup GPT at LBA 16383 is damaged (header CRC32", false},
		{"backup entries", []int64{size - 33*512 + 40}, false, "backup GPT at LBA 16383 is damaged (entry array CRC32", false},
		{"both headers", []int64{512 + 60, size - 512 + 60}, false, "", true},
		{"primary header, backup entries", []int64{512 + 60, size - 33*512 + 40}, false, "", true},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			img := newImage(t, "d.img", size)
			run(t, "", sg, "-o", "-n", "1:0:+1M", "-t", "1:8309", "-c", "1:luks", "-n", "2:0:+2M", "-t", "2:8300", img)
			good := mustRead(t, img, Options{})
			for _, off := range c.offs {
				flip(t, img, off)
			}
			v := sgdiskVerify(t, img)
			tb, err := readImage(t, img, Options{})
			if c.corrupt {
				oneLine(t, err, ErrCorrupt)
				if v.found && (v.mainHeader && v.mainTable || v.backupHeader && v.backupTable) {
					t.Errorf("we refuse the disk, but sgdisk -v finds a sound copy: %+v", v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// sgdisk -v is the judge of which copy is sound.
			primaryOK := v.mainHeader && v.mainTable
			if !v.found || primaryOK == c.backup {
				t.Fatalf("sgdisk -v says %+v for damage to the %s", v, c.name)
			}
			if tb.Backup != !primaryOK {
				t.Errorf("Backup %v; sgdisk -v says %+v", tb.Backup, v)
			}
			if len(tb.Warnings) != 1 || !strings.Contains(tb.Warnings[0], c.warning) {
				t.Errorf("warnings %q, want one containing %q", tb.Warnings, c.warning)
			}
			if !reflect.DeepEqual(tb.Partitions, good.Partitions) || tb.DiskGUID != good.DiskGUID {
				t.Errorf("partitions %+v, before the damage %+v", tb.Partitions, good.Partitions)
			}
		})
	}
}

// TestGPTTypeNames checks every type name of ours against sgdisk's,
// through a partition of each type made by sgdisk's type code.
func TestGPTTypeNames(t *testing.T) {
	sg := sgdisk(t)
	codes := []string{"ef00", "ef02", "8300", "8e00", "8200", "8309", "8308", "fd00", "8304", "8303", "8305",
		"8307", "8302", "8306", "8310", "8311", "8301", "8314", "ea00", "0700", "0c01", "2700", "4200", "4201",
		"af00", "af0a", "a503", "a502", "a504", "bf01", "e900", "7f00", "7f01"}
	img := newImage(t, "types.img", 64<<20)
	args := []string{"-o"}
	for i, c := range codes {
		args = append(args, "-n", strconv.Itoa(i+1)+":0:+1M", "-t", strconv.Itoa(i+1)+":"+c)
	}
	run(t, "", sg, append(args, img)...)
	tb := mustRead(t, img, Options{})
	seen := map[GUID]bool{}
	for _, p := range tb.Partitions {
		s := parseSgdiskI(t, run(t, "", sg, "-i", strconv.Itoa(p.Number), img))
		if !strings.EqualFold(p.Type.String(), s.typeGUID) || p.TypeName() != s.typeName {
			t.Errorf("code %s: %s %q, sgdisk says %s %q", codes[p.Number-1], p.Type, p.TypeName(), s.typeGUID, s.typeName)
		}
		seen[p.Type] = true
	}
	for g, name := range gptTypeNames {
		if !seen[g] {
			t.Errorf("type %s %q is not checked against sgdisk: add its code to this test", g, name)
		}
	}
}

// TestGPTResized: a disk image that grew keeps its backup at the old end
// (sgdisk -v: "doesn't reside at the end of the disk"); we read the
// primary, check the backup where the primary says it is, and warn. One
// that shrank has lost its backup and its usable range overruns the
// device: Linux refuses it, and so do we (sgdisk -v reports errors too).
func TestGPTResized(t *testing.T) {
	sg := sgdisk(t)
	img := newImage(t, "r.img", 8<<20)
	run(t, "", sg, "-o", "-n", "1:0:+1M", "-t", "1:8309", img)
	good := mustRead(t, img, Options{})
	if err := os.Truncate(img, 10<<20); err != nil {
		t.Fatal(err)
	}
	if out := runAny(sg, "-v", img); !strings.Contains(out, "doesn't reside\nat the end of the disk") {
		t.Fatalf("sgdisk -v on the grown disk:\n%s", out)
	}
	tb := mustRead(t, img, Options{})
	if tb.Backup || !reflect.DeepEqual(tb.Partitions, good.Partitions) || len(tb.Warnings) != 1 ||
		!strings.Contains(tb.Warnings[0], "AlternateLBA is 16383, not the last LBA 20479") {
		t.Errorf("grown disk: Backup %v, warnings %q", tb.Backup, tb.Warnings)
	}
	if err := os.Truncate(img, 7<<20); err != nil {
		t.Fatal(err)
	}
	if v := sgdiskVerify(t, img); v.backupHeader && v.backupTable {
		t.Fatalf("sgdisk -v finds the shrunk disk's backup sound: %+v", v)
	}
	_, err := readImage(t, img, Options{})
	oneLine(t, err, ErrCorrupt)
	t.Log(err)
}
