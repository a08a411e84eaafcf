package token

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/swtpmtest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// swtpm is a software TPM the test started, reached at tcti.
type swtpm struct {
	tcti string
	port int
}

// startSwtpm starts swtpm on free loopback ports with its state in a fresh
// directory (internal/swtpmtest), and kills it when the test ends.
func startSwtpm(t *testing.T) *swtpm {
	t.Helper()
	s := swtpmtest.Start(t, "")
	return &swtpm{tcti: s.TCTI, port: s.Port}
}

// run runs a tool with env added, failing the test with its output.
func run(t *testing.T, env []string, stdin []byte, name string, args ...string) string {
	t.Helper()
	out, err := runErr(env, stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(env []string, stdin []byte, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// extendPCR7 extends PCR 7 of the SHA-256 bank with a random digest.
func (s *swtpm) extendPCR7(t *testing.T) {
	t.Helper()
	tool := testenv.Need(t, "tpm2_pcrextend", "tpm2-tools")
	var d [32]byte
	rand.Read(d[:])
	run(t, []string{"TPM2TOOLS_TCTI=" + s.tcti}, nil, tool, "7:sha256="+hex.EncodeToString(d[:]))
}

// fixture is a LUKS2 image made by cryptsetup, with its first passphrase
// in a key file.
type fixture struct {
	img, keyFile string
	pass         []byte
}

func newImage(t *testing.T) *fixture {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	f := &fixture{img: filepath.Join(dir, "img"), keyFile: filepath.Join(dir, "key"), pass: []byte("first passphrase")}
	if err := os.WriteFile(f.keyFile, f.pass, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f.img, 32<<20); err != nil {
		t.Fatal(err)
	}
	run(t, nil, nil, cs, "luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", f.keyFile, f.img)
	return f
}

// cryptsetupAccepts reports whether cryptsetup opens the image with pass
// (given through stdin, never argv).
func (f *fixture) cryptsetupAccepts(t *testing.T, pass []byte) bool {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	out, err := runErr(nil, pass, cs, "open", "--test-passphrase", "--key-file", "-", f.img)
	if err != nil && !strings.Contains(out, "No key available") {
		t.Logf("cryptsetup: %v: %s", err, out)
	}
	return err == nil
}

func (f *fixture) open(t *testing.T) *blkcrypt.LUKS {
	t.Helper()
	h, err := blkcrypt.OpenLUKS(context.Background(), f.img, blkcrypt.LUKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// cryptenroll runs systemd-cryptenroll on the image, authorised by its key file.
func (f *fixture) cryptenroll(t *testing.T, env []string, args ...string) string {
	t.Helper()
	tool := testenv.Need(t, "systemd-cryptenroll", "systemd")
	return run(t, env, nil, tool, append(append([]string{"--unlock-key-file=" + f.keyFile}, args...), f.img)...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// judge runs the shared tpm2-tools unsealer on token id and returns the
// passphrase it prints.
func judge(t *testing.T, img string, id int, tcti string) []byte {
	t.Helper()
	testenv.Need(t, "tpm2_unseal", "tpm2-tools")
	testenv.Need(t, "python3", "python3")
	testenv.Need(t, "bash", "bash")
	script := filepath.Join(testenv.ModuleRoot(t), "..", "shared", "judges", "tpm2-systemd-unlock.sh")
	if _, err := os.Stat(script); err != nil {
		testenv.Missing(t, "judge %s: %v", script, err)
	}
	out, err := exec.Command("bash", script, img, strconv.Itoa(id), tcti).Output()
	if err != nil {
		t.Fatalf("judge: %v", err)
	}
	return bytes.TrimSpace(out)
}

// TestUnlockSystemdTPM2: tokens systemd-cryptenroll 252 seals on swtpm
// (PCR 7, without and with a PIN) unseal through Unlock to the passphrase
// cryptsetup accepts and the tpm2-tools judge unseals too; a wrong or
// missing PIN is refused naming the token, and after PCR 7 changes every
// token is refused with a PCR message.
func TestUnlockSystemdTPM2(t *testing.T) {
	tpm := startSwtpm(t)
	tpm.extendPCR7(t)
	f := newImage(t)
	f.cryptenroll(t, nil, "--tpm2-device="+tpm.tcti, "--tpm2-pcrs=7")
	// systemd 252 reads the new PIN from $NEWPIN (documented in
	// systemd-cryptenroll(1)); $PIN is the unlocking side's.
	f.cryptenroll(t, []string{"NEWPIN=4711"}, "--tpm2-device="+tpm.tcti, "--tpm2-pcrs=7", "--tpm2-with-pin=yes")
	h := f.open(t)
	ctx := ctxT(t)

	pass, id, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti})
	if err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if id != 0 {
		t.Errorf("token %d unlocked, want 0 (the one without a PIN)", id)
	}
	if !f.cryptsetupAccepts(t, pass) {
		t.Fatal("cryptsetup refuses the passphrase Unlock returned")
	}
	if j := judge(t, f.img, 0, tpm.tcti); !bytes.Equal(j, pass) {
		t.Fatal("the tpm2-tools judge unseals another passphrase")
	}
	v, err := blkcrypt.Open(ctx, f.img, blkcrypt.OpenOptions{Passphrase: pass})
	if err != nil {
		t.Fatalf("blkcrypt.Open with the passphrase: %v", err)
	}
	v.Close()

	one := 1
	pass1, id, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &one, PIN: []byte("4711")})
	if err != nil || id != 1 {
		t.Fatalf("Unlock of the PIN token: %d, %v", id, err)
	}
	if !f.cryptsetupAccepts(t, pass1) || bytes.Equal(pass1, pass) {
		t.Fatal("the PIN token's passphrase is not its keyslot's")
	}
	_, _, err = Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &one})
	if !errors.Is(err, ErrNeedPIN) || !strings.Contains(err.Error(), "token 1") {
		t.Fatalf("PIN token without a PIN: %v", err)
	}
	_, _, err = Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &one, PIN: []byte("0000")})
	if !errors.Is(err, ErrWrongPIN) || !strings.Contains(err.Error(), "token 1") || !strings.Contains(err.Error(), "before the TPM locks out") {
		t.Fatalf("wrong PIN: %v", err)
	}
	t.Logf("wrong PIN: %v", err)

	tpm.extendPCR7(t)
	_, _, err = Unlock(ctx, h, Options{TPM2Device: tpm.tcti, PIN: []byte("4711")})
	if !errors.Is(err, ErrPCRMismatch) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("after PCR 7 changed: %v", err)
	}
	for _, id := range []string{"token 0", "token 1"} {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("the PCR error does not name %s: %v", id, err)
		}
	}
	t.Logf("after PCR 7 changed: %v", err)
}

// TestSwtpmUnixSocket: swtpm:path=SOCKET reaches a swtpm serving on a Unix
// socket; a token sealed there unseals there.
func TestSwtpmUnixSocket(t *testing.T) {
	bin := testenv.Need(t, "swtpm", "swtpm")
	dir := t.TempDir()
	sock, ctrl := filepath.Join(dir, "tpm.sock"), filepath.Join(dir, "ctrl.sock")
	var out bytes.Buffer
	cmd := exec.Command(bin, "socket", "--tpm2", "--server", "type=unixio,path="+sock, "--ctrl", "type=unixio,path="+ctrl,
		"--flags", "not-need-init,startup-clear", "--tpmstate", "dir="+dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(time.Minute); !testenv.UnixListening(sock); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("swtpm exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("swtpm did not listen within a minute: %s", out.String())
		}
	}
	f := newImage(t)
	h := f.open(t)
	ctx := ctxT(t)
	tcti := "swtpm:path=" + sock
	if _, _, err := EnrollTPM2(ctx, h, TPM2EnrollOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, TPM2Device: tcti}); err != nil {
		t.Fatal(err)
	}
	pass, _, err := Unlock(ctx, h, Options{TPM2Device: tcti})
	if err != nil || !f.cryptsetupAccepts(t, pass) {
		t.Fatalf("Unlock over the Unix socket: %v", err)
	}
}
