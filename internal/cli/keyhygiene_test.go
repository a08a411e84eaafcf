package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"golang.org/x/sys/unix"
)

// Key hygiene: a whole CLI session must never print a passphrase or the
// volume key, in any encoding, on stdout or stderr, in errors or in --json
// output. The one exception is dump --dump-volume-key, which exists to
// print the key (and is checked to do so, so the search is known to work).

// secretForms returns the ways a secret could show up in output: raw, hex
// (both cases, with and without the spaces of a hex dump) and base64, for
// the whole secret and for every 8-byte window of it (a hex dump splits a
// key across lines).
func secretForms(secret []byte) []string {
	forms := []string{string(secret), base64.StdEncoding.EncodeToString(secret), base64.RawURLEncoding.EncodeToString(secret)}
	win := min(8, len(secret))
	for i := 0; i+win <= len(secret); i++ {
		w := secret[i : i+win]
		h := hex.EncodeToString(w)
		var spaced strings.Builder
		for j, b := range w {
			if j > 0 {
				spaced.WriteByte(' ')
			}
			fmt.Fprintf(&spaced, "%02x", b)
		}
		forms = append(forms, h, strings.ToUpper(h), spaced.String(), strings.ToUpper(spaced.String()))
	}
	return forms
}

// transcript collects the output of every command of a session.
type transcript struct {
	t       *testing.T
	entries []transcriptEntry
}

type transcriptEntry struct {
	what           string
	stdout, stderr string
	mayShowKey     bool
}

// run runs one command in-process and records its output. want < 0
// accepts any exit code.
func (tr *transcript) run(stdin []byte, want int, args ...string) (string, string) {
	tr.t.Helper()
	code, out, errs := run(tr.t, stdin, args...)
	if want >= 0 && code != want {
		tr.t.Fatalf("%v: exit %d, want %d: %s", args, code, want, errs)
	}
	tr.add(strings.Join(args[:1], " "), out, errs, false)
	return out, errs
}

func (tr *transcript) add(what, stdout, stderr string, mayShowKey bool) {
	tr.entries = append(tr.entries, transcriptEntry{what, stdout, stderr, mayShowKey})
}

// check fails for every entry that shows a secret, except that entries
// marked mayShowKey may show the volume key (and must).
func (tr *transcript) check(passphrases [][]byte, volumeKey []byte) {
	tr.t.Helper()
	vkForms := secretForms(volumeKey)
	for _, e := range tr.entries {
		all := e.stdout + "\x00" + e.stderr
		for _, p := range passphrases {
			for _, f := range secretForms(p) {
				if strings.Contains(all, f) {
					tr.t.Errorf("%s: output shows passphrase %q (as %q)", e.what, p, f)
				}
			}
		}
		shown := false
		for _, f := range vkForms {
			if strings.Contains(all, f) {
				shown = true
				if !e.mayShowKey {
					tr.t.Errorf("%s: output shows the volume key (as %q)", e.what, f)
				}
			}
		}
		if e.mayShowKey && !shown {
			tr.t.Errorf("%s: dump --dump-volume-key does not show the volume key; the search is broken", e.what)
		}
	}
}

// TestKeyHygieneSession runs a full session over LUKS1 and LUKS2 and
// searches all its output for the passphrases and the volume key.
func TestKeyHygieneSession(t *testing.T) {
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) { keyHygieneSession(t, typ) })
	}
}

func keyHygieneSession(t *testing.T, typ string) {
	dir := t.TempDir()
	tr := &transcript{t: t}
	p1, p2, p3 := []byte("hygiene first passphrase"), []byte("hygiene second passphrase"), []byte("hygiene third passphrase")
	wrong := []byte("hygiene wrong passphrase")
	vk := randBytes(64)
	pf1, pf2, pf3 := writeFile(t, dir, "p1", p1), writeFile(t, dir, "p2", p2), writeFile(t, dir, "p3", p3)
	wf := writeFile(t, dir, "wrong", wrong)
	vkf := writeFile(t, dir, "vk", vk)
	data := randBytes(64 << 10)
	in := writeFile(t, dir, "data", data)
	img := filepath.Join(dir, typ+".img")

	tr.run(nil, 0, append([]string{"format", img, "--type", typ, "--size", "17825792", "--volume-key-file", vkf, "--key-file", pf1, "-q"}, fastKDF...)...)
	tr.run(nil, 0, append([]string{"add-key", img, pf2, "--key-file", pf1}, fastKDF...)...)
	tr.run(nil, 0, "dump", img)
	tr.run(nil, 0, "dump", img, "--json")
	tr.run(nil, 0, "write", img, "-i", in, "--key-file", pf1)
	if out, _ := tr.run(nil, 0, "read", img, "--key-file", pf2, "--length", fmt.Sprint(len(data))); out != string(data) {
		t.Fatal("read does not return what write wrote")
	}
	// Passphrases typed on stdin, right and wrong.
	tr.run(append(append([]byte(nil), p2...), '\n'), 0, "test-passphrase", img)
	tr.run(append(append([]byte(nil), wrong...), '\n'), 2, "test-passphrase", img)
	tr.run(nil, 0, "test-passphrase", img, "--key-file", pf1)
	tr.run(nil, 0, append([]string{"change-key", img, pf3, "--key-file", pf2}, fastKDF...)...)
	// Failures that involve the secrets: wrong passphrase for every verb
	// that unlocks, key file shorter than asked, wrong volume key file.
	for _, args := range [][]string{
		{"test-passphrase", img, "--key-file", wf},
		{"read", img, "--key-file", wf},
		{"dump", img, "--dump-volume-key", "--key-file", wf},
		{"add-key", img, pf3, "--key-file", wf},
		{"change-key", img, pf3, "--key-file", wf},
		{"remove-key", img, "--key-file", wf},
		{"kill-slot", img, "0", "--key-file", wf},
		{"test-passphrase", img, "--key-file", pf1, "--keyfile-size", "1000"},
		{"test-passphrase", img, "--volume-key-file", pf1},
		{"test-passphrase", img, "--volume-key-file", wf},
	} {
		tr.run(nil, -1, args...)
	}
	wrongVK := writeFile(t, dir, "wrongvk", randBytes(64))
	tr.run(nil, 2, "test-passphrase", img, "--volume-key-file", wrongVK)
	tr.run(nil, 0, "test-passphrase", img, "--volume-key-file", vkf)
	tr.run(nil, 0, "header-backup", img, "--header-backup-file", filepath.Join(dir, "backup"))
	hygieneServe(t, tr, img, pf3)
	tr.run(nil, 0, "remove-key", img, "--key-file", pf3)

	// The one place the key may appear, and must.
	code, out, errs := run(t, nil, "dump", img, "--dump-volume-key", "--key-file", pf1)
	if code != 0 {
		t.Fatalf("dump --dump-volume-key: %s", errs)
	}
	tr.add("dump --dump-volume-key", out, errs, true)
	code, out, errs = run(t, nil, "dump", img, "--dump-volume-key", "--json", "--key-file", pf1)
	if code != 0 {
		t.Fatalf("dump --dump-volume-key --json: %s", errs)
	}
	tr.add("dump --dump-volume-key --json", out, errs, true)

	tr.check([][]byte{p1, p2, p3, wrong}, vk)
	t.Logf("%d commands checked", len(tr.entries))
}

// TestKeyHygienePlain: plain mode with a typed passphrase, whose hash is
// the volume key itself.
func TestKeyHygienePlain(t *testing.T) {
	dir := t.TempDir()
	tr := &transcript{t: t}
	pass := []byte("plain hygiene passphrase")
	key := sha256.Sum256(pass) // cryptsetup: one sha256 round fills a 256-bit key
	img := writeFile(t, dir, "plain.img", make([]byte, 1<<20))
	in := writeFile(t, dir, "data", randBytes(8192))
	args := []string{"--type", "plain", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--hash", "sha256"}
	line := append(append([]byte(nil), pass...), '\n')
	tr.run(line, 0, append([]string{"write", img, "-i", in}, args...)...)
	tr.run(line, 0, append([]string{"read", img, "--length", "8192"}, args...)...)
	tr.run(line, -1, append([]string{"read", img, "--length", "8192", "--keyfile-size", "1000"}, args...)...)
	tr.run(line, 1, append([]string{"read", img, "--offset-bytes", "2000000"}, args...)...)
	tr.check([][]byte{pass}, key[:])
}

// hygieneServe serves img briefly in-process, lets nbdinfo look at it when
// installed, and records what the server and nbdinfo printed.
func hygieneServe(t *testing.T, tr *transcript, img, keyFile string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", img, "--listen", "unix:" + sock, "--key-file", keyFile}, &Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb})
	}()
	for i := 0; ; i++ {
		if testenv.UnixListening(sock) {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited early with %d: %s", code, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if i > 500 {
			t.Fatal("serve did not start")
		}
	}
	if _, err := testenv.LookPath("nbdinfo"); err != nil && testenv.InCI() {
		t.Fatal("nbdinfo is needed to check what serve shows a client (CI is set): apt-get install -y libnbd-bin")
	} else if err == nil {
		info, err := exec.Command("nbdinfo", "--json", "nbd+unix:///?socket="+sock).CombinedOutput()
		if err != nil {
			t.Fatalf("nbdinfo: %v %s", err, info)
		}
		tr.add("nbdinfo of serve", string(info), "", false)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	tr.add("serve", out.String(), errb.String(), false)
}

// TestNoSecretInArgv: no flag takes a secret as its value; passphrases and
// keys come from files, stdin or the terminal, never from the command
// line (where ps and /proc/PID/cmdline would show them).
func TestNoSecretInArgv(t *testing.T) {
	for _, d := range knownFlags() {
		if d.kind != kindString {
			continue
		}
		n := d.name
		secretish := strings.Contains(n, "key") || strings.Contains(n, "pass") || strings.Contains(n, "secret") || strings.Contains(n, "pin")
		// --key-description names a kernel keyring key (cryptsetup's token
		// add); the key itself never passes through it.
		// --fido2-with-client-pin is yes or no (is a PIN required?).
		if secretish && !strings.HasSuffix(n, "-file") && !strings.HasSuffix(n, "keyfiles") && n != "tls-key" && n != "key-description" && n != "fido2-with-client-pin" {
			t.Errorf("flag --%s takes a string that looks like a secret; secrets must come from files or stdin", n)
		}
	}
}

// TestServeHardensProcess: serve turns off core dumps (not dumpable, core
// limit 0) and locks memory when the OS allows it.
func TestServeHardensProcess(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(1<<20))
	vkf := writeFile(t, dir, "vk", randBytes(64))
	sock := filepath.Join(dir, "s.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		done <- Main(ctx, []string{"serve", img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512", "--listen", "unix:" + sock},
			&Env{Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: &errb})
	}()
	for i := 0; i < 500; i++ {
		if testenv.UnixListening(sock) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	dumpable, err := processDumpable(t)
	var core unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_CORE, &core)
	status, _ := os.ReadFile("/proc/self/status")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d: %s", code, errb.String())
	}
	if err != nil || dumpable != 0 {
		t.Errorf("serve left the process dumpable (%d, %v)", dumpable, err)
	}
	if core.Cur != 0 {
		t.Errorf("core limit %d, want 0", core.Cur)
	}
	// CAP_IPC_LOCK is capability 14; with it mlockall cannot fail for
	// lack of RLIMIT_MEMLOCK.
	ipcLock := false
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			var caps uint64
			fmt.Sscanf(strings.TrimSpace(v), "%x", &caps)
			ipcLock = caps&(1<<14) != 0
		}
	}
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmLck:") {
			locked := strings.TrimSpace(strings.TrimPrefix(l, "VmLck:")) != "0 kB"
			if !locked && ipcLock {
				t.Errorf("serve with CAP_IPC_LOCK did not lock memory: %s", l)
			}
			t.Logf("%s (mlockall is best effort without CAP_IPC_LOCK; have it: %v)", l, ipcLock)
		}
	}
}
