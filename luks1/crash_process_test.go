package luks1_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

// These tests crash the real blkcrypt process, not a Device wrapper: the
// command is built with go build, started on a copy of a cryptsetup-made
// image and killed with SIGKILL after a random delay. Afterwards
// cryptsetup is the judge: the passphrase that worked before must still
// work, and our test-passphrase must agree with cryptsetup's on every
// passphrase. What reached the page cache before the kill stays (a process
// crash, not a power cut; the power-cut sweeps in luks1_powercut_test.go
// and luks2_powercut_test.go model that, on internal/powercut).

// buildBlkcrypt builds cmd/blkcrypt into dir.
func buildBlkcrypt(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "blkcrypt")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	cmd.Dir = lukstest.ModuleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/blkcrypt: %v\n%s", err, out)
	}
	return bin
}

// TestCrashRealProcess builds the command once and runs the process crash
// tests with it.
func TestCrashRealProcess(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	bin := buildBlkcrypt(t, t.TempDir())
	t.Run("kill-add-key", func(t *testing.T) { testKillAddKey(t, cs.With(t), bin) })
	t.Run("kill-header-restore", func(t *testing.T) { testKillHeaderRestore(t, cs.With(t), bin) })
	t.Run("torn-header-restore", func(t *testing.T) { testTornHeaderRestore(t, cs.With(t), bin) })
}

// judges asks both implementations whether a key file opens an image.
type judges struct {
	t   *testing.T
	cs  *lukstest.Cryptsetup
	bin string
}

// ours runs `blkcrypt test-passphrase`: exit 0 opens, 2 does not; anything
// else (an unreadable header) fails the test.
func (j judges) ours(img, keyFile string) bool {
	j.t.Helper()
	out, err := exec.Command(j.bin, "test-passphrase", img, "--key-file", keyFile).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &ee) && ee.ExitCode() == 2:
		return false
	}
	j.t.Fatalf("blkcrypt test-passphrase: %v: %s", err, out)
	return false
}

func (j judges) theirs(img, keyFile string) bool {
	_, err := j.cs.Run("open", "--test-passphrase", "--batch-mode", "--key-file", keyFile, img)
	return err == nil
}

// check: must opens for both; maybe opens for both or for neither. It
// returns whether maybe opens.
func (j judges) check(what, img, must, maybe string) bool {
	j.t.Helper()
	if !j.ours(img, must) || !j.theirs(img, must) {
		j.t.Fatalf("%s: the old passphrase no longer opens (ours %v, cryptsetup %v)", what, j.ours(img, must), j.theirs(img, must))
	}
	o, c := j.ours(img, maybe), j.theirs(img, maybe)
	if o != c {
		j.t.Fatalf("%s: the new passphrase opens for us: %v, for cryptsetup: %v", what, o, c)
	}
	return o
}

// runKilled starts bin with args and sends SIGKILL after delay (if it is
// still running). It returns whether the kill hit a running process.
func runKilled(t *testing.T, bin string, delay time.Duration, args ...string) bool {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
	err := cmd.Wait()
	timer.Stop()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return true
	}
	if err != nil {
		t.Fatalf("%v exited by itself with %v", args, err)
	}
	return false
}

// The kill tests go on until minKills kills have hit a running process,
// for at most maxKillRuns runs, and fail if they never get there.
const (
	minKills    = 4
	maxKillRuns = 40
)

// killAim picks when to kill the next run. It starts at half the fastest
// complete run and walks: a kill that found the image unchanged moves the
// next one later, a kill that came after the process had exited moves it
// earlier, so the kills gather where the operation writes, whatever the
// machine's load makes of the timing. Each delay is jittered by a step.
type killAim struct{ d, step time.Duration }

func newKillAim(fastest time.Duration) *killAim {
	return &killAim{d: fastest / 2, step: max(fastest/10, time.Millisecond)}
}

func (a *killAim) next() time.Duration {
	return max(0, a.d-a.step+time.Duration(rand.Int64N(int64(2*a.step)+1)))
}

func (a *killAim) result(hit, changed bool) {
	switch {
	case !hit:
		a.d = max(0, a.d-a.step)
	case !changed:
		a.d += a.step
	}
}

// timeRun runs bin to completion and returns how long it took.
func timeRun(t *testing.T, bin string, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v %s", args, err, out)
	}
	return time.Since(start)
}

var fastKDF = []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}

// crashBase makes a LUKS1 or LUKS2 image with cryptsetup holding old in
// keyslot 0.
func crashBase(t *testing.T, cs *lukstest.Cryptsetup, dir, typ string, old []byte) string {
	t.Helper()
	size := int64(imgSize)
	if typ == "luks2" {
		size = 17 << 20 // cryptsetup's default 16 MiB LUKS2 data offset
	}
	img := lukstest.NewImage(t, dir, typ+".img", size)
	args := []string{"luksFormat", "--type", typ, "--batch-mode", "--key-file", cs.KeyFile(old), img}
	if typ == "luks1" {
		args = append(args, "--pbkdf-force-iterations", "1000")
	} else {
		args = append(args, fastKDF...)
	}
	cs.MustRun(args...)
	return img
}

// testKillAddKey kills `blkcrypt add-key` at random moments, at least 10
// times per LUKS version and until minKills kills hit the running
// process: the old passphrase must always open with cryptsetup and with
// us, and the new one opens for both or for neither.
func testKillAddKey(t *testing.T, cs *lukstest.Cryptsetup, bin string) {
	old, nw := []byte("old passphrase"), []byte("new passphrase")
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			cs := cs.With(t)
			j := judges{t, cs, bin}
			base := crashBase(t, cs, t.TempDir(), typ, old)
			oldF, newF := cs.KeyFile(old), cs.KeyFile(nw)
			args := func(img string) []string {
				return append([]string{"add-key", img, newF, "--key-file", oldF}, fastKDF...)
			}
			// How long a whole add-key takes here, start to exit.
			var runs []time.Duration
			for i := 0; i < 3; i++ {
				img := lukstest.CopyFile(t, base, t.TempDir())
				runs = append(runs, timeRun(t, bin, args(img)...))
				if !j.check("completed add-key", img, oldF, newF) {
					t.Fatal("a completed add-key did not add the passphrase")
				}
				os.Remove(img)
			}
			sort.Slice(runs, func(a, b int) bool { return runs[a] < runs[b] })
			baseBytes, err := os.ReadFile(base)
			if err != nil {
				t.Fatal(err)
			}
			var killed, added, partial, i int
			aim := newKillAim(runs[0])
			for i = 0; i < maxKillRuns && (i < 10 || killed < minKills); i++ {
				img := lukstest.CopyFile(t, base, t.TempDir())
				delay := aim.next()
				k := runKilled(t, bin, delay, args(img)...)
				opens := j.check(fmt.Sprintf("run %d (SIGKILL after %v, hit a running process: %v)", i, delay, k), img, oldF, newF)
				after, err := os.ReadFile(img)
				if err != nil {
					t.Fatal(err)
				}
				changed := !bytes.Equal(after, baseBytes)
				switch {
				case opens:
					added++
				case changed:
					partial++ // killed between its writes
				}
				aim.result(k, changed)
				if k {
					killed++
				}
				os.Remove(img)
			}
			t.Logf("a whole add-key takes %v; %d of %d kills hit a running process; afterwards the new passphrase works %d times, %d images were changed without it working",
				runs, killed, i, added, partial)
			if killed < minKills {
				t.Fatalf("only %d of %d kills landed while add-key ran (want %d): the test did not crash the operation", killed, i, minKills)
			}
		})
	}
}

// testKillHeaderRestore restores a header backup that lacks the
// newest keyslot and kills `blkcrypt header-restore` at random moments,
// until minKills kills hit the running process; the passphrase both
// headers hold must keep working.
func testKillHeaderRestore(t *testing.T, cs *lukstest.Cryptsetup, bin string) {
	old, nw := []byte("old passphrase"), []byte("new passphrase")
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			cs := cs.With(t)
			j := judges{t, cs, bin}
			dir := t.TempDir()
			cur := crashBase(t, cs, dir, typ, old)
			oldF, newF := cs.KeyFile(old), cs.KeyFile(nw)
			backup := filepath.Join(dir, "backup")
			cs.MustRun("luksHeaderBackup", cur, "--header-backup-file", backup)
			cs.MustRun(append([]string{"luksAddKey", "--batch-mode", "--key-file", oldF, cur, newF}, fastKDF...)...)
			args := func(img string) []string {
				return []string{"header-restore", img, "--header-backup-file", backup}
			}
			var fastest time.Duration
			for i := 0; i < 3; i++ {
				img := lukstest.CopyFile(t, cur, t.TempDir())
				if d := timeRun(t, bin, args(img)...); i == 0 || d < fastest {
					fastest = d
				}
				if j.check("completed restore", img, oldF, newF) {
					t.Fatal("the restored header still holds the newer keyslot")
				}
				os.Remove(img)
			}
			curBytes, err := os.ReadFile(cur)
			if err != nil {
				t.Fatal(err)
			}
			killed, partial, i := 0, 0, 0
			aim := newKillAim(fastest)
			for ; i < maxKillRuns && (i < 5 || killed < minKills); i++ {
				img := lukstest.CopyFile(t, cur, t.TempDir())
				delay := aim.next()
				hit := runKilled(t, bin, delay, args(img)...)
				after, err := os.ReadFile(img)
				if err != nil {
					t.Fatal(err)
				}
				changed := !bytes.Equal(after, curBytes)
				if hit {
					killed++
					if changed {
						partial++ // killed between its writes
					}
				}
				aim.result(hit, changed)
				j.check(fmt.Sprintf("run %d (SIGKILL after %v)", i, delay), img, oldF, newF)
				os.Remove(img)
			}
			t.Logf("a whole header-restore takes at least %v; %d of %d kills hit a running header-restore, %d of them after it had changed the image", fastest, killed, i, partial)
			if killed < minKills {
				t.Fatalf("only %d of %d kills landed while header-restore ran (want %d): the test did not crash the operation", killed, i, minKills)
			}
		})
	}
}

// testTornHeaderRestore models a header restore done in one write of the
// whole backup (as cryptsetup's luksHeaderRestore does, and blkcrypt's did)
// that a power cut stopped part way, in order: it writes the first k bytes
// of the backup over the current header for k at sector boundaries across
// the headers and keyslot areas, and checks that the passphrase both
// headers share still opens with cryptsetup and with us, and that we agree
// on the other one. An out-of-order tear of such a write can lose both
// passphrases (the luks1 power-cut sweep shows it); blkcrypt's own
// header-restore (RestoreHeader) is ordered and synced, and its power-cut
// sweeps are in luks1_powercut_test.go and luks2_powercut_test.go.
func testTornHeaderRestore(t *testing.T, cs *lukstest.Cryptsetup, bin string) {
	old, nw := []byte("old passphrase"), []byte("new passphrase")
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			cs := cs.With(t)
			j := judges{t, cs, bin}
			dir := t.TempDir()
			cur := crashBase(t, cs, dir, typ, old)
			oldF, newF := cs.KeyFile(old), cs.KeyFile(nw)
			backupF := filepath.Join(dir, "backup")
			cs.MustRun("luksHeaderBackup", cur, "--header-backup-file", backupF)
			cs.MustRun(append([]string{"luksAddKey", "--batch-mode", "--key-file", oldF, cur, newF}, fastKDF...)...)
			backup, err := os.ReadFile(backupF)
			if err != nil {
				t.Fatal(err)
			}
			n := len(backup)
			for _, k := range []int{0, 512, 4096, 16384, 16384 + 512, 32768, 65536, 163840, 262144, 1 << 20, n / 2, n - 512, n} {
				if k > n {
					continue
				}
				img := lukstest.CopyFile(t, cur, t.TempDir())
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(backup[:k], 0); err != nil {
					t.Fatal(err)
				}
				f.Close()
				j.check(fmt.Sprintf("restore torn after %d of %d bytes", k, n), img, oldF, newF)
				os.Remove(img)
			}
		})
	}
}
