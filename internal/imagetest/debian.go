package imagetest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// DebianKey is the passphrase of the Debian image's LUKS2 volume (also in
// the file Debian.Key).
const DebianKey = "debian installer passphrase"

// Debian is what debian-installer makes for "guided, use entire disk and
// set up encrypted LVM", built by the real tools: sgdisk's GPT with an ESP
// (mkfs.vfat + mcopy, partition 1), a /boot (mkfs.ext4 -d, partition 2)
// and a LUKS2 partition (3) whose plaintext is an LVM2 PV
// (pvcreate/vgcreate/lvcreate on a loop device, never activated) holding
// vg0/root (ext4, two segments around swap) and vg0/swap (mkswap). The PV
// was encrypted in place by cryptsetup reencrypt --encrypt. Where things
// are is taken from sgdisk, pvs and lvs, never from blkcrypt.
type Debian struct {
	Dir, Disk, Key string
	ESP            string        // the ESP's own image, for mtype
	Crypt          string        // partition 3's own image (cryptsetup's output)
	PartStart      map[int]int64 // sgdisk's first sector × 512
	PartSize       map[int]int64 // bytes
	Plain          []byte        // the PV as lvm2 left it (cryptsetup's input)
	PEStart        int64         // pvs pe_start
	Extent         int64         // vg_extent_size
	RootSegs       []Segment     // lvs segments of vg0/root
	RootSize       int64         // lvs lv_size
	Tree           string        // the ext4 root's source tree
	BigFile        string        // the path of the big file in it
	Files          map[string][]byte
}

// DebianOptions size the image.
type DebianOptions struct {
	RootMiB     int // vg0/root's size (at least 16)
	BigFileSize int // var/big.bin's size in the root filesystem
	// RootBlockSize is mkfs.ext4 -b for the root filesystem; 0 leaves
	// mkfs's choice (1024 for so small a filesystem).
	RootBlockSize int
}

// NewDebian builds the image in a temporary directory of t.
func NewDebian(t testing.TB, o DebianOptions) *Debian {
	t.Helper()
	for _, tool := range [][2]string{{"sgdisk", "gdisk"}, {"mkfs.vfat", "dosfstools"}, {"mmd", "mtools"}, {"mcopy", "mtools"},
		{"cryptsetup", "cryptsetup-bin"}, {"mkfs.ext4", "e2fsprogs"}, {"mkswap", "util-linux"}, {"truncate", "coreutils"}, {"dd", "coreutils"}} {
		testenv.Need(t, tool[0], tool[1])
	}
	d := &Debian{Dir: t.TempDir(), Files: map[string][]byte{}}
	d.build(t, o)
	return d
}

// Sh runs a command with env added to the environment, returning its
// standard output, or an error holding its standard error.
func Sh(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func (d *Debian) build(t testing.TB, o DebianOptions) {
	t.Helper()
	rootMiB := o.RootMiB
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	p := func(name string) string { return filepath.Join(d.Dir, name) }
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.Key = p("key")
	write(d.Key, []byte(DebianKey))

	// ESP: FAT with a boot loader and a long-named file.
	d.ESP = p("esp.img")
	must(Sh(nil, "truncate", "-s", "8M", d.ESP))
	must(Sh(nil, "mkfs.vfat", "-n", "ESP", d.ESP))
	write(p("src/grubx64.efi"), randBytes(150_000))
	write(p("src/Long Name Notes.txt"), []byte("the ESP of a debian-installer-like image\n"))
	mt := []string{"MTOOLS_SKIP_CHECK=1"}
	must(Sh(mt, "mmd", "-i", d.ESP, "::EFI", "::EFI/debian"))
	must(Sh(mt, "mcopy", "-i", d.ESP, p("src/grubx64.efi"), "::EFI/debian/grubx64.efi"))
	must(Sh(mt, "mcopy", "-i", d.ESP, p("src/Long Name Notes.txt"), "::EFI/Long Name Notes.txt"))

	// /boot: ext4 made from a tree.
	write(p("boot/vmlinuz-6.1.0-13-amd64"), randBytes(300_000))
	write(p("boot/grub/grub.cfg"), []byte("set timeout=5\n"))
	must(Sh(nil, "mkfs.ext4", "-q", "-L", "boot", "-d", p("boot"), p("boot.img"), "16M"))

	// root: ext4 with /etc/fstab, a big file and a 300-entry directory.
	d.Tree = p("root")
	d.Files["etc/fstab"] = []byte("/dev/mapper/vg0-root / ext4 errors=remount-ro 0 1\nUUID=boot /boot ext4 defaults 0 2\n/dev/mapper/vg0-swap none swap sw 0 0\n")
	d.Files["var/big.bin"] = randBytes(o.BigFileSize)
	for name, b := range d.Files {
		write(filepath.Join(d.Tree, name), b)
	}
	for i := range 300 {
		write(filepath.Join(d.Tree, "usr/share/many", fmt.Sprintf("entry-%03d", i)), []byte(strconv.Itoa(i)))
	}
	d.BigFile = "var/big.bin"
	mkfs := []string{"-q", "-L", "root", "-d", d.Tree}
	if o.RootBlockSize != 0 {
		mkfs = append(mkfs, "-b", strconv.Itoa(o.RootBlockSize))
	}
	must(Sh(nil, "mkfs.ext4", append(mkfs, p("root.img"), fmt.Sprintf("%dM", rootMiB))...))
	must(Sh(nil, "truncate", "-s", "8M", p("swap.img")))
	must(Sh(nil, "mkswap", "-L", "swap", p("swap.img")))

	// The PV on a loop device; root made in two segments around swap, so
	// that the LV's mapping is not the identity.
	pvMiB := rootMiB + 24 // root, swap, metadata and slack
	pv := p("pv.img")
	must(Sh(nil, "truncate", "-s", fmt.Sprintf("%dM", pvMiB), pv))
	lvm := AttachLVM(t, pv)
	loop := lvm.Loops[0]
	lvm.Run("pvcreate", "-q", loop)
	lvm.Run("vgcreate", "-q", "-s", "4M", "vg0", loop)
	lvm.Run("lvcreate", "-q", "-an", "-Zn", "-L", "12M", "-n", "root", "vg0")
	lvm.Run("lvcreate", "-q", "-an", "-Zn", "-L", "8M", "-n", "swap", "vg0")
	lvm.Run("lvextend", "-q", "-L", fmt.Sprintf("%dM", rootMiB), "vg0/root")
	peStart, extent := lvm.PVs()
	d.PEStart, d.Extent = peStart[loop], extent
	segs := lvm.Segments("vg0")
	d.RootSegs = SegmentsOf(segs, "root")
	swap := SegmentsOf(segs, "swap")
	if len(d.RootSegs) != 2 || len(swap) != 1 {
		t.Fatalf("lvs: unexpected layout %+v", segs)
	}
	d.RootSize = d.RootSegs[0].LVSize
	lvm.Detach()
	plain, err := os.ReadFile(pv)
	if err != nil {
		t.Fatal(err)
	}
	// The LVs' contents go where lvs says: the filesystems are made as
	// files, as an installer's mkfs on /dev/vg0/root would write them.
	rootFS, err := os.ReadFile(p("root.img"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.RootSegs {
		lvOff := int64(s.StartPE) * d.Extent
		copy(plain[d.pvOff(s):][:int64(s.SizePE)*d.Extent], rootFS[lvOff:])
	}
	swapFS, err := os.ReadFile(p("swap.img"))
	if err != nil {
		t.Fatal(err)
	}
	copy(plain[d.pvOff(swap[0]):][:int64(swap[0].SizePE)*d.Extent], swapFS)
	d.Plain = plain
	// cryptsetup encrypts in place: the device grows by the 32 MiB it
	// needs (the data shifts by half of it); the plaintext keeps its size.
	d.Crypt = p("crypt.img")
	write(d.Crypt, plain)
	must(Sh(nil, "truncate", "-s", fmt.Sprintf("%dM", pvMiB+32), d.Crypt))
	must(Sh(nil, "cryptsetup", "reencrypt", "--encrypt", "--type", "luks2", "--reduce-device-size", "32M", "--pbkdf", "pbkdf2",
		"--pbkdf-force-iterations", "1000", "--key-file", d.Key, "--label", "cryptroot-luks", "-q", d.Crypt))

	// The disk: sgdisk's GPT, each partition filled with dd where sgdisk
	// says it starts.
	d.Disk = p("disk.img")
	must(Sh(nil, "truncate", "-s", fmt.Sprintf("%dM", 1+8+16+pvMiB+32+1), d.Disk))
	must(Sh(nil, "sgdisk", "-n", "1:2048:+8M", "-t", "1:ef00", "-c", "1:EFI System Partition",
		"-n", "2:0:+16M", "-t", "2:8300", "-c", "2:boot",
		"-n", fmt.Sprintf("3:0:+%dM", pvMiB+32), "-t", "3:8309", "-c", "3:cryptroot", d.Disk))
	d.PartStart, d.PartSize = map[int]int64{}, map[int]int64{}
	for n, src := range map[int]string{1: d.ESP, 2: p("boot.img"), 3: d.Crypt} {
		info := must(Sh(nil, "sgdisk", "-i", strconv.Itoa(n), d.Disk))
		var first, last int64
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(l, "First sector: "); ok {
				first, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
			if v, ok := strings.CutPrefix(l, "Last sector: "); ok {
				last, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
		if first == 0 || last < first {
			t.Fatalf("sgdisk -i %d: no sectors in %q", n, info)
		}
		d.PartStart[n], d.PartSize[n] = first*512, (last-first+1)*512
		must(Sh(nil, "dd", "if="+src, "of="+d.Disk, "bs=512", fmt.Sprintf("seek=%d", first), "conv=notrunc,sparse", "status=none"))
	}
}

// pvOff is where a one-stripe segment starts in the PV, in bytes.
func (d *Debian) pvOff(s Segment) int64 { return d.PEStart + int64(s.Ranges[0].Start)*d.Extent }

// RootPlace is where byte off of vg0/root lives in the plaintext, from
// lvs and pvs alone.
func (d *Debian) RootPlace(off int64) int64 {
	p := Locate(d.RootSegs, map[string]int64{d.RootSegs[0].Ranges[0].Dev: d.PEStart}, d.Extent, off)
	return p.Off
}

// RootBytes is vg0/root as lvm2 lays it out in the plaintext.
func (d *Debian) RootBytes() []byte {
	b := make([]byte, 0, d.RootSize)
	for _, s := range d.RootSegs {
		b = append(b, d.Plain[d.pvOff(s):][:int64(s.SizePE)*d.Extent]...)
	}
	return b
}

// PlainAfterRootWrite is Plain as it must be after data was written at
// byte off of vg0/root: each byte where lvs and pvs place it.
func (d *Debian) PlainAfterRootWrite(off int64, data []byte) []byte {
	want := bytes.Clone(d.Plain)
	for i := range int64(len(data)) {
		want[d.RootPlace(off+i)] = data[i]
	}
	return want
}

// SameOutside reports whether two copies of the disk (or of its first
// bytes) agree outside partition n, where sgdisk put it.
func (d *Debian) SameOutside(n int, before, after []byte) bool {
	s, e := d.PartStart[n], d.PartStart[n]+d.PartSize[n]
	if int64(len(before)) < e || int64(len(after)) < e {
		return false
	}
	return bytes.Equal(before[:s], after[:s]) && bytes.Equal(before[e:], after[e:])
}
