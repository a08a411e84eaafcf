//go:build linux

package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/imagetest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// testImageMount: mount --partition 3 --lv vg0/root shows lvm2's vg0/root,
// e2fsck finds the ext4 in the mounted file clean, and a write through the
// kernel's FUSE across root's two segments lands where lvs says, inside
// partition 3 only (issue #26).
func testImageMount(t *testing.T, d *imagetest.Debian) {
	needFUSE(t)
	e2fsck := testenv.Need(t, "e2fsck", "e2fsprogs")
	disk := filepath.Join(t.TempDir(), "disk.img")
	if _, err := imagetest.Sh(nil, "cp", "--sparse=always", d.Disk, disk); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	m := mountInBackground(t, "--partition", "PARTLABEL=cryptroot", "--lv", "vg0/root", "--key-file", d.Key, disk)
	if got := catFile(t, m.file); !bytes.Equal(got, d.RootBytes()) {
		t.Fatalf("the mounted file is not lvm2's vg0/root (%d bytes, want %d)", len(got), d.RootSize)
	}
	if out, err := exec.Command(e2fsck, "-fn", m.file).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn on the mounted root: %v %s", err, out)
	}
	off := int64(d.RootSegs[1].StartPE)*d.Extent - 3000
	data := randBytes(10000)
	f, err := os.OpenFile(m.file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after a write (flushes the stack): %v", err)
	}
	if code := m.stop(t); code != 0 {
		t.Fatalf("mount exited %d: %s", code, m.stderr.String())
	}
	after, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	s, e := d.PartStart[3], d.PartStart[3]+d.PartSize[3]
	if sum(before[:s]) != sum(after[:s]) || sum(before[e:]) != sum(after[e:]) {
		t.Errorf("bytes outside partition 3 changed")
	}
	_, plain, errs := run(t, nil, "read", "--partition", "3", "--key-file", d.Key, "--length", strconv.Itoa(len(d.Plain)), disk)
	want := bytes.Clone(d.Plain)
	for i := range int64(len(data)) {
		want[d.RootPlace(off+i)] = data[i]
	}
	if plain != string(want) {
		t.Errorf("after a write through the mount the plaintext is not lvm2's layout with the data where lvs says %s", errs)
	}
}

// testImageGateway: a gateway's exports take partition= and lv=: vg0/root
// and vg0/swap of one disk, served together read-only, come out as lvm2
// laid them out (root byte for byte; swap as blkid's swap with its label).
func testImageGateway(t *testing.T, d *imagetest.Debian) {
	needTool(t, "nbdcopy", "libnbd-bin")
	blkid := testenv.Need(t, "blkid", "util-linux")
	spec := func(lv string) string {
		return lv + "=" + d.Disk + ",partition=3,lv=vg0/" + lv + ",key-file=" + d.Key
	}
	sock, stop := serveInBackground(t, "--read-only", "--export", spec("root"), "--export", spec("swap"))
	dir := t.TempDir()
	for _, n := range []string{"root", "swap"} {
		if o, err := exec.Command("nbdcopy", "nbd+unix:///"+n+"?socket="+sock, filepath.Join(dir, n)).CombinedOutput(); err != nil {
			stop()
			t.Fatalf("nbdcopy %s: %v %s", n, err, o)
		}
	}
	if code := stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "root")); err != nil || !bytes.Equal(got, d.RootBytes()) {
		t.Errorf("export root is not lvm2's vg0/root (%d bytes, want %d): %v", len(got), d.RootSize, err)
	}
	out, err := exec.Command(blkid, "-p", "-o", "export", filepath.Join(dir, "swap")).Output()
	if err != nil || !strings.Contains(string(out), "TYPE=swap") || !strings.Contains(string(out), "LABEL=swap") {
		t.Errorf("export swap: blkid says %q (%v), want TYPE=swap LABEL=swap", out, err)
	}
}
