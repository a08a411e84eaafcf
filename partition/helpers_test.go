package partition

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// run runs a peer tool; its failure fails the test (the tool is found,
// so a failure is in what we asked of it).
func run(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// runAny runs a tool whose non-zero exit is an answer (sgdisk -v on a
// damaged disk).
func runAny(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	return string(out)
}

func sgdisk(t testing.TB) string { return testenv.Need(t, "sgdisk", "gdisk") }
func sfdisk(t testing.TB) string { return testenv.Need(t, "sfdisk", "fdisk") }

// newImage makes a sparse file of size bytes.
func newImage(t testing.TB, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// readImage reads the table of an image file with our code.
func readImage(t testing.TB, path string, o Options) (*Table, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return Read(f, st.Size(), o)
}

func mustRead(t testing.TB, path string, o Options) *Table {
	t.Helper()
	tb, err := readImage(t, path, o)
	if err != nil {
		t.Fatalf("Read(%s): %v", path, err)
	}
	return tb
}

// attachLoop attaches img to a loop device with ss-byte logical sectors
// and detaches it at cleanup. A failure of losetup is outside our code:
// reported Missing (a skip outside CI, a failure under CI).
func attachLoop(t testing.TB, img string, ss int) string {
	t.Helper()
	losetup := testenv.Need(t, "losetup", "mount")
	out, err := exec.Command(losetup, "--sector-size", strconv.Itoa(ss), "-f", "--show", img).CombinedOutput()
	if err != nil {
		testenv.Missing(t, "losetup --sector-size %d -f --show failed (root and /dev/loop-control are needed): %v: %s", ss, err, strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command(losetup, "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// sgdiskDisk is what sgdisk -p says of a disk.
type sgdiskDisk struct {
	sectorSize  int
	diskGUID    string
	entries     int
	first, last uint64
	numbers     []int
}

var (
	reSectorSize = regexp.MustCompile(`(?m)^Sector size \(logical(?:/physical)?\): (\d+)`)
	reDiskGUID   = regexp.MustCompile(`(?m)^Disk identifier \(GUID\): (\S+)`)
	reEntries    = regexp.MustCompile(`(?m)^Partition table holds up to (\d+) entries`)
	reUsable     = regexp.MustCompile(`(?m)^First usable sector is (\d+), last usable sector is (\d+)`)
	reRow        = regexp.MustCompile(`(?m)^\s+(\d+)\s+\d+\s+\d+\s`)
)

func parseSgdiskP(t testing.TB, out string) sgdiskDisk {
	t.Helper()
	var d sgdiskDisk
	m := reSectorSize.FindStringSubmatch(out)
	g := reDiskGUID.FindStringSubmatch(out)
	e := reEntries.FindStringSubmatch(out)
	u := reUsable.FindStringSubmatch(out)
	if m == nil || g == nil || e == nil || u == nil {
		t.Fatalf("cannot parse sgdisk -p output:\n%s", out)
	}
	d.sectorSize, _ = strconv.Atoi(m[1])
	d.diskGUID = g[1]
	d.entries, _ = strconv.Atoi(e[1])
	d.first, _ = strconv.ParseUint(u[1], 10, 64)
	d.last, _ = strconv.ParseUint(u[2], 10, 64)
	_, rows, ok := strings.Cut(out, "Number  Start")
	if !ok {
		t.Fatalf("no partition list in sgdisk -p output:\n%s", out)
	}
	for _, r := range reRow.FindAllStringSubmatch(rows, -1) {
		n, _ := strconv.Atoi(r[1])
		d.numbers = append(d.numbers, n)
	}
	return d
}

// sgdiskPart is what sgdisk -i N says of one partition.
type sgdiskPart struct {
	typeGUID, typeName string
	uniqueGUID         string
	first, last        uint64
	attrs              uint64
	name               string
}

var (
	reTypeCode = regexp.MustCompile(`(?m)^Partition GUID code: (\S+) \((.*)\)$`)
	reUnique   = regexp.MustCompile(`(?m)^Partition unique GUID: (\S+)$`)
	reFirst    = regexp.MustCompile(`(?m)^First sector: (\d+) `)
	reLast     = regexp.MustCompile(`(?m)^Last sector: (\d+) `)
	reAttrs    = regexp.MustCompile(`(?m)^Attribute flags: ([0-9A-Fa-f]{16})$`)
	reName     = regexp.MustCompile(`(?m)^Partition name: '(.*)'$`)
)

func parseSgdiskI(t testing.TB, out string) sgdiskPart {
	t.Helper()
	var p sgdiskPart
	tc, un, fi, la, at, na := reTypeCode.FindStringSubmatch(out), reUnique.FindStringSubmatch(out),
		reFirst.FindStringSubmatch(out), reLast.FindStringSubmatch(out), reAttrs.FindStringSubmatch(out), reName.FindStringSubmatch(out)
	if tc == nil || un == nil || fi == nil || la == nil || at == nil || na == nil {
		t.Fatalf("cannot parse sgdisk -i output:\n%s", out)
	}
	p.typeGUID, p.typeName, p.uniqueGUID, p.name = tc[1], tc[2], un[1], na[1]
	p.first, _ = strconv.ParseUint(fi[1], 10, 64)
	p.last, _ = strconv.ParseUint(la[1], 10, 64)
	p.attrs, _ = strconv.ParseUint(at[1], 16, 64)
	return p
}

// sfdiskTable is sfdisk --json's view of an MBR.
type sfdiskTable struct {
	PartitionTable struct {
		Label      string `json:"label"`
		ID         string `json:"id"`
		Device     string `json:"device"`
		SectorSize int    `json:"sectorsize"`
		Partitions []struct {
			Node     string `json:"node"`
			Start    int64  `json:"start"`
			Size     int64  `json:"size"`
			Type     string `json:"type"`
			Bootable bool   `json:"bootable"`
		} `json:"partitions"`
	} `json:"partitiontable"`
}

func sfdiskJSON(t testing.TB, dev string) sfdiskTable {
	t.Helper()
	var st sfdiskTable
	out := run(t, "", sfdisk(t), "--json", dev)
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("sfdisk --json %s: %v\n%s", dev, err, out)
	}
	return st
}

// nodeNumber is N of sfdisk's node "disk.imgN" or "/dev/loop2pN".
func nodeNumber(t testing.TB, dev, node string) int {
	t.Helper()
	s := strings.TrimPrefix(node, dev)
	s = strings.TrimPrefix(s, "p")
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("sfdisk node %q of %q has no number", node, dev)
	}
	return n
}

// oneLine fails the test unless err is a single-line error wrapping want.
func oneLine(t testing.TB, err error, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %q does not wrap %v", err, want)
	}
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error is not one line: %q", err)
	}
}

// sparse is a device of size bytes: head at 0, tail at the end, zeros
// between (the fuzz targets' device, and the hostile tests' huge disks).
type sparse struct {
	head, tail []byte
	size       int64
}

func (s *sparse) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= s.size {
		return 0, io.EOF
	}
	n := len(p)
	if int64(n) > s.size-off {
		n = int(s.size - off)
	}
	clear(p[:n])
	place := func(b []byte, at int64) {
		// the overlap of [at, at+len(b)) with [off, off+n)
		lo, hi := max(at, off), min(at+int64(len(b)), off+int64(n))
		if lo < hi {
			copy(p[lo-off:hi-off], b[lo-at:hi-at])
		}
	}
	place(s.head, 0)
	place(s.tail, s.size-int64(len(s.tail)))
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
