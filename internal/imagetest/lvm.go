// Package imagetest builds the disk images of the tests with the real
// tools — lvm2 on loop devices, sgdisk, mkfs, cryptsetup — and reads back
// where those tools put things (lvs, pvs, sgdisk -i), so that a test judges
// blkcrypt by lvm2's and sgdisk's word, never by blkcrypt's own. It is
// used by tests only (lvm, fsys/probe, internal/cli, test/kernel).
//
// Attaching loop devices needs root and /dev/loop-control; a missing tool
// or loop support is reported through internal/testenv (a failure under
// CI, a skip elsewhere).
package imagetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// LVM is one test's loop devices and a private lvm2 configuration that
// sees only them. No LV is ever activated: every command runs with
// --driverloaded n, and the configuration (LVM_SYSTEM_DIR) keeps no
// devices file, asks udev nothing and archives nothing, so the host's LVM
// setup is neither read nor changed and no device-mapper is needed.
type LVM struct {
	t        testing.TB
	Dir      string   // LVM_SYSTEM_DIR
	Files    []string // backing files
	Loops    []string // /dev/loopN, in the order of Files
	lvm      string
	detached bool
}

// NewLVM makes one zero-filled backing file of sizeMiB per entry in a
// temporary directory and attaches them (see AttachLVM).
func NewLVM(t testing.TB, sizesMiB ...int) *LVM {
	t.Helper()
	dir := t.TempDir()
	var files []string
	for i, mib := range sizesMiB {
		f := filepath.Join(dir, fmt.Sprintf("pv%d.img", i))
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(f, int64(mib)<<20); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return AttachLVM(t, files...)
}

// AttachLVM attaches each file to a free loop device (detached again by
// Detach or t.Cleanup, whatever happens) and writes an lvm.conf accepting
// only those devices.
func AttachLVM(t testing.TB, files ...string) *LVM {
	t.Helper()
	e := &LVM{t: t, Dir: t.TempDir(), lvm: testenv.Need(t, "lvm", "lvm2")}
	losetup := testenv.Need(t, "losetup", "mount")
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testenv.Missing(t, "/dev/loop-control is needed to attach loop devices: %v", err)
	}
	t.Cleanup(e.Detach)
	for _, f := range files {
		out, err := exec.Command(losetup, "-f", "--show", f).CombinedOutput()
		if err != nil {
			testenv.Missing(t, "cannot attach a loop device (root and the loop driver are needed): losetup: %v: %s", err, out)
		}
		e.Files = append(e.Files, f)
		e.Loops = append(e.Loops, strings.TrimSpace(string(out)))
	}
	var filter []string
	for _, l := range e.Loops {
		filter = append(filter, strconv.Quote("a|^"+l+"$|"))
	}
	filter = append(filter, `"r|.*|"`)
	conf := fmt.Sprintf(`devices {
	filter = [ %[1]s ]
	global_filter = [ %[1]s ]
	scan = [ "/dev" ]
	use_devicesfile = 0
	obtain_device_list_from_udev = 0
	external_device_info_source = "none"
	hints = "none"
}
activation {
	udev_sync = 0
	udev_rules = 0
	monitoring = 0
}
global {
	use_lvmlockd = 0
	event_activation = 0
	locking_dir = %[2]q
}
backup {
	backup = 0
	archive = 0
}
`, strings.Join(filter, ", "), filepath.Join(e.Dir, "lock"))
	if err := os.WriteFile(filepath.Join(e.Dir, "lvm.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// Detach detaches the loop devices now (lvm2 commands fail after it). It
// may be called more than once.
func (e *LVM) Detach() {
	if e.detached {
		return
	}
	e.detached = true
	for _, l := range e.Loops {
		if out, err := exec.Command("losetup", "-d", l).CombinedOutput(); err != nil {
			e.t.Errorf("detaching %s: %v: %s", l, err, out)
		}
	}
}

// Run runs one lvm2 command (its first argument is the command, e.g.
// "pvcreate") with --driverloaded n and returns its standard output; a
// failure fails the test.
func (e *LVM) Run(args ...string) string {
	e.t.Helper()
	out, err := e.Try(args...)
	if err != nil {
		e.t.Fatalf("lvm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// Try is Run returning the error, with lvm2's standard error in it.
func (e *LVM) Try(args ...string) (string, error) {
	full := append([]string{args[0], "--driverloaded", "n"}, args[1:]...)
	cmd := exec.Command(e.lvm, full...)
	cmd.Env = append(os.Environ(), "LVM_SYSTEM_DIR="+e.Dir, "LVM_SUPPRESS_FD_WARNINGS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Segment is one row of lvs -o seg_* output: lvm2's word on a segment.
type Segment struct {
	LV         string // without the brackets of hidden LVs
	StartPE    uint64 // seg_start_pe: the first extent of the LV it maps
	SizePE     uint64
	Ranges     []Range // seg_pe_ranges: one per stripe
	Stripes    int
	StripeSize int64 // bytes
	LVSize     int64 // bytes, of the whole LV
	Type       string
}

// Range is one PV range of a segment.
type Range struct {
	Dev        string
	Start, End uint64 // physical extents, inclusive, as lvs prints them
}

// Segments returns every segment of every LV of vg (hidden ones too), in
// lvs's order.
func (e *LVM) Segments(vg string) []Segment {
	e.t.Helper()
	out := e.Run("lvs", "-a", "--noheadings", "--separator", "|", "--units", "b", "--nosuffix",
		"-o", "lv_name,seg_start_pe,seg_pe_ranges,seg_size_pe,stripes,stripe_size,lv_size,segtype", vg)
	var segs []Segment
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 8 {
			e.t.Fatalf("lvs line %q", line)
		}
		s := Segment{LV: strings.Trim(f[0], "[]"), Type: f[7]}
		s.StartPE = e.uint(f[1])
		s.SizePE = e.uint(f[3])
		s.Stripes = int(e.uint(f[4]))
		s.StripeSize = int64(e.uint(f[5]))
		s.LVSize = int64(e.uint(f[6]))
		for _, r := range strings.Fields(f[2]) {
			i := strings.LastIndexByte(r, ':')
			if i < 0 {
				e.t.Fatalf("lvs range %q", r)
			}
			a, b, ok := strings.Cut(r[i+1:], "-")
			if !ok {
				e.t.Fatalf("lvs range %q", r)
			}
			s.Ranges = append(s.Ranges, Range{r[:i], e.uint(a), e.uint(b)})
		}
		segs = append(segs, s)
	}
	return segs
}

// SegmentsOf returns the segments of one LV from Segments' output.
func SegmentsOf(segs []Segment, lv string) []Segment {
	var out []Segment
	for _, s := range segs {
		if s.LV == lv {
			out = append(out, s)
		}
	}
	return out
}

// PVs returns each PV's pe_start and the extent size, in bytes, as pvs
// reports them.
func (e *LVM) PVs() (peStart map[string]int64, extent int64) {
	e.t.Helper()
	out := e.Run("pvs", "--noheadings", "--separator", "|", "--units", "b", "--nosuffix", "-o", "pv_name,pe_start,vg_extent_size")
	peStart = map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			e.t.Fatalf("pvs line %q", line)
		}
		peStart[f[0]] = int64(e.uint(f[1]))
		extent = int64(e.uint(f[2]))
	}
	return peStart, extent
}

func (e *LVM) uint(s string) uint64 {
	e.t.Helper()
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		e.t.Fatalf("lvm2 printed %q where a number was expected", s)
	}
	return v
}

// Place is where one LV byte lives according to lvm2: a device, a byte
// offset on it, and how many bytes follow it there contiguously (to the
// end of its stripe chunk or segment).
type Place struct {
	Dev string
	Off int64
	Run int64
}

// Locate computes, from lvs and pvs output only, where byte off of an LV
// (segs: its segments) lives: the segment holding it, then dm-striped's
// rule (stripe_size chunks taken round-robin across the stripes) for a
// striped one. It panics for an offset outside the LV.
func Locate(segs []Segment, peStart map[string]int64, extent int64, off int64) Place {
	for _, s := range segs {
		start := int64(s.StartPE) * extent
		length := int64(s.SizePE) * extent
		if off < start || off >= start+length {
			continue
		}
		rel := off - start
		r, run := s.Ranges[0], length-rel
		if s.Stripes > 1 {
			chunk := rel / s.StripeSize
			r, run = s.Ranges[chunk%int64(s.Stripes)], s.StripeSize-rel%s.StripeSize
			rel = (chunk/int64(s.Stripes))*s.StripeSize + rel%s.StripeSize
		}
		return Place{r.Dev, peStart[r.Dev] + int64(r.Start)*extent + rel, run}
	}
	panic(fmt.Sprintf("offset %d is in no segment", off))
}
