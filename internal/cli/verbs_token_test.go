package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/swtpmtest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/token"
)

// tokenTool runs a tool with env added, bounded, and returns its
// combined output.
func tokenTool(env []string, stdin []byte, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustTool(t *testing.T, env []string, stdin []byte, name string, args ...string) string {
	t.Helper()
	out, err := tokenTool(env, stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

// startTestSwtpm starts swtpm on free loopback ports (internal/swtpmtest)
// and returns its TCTI in systemd's spelling.
func startTestSwtpm(t *testing.T) string {
	t.Helper()
	return swtpmtest.Start(t, "").TCTI
}

// extendPCR7 extends PCR 7 (sha256) with a random digest through tpm2-tools.
func extendPCR7(t *testing.T, tcti string) {
	t.Helper()
	tool := testenv.Need(t, "tpm2_pcrextend", "tpm2-tools")
	var d [32]byte
	rand.Read(d[:])
	mustTool(t, []string{"TPM2TOOLS_TCTI=" + tcti}, nil, tool, "7:sha256="+hex.EncodeToString(d[:]))
}

// startTestTang runs Debian's tangd under socat on loopback with fresh
// keys and returns its URL and a stop function; the whole process group
// is killed at the end too.
func startTestTang(t *testing.T) (string, func()) {
	t.Helper()
	socat := testenv.Need(t, "socat", "socat")
	const tangd = "/usr/libexec/tangd"
	if _, err := os.Stat(tangd); err != nil {
		testenv.Missing(t, "%s (apt package tang): %v", tangd, err)
	}
	dir := t.TempDir()
	mustTool(t, nil, nil, "/usr/libexec/tangd-keygen", dir)
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		var out bytes.Buffer
		cmd := exec.Command(socat, fmt.Sprintf("TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork", port), "EXEC:"+tangd+" "+dir)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		t.Cleanup(stop)
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		for deadline := time.Now().Add(30 * time.Second); ; {
			select {
			case <-exited:
				goto retry
			default:
			}
			if rsp, err := http.Get(url + "/adv"); err == nil {
				rsp.Body.Close()
				if rsp.StatusCode == 200 {
					return url, stop
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("tang did not answer within 30 s: %s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	retry:
	}
	t.Fatal("tang could not start on a free port")
	return "", nil
}

// runPrompt is run with a terminal whose prompt answers with answer and
// counts how often it was asked.
func runPrompt(t *testing.T, answer []byte, asked *int, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb, StdinIsTerminal: true,
		Prompt: func(string) ([]byte, error) { *asked++; return bytes.Clone(answer), nil }}
	code := Main(context.Background(), args, env)
	return code, out.String(), errb.String()
}

// tokenImage is a small LUKS2 image cryptsetup formatted (PBKDF2, 1000
// iterations) with its passphrase in a key file and 1 MiB of random data
// written through blkcrypt.
func tokenImage(t *testing.T) (img, keyFile string, data []byte) {
	t.Helper()
	dir := t.TempDir()
	img = csFormat(t, dir, "tok.img", "luks2", 20<<20, "first passphrase")
	keyFile = img + ".pass0"
	data = randBytes(1 << 20)
	in := writeFile(t, dir, "data", data)
	mustRun(t, nil, "write", "--key-file", keyFile, "--input", in, img)
	return img, keyFile, data
}

// TestTokenOnlyTPM2: a systemd-tpm2 token systemd-cryptenroll enrolls on
// swtpm opens the volume through read --token-only with no prompt, to the
// bytes the passphrase gives; after PCR 7 changes --token-only fails on
// one line without asking, and without --token-only the passphrase is
// asked for instead.
func TestTokenOnlyTPM2(t *testing.T) {
	tcti := startTestSwtpm(t)
	enroll := testenv.Need(t, "systemd-cryptenroll", "systemd")
	extendPCR7(t, tcti) // else systemd warns that PCR 7 is unset
	img, kf, data := tokenImage(t)
	mustTool(t, nil, nil, enroll, "--tpm2-device="+tcti, "--tpm2-pcrs=7", "--unlock-key-file="+kf, img)

	asked := 0
	code, out, errs := runPrompt(t, []byte("wrong"), &asked, "read", "--token-only", "--tpm2-device", tcti, "--length", "1M", img)
	if code != 0 || asked != 0 {
		t.Fatalf("read --token-only: exit %d, %d prompts: %s", code, asked, errs)
	}
	if !bytes.Equal([]byte(out), data) {
		t.Fatal("read --token-only gave other bytes than were written with the passphrase")
	}
	// test-passphrase goes through the same token step.
	if code, _, errs := runPrompt(t, []byte("wrong"), &asked, "test-passphrase", "--token-only", "--tpm2-device", tcti, img); code != 0 || asked != 0 {
		t.Fatalf("test-passphrase --token-only: exit %d, %d prompts: %s", code, asked, errs)
	}

	extendPCR7(t, tcti)
	code, out, errs = runPrompt(t, []byte("first passphrase"), &asked, "read", "--token-only", "--tpm2-device", tcti, "--length", "1M", img)
	if code == 0 || asked != 0 || out != "" {
		t.Fatalf("read --token-only after PCR 7 changed: exit %d, %d prompts, %d bytes out", code, asked, len(out))
	}
	if lines := strings.Count(strings.TrimSpace(errs), "\n"); lines != 0 || !strings.Contains(errs, "PCR") {
		t.Errorf("want one line naming the PCR mismatch, got %q", errs)
	}
	// Without --token-only the token fails and the passphrase is asked for.
	code, out, errs = runPrompt(t, []byte("first passphrase"), &asked, "read", "--tpm2-device", tcti, "--length", "1M", img)
	if code != 0 || asked != 1 || !bytes.Equal([]byte(out), data) {
		t.Fatalf("read falling back to a passphrase: exit %d, %d prompts: %s", code, asked, errs)
	}
}

// TestBindTangCLI: blkcrypt bind IMAGE tang CONFIG -y -k K makes a binding
// clevis luks pass decrypts to a passphrase cryptsetup accepts for the
// keyslot; list prints clevis luks list's line, read --token-only opens
// it, unbind removes it.
func TestBindTangCLI(t *testing.T) {
	url, stopTang := startTestTang(t)
	clevis := testenv.Need(t, "clevis", "clevis")
	testenv.Need(t, "jose", "jose")
	img, kf, data := tokenImage(t)
	cfg := `{"url":"` + url + `"}`
	mustRun(t, nil, "bind", img, "tang", cfg, "-y", "-k", kf)

	listing := mustRun(t, nil, "list", img)
	m := regexp.MustCompile(`^(\d+): tang '(.*)'\n$`).FindStringSubmatch(listing)
	if m == nil || m[2] != cfg {
		t.Fatalf("list: %q", listing)
	}
	slot := m[1]
	if want := mustTool(t, nil, nil, clevis, "luks", "list", "-d", img); want != listing {
		t.Errorf("list %q, clevis luks list %q", listing, want)
	}
	pass := mustTool(t, nil, nil, clevis, "luks", "pass", "-d", img, "-s", slot)
	if pass == "" {
		t.Fatal("clevis luks pass printed nothing")
	}
	mustCS(t, "open", "--test-passphrase", "--key-slot", slot, "--key-file", writeFile(t, t.TempDir(), "pass", []byte(pass)), img)

	asked := 0
	code, out, errs := runPrompt(t, nil, &asked, "read", "--token-only", "--length", "1M", img)
	if code != 0 || asked != 0 || !bytes.Equal([]byte(out), data) {
		t.Fatalf("read --token-only through tang: exit %d, %d prompts: %s", code, asked, errs)
	}

	// add-key takes the existing passphrase from the token.
	newKey := writeFile(t, t.TempDir(), "new", []byte("added through tang"))
	if code, _, errs := runPrompt(t, nil, &asked, "add-key", "--token-only", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", img, newKey); code != 0 || asked != 0 {
		t.Fatalf("add-key --token-only: exit %d, %d prompts: %s", code, asked, errs)
	}
	mustCS(t, "open", "--test-passphrase", "--key-file", newKey, img)

	// With tang down: --token-only fails on one line without asking;
	// otherwise the passphrase is asked for.
	stopTang()
	code, out, errs = runPrompt(t, []byte("first passphrase"), &asked, "read", "--token-only", "--length", "1M", img)
	if code != ExitPermission || asked != 0 || out != "" || !strings.Contains(errs, "clevis") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("read --token-only with tang down: exit %d, %d prompts: %q", code, asked, errs)
	}
	code, out, errs = runPrompt(t, []byte("first passphrase"), &asked, "read", "--length", "1M", img)
	if code != 0 || asked != 1 || !bytes.Equal([]byte(out), data) {
		t.Fatalf("read with tang down: exit %d, %d prompts: %s", code, asked, errs)
	}

	mustRun(t, nil, "unbind", "-s", slot, img)
	if l := mustRun(t, nil, "list", img); l != "" {
		t.Errorf("list after unbind: %q", l)
	}
	if _, err := cryptsetup(t, "open", "--test-passphrase", "--key-slot", slot, "--key-file", writeFile(t, t.TempDir(), "pass", []byte(pass)), img); err == nil {
		t.Error("cryptsetup still opens the unbound keyslot")
	}
}

// TestEnrollRecoveryCLI: enroll --recovery-key prints a key cryptsetup
// accepts, under a systemd-recovery token; a second enrollment with
// --wipe-slot=recovery,password removes the first key's keyslot and token
// and the passphrase's keyslot, and cryptsetup takes neither any more.
func TestEnrollRecoveryCLI(t *testing.T) {
	img, kf, _ := tokenImage(t)
	modhex := regexp.MustCompile(`^[cbdefghijklnrtuv]{8}(-[cbdefghijklnrtuv]{8}){7}$`)
	dir := t.TempDir()
	first := strings.TrimSpace(mustRun(t, nil, "enroll", "--recovery-key", "--unlock-key-file", kf, img))
	if !modhex.MatchString(first) {
		t.Fatalf("enroll --recovery-key printed %q", first)
	}
	firstFile := writeFile(t, dir, "rk1", []byte(first))
	mustCS(t, "open", "--test-passphrase", "--key-file", firstFile, img)

	second := strings.TrimSpace(mustRun(t, nil, "enroll", "--recovery-key", "--unlock-key-file", kf, "--wipe-slot", "recovery,password", img))
	if !modhex.MatchString(second) || second == first {
		t.Fatalf("second enroll --recovery-key printed %q", second)
	}
	mustCS(t, "open", "--test-passphrase", "--key-file", writeFile(t, dir, "rk2", []byte(second)), img)
	for _, gone := range []string{kf, firstFile} {
		if _, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", gone, img); err == nil {
			t.Errorf("--wipe-slot recovery,password left the keyslot of %s", filepath.Base(gone))
		}
	}
	dump := mustCS(t, "luksDump", img)
	if n := strings.Count(dump, "systemd-recovery"); n != 1 {
		t.Errorf("want one systemd-recovery token in cryptsetup's dump, got %d:\n%s", n, dump)
	}
}

// TestEnrollTPM2CLI: what blkcrypt enroll --tpm2-device seals on swtpm
// unseals with tpm2-tools alone (the shared judge) to a passphrase
// cryptsetup accepts for the new keyslot, and opens through read
// --token-only; a PIN token opens with --tpm2-pin-file and refuses a
// wrong PIN without asking for a passphrase.
func TestEnrollTPM2CLI(t *testing.T) {
	tcti := startTestSwtpm(t)
	extendPCR7(t, tcti)
	img, kf, data := tokenImage(t)
	code, _, errs := run(t, nil, "enroll", "--tpm2-device", tcti, "--tpm2-pcrs", "7", "--unlock-key-file", kf, img)
	m := regexp.MustCompile(`key slot (\d+)\.`).FindStringSubmatch(errs)
	if code != 0 || m == nil {
		t.Fatalf("enroll --tpm2-device: exit %d: %s", code, errs)
	}
	slot := m[1]

	testenv.Need(t, "tpm2_unseal", "tpm2-tools")
	testenv.Need(t, "python3", "python3")
	script := filepath.Join(testenv.ModuleRoot(t), "..", "shared", "judges", "tpm2-systemd-unlock.sh")
	if _, err := os.Stat(script); err != nil {
		testenv.Missing(t, "judge %s: %v", script, err)
	}
	pass := strings.TrimSpace(mustTool(t, nil, nil, "bash", script, img, "0", tcti))
	mustCS(t, "open", "--test-passphrase", "--key-slot", slot, "--key-file", writeFile(t, t.TempDir(), "pass", []byte(pass)), img)

	asked := 0
	code, out, errs := runPrompt(t, nil, &asked, "read", "--token-only", "--tpm2-device", tcti, "--length", "1M", img)
	if code != 0 || asked != 0 || !bytes.Equal([]byte(out), data) {
		t.Fatalf("read --token-only: exit %d, %d prompts: %s", code, asked, errs)
	}

	// A PIN token beside it: the PIN from a file; a wrong one refused.
	dir := t.TempDir()
	pin := writeFile(t, dir, "pin", []byte("1234\n"))
	mustRun(t, nil, "enroll", "--tpm2-device", tcti, "--tpm2-with-pin", "--tpm2-pin-file", pin, "--unlock-key-file", kf, img)
	code, out, errs = runPrompt(t, nil, &asked, "read", "--token-only", "--token-id", "1", "--tpm2-device", tcti, "--tpm2-pin-file", pin, "--length", "1M", img)
	if code != 0 || asked != 0 || !bytes.Equal([]byte(out), data) {
		t.Fatalf("read --token-only with a PIN file: exit %d, %d prompts: %s", code, asked, errs)
	}
	bad := writeFile(t, dir, "bad", []byte("4321"))
	code, _, errs = runPrompt(t, nil, &asked, "read", "--token-only", "--token-id", "1", "--tpm2-device", tcti, "--tpm2-pin-file", bad, "--length", "1M", img)
	if code == 0 || asked != 0 || !strings.Contains(errs, "PIN") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("read --token-only with a wrong PIN: exit %d, %d prompts: %q", code, asked, errs)
	}
	// The PIN asked on the terminal when no file is given.
	code, out, errs = runPrompt(t, []byte("1234"), &asked, "read", "--token-only", "--token-id", "1", "--tpm2-device", tcti, "--length", "1M", img)
	if code != 0 || asked != 1 || !bytes.Equal([]byte(out), data) {
		t.Fatalf("read --token-only with a PIN prompt: exit %d, %d prompts: %s", code, asked, errs)
	}
}

// TestTokenFlagErrors: wrong uses of the token flags and verbs are one-line
// errors with cryptsetup's exit codes, and change nothing.
func TestTokenFlagErrors(t *testing.T) {
	img, kf, _ := tokenImage(t)
	before := fileSum(t, img)
	dir := t.TempDir()
	plainKey := writeFile(t, dir, "plain", randBytes(64))
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"read", "--token-only", "--key-file", kf, img}, ExitUsage, "--token-only"},
		{[]string{"read", "--token-only", img}, ExitPermission, "no usable token"},
		{[]string{"read", "--token-only", "--token-id", "40", img}, ExitUsage, "0..31"},
		{[]string{"read", "--token-only", "--type", "plain", "--key-file", plainKey, img}, ExitUsage, "no tokens"},
		{[]string{"test-passphrase", "--token-only", img}, ExitPermission, "no usable token"},
		{[]string{"enroll", img}, ExitUsage, "nothing to do"},
		{[]string{"enroll", "--tpm2-device", "swtpm:host=127.0.0.1,port=1", "--tpm2-pcrs", "7+99", "--unlock-key-file", kf, img}, ExitUsage, "PCR"},
		{[]string{"enroll", "--recovery-key", "--unlock-key-file", writeFile(t, dir, "wrong", []byte("wrong")), img}, ExitPermission, ""},
		{[]string{"enroll", "--wipe-slot", "9", "--unlock-key-file", kf, img}, ExitUsage, "wipe-slot"},
		{[]string{"enroll", "--fido2-device", "auto", "--fido2-with-client-pin", "maybe", "--unlock-key-file", kf, img}, ExitUsage, "--fido2-with-client-pin"},
		{[]string{"enroll", "--fido2-device", "auto", "--recovery-key", "--unlock-key-file", kf, img}, ExitUsage, "only one"},
		{[]string{"enroll", "--fido2-device", "auto", "--unlock-key-file", kf, img}, ExitUsage, "--fido2-pin-file"},
		{[]string{"enroll", "--fido2-device", filepath.Join(dir, "no-hidraw"), "--fido2-with-client-pin=no", "--unlock-key-file", kf, img}, ExitDevice, "no-hidraw"},
		{[]string{"read", "--token-only", "--fido2-device", filepath.Join(dir, "no-hidraw"), img}, ExitPermission, "no usable token"},
		{[]string{"bind", img, "nosuchpin", "{}", "-k", kf}, 1, "nosuchpin"},
		{[]string{"bind", img, "tang", "{not json", "-k", kf}, 1, ""},
		{[]string{"bind", img, "tang"}, ExitUsage, "DEVICE PIN CONFIG"},
		{[]string{"unbind", img}, ExitUsage, "-s SLOT"},
		{[]string{"unbind", "-s", "0", img}, 1, "no clevis binding"},
	} {
		code, _, errs := run(t, nil, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d (want %d), stderr %q (want one line with %q)", c.args, code, c.code, errs, c.want)
		}
	}
	if fileSum(t, img) != before {
		t.Error("a failed command changed the image")
	}
	if l := mustRun(t, nil, "list", img); l != "" {
		t.Errorf("list of an image without bindings: %q", l)
	}
}

// FuzzTokenArgs: --tpm2-pcrs never panics; every PCR token.ParsePCRs
// accepts is in 0..23. (The token JSON --wipe-slot reads is fuzzed in
// package token, FuzzWipeTokenJSON.)
func FuzzTokenArgs(f *testing.F) {
	for _, s := range []string{"7", "0+7", "0,7,14", "", "+", "99", "-1", `{"type":"systemd-tpm2","keyslots":["1","x"]}`, `{"keyslots":[1]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if pcrs, err := token.ParsePCRs(s); err == nil {
			for _, p := range pcrs {
				if p < 0 || p > 23 {
					t.Fatalf("ParsePCRs(%q) accepted PCR %d", s, p)
				}
			}
		}
	})
}
