package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/fsys/probe"
	"github.com/blkcrypt/blkcrypt/internal/imagetest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// The disk image of these tests is imagetest.Debian: what debian-installer
// makes for "guided, use entire disk and set up encrypted LVM", built by
// sgdisk, mkfs, lvm2 and cryptsetup at test time. Where things are is taken
// from sgdisk, pvs and lvs, never from blkcrypt.

// debianImage builds the image (internal/imagetest) in t's temporary
// directory: a 24 MiB root with a 4 MiB file.
func debianImage(t testing.TB) *imagetest.Debian {
	t.Helper()
	testenv.Need(t, "mtype", "mtools")
	return imagetest.NewDebian(t, imagetest.DebianOptions{RootMiB: 24, BigFileSize: 4 << 20})
}

// TestImage reads and writes one debian-installer-like image through
// every layer; the image takes seconds to build, so the checks share it.
func TestImage(t *testing.T) {
	d := debianImage(t)
	t.Run("Probe", func(t *testing.T) { testImageProbe(t, d) })
	t.Run("Files", func(t *testing.T) { testImageFiles(t, d) })
	t.Run("ReadWrite", func(t *testing.T) { testImageReadWrite(t, d) })
	t.Run("KeyVerbs", func(t *testing.T) { testImageKeyVerbs(t, d) })
	t.Run("Serve", func(t *testing.T) { testImageServe(t, d) })
	t.Run("Mount", func(t *testing.T) { testImageMount(t, d) })
	t.Run("Gateway", func(t *testing.T) { testImageGateway(t, d) })
}

// testImageServe: serve --partition --lv exports vg0/root over NBD;
// nbdcopy copies out lvm2's LV bytes, and e2fsck finds the ext4 in it
// clean.
func testImageServe(t *testing.T, d *imagetest.Debian) {
	needTool(t, "nbdcopy", "libnbd-bin")
	e2fsck := testenv.Need(t, "e2fsck", "e2fsprogs")
	sock, stop := serveInBackground(t, "--read-only", "--partition", "3", "--lv", "vg0/root", "--key-file", d.Key, d.Disk)
	out := filepath.Join(t.TempDir(), "root.img")
	if o, err := exec.Command("nbdcopy", "nbd+unix:///?socket="+sock, out).CombinedOutput(); err != nil {
		stop()
		t.Fatalf("nbdcopy: %v %s", err, o)
	}
	if code := stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, d.RootBytes()) {
		t.Fatalf("the served LV is not lvm2's vg0/root (%d bytes, want %d): %v", len(got), d.RootSize, err)
	}
	if o, err := exec.Command(e2fsck, "-fn", out).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn on the served root: %v %s", err, o)
	}
}

func testImageProbe(t *testing.T, d *imagetest.Debian) {
	code, out, errs := run(t, nil, "probe", "--json", "--key-file", d.Key, d.Disk)
	if code != 0 {
		t.Fatalf("probe: %d %s", code, errs)
	}
	var tree struct {
		BlockDevices []*probe.Node `json:"blockdevices"`
	}
	if err := json.Unmarshal([]byte(out), &tree); err != nil {
		t.Fatal(err)
	}
	disk := tree.BlockDevices[0]
	if disk.PTType != "gpt" || len(disk.Children) != 3 {
		t.Fatalf("disk: %+v", disk)
	}
	want := []struct {
		n      int
		label  string
		fstype string
	}{{1, "EFI System Partition", "vfat"}, {2, "boot", "ext4"}, {3, "cryptroot", "crypto_LUKS"}}
	for i, w := range want {
		c := disk.Children[i]
		if c.PartN != w.n || c.PartLabel != w.label || c.FSType != w.fstype || *c.Start != d.PartStart[w.n] || c.Size != d.PartSize[w.n] {
			t.Errorf("partition %d: %+v, want %+v at %d, %d bytes", i, c, w, d.PartStart[w.n], d.PartSize[w.n])
		}
	}
	if l := disk.Children[0].Label; l != "ESP" {
		t.Errorf("ESP label %q", l)
	}
	luks := disk.Children[2]
	if len(luks.Children) != 1 || luks.Children[0].FSType != "LVM2_member" {
		t.Fatalf("inside LUKS: %s", out)
	}
	lvs := map[string]string{}
	for _, c := range luks.Children[0].Children {
		lvs[c.Name] = c.FSType + " " + c.Label
	}
	if lvs["vg0-root"] != "ext4 root" || lvs["vg0-swap"] != "swap swap" || len(lvs) != 2 {
		t.Errorf("LVs: %v", lvs)
	}
	// The UUIDs are blkid's, taken from the parts lvm2 and cryptsetup made.
	if u, err := imagetest.Sh(nil, "cryptsetup", "luksUUID", d.Crypt); err != nil || strings.TrimSpace(u) != luks.UUID {
		t.Errorf("LUKS UUID %q, cryptsetup says %q (%v)", luks.UUID, u, err)
	}
	// Without a key it does not descend; the text form names everything.
	t.Logf("probe --json:\n%s", out)
	code, out, errs = run(t, nil, "probe", "--key-file", d.Key, d.Disk)
	t.Logf("probe:\n%s", out)
	code, out, errs = run(t, nil, "probe", d.Disk)
	if code != 0 || !strings.Contains(out, "cryptroot") || !strings.Contains(out, "crypto_LUKS") || strings.Contains(out, "LVM2_member") || !strings.Contains(out, "locked") {
		t.Errorf("probe without a key: %d %s %s", code, out, errs)
	}
}

func testImageFiles(t *testing.T, d *imagetest.Debian) {
	// FAT: byte-exact against mtype.
	want, err := imagetest.Sh([]string{"MTOOLS_SKIP_CHECK=1"}, "mtype", "-i", d.ESP, "::EFI/debian/grubx64.efi")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, nil, "cat", "--partition", "PARTLABEL=EFI System Partition", d.Disk, "/EFI/debian/grubx64.efi")
	if code != 0 || out != want {
		t.Errorf("cat from the ESP: %d, %d bytes (want %d) %s", code, len(out), len(want), errs)
	}
	code, out, _ = run(t, nil, "ls", "--partition", "1", d.Disk, "/EFI")
	if code != 0 || out != "Long Name Notes.txt\ndebian/\n" && out != "debian/\nLong Name Notes.txt\n" {
		t.Errorf("ls /EFI: %d %q", code, out)
	}
	// ext4 in LVM in LUKS2.
	stack := []string{"--partition", "3", "--lv", "vg0/root", "--key-file", d.Key, d.Disk}
	for name, b := range d.Files {
		code, out, errs := run(t, nil, append([]string{"cat"}, append(stack, "/"+name)...)...)
		if code != 0 || out != string(b) {
			t.Errorf("cat %s: %d, %d bytes (want %d) %s", name, code, len(out), len(b), errs)
		}
	}
	code, out, errs = run(t, nil, append([]string{"ls"}, append(stack, "/usr/share/many")...)...)
	if names := strings.Fields(out); code != 0 || len(names) != 300 || names[0] != "entry-000" {
		t.Errorf("ls of 300 entries: %d, %d names %s", code, len(names), errs)
	}
	// cp of a directory keeps contents, modes and mtimes.
	dst := filepath.Join(t.TempDir(), "etc-copy")
	if code, _, errs := run(t, nil, append([]string{"cp"}, append(stack, "/etc", dst)...)...); code != 0 {
		t.Fatalf("cp: %d %s", code, errs)
	}
	got, err := os.ReadFile(filepath.Join(dst, "fstab"))
	srcSt, _ := os.Stat(filepath.Join(d.Tree, "etc/fstab"))
	dstSt, _ := os.Stat(filepath.Join(dst, "fstab"))
	if err != nil || !bytes.Equal(got, d.Files["etc/fstab"]) || dstSt.Mode() != srcSt.Mode() || !sameMtime(dstSt.ModTime(), srcSt.ModTime()) {
		t.Errorf("cp'd fstab: %v; mode %v (want %v), mtime %v (want %v)", err, dstSt.Mode(), srcSt.Mode(), dstSt.ModTime(), srcSt.ModTime())
	}
	// /boot is ext4 on the partition itself.
	code, out, _ = run(t, nil, "cat", "--partition", "PARTLABEL=boot", d.Disk, "grub/grub.cfg")
	if code != 0 || out != "set timeout=5\n" {
		t.Errorf("cat /boot/grub/grub.cfg: %d %q", code, out)
	}
	// Errors: one line and the CLI's exit codes.
	for _, c := range []struct {
		args []string
		code int
	}{
		{append([]string{"cat"}, append(stack, "/no/such")...), ExitDevice},
		{[]string{"cat", "--partition", "3", "--lv", "vg0/nope", "--key-file", d.Key, d.Disk, "/etc/fstab"}, ExitDevice},
		{[]string{"cat", "--partition", "9", d.Disk, "/x"}, ExitDevice},
		{[]string{"ls", "--partition", "3", d.Disk, "/"}, ExitUsage}, // no key, and nothing on stdin
		{[]string{"format", "--partition", "3", d.Disk}, ExitUsage},
		{[]string{"reencrypt", "--lv", "vg0/root", d.Disk}, ExitUsage},
	} {
		code, _, errs := run(t, nil, c.args...)
		if code != c.code || strings.Count(strings.TrimSpace(errs), "\n") != 0 || errs == "" {
			t.Errorf("%v: exit %d (want %d), %q", c.args, code, c.code, errs)
		}
	}
}

// sameMtime: ext4 with 128-byte inodes (mkfs's choice for a small
// filesystem) keeps whole seconds only.
func sameMtime(got, src time.Time) bool {
	return got.Equal(src) || got.Nanosecond() == 0 && got.Unix() == src.Unix()
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

func testImageReadWrite(t *testing.T, d *imagetest.Debian) {
	// Work on a copy: this test writes.
	disk := filepath.Join(t.TempDir(), "disk.img")
	if _, err := imagetest.Sh(nil, "cp", "--sparse=always", d.Disk, disk); err != nil {
		t.Fatal(err)
	}
	stack := []string{"--partition", "PARTLABEL=cryptroot", "--lv", "vg0/root", "--key-file", d.Key, disk}
	code, out, errs := run(t, nil, append([]string{"read"}, stack...)...)
	if code != 0 || int64(len(out)) != d.RootSize || out != string(d.RootBytes()) {
		t.Fatalf("read vg0/root: %d, %d bytes (want %d, from lvs) %s", code, len(out), d.RootSize, errs)
	}
	// The whole plaintext through the partition alone is lvm2's PV.
	code, out, errs = run(t, nil, "read", "--partition", "3", "--key-file", d.Key, "--length", strconv.Itoa(len(d.Plain)), disk)
	if code != 0 || out != string(d.Plain) {
		t.Fatalf("read partition 3: %d %s", code, errs)
	}

	before, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	// A write across the boundary of root's two segments.
	off := int64(d.RootSegs[1].StartPE)*d.Extent - 3000
	data := randBytes(10000)
	in := writeFile(t, t.TempDir(), "in", data)
	if code, _, errs := run(t, nil, append([]string{"write", "--offset-bytes", strconv.FormatInt(off, 10), "--input", in}, stack...)...); code != 0 {
		t.Fatalf("write: %d %s", code, errs)
	}
	after, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if !d.SameOutside(3, before, after) {
		t.Errorf("bytes outside partition 3 changed")
	}
	_, plain, errs := run(t, nil, "read", "--partition", "3", "--key-file", d.Key, "--length", strconv.Itoa(len(d.Plain)), disk)
	if plain != string(d.PlainAfterRootWrite(off, data)) {
		t.Errorf("the plaintext after the write is not lvm2's layout with the data where lvs says %s", errs)
	}
	// Past the LV's end: refused, nothing written.
	code, _, errs = run(t, nil, append([]string{"write", "--offset-bytes", strconv.FormatInt(d.RootSize-100, 10), "--input", in}, stack...)...)
	if code == 0 {
		t.Errorf("a write past the LV's end succeeded")
	}
	_ = errs
}

func testImageKeyVerbs(t *testing.T, d *imagetest.Debian) {
	disk := filepath.Join(t.TempDir(), "disk.img")
	if _, err := imagetest.Sh(nil, "cp", "--sparse=always", d.Disk, disk); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, nil, "test-passphrase", "--partition", "3", "--key-file", d.Key, disk); code != 0 {
		t.Fatalf("test-passphrase: %d %s", code, errs)
	}
	bad := writeFile(t, t.TempDir(), "bad", []byte("wrong"))
	if code, _, _ := run(t, nil, "test-passphrase", "--partition", "3", "--key-file", bad, disk); code != ExitPermission {
		t.Errorf("a wrong passphrase: exit %d", code)
	}
	newKey := writeFile(t, t.TempDir(), "new", []byte("second passphrase"))
	if code, _, errs := run(t, nil, "add-key", "--partition", "3", "--key-file", d.Key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", disk, newKey); code != 0 {
		t.Fatalf("add-key: %d %s", code, errs)
	}
	// cryptsetup judges, on the partition cut out where sgdisk says.
	part := filepath.Join(t.TempDir(), "p3")
	if _, err := imagetest.Sh(nil, "dd", "if="+disk, "of="+part, "bs=512", fmt.Sprintf("skip=%d", d.PartStart[3]/512), fmt.Sprintf("count=%d", d.PartSize[3]/512), "status=none"); err != nil {
		t.Fatal(err)
	}
	if _, err := imagetest.Sh(nil, "cryptsetup", "open", "--test-passphrase", "--key-file", newKey, part); err != nil {
		t.Errorf("cryptsetup does not take the key add-key added in partition 3: %v", err)
	}
	f, _ := os.Open(disk)
	defer f.Close()
	b1, b2 := make([]byte, d.PartStart[3]), make([]byte, d.PartStart[3])
	io.ReadFull(f, b1)
	g, _ := os.Open(d.Disk)
	defer g.Close()
	io.ReadFull(g, b2)
	if !bytes.Equal(b1, b2) {
		t.Errorf("add-key changed bytes before partition 3")
	}
}

// BenchmarkCatThroughStack: cat of a 256 MiB ext4 file in vg0/root in
// LUKS2 in partition 3, against read of as many bytes of the decrypted
// volume (issue #26: cat must reach 0.8× read). Both rates and their
// ratio are reported from the one run.
func BenchmarkCatThroughStack(b *testing.B) {
	testenv.Need(b, "sgdisk", "gdisk")
	const size = 256 << 20
	d := imagetest.NewDebian(b, imagetest.DebianOptions{RootMiB: 300, BigFileSize: size})
	discard := func(args ...string) time.Duration {
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: io.Discard}
		start := time.Now()
		if code := Main(context.Background(), args, env); code != 0 {
			b.Fatalf("%v: exit %d", args, code)
		}
		return time.Since(start)
	}
	// One untimed round of each: the image was just written, and its
	// writeback would otherwise land on whichever runs first.
	if _, err := imagetest.Sh(nil, "sync"); err != nil {
		b.Fatal(err)
	}
	discard("cat", "--partition", "3", "--lv", "vg0/root", "--key-file", d.Key, d.Disk, "/var/big.bin")
	discard("read", "--partition", "3", "--key-file", d.Key, "--length", strconv.Itoa(size), d.Disk)
	var catT, readT time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		n++
		catT += discard("cat", "--partition", "3", "--lv", "vg0/root", "--key-file", d.Key, d.Disk, "/var/big.bin")
		readT += discard("read", "--partition", "3", "--key-file", d.Key, "--length", strconv.Itoa(size), d.Disk)
	}
	catRate := float64(size) * float64(n) / catT.Seconds() / 1e6
	readRate := float64(size) * float64(n) / readT.Seconds() / 1e6
	b.ReportMetric(catRate, "cat-MB/s")
	b.ReportMetric(readRate, "read-MB/s")
	b.ReportMetric(catRate/readRate, "cat/read")
}

// TestImageBitlkClearKeyPartition: a BitLocker clear-key volume from
// cryptsetup's fixtures, placed in a GPT partition by sgdisk and dd, opens
// with no secret through --partition and decrypts to the fixture's
// checksum.
func TestImageBitlkClearKeyPartition(t *testing.T) {
	sgdisk := testenv.Need(t, "sgdisk", "gdisk")
	dir, conf := bitlkFixture(t)
	tried := 0
	for _, name := range sortedKeys(conf) {
		c := conf[name]
		if c["CLEARKEY_VMK_GUID"] == "" {
			continue
		}
		tried++
		img, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sectors := (len(img) + 511) / 512
		disk := filepath.Join(t.TempDir(), "disk.img")
		if err := os.WriteFile(disk, make([]byte, 2048*512+sectors*512+1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(sgdisk, "-n", fmt.Sprintf("1:2048:+%d", sectors), "-t", "1:0700", disk).CombinedOutput(); err != nil {
			t.Fatalf("sgdisk: %v %s", err, out)
		}
		f, err := os.OpenFile(disk, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt(img, 2048*512)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		code, sum, stderr := runHash(t, nil, "read", "--partition", "1", disk)
		if code != 0 || sum != c["SHA256SUM"] {
			t.Errorf("%s in partition 1: exit %d, sha256 %s (want %s) %s", name, code, sum, c["SHA256SUM"], stderr)
		}
	}
	if tried == 0 {
		t.Fatal("no clear-key BitLocker fixture")
	}
}
