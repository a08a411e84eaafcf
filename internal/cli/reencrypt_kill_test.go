package cli

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReencryptKillRealProcess kills the real `blkcrypt reencrypt` with
// SIGKILL at random moments of its run, for checksum and journal, until at
// least 3 kills per mode leave a reencryption in progress (at most 30
// runs), and resumes each, alternately by blkcrypt and by cryptsetup
// (repair of the crashed hotzone, then --resume-only). Every volume must
// then read back the plaintext written before.
func TestReencryptKillRealProcess(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pass := writeFile(t, dir, "p", []byte("kill me"))
	base := filepath.Join(dir, "base.img")
	if code, _, e := run(t, nil, append([]string{"format", base, "--type", "luks2", "--size", "41943040", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	plain := randBytes(24 << 20)
	in := writeFile(t, dir, "in", plain)
	if code, _, e := run(t, nil, "write", base, "-i", in, "--key-file", pass); code != 0 {
		t.Fatalf("write: %s", e)
	}
	baseImg, _ := os.ReadFile(base)
	rng := rand.New(rand.NewPCG(15, 15))
	for _, res := range []string{"checksum", "journal"} {
		t.Run(res, func(t *testing.T) {
			img := filepath.Join(dir, res+".img")
			args := append([]string{"reencrypt", img, "--resilience", res, "--hotzone-size", "256k", "--key-file", pass}, reencFast...)
			// How long a whole run takes here, to aim the kills.
			os.WriteFile(img, baseImg, 0o600)
			start := time.Now()
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Fatalf("reencrypt: %v\n%s", err, out)
			}
			whole := time.Since(start)
			kills := 0
			for runN := 0; runN < 30 && kills < 3; runN++ {
				os.WriteFile(img, baseImg, 0o600)
				delay, killed := killedRun(t, bin, args, rng, whole)
				dump, err := cryptsetup(t, "luksDump", img)
				if err != nil {
					t.Fatalf("after a kill at %v: cryptsetup luksDump: %v\n%s", delay, err, dump)
				}
				if killed && strings.Contains(dump, "online-reencrypt-v2") {
					kills++
					resumeKilled(t, img, pass, dump, kills%2 == 1, delay)
				}
				if d, _ := cryptsetup(t, "luksDump", img); strings.Contains(d, "online-reencrypt-v2") {
					t.Fatalf("after a kill at %v and a resume, a reencryption is still in progress:\n%s", delay, d)
				}
				code, got, e := run(t, nil, "read", img, "--key-file", pass, "--length", fmt.Sprint(len(plain)))
				if code != 0 || !bytes.Equal([]byte(got), plain) {
					t.Fatalf("after a kill at %v (run %d): read exit %d %s, plaintext equal %v", delay, runN, code, e, got == string(plain))
				}
			}
			if kills < 3 {
				t.Fatalf("only %d kills landed during the reencryption", kills)
			}
		})
	}
}

// TestReencryptSIGINT: SIGINT stops `blkcrypt reencrypt` between hotzones
// with exit 1 and a resumable state, which cryptsetup finishes to the
// original plaintext.
func TestReencryptSIGINT(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pass := writeFile(t, dir, "p", []byte("interrupt me"))
	img := filepath.Join(dir, "i.img")
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", "67108864", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	plain := randBytes(48 << 20)
	if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, "in", plain), "--key-file", pass); code != 0 {
		t.Fatalf("write: %s", e)
	}
	for try := 0; ; try++ {
		cmd := exec.Command(bin, append([]string{"reencrypt", img, "--resilience", "journal", "--hotzone-size", "128k", "--key-file", pass}, reencFast...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the reencryption has begun (the requirement is on disk).
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			// Read the metadata directly: a luksDump would take the lock
			// the starting blkcrypt needs.
			if b, _ := os.ReadFile(img); bytes.Contains(b[:16<<10], []byte("online-reencrypt-v2")) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		d, _ := cryptsetup(t, "luksDump", img)
		if err == nil && !strings.Contains(d, "online-reencrypt-v2") {
			if try < 3 {
				continue // finished before the signal: again, on the new key
			}
			t.Fatal("every run finished before SIGINT arrived")
		}
		if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.ExitStatus() != 1 || !strings.Contains(stderr.String(), "resume") {
			t.Fatalf("after SIGINT: exit %v, stderr %q", err, stderr.String())
		}
		if strings.Contains(d, "in-reencryption") {
			t.Fatalf("SIGINT left a hotzone in reencryption:\n%s", d)
		}
		sameDump(t, img, "blkcrypt stopped by SIGINT")
		break
	}
	if out, err := cryptsetup(t, "reencrypt", "--resume-only", "--force-offline-reencrypt", "-q", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup resume: %v\n%s", err, out)
	}
	code, got, e := run(t, nil, "read", img, "--key-file", pass, "--length", fmt.Sprint(len(plain)))
	if code != 0 || got != string(plain) {
		t.Fatalf("read: exit %d %s, plaintext equal %v", code, e, got == string(plain))
	}
}

// resumeKilled finishes a reencryption a SIGKILL interrupted, by blkcrypt
// or by cryptsetup (repair of a crashed hotzone first, as cryptsetup asks),
// and fails unless the reencryption is no longer in progress afterwards.
// dump is cryptsetup's luksDump right after the kill.
func resumeKilled(t *testing.T, img, pass, dump string, byBlkcrypt bool, delay time.Duration) {
	t.Helper()
	if byBlkcrypt {
		if code, _, e := run(t, nil, "reencrypt", img, "--resume-only", "--key-file", pass); code != 0 {
			t.Fatalf("blkcrypt resume after a kill at %v: %s", delay, e)
		}
	} else {
		if strings.Contains(dump, "in-reencryption") {
			if out, err := cryptsetup(t, "repair", "-q", "--key-file", pass, img); err != nil {
				t.Fatalf("cryptsetup repair after a kill at %v: %v\n%s", delay, err, out)
			}
		}
		if d, _ := cryptsetup(t, "luksDump", img); strings.Contains(d, "online-reencrypt-v2") {
			if out, err := cryptsetup(t, "reencrypt", "--resume-only", "--force-offline-reencrypt", "-q", "--key-file", pass, img); err != nil {
				t.Fatalf("cryptsetup resume after a kill at %v: %v\n%s", delay, err, out)
			}
		}
	}
}

// killedRun runs bin with args and sends it SIGKILL after a random share
// of whole (a whole run's time); it returns that delay and whether the
// kill ended the process (a run can finish first).
func killedRun(t *testing.T, bin string, args []string, rng *rand.Rand, whole time.Duration) (time.Duration, bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	delay := time.Duration(rng.Int64N(int64(whole)))
	timer := time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
	cmd.Wait()
	timer.Stop()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return delay, ws.Signaled()
}
