//go:build linux

package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/mount"
)

// needFUSE: fusermount3 (which go-fuse mounts with) and the kernel's
// /dev/fuse.
func needFUSE(t *testing.T) {
	t.Helper()
	testenv.Need(t, "fusermount3", "fuse3")
	testenv.Need(t, "dd", "coreutils")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "FUSE mounts need /dev/fuse (modprobe fuse): %v", err)
	}
}

// isMountPoint reports whether dir is a mount point now, by the kernel's
// /proc/self/mountinfo (field 5 is the mount point, spaces as \040).
func isMountPoint(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.ReplaceAll(fields[4], `\040`, " ") == dir {
			return true
		}
	}
	return false
}

// lockedBuffer is stderr shared by the command's goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mountRun is a `blkcrypt mount` running in-process.
type mountRun struct {
	dir, file string
	cancel    context.CancelFunc
	done      chan int
	stderr    *lockedBuffer
}

// mountInBackground runs `blkcrypt mount ARGS DIR` with a new DIR and
// returns once DIR/volume is there. A mount the test leaves behind is
// detached at cleanup, before DIR is removed.
func mountInBackground(t *testing.T, args ...string) *mountRun {
	t.Helper()
	dir := t.TempDir()
	m := &mountRun{dir: dir, file: filepath.Join(dir, mount.DefaultFileName), done: make(chan int, 1), stderr: &lockedBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	t.Cleanup(func() {
		cancel()
		if isMountPoint(t, dir) {
			exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
	})
	go func() {
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: m.stderr}
		m.done <- Main(ctx, append(append([]string{"mount"}, args...), dir), env)
	}()
	waitMounted(t, m.file, m.done, m.stderr.String)
	return m
}

// waitMounted waits for file to appear in a mount that is up, failing if
// the command ends first.
func waitMounted(t *testing.T, file string, done <-chan int, stderr func() string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if isMountPoint(t, filepath.Dir(file)) {
			if _, err := os.Stat(file); err == nil {
				return
			}
		}
		select {
		case code := <-done:
			t.Fatalf("mount exited early with %d: %s", code, stderr())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not appear within 20s: %s", file, stderr())
}

// wait waits for the command to end by itself (after fusermount -u).
func (m *mountRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-m.done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("mount did not end: %s", m.stderr.String())
		return -1
	}
}

// stop cancels the command's context, the path SIGINT/SIGTERM take.
func (m *mountRun) stop(t *testing.T) int {
	t.Helper()
	m.cancel()
	return m.wait(t)
}

// luks2Image formats a size-byte image with cryptsetup (fast PBKDF2,
// 4096-byte sectors) and returns it, its passphrase file and the volume
// key cryptsetup reports.
func luks2Image(t *testing.T, dir string, size int) (img, pass string, vk []byte) {
	t.Helper()
	img = writeFile(t, dir, "luks.img", make([]byte, size))
	pass = writeFile(t, dir, "pass", []byte("mount-test"))
	if out, err := cryptsetup(t, "luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--sector-size", "4096", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v %s", err, out)
	}
	dump, err := cryptsetup(t, "luksDump", "--dump-volume-key", "-q", "--key-file", pass, img)
	if err != nil {
		t.Fatalf("cryptsetup luksDump: %v %s", err, dump)
	}
	vk, _ = hex.DecodeString(volumeKeyOf(dump))
	if len(vk) != 64 {
		t.Fatalf("volume key of %d bytes from %q", len(vk), dump)
	}
	return img, pass, vk
}

// checkDecrypts has OpenSSL decrypt the 4096-byte aes-xts-plain64 sectors
// of img (data at dataOff) that cover [from, to) and compares them with
// want, the whole expected plaintext.
func checkDecrypts(t *testing.T, o *oracle.Oracle, img string, vk []byte, dataOff int, want []byte, from, to int) {
	t.Helper()
	const ss = 4096
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	for s := from / ss; s*ss < to && s*ss < len(want); s++ {
		ct := raw[dataOff+s*ss : dataOff+(s+1)*ss]
		pt, err := o.Crypt("aes-256-xts", vk, plainIV(uint64(s*ss/512)), ct, false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pt, want[s*ss:(s+1)*ss]) {
			t.Fatalf("sector %d of %s: OpenSSL with the volume key decrypts to something other than what was written", s, img)
		}
	}
}

func catFile(t *testing.T, path string) []byte {
	t.Helper()
	out, err := exec.Command("cat", path).Output()
	if err != nil {
		t.Fatalf("cat %s: %v", path, err)
	}
	return out
}

// ddWrite writes src into the mounted file at byte offset off, as a user
// would, never truncating.
func ddWrite(path, src string, off int, extra ...string) ([]byte, error) {
	args := append([]string{"if=" + src, "of=" + path, "bs=65536", "seek=" + strconv.Itoa(off),
		"oflag=seek_bytes", "conv=notrunc", "status=none"}, extra...)
	return exec.Command("dd", args...).CombinedOutput()
}

// TestMountLUKS2WriteSyncDecrypts is issue 17's acceptance test: a LUKS2
// volume cryptsetup made is mounted; dd writes an unaligned range through
// the mount and `sync` runs; OpenSSL with cryptsetup's volume key then
// decrypts the image to what was written — before the unmount (sync
// reached the image) and after `fusermount3 -u`, which ends the command
// with 0 and leaves nothing mounted.
func TestMountLUKS2WriteSyncDecrypts(t *testing.T) {
	needFUSE(t)
	o := oracle.New(t)
	dir := t.TempDir()
	img, pass, vk := luks2Image(t, dir, 20<<20)
	m := mountInBackground(t, img, "--key-file", pass)
	st, err := os.Stat(m.file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 4<<20 || st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
		t.Fatalf("%s: size %d mode %v, want the 4 MiB data segment as a 0600 file", m.file, st.Size(), st.Mode())
	}
	want := catFile(t, m.file)
	if len(want) != 4<<20 {
		t.Fatalf("cat read %d bytes of the mount", len(want))
	}
	const off = 123457
	data := randBytes(777777)
	src := writeFile(t, dir, "src", data)
	if out, err := ddWrite(m.file, src, off); err != nil {
		t.Fatalf("dd into the mount: %v %s", err, out)
	}
	if out, err := exec.Command("sync").CombinedOutput(); err != nil {
		t.Fatalf("sync: %v %s", err, out)
	}
	copy(want[off:], data)
	if got := catFile(t, m.file); !bytes.Equal(got, want) {
		t.Fatal("reading the mount back differs from what dd wrote")
	}
	const dataOff = 16 << 20
	checkDecrypts(t, o, img, vk, dataOff, want, off-8192, off+len(data)+8192)

	if out, err := exec.Command("fusermount3", "-u", m.dir).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v %s", err, out)
	}
	if code := m.wait(t); code != 0 {
		t.Fatalf("mount exited %d after fusermount3 -u: %s", code, m.stderr.String())
	}
	if isMountPoint(t, m.dir) {
		t.Fatal("still mounted after the command ended")
	}
	checkDecrypts(t, o, img, vk, dataOff, want, 0, len(want))
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup no longer opens the image: %v %s", err, out)
	}
}

// plainMountArgs is a 4 MiB plain volume (aes-xts-plain64, 4096-byte
// sectors) with a random key: no KDF, so the semantics tests are quick.
// The image's name has a comma and a space, which the fsname mount option
// must escape for fusermount3.
func plainMountArgs(t *testing.T, dir string) (img string, vk []byte, args []string) {
	vk = randBytes(64)
	img = writeFile(t, dir, "plain, image.img", randBytes(4<<20))
	vkf := writeFile(t, dir, "vk", vk)
	return img, vk, []string{img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512", "--sector-size", "4096"}
}

// TestMountReadOnlyRefusesWrites: a --read-only mount refuses to open the
// file for writing (EROFS), dd fails on it, reads still work, and the
// image stays byte for byte the same. Ending it through the context is the
// SIGINT path: exit 0, nothing mounted.
func TestMountReadOnlyRefusesWrites(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	img, _, args := plainMountArgs(t, dir)
	before := fileSum(t, img)
	m := mountInBackground(t, append(args, "--read-only")...)
	st, err := os.Stat(m.file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o400 {
		t.Errorf("read-only file has mode %v, want 0400", st.Mode())
	}
	for _, flag := range []int{os.O_WRONLY, os.O_RDWR} {
		f, err := os.OpenFile(m.file, flag, 0)
		if err == nil {
			f.Close()
			t.Fatalf("open with flag %#x of a read-only mount succeeded", flag)
		}
		if !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
			t.Fatalf("open for writing: %v, want EROFS or EACCES", err)
		}
	}
	src := writeFile(t, dir, "src", randBytes(8192))
	if out, err := ddWrite(m.file, src, 0); err == nil {
		t.Fatal("dd wrote into a read-only mount")
	} else if !strings.Contains(string(out), "Read-only file system") && !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("dd into a read-only mount: %s", out)
	}
	got := catFile(t, m.file)
	if code := m.stop(t); code != 0 {
		t.Fatalf("mount exited %d: %s", code, m.stderr.String())
	}
	if isMountPoint(t, m.dir) {
		t.Fatal("still mounted after cancellation")
	}
	if fileSum(t, img) != before {
		t.Fatal("a read-only mount changed the image")
	}
	code, plainOut, e := run(t, nil, append([]string{"read"}, args...)...)
	if code != 0 || plainOut != string(got) {
		t.Fatalf("the read-only mount shows something other than blkcrypt read (%d %s)", code, e)
	}
}

// TestMountBlockDeviceSemantics: the file behaves as a block device does
// for the tools people point at it. Its size is fixed: an O_TRUNC open
// (cat > volume) writes from the start without shrinking it, truncate(1)
// to another size fails; a write at the end gets ENOSPC and one across
// the end keeps what fits; fsync works (conv=fsync), chmod is refused.
// OpenSSL then decrypts the image to the expected bytes.
func TestMountBlockDeviceSemantics(t *testing.T) {
	needFUSE(t)
	o := oracle.New(t)
	dir := t.TempDir()
	img, vk, args := plainMountArgs(t, dir)
	m := mountInBackground(t, args...)
	const size = 4 << 20
	want := catFile(t, m.file)

	head := randBytes(10000)
	if out, err := exec.Command("sh", "-c", `cat "$1" > "$2"`, "sh", writeFile(t, dir, "head", head), m.file).CombinedOutput(); err != nil {
		t.Fatalf("cat > volume: %v %s", err, out)
	}
	copy(want, head)
	if st, err := os.Stat(m.file); err != nil || st.Size() != size {
		t.Fatalf("after an O_TRUNC write: %v, size %d", err, st.Size())
	}
	if err := exec.Command("truncate", "-s", "100", m.file).Run(); err == nil {
		t.Fatal("truncate -s 100 succeeded on a fixed-size volume")
	}
	if err := os.Chmod(m.file, 0o644); err == nil {
		t.Fatal("chmod of the volume file succeeded")
	}

	mid := randBytes(3 * 4096)
	if out, err := ddWrite(m.file, writeFile(t, dir, "mid", mid), 5000, "conv=notrunc,fsync"); err != nil {
		t.Fatalf("dd conv=fsync: %v %s", err, out)
	}
	copy(want[5000:], mid)

	tail := randBytes(9000)
	tailSrc := writeFile(t, dir, "tail", tail)
	out, err := ddWrite(m.file, tailSrc, size)
	if err == nil || !strings.Contains(string(out), "No space left on device") {
		t.Fatalf("dd at the end of the volume: %v %s, want ENOSPC", err, out)
	}
	out, err = ddWrite(m.file, tailSrc, size-3000)
	if err == nil {
		t.Fatalf("dd across the end of the volume succeeded: %s", out)
	}
	copy(want[size-3000:], tail)
	if got := catFile(t, m.file); !bytes.Equal(got, want) {
		t.Fatal("the mount reads back something other than what was written")
	}
	if code := m.stop(t); code != 0 {
		t.Fatalf("mount exited %d: %s", code, m.stderr.String())
	}
	checkDecrypts(t, o, img, vk, 0, want, 0, size)
}

// TestMountSIGTERMLeavesImageConsistent runs the real binary. SIGTERM to an
// idle mount unmounts, exits 0, and the image decrypts to what dd wrote
// (no sync: the exit flushes). SIGTERM while a file is open detaches the
// mount at once, keeps serving the open file until it is closed, then
// exits 0 with that write in the image too; cryptsetup still opens it.
// SIGHUP unmounts too.
func TestMountSIGTERMLeavesImageConsistent(t *testing.T) {
	needFUSE(t)
	o := oracle.New(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = testenv.ModuleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	img, pass, vk := luks2Image(t, dir, 20<<20)
	const dataOff = 16 << 20
	var want []byte

	start := func() (*exec.Cmd, string, *lockedBuffer, chan int) {
		mnt := t.TempDir()
		t.Cleanup(func() {
			if isMountPoint(t, mnt) {
				exec.Command("fusermount3", "-u", "-z", mnt).Run()
			}
		})
		cmd := exec.Command(bin, "mount", img, mnt, "--key-file", pass)
		errb := &lockedBuffer{}
		cmd.Stderr = errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan int, 1)
		go func() { cmd.Wait(); done <- cmd.ProcessState.ExitCode() }()
		t.Cleanup(func() { cmd.Process.Kill() })
		file := filepath.Join(mnt, mount.DefaultFileName)
		waitMounted(t, file, done, errb.String)
		return cmd, file, errb, done
	}
	waitExit := func(done chan int, errb *lockedBuffer) int {
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatalf("blkcrypt mount did not exit after SIGTERM: %s", errb.String())
			return -1
		}
	}

	cmd, file, errb, done := start()
	want = catFile(t, file)
	data := randBytes(300001)
	if out, err := ddWrite(file, writeFile(t, dir, "a", data), 4097); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	copy(want[4097:], data)
	cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(done, errb); code != 0 {
		t.Fatalf("SIGTERM: exit %d: %s", code, errb.String())
	}
	if isMountPoint(t, filepath.Dir(file)) {
		t.Fatal("still mounted after SIGTERM")
	}
	if n := strings.Count(errb.String(), "\n"); n != 1 {
		t.Errorf("an idle mount ended by SIGTERM printed %q, want only the mount line", errb.String())
	}
	checkDecrypts(t, o, img, vk, dataOff, want, 0, len(want))

	// Busy: the test holds the file open across the signal.
	cmd, file, errb, done = start()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	// The message follows the detach, so wait for both.
	deadline := time.Now().Add(10 * time.Second)
	for (isMountPoint(t, filepath.Dir(file)) || !strings.Contains(errb.String(), "busy")) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if isMountPoint(t, filepath.Dir(file)) {
		t.Fatalf("a busy mount was not detached after SIGTERM: %s", errb.String())
	}
	if !strings.Contains(errb.String(), "busy") {
		t.Errorf("stderr %q does not say the mount was busy", errb.String())
	}
	select {
	case code := <-done:
		t.Fatalf("exited %d while a file was still open: %s", code, errb.String())
	case <-time.After(200 * time.Millisecond):
	}
	late := randBytes(5000)
	if _, err := f.WriteAt(late, 2<<20); err != nil {
		t.Fatalf("writing through the file held open across SIGTERM: %v", err)
	}
	copy(want[2<<20:], late)
	if err := f.Close(); err != nil {
		t.Fatalf("close after the write: %v", err)
	}
	if code := waitExit(done, errb); code != 0 {
		t.Fatalf("exit %d after the last file closed: %s", code, errb.String())
	}
	checkDecrypts(t, o, img, vk, dataOff, want, 0, len(want))
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup no longer opens the image: %v %s", err, out)
	}

	// SIGHUP (the terminal closed) unmounts as SIGTERM does.
	cmd, file, errb, done = start()
	cmd.Process.Signal(syscall.SIGHUP)
	if code := waitExit(done, errb); code != 0 {
		t.Fatalf("SIGHUP: exit %d: %s", code, errb.String())
	}
	if isMountPoint(t, filepath.Dir(file)) {
		t.Fatal("still mounted after SIGHUP")
	}
}

// TestMountBadInput: a missing or non-directory DIR, a wrong argument
// count, a wrong passphrase, a missing device and an image that is already
// mounted each give one line on stderr and cryptsetup's exit code (1 wrong
// parameters, 2 bad passphrase, 4 wrong device, 5 busy), with nothing
// mounted and the image unchanged.
func TestMountBadInput(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	img, pass, _ := luks2Image(t, dir, 20<<20)
	wrong := writeFile(t, dir, "wrong", []byte("not-the-passphrase"))
	mnt := t.TempDir()
	before := fileSum(t, img)
	for _, c := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"missing dir", []string{img, filepath.Join(dir, "nope"), "--key-file", pass}, ExitUsage, "mount point"},
		{"dir is a file", []string{img, pass, "--key-file", pass}, ExitUsage, "not a directory"},
		{"no dir", []string{img, "--key-file", pass}, ExitUsage, "DEVICE and DIR"},
		{"wrong passphrase", []string{img, mnt, "--key-file", wrong}, ExitPermission, ""},
		{"missing device", []string{filepath.Join(dir, "none.img"), mnt, "--key-file", pass}, ExitDevice, ""},
	} {
		code, _, e := run(t, nil, append([]string{"mount"}, c.args...)...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d (%s)", c.name, code, c.code, e)
		}
		if strings.Count(e, "\n") != 1 || !strings.Contains(e, c.says) {
			t.Errorf("%s: stderr %q, want one line saying %q", c.name, e, c.says)
		}
		if isMountPoint(t, mnt) {
			t.Fatalf("%s: left %s mounted", c.name, mnt)
		}
	}
	if fileSum(t, img) != before {
		t.Fatal("bad input changed the image")
	}

	// A mounted image is locked: a second mount is busy (exit 5).
	m := mountInBackground(t, img, "--key-file", pass)
	code, _, e := run(t, nil, "mount", img, mnt, "--key-file", pass)
	if code != ExitBusy || strings.Count(e, "\n") != 1 {
		t.Errorf("second mount of a mounted image: exit %d %q, want 5 and one line", code, e)
	}
	if isMountPoint(t, mnt) {
		t.Fatal("the refused second mount left its directory mounted")
	}
	if code := m.stop(t); code != 0 {
		t.Fatalf("mount exited %d: %s", code, m.stderr.String())
	}
}
