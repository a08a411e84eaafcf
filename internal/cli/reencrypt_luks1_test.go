package cli

import (
	"bytes"
	"context"
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

// luks1Vol formats a LUKS1 image with cryptsetup (two keyslots) and
// writes plaintext through blkcrypt; cryptsetup then checks what blkcrypt
// wrote decrypts under its volume key only through the tests below.
func luks1Vol(t *testing.T, dir string, dataMiB int) (img string, pass [2]string, plain []byte) {
	t.Helper()
	img = filepath.Join(dir, "v1.img")
	if err := os.WriteFile(img, make([]byte, (2+dataMiB)<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	pass = [2]string{writeFile(t, dir, "p0", []byte("slot zero")), writeFile(t, dir, "p1", []byte("slot one"))}
	if out, err := cryptsetup(t, "luksFormat", "--type", "luks1", "-q", "--pbkdf-force-iterations", "1000", "--key-file", pass[0], img); err != nil {
		t.Fatalf("luksFormat: %v\n%s", err, out)
	}
	if out, err := cryptsetup(t, "luksAddKey", "-q", "--pbkdf-force-iterations", "1000", "--key-file", pass[0], img, pass[1]); err != nil {
		t.Fatalf("luksAddKey: %v\n%s", err, out)
	}
	plain = randBytes(dataMiB << 20)
	if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, "plain", plain), "--key-file", pass[0]); code != 0 {
		t.Fatalf("write: %s", e)
	}
	return img, pass, plain
}

func mkDigest(t *testing.T, img string) string {
	t.Helper()
	out, err := cryptsetup(t, "luksDump", img)
	if err != nil {
		t.Fatalf("cryptsetup luksDump: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "MK digest:") {
			return l
		}
	}
	t.Fatalf("no MK digest in\n%s", out)
	return ""
}

// newKeyBothSlots checks with cryptsetup that the volume key changed and
// that both keyslots open.
func newKeyBothSlots(t *testing.T, img, digestBefore string, pass [2]string) {
	t.Helper()
	if mkDigest(t, img) == digestBefore {
		t.Fatal("the volume key digest did not change")
	}
	for s, p := range pass {
		if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-slot", fmt.Sprint(s), "--key-file", p, img); err != nil {
			t.Fatalf("cryptsetup refuses keyslot %d: %v\n%s", s, err, out)
		}
	}
}

// reencrypt on a LUKS1 device: cryptsetup's passphrase rules (a key file
// needs --key-slot when several keyslots are active; on a terminal every
// keyslot's passphrase is asked), a new key that cryptsetup opens with
// every kept passphrase, and the plaintext unchanged.
func TestReencryptLUKS1CLI(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	t.Chdir(dir)
	img, pass, plain := luks1Vol(t, dir, 2)
	before := mkDigest(t, img)

	code, _, e := run(t, nil, "reencrypt", img, "--key-file", pass[0], "--pbkdf-force-iterations", "1000")
	if code != 1 || !strings.Contains(e, "exactly one key slot") {
		t.Fatalf("key file without --key-slot on two keyslots: exit %d %q", code, e)
	}
	if mkDigest(t, img) != before {
		t.Fatal("refused run wrote the header")
	}

	// On a terminal: one prompt per keyslot, both kept.
	var prompts []string
	env := &Env{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, StdinIsTerminal: true,
		Prompt: func(p string) ([]byte, error) {
			prompts = append(prompts, p)
			b, err := os.ReadFile(pass[len(prompts)-1])
			return b, err
		}}
	if code := Main(context.Background(), []string{"reencrypt", img, "--pbkdf-force-iterations", "1000", "--block-size", "1"}, env); code != 0 {
		t.Fatalf("reencrypt: exit %d %s", code, env.Stderr)
	}
	if fmt.Sprint(prompts) != "[Enter passphrase for key slot 0:  Enter passphrase for key slot 1: ]" {
		t.Fatalf("prompts %q", prompts)
	}
	newKeyBothSlots(t, img, before, pass)
	code, got, e := run(t, nil, "read", img, "--key-file", pass[1])
	if code != 0 || got != string(plain) {
		t.Fatalf("read after reencrypt: exit %d %s, equal %v", code, e, got == string(plain))
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "LUKS-*")); len(ents) != 0 {
		t.Fatalf("files left: %v", ents)
	}

	// Not a terminal: one passphrase per line of stdin, as cryptsetup
	// reads them for each keyslot.
	mid := mkDigest(t, img)
	if code, _, e := run(t, []byte("slot zero\nslot one\n"), "reencrypt", img, "--pbkdf-force-iterations", "1000"); code != 0 {
		t.Fatalf("reencrypt with passphrases on stdin: %s", e)
	}
	newKeyBothSlots(t, img, mid, pass)

	// --key-slot keeps only that keyslot; a new cipher.
	code, _, e = run(t, nil, "reencrypt", img, "--key-file", pass[1], "--key-slot", "1", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--pbkdf-force-iterations", "1000")
	if code != 0 {
		t.Fatalf("reencrypt --cipher: %s", e)
	}
	if out, _ := cryptsetup(t, "luksDump", img); !strings.Contains(out, "cbc-essiv:sha256") || !strings.Contains(out, "MK bits:       \t256") || !strings.Contains(out, "Key Slot 0: DISABLED") {
		t.Fatalf("luksDump after --cipher:\n%s", out)
	}
	if code, got, _ := run(t, nil, "read", img, "--key-file", pass[1]); code != 0 || got != string(plain) {
		t.Fatal("plaintext changed by the new cipher")
	}
}

// Bad input to LUKS1 reencrypt: cryptsetup's exit codes, nothing written;
// and a device marked by a reencryption in progress is refused by the
// verbs that open it, as cryptsetup refuses it.
func TestReencryptLUKS1BadInput(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	t.Chdir(dir)
	img, pass, _ := luks1Vol(t, dir, 1)
	sum := fileSum(t, img)
	wrong := writeFile(t, dir, "wrong", []byte("wrong"))
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--key-file", wrong, "--key-slot", "0"}, 2, "passphrase"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--cipher", "nosuch-xts-plain64"}, 1, "nosuch"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--block-size", "65"}, 1, "block size"},
		{[]string{"--key-file", pass[0], "--key-slot", "9"}, 1, "key slot"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--decrypt"}, 1, "not supported"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--resilience", "journal"}, 1, "LUKS2 only"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--resume-only"}, 1, "not in progress"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--pbkdf", "argon2id"}, 1, "pbkdf2"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--type", "luks2"}, 1, "holds LUKS1"},
		{[]string{"--key-file", pass[0], "--key-slot", "0", "--header", pass[1]}, 1, "detached"},
	} {
		code, _, e := run(t, nil, append([]string{"reencrypt", img, "--pbkdf-force-iterations", "1000"}, tc.args...)...)
		if code != tc.code || !strings.Contains(e, tc.msg) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
			t.Errorf("%v: exit %d %q, want %d and %q on one line", tc.args, code, e, tc.code, tc.msg)
		}
		if fileSum(t, img) != sum {
			t.Fatalf("%v wrote the device", tc.args)
		}
		if ents, _ := filepath.Glob(filepath.Join(dir, "LUKS-*")); len(ents) != 0 {
			t.Fatalf("%v left files: %v", tc.args, ents)
		}
	}

	// A marked device: cryptsetup and blkcrypt both refuse to open it.
	b, _ := os.ReadFile(img)
	copy(b, "LUKS\xde\xad")
	os.WriteFile(img, b, 0o600)
	_, csErr := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass[0], img)
	csCode := -1
	if ee, ok := csErr.(*exec.ExitError); ok {
		csCode = ee.ExitCode()
	}
	for _, args := range [][]string{
		{"test-passphrase", img, "--key-file", pass[0]},
		{"read", img, "--key-file", pass[0], "--length", "512"},
		{"read", img, "--type", "luks1", "--key-file", pass[0], "--length", "512"},
		{"open", "--test-passphrase", img, "--key-file", pass[0]},
		{"reencrypt", img, "--key-file", pass[0]},
	} {
		code, out, e := run(t, nil, args...)
		if code != csCode || out != "" || !strings.Contains(e, "LUKS1 reencryption is in progress") {
			t.Errorf("%v on a marked device: exit %d (cryptsetup %d) %q", args, code, csCode, e)
		}
	}
}

// TestReencryptLUKS1Kill kills the real `blkcrypt reencrypt` of a LUKS1
// volume with SIGKILL at random moments until at least 4 kills land while
// the reencryption is in progress, and runs it again in the same
// directory each time: every volume must end with a new key that
// cryptsetup opens and read back the plaintext written before. Then the
// same with SIGINT, which stops cleanly between blocks.
func TestReencryptLUKS1Kill(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	img, pass, plain := luks1Vol(t, dir, 24)
	base, _ := os.ReadFile(img)
	args := []string{"reencrypt", img, "--key-file", pass[0], "--key-slot", "0", "--block-size", "1", "--pbkdf-force-iterations", "1000"}
	start := time.Now()
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("reencrypt: %v\n%s", err, out)
	}
	whole := time.Since(start)
	rng := rand.New(rand.NewPCG(1, 15))
	kills := 0
	for runN := 0; runN < 30 && kills < 4; runN++ {
		os.WriteFile(img, base, 0o600)
		before := mkDigest(t, img)
		delay, killed := killedRun(t, bin, args, rng, whole)
		left, _ := filepath.Glob(filepath.Join(dir, "LUKS-*"))
		if killed && len(left) > 0 {
			kills++
			if code, _, e := run(t, nil, args...); code != 0 {
				t.Fatalf("resume after a kill at %v (files %v): %s", delay, left, e)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "LUKS-*")); len(left) != 0 {
			t.Fatalf("after a kill at %v and a resume, files are left: %v", delay, left)
		}
		if killed && mkDigest(t, img) == before {
			// Killed before the start wrote anything: run it whole.
			if code, _, e := run(t, nil, args...); code != 0 {
				t.Fatalf("rerun: %s", e)
			}
		}
		if mkDigest(t, img) == before {
			t.Fatalf("run %d (kill at %v): the volume key did not change", runN, delay)
		}
		if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass[0], img); err != nil {
			t.Fatalf("after a kill at %v: cryptsetup refuses the passphrase: %v\n%s", delay, err, out)
		}
		code, got, e := run(t, nil, "read", img, "--key-file", pass[0])
		if code != 0 || got != string(plain) {
			t.Fatalf("after a kill at %v (run %d): read exit %d %s, plaintext equal %v", delay, runN, code, e, got == string(plain))
		}
	}
	if kills < 4 {
		t.Fatalf("only %d kills landed during the reencryption", kills)
	}

	// SIGINT stops between blocks: exit 1 saying how to resume, the log at
	// a block boundary, and a rerun finishes.
	for try := 0; ; try++ {
		os.WriteFile(img, base, 0o600)
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if m, _ := filepath.Glob(filepath.Join(dir, "LUKS-*.jnl")); len(m) > 0 {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		logs, _ := filepath.Glob(filepath.Join(dir, "LUKS-*.log"))
		if err == nil && len(logs) == 0 {
			if try < 3 {
				continue // finished before the signal
			}
			t.Fatal("every run finished before SIGINT arrived")
		}
		if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.ExitStatus() != 1 || !strings.Contains(stderr.String(), "resume") || len(logs) != 1 {
			t.Fatalf("after SIGINT: exit %v, stderr %q, logs %v", err, stderr.String(), logs)
		}
		lb, _ := os.ReadFile(logs[0])
		var off int64
		for _, l := range strings.Split(string(lb), "\n") {
			fmt.Sscanf(l, "offset = %d", &off)
		}
		if off%(1<<20) != 0 {
			t.Fatalf("SIGINT left the log at %d, not at a block boundary", off)
		}
		break
	}
	if code, _, e := run(t, nil, args...); code != 0 {
		t.Fatalf("resume after SIGINT: %s", e)
	}
	if code, got, _ := run(t, nil, "read", img, "--key-file", pass[0]); code != 0 || got != string(plain) {
		t.Fatal("plaintext differs after a SIGINT and a resume")
	}
}
