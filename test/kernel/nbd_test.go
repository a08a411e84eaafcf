//go:build linux

package kernel

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/imagetest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// nbdMinFsynced is how many files the guest's writer must have fsynced
// before the server is killed.
const nbdMinFsynced = 20

// nbdScript is the guest's part of TestNBDImageStack. The host fills in
// the @…@ fields. Lines the host reads:
//
//	@@FAIL …               a step failed (the test fails)
//	@@P NAME SHA256        a file of the image as the kernel's ext4 reads it
//	@@E1|@@E2|@@E3 RC      e2fsck -fn: after the clean write, after the
//	                       crash and the remount, on dm-crypt's copy
//	@@F/@@A/@@X            the writer's lines (guest/syncwriter)
//	@@V NAME SIZE SHA256   a stream file after the restart and remount
//	@@NBDSUM / @@DMSUM     SHA-256 of vg0/root read over NBD / cut out of
//	                       dm-crypt's mapping of partition 3 where lvm2 says
const nbdScript = `
ln -sf /proc/mounts /etc/mtab
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
disk=$(readlink /dev/disk/deb)
srv=
# kt_serve LOG: blkcrypt serves vg0/root of the disk on loopback.
kt_serve() {
	/kt/blkcrypt serve --partition 3 --lv vg0/root --key-file /kt/key --listen 127.0.0.1:10809 $disk >$1 2>&1 &
	srv=$!
	i=0
	while ! grep -q serving $1; do
		if ! kill -0 $srv 2>/dev/null || [ $i -gt 1200 ]; then
			echo "@@FAIL serve did not start: $(tr '\n' ' ' < $1)"
			return 1
		fi
		i=$((i + 1))
		sleep 0.1
	done
}
# kt_attach DEV: the kernel's NBD client, configured by Debian's nbd-client.
kt_attach() {
	if ! nbd-client 127.0.0.1 10809 $1 -t 20 >/tmp/nbd.log 2>&1; then
		echo "@@FAIL nbd-client $1: $(tr '\n' ' ' < /tmp/nbd.log)"
		return 1
	fi
	echo "@@S attached $1: $(blockdev --getsize64 $1) bytes, $(blockdev --getss $1)-byte sectors"
}
kt_fsck() {
	e2fsck -fn $2 >/tmp/fsck.log 2>&1
	rc=$?
	echo "@@$1 $rc"
	[ $rc = 0 ] || sed "s/^/@@S fsck: /" /tmp/fsck.log
}

kt_time() { echo "@@S $(cut -d' ' -f1 /proc/uptime) s: $1"; }
# 1. A clean session: mount, read, write, sync, unmount, e2fsck.
kt_time "clean session"
kt_serve /tmp/serve1.log || exit 1
kt_attach /dev/nbd0 || exit 1
mount -t ext4 /dev/nbd0 /mnt || { echo "@@FAIL mount /dev/nbd0"; exit 1; }
for f in etc/fstab var/big.bin; do echo "@@P $f $(sha256sum < /mnt/$f | cut -d' ' -f1)"; done
mkdir /mnt/kt
for f in /kt/files/*; do cp $f /mnt/kt/ || echo "@@FAIL cp $f"; done
sync
umount /mnt || echo "@@FAIL umount /dev/nbd0"
kt_fsck E1 /dev/nbd0

# 2. The crash: kill -9 the server while the writer writes and fsyncs.
kt_time "crash session"
mount -t ext4 /dev/nbd0 /mnt || { echo "@@FAIL second mount of /dev/nbd0"; exit 1; }
: >/tmp/w.out
/kt/syncwriter -dir /mnt/stream -n 5000 >/tmp/w.out 2>&1 &
w=$!
i=0
while [ "$(grep -c '^@@F' /tmp/w.out)" -lt @MIN@ ]; do
	if ! kill -0 $w 2>/dev/null || [ $i -gt 3000 ]; then echo "@@FAIL the writer stopped early"; break; fi
	i=$((i + 1))
	sleep 0.1
done
kill -9 $srv
echo "@@S server killed after $(grep -c '^@@F' /tmp/w.out) files"
wait $w
echo "@@WRC $?"
kt_time "writer stopped"
wait $srv
umount /mnt 2>/tmp/umount.err || { echo "@@S umount after the kill: $(cat /tmp/umount.err)"; umount -l /mnt; }
nbd-client -d /dev/nbd0 >/dev/null 2>&1
cat /tmp/w.out

# 3. Restart; the journal is replayed by the mount; everything fsynced is there.
kt_time "restart"
kt_serve /tmp/serve2.log || exit 1
kt_attach /dev/nbd1 || exit 1
mount -t ext4 /dev/nbd1 /mnt || { echo "@@FAIL mount after the restart"; exit 1; }
for f in /mnt/stream/f*; do
	[ -e "$f" ] && echo "@@V ${f##*/} $(stat -c %s $f) $(sha256sum < $f | cut -d' ' -f1)"
done
umount /mnt || echo "@@FAIL umount /dev/nbd1"
kt_fsck E2 /dev/nbd1
echo "@@NBDSUM $(sha256sum < /dev/nbd1 | cut -d' ' -f1)"
nbd-client -d /dev/nbd1 >/dev/null 2>&1
kill $srv
wait $srv
echo "@@SRVRC $?"
sed 's/^/@@S serve: /' /tmp/serve2.log

# 4. The judge: dm-crypt opens partition 3 and vg0/root is cut out where
# lvm2 put it (dd in MiB: PV offset, LV offset, length).
kt_time "dm-crypt judge"
if cryptsetup open --readonly --key-file /kt/key ${disk}3 kt-pv 2>/tmp/err; then
	while read pvoff lvoff n; do
		dd if=/dev/mapper/kt-pv of=/tmp/lv.img bs=1048576 skip=$pvoff seek=$lvoff count=$n conv=notrunc 2>/dev/null
	done < /kt/segments
	echo "@@DMSUM $(sha256sum < /tmp/lv.img | cut -d' ' -f1)"
	kt_fsck E3 /tmp/lv.img
	cryptsetup close kt-pv
else
	echo "@@FAIL cryptsetup open ${disk}3: $(cat /tmp/err)"
fi
`

// TestNBDImageStack is issue #26's "the whole stack meets the real
// kernel": a debian-installer-like disk made by sgdisk, cryptsetup and
// lvm2 on the host; in the guest, blkcrypt serve --partition 3 --lv
// vg0/root is attached by the kernel's NBD client (Debian's nbd-client),
// the ext4 in it is mounted, read, written, synced, unmounted and passes
// e2fsck -fn. Then the server is killed with SIGKILL while a writer
// creates and fsyncs files; after a restart the mount replays the journal,
// every file reported fsynced is there whole, and e2fsck -fn passes. The
// bytes are judged by the kernel's ext4, e2fsck, dm-crypt with lvm2's
// offsets (in the guest) and debugfs (on the host).
//
// Only the server's process dies: what it wrote to /dev/vda stays in the
// guest's page cache. So the crash case proves that blkcrypt answers a
// write or flush only once it is in its backend, and that the kernel's
// flushes and FUA writes reach it in order; a power cut under the backend
// is internal/powercut's part. Making the writer skip its fsyncs (and
// still report them) fails this test: that was tried.
func TestNBDImageStack(t *testing.T) {
	k := need(t)
	testenv.Need(t, "nbd-client", "nbd-client")
	e2fsck := testenv.Need(t, "e2fsck", "e2fsprogs")
	debugfs := testenv.Need(t, "debugfs", "e2fsprogs")
	d := imagetest.NewDebian(t, imagetest.DebianOptions{RootMiB: 32, BigFileSize: 256 << 10, RootBlockSize: 4096})
	dir := t.TempDir()
	cli := filepath.Join(dir, "blkcrypt")
	goBuild(t, "../../cmd/blkcrypt", cli, false)
	writer := filepath.Join(dir, "syncwriter")
	goBuild(t, "./guest/syncwriter", writer, false)

	// The files the clean session copies in.
	r := rand.New(rand.NewPCG(26, 1))
	files := map[string][]byte{"hello.txt": []byte("written through the kernel's NBD client\n")}
	for name, n := range map[string]int{"one-mib.bin": 1 << 20, "odd.bin": 300001} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		files[name] = b
	}
	// vg0/root's segments in MiB, for the guest's dd over dm-crypt.
	var segs strings.Builder
	for _, s := range d.RootSegs {
		pvOff, lvOff, n := d.PEStart+int64(s.Ranges[0].Start)*d.Extent, int64(s.StartPE)*d.Extent, int64(s.SizePE)*d.Extent
		if pvOff%(1<<20) != 0 || lvOff%(1<<20) != 0 || n%(1<<20) != 0 {
			t.Fatalf("lvm2 placed a segment of vg0/root off MiB boundaries: %+v (pe_start %d)", s, d.PEStart)
		}
		fmt.Fprintf(&segs, "%d %d %d\n", pvOff>>20, lvOff>>20, n>>20)
	}
	key, err := os.ReadFile(d.Key)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(d.Disk)
	if err != nil {
		t.Fatal(err)
	}

	b := Boot{
		Script:      strings.ReplaceAll(nbdScript, "@MIN@", strconv.Itoa(nbdMinFsynced)),
		Files:       map[string][]byte{"/kt/key": key, "/kt/segments": []byte(segs.String())},
		Executables: map[string]string{"/kt/blkcrypt": cli, "/kt/syncwriter": writer},
		Programs:    []string{"nbd-client", "e2fsck"},
		Disks:       []Disk{{Name: "deb", Path: d.Disk}},
		Timeout:     10 * time.Minute,
	}
	for name, data := range files {
		b.Files["/kt/files/"+name] = data
	}
	res := run(t, k, b)
	for _, l := range res.Lines("@@S ") {
		t.Logf("guest: %s", l)
	}
	defer func() {
		if t.Failed() {
			t.Logf("guest output:\n%s", res.Output)
			t.Logf("console tail:\n%s", tail(res.Console, 6000))
		}
	}()
	for _, l := range res.Lines("@@FAIL ") {
		t.Errorf("guest: %s", l)
	}
	if res.ExitCode != 0 {
		t.Fatalf("guest script exit %d", res.ExitCode)
	}
	one := func(prefix string) string {
		l := res.Lines(prefix)
		if len(l) != 1 {
			t.Fatalf("guest printed %d %q lines, want 1", len(l), prefix)
		}
		return l[0]
	}

	// The kernel's ext4 read the image's files over NBD.
	for _, l := range res.Lines("@@P ") {
		f := strings.Fields(l)
		if want := sha256.Sum256(d.Files[f[0]]); len(f) != 2 || f[1] != hex.EncodeToString(want[:]) {
			t.Errorf("the kernel read %s over NBD as %q, want SHA-256 %x", f[0], l, want)
		}
	}
	if n := len(res.Lines("@@P ")); n != 2 {
		t.Errorf("%d files read over NBD, want 2", n)
	}
	for _, e := range []string{"@@E1 ", "@@E2 ", "@@E3 "} {
		if rc := one(e); rc != "0" {
			t.Errorf("e2fsck -fn (%s) exited %s", strings.TrimSpace(e), rc)
		}
	}

	// The crash: the writer was stopped by the kill, not by its end, and
	// every file and log record it reported durable is there.
	if rc := one("@@WRC "); rc == "0" {
		t.Errorf("the writer finished all its rounds before the kill: the crash case tested nothing")
	}
	fsynced := map[string]string{}
	for _, l := range res.Lines("@@F ") {
		f := strings.Fields(l)
		fsynced[f[0]] = f[1] + " " + f[2]
	}
	records := 0
	for _, l := range res.Lines("@@A ") {
		records, _ = strconv.Atoi(l)
	}
	if len(fsynced) < nbdMinFsynced {
		t.Errorf("only %d files fsynced before the kill, want at least %d", len(fsynced), nbdMinFsynced)
	}
	t.Logf("writer: %d files and %d log records fsynced before the kill; %s", len(fsynced), records, strings.Join(res.Lines("@@X "), " "))
	after := map[string]string{}
	for _, l := range res.Lines("@@V ") {
		f := strings.Fields(l)
		after[f[0]] = f[1] + " " + f[2]
	}
	lost := 0
	for _, name := range sortedNames(fsynced) {
		if after[name] != fsynced[name] {
			if lost++; lost <= 3 {
				t.Errorf("%s was fsynced (%s) before the kill; after the restart the kernel reads %q", name, fsynced[name], after[name])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of the %d files fsynced before the kill are lost or differ after the restart", lost, len(fsynced))
	}
	if rc := one("@@SRVRC "); rc != "0" {
		t.Errorf("the restarted server exited %s on SIGTERM", rc)
	}

	// Host side: blkcrypt reads vg0/root out of the disk the guest wrote;
	// it is the bytes the guest read over NBD and cut out of dm-crypt.
	lv := filepath.Join(dir, "root.img")
	stack := []string{"--partition", "3", "--lv", "vg0/root", "--key-file", d.Key, d.Disk}
	if o, err := exec.Command(cli, append([]string{"read", "-o", lv}, stack...)...).CombinedOutput(); err != nil {
		t.Fatalf("blkcrypt read: %v %s", err, o)
	}
	lvBytes, err := os.ReadFile(lv)
	if err != nil {
		t.Fatal(err)
	}
	lvSum := sha256.Sum256(lvBytes)
	if got := hex.EncodeToString(lvSum[:]); one("@@NBDSUM ") != got || one("@@DMSUM ") != got || int64(len(lvBytes)) != d.RootSize {
		t.Errorf("vg0/root: %d bytes, SHA-256 %s on the host (lvs: %d bytes); over NBD %s; dm-crypt at lvm2's offsets %s",
			len(lvBytes), got, d.RootSize, one("@@NBDSUM "), one("@@DMSUM "))
	}
	if o, err := exec.Command(e2fsck, "-fn", lv).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn on the host: %v\n%s", err, o)
	}
	// The files, byte-exact: debugfs on the host's copy, and blkcrypt cat.
	dump := func(path string) []byte {
		out := filepath.Join(dir, "dump")
		os.Remove(out)
		if o, err := exec.Command(debugfs, "-R", fmt.Sprintf("dump %s %s", path, out), lv).CombinedOutput(); err != nil {
			t.Fatalf("debugfs dump %s: %v %s", path, err, o)
		}
		b, _ := os.ReadFile(out) // no file: debugfs found none (nil)
		return b
	}
	for _, name := range sortedNames(files) {
		if got := dump("/kt/" + name); !bytes.Equal(got, files[name]) {
			t.Errorf("debugfs: /kt/%s is %d bytes, not the %d the guest wrote", name, len(got), len(files[name]))
		}
		got, err := exec.Command(cli, append([]string{"cat"}, append(stack, "/kt/"+name)...)...).Output()
		if err != nil || !bytes.Equal(got, files[name]) {
			t.Errorf("blkcrypt cat /kt/%s: %v, %d bytes, want %d", name, err, len(got), len(files[name]))
		}
	}
	differ := 0
	for _, name := range sortedNames(fsynced) {
		got := dump("/stream/" + name)
		if sum := sha256.Sum256(got); fmt.Sprintf("%d %x", len(got), sum) != fsynced[name] {
			differ++
		}
	}
	if differ > 0 {
		t.Errorf("debugfs: %d of the %d fsynced files in /stream differ from what was written", differ, len(fsynced))
	}
	log := dump("/stream/log.bin")
	if len(log) < records*syncRecordSize {
		t.Errorf("log.bin holds %d bytes; %d records of %d were fsynced", len(log), records, syncRecordSize)
	}
	for i := 0; i < records && (i+1)*syncRecordSize <= len(log); i++ {
		if !bytes.Equal(log[i*syncRecordSize:(i+1)*syncRecordSize], syncRecord(i)) {
			t.Errorf("log.bin record %d differs from what was fsynced", i)
			break
		}
	}
	// Nothing outside partition 3 changed.
	if after, err := os.ReadFile(d.Disk); err != nil || !d.SameOutside(3, before, after) {
		t.Errorf("bytes outside partition 3 changed (%v)", err)
	}
}

// syncRecord and syncRecordSize are guest/syncwriter's log records.
const syncRecordSize = 4096

func syncRecord(i int) []byte {
	b := make([]byte, syncRecordSize)
	for j := 0; j < syncRecordSize/8; j++ {
		binary.LittleEndian.PutUint64(b[8*j:], uint64(i)<<32|uint64(j))
	}
	return b
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
