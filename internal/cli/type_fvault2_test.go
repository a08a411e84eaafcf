package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFvault2Fixture: cryptsetup's fvault2-compat-test expectations
// through the CLI: the dump (type detected), the volume key with the
// passphrase as a key file, the SHA-256 of the logical volume (read with
// the passphrase, and with the dumped volume key), and exit 2 for a wrong
// passphrase.
func TestFvault2Fixture(t *testing.T) {
	img := filepath.Join(unpack(t, "fvault2-images.tar.xz"), "fvault2-images", "small")
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", []byte("heslo123"))

	code, out, stderr := run(t, nil, "dump", img)
	if code != 0 {
		t.Fatalf("dump: exit %d %s", code, stderr)
	}
	for _, l := range []string{
		"Physical volume UUID: \tfc52bfae-5a1f-4f9b-b3a6-f33303a0e401\n",
		"Family UUID:          \t33a76caa-1481-4bc5-8d04-1ac1707c19c0\n",
		"Logical volume offset:\t67108864 [bytes]\n",
		"Logical volume size:  \t167772160 [bytes]\n",
		"Cipher:               \taes\n",
		"Cipher mode:          \txts-plain64\n",
		"PBKDF2 iterations:    \t204222\n",
		"PBKDF2 salt:          \t2c 24 9e db 66 63 d6 fb cc 79 05 b7 a4 d7 27 52 \n",
	} {
		if !strings.Contains(out, l) {
			t.Errorf("dump lacks %q:\n%s", l, out)
		}
	}
	vkf := filepath.Join(dir, "vk")
	code, out, stderr = run(t, nil, "dump", img, "--dump-volume-key", "--key-file", pass, "--volume-key-file", vkf, "-q")
	if code != 0 || !strings.Contains(out, "Volume key:       \t20 73 4d 33 89 21 27 74 d7 61 0c 29 d7 32 88 09 16 f3 be 14 c4 b1 2a c7 aa f0 7e 5c cc 77 b3 19 \n") {
		t.Fatalf("dump --dump-volume-key: exit %d\n%s%s", code, out, stderr)
	}
	if b, _ := os.ReadFile(vkf); len(b) != 32 {
		t.Fatalf("volume key file holds %d bytes", len(b))
	}
	const want = "2c662e36c0f7e2f5583e6a939bbcbdc660805692d0fccaa45ad4052beb3b8e18"
	for _, args := range [][]string{
		{"read", img, "--key-file", pass},
		{"read", img, "--type", "fvault2", "--volume-key-file", vkf},
	} {
		if code, sum, stderr := runHash(t, nil, args...); code != 0 || sum != want {
			t.Errorf("%v: exit %d, SHA-256 %s (%s)", args[2:], code, sum, stderr)
		}
	}
	if code, sum, stderr := runHash(t, []byte("heslo123\n"), "read", img, "--length", "1048576", "--offset-bytes", "4096"); code != 0 || sum == "" {
		t.Errorf("passphrase on stdin: exit %d %s", code, stderr)
	}
	for _, verb := range []string{"read", "test-passphrase"} {
		if code, _, stderr := runHash(t, []byte("heslo124\n"), verb, img); code != 2 {
			t.Errorf("%s with a wrong passphrase: exit %d, want 2 (%s)", verb, code, stderr)
		}
	}
	if code, _, stderr := run(t, nil, "open", "--test-passphrase", img, "--key-file", pass); code != 0 {
		t.Errorf("open --test-passphrase: exit %d %s", code, stderr)
	}
	if out, err := exec.Command("cryptsetup", "fvault2Dump", img).Output(); err == nil {
		_, mine, _ := run(t, nil, "dump", img)
		if string(out) != strings.Replace(mine, img, img, 1) {
			t.Errorf("dump differs from cryptsetup's:\n%s--- cryptsetup:\n%s", mine, out)
		}
	}
	// Writes need --fvault2-read-write; with it they read back, on a copy.
	before := fileSum(t, img)
	if code, _, stderr := run(t, []byte("x"), "write", img, "--key-file", pass, "--input", pass); code == 0 || !strings.Contains(stderr, "read-only") {
		t.Errorf("write without --fvault2-read-write: exit %d %q", code, stderr)
	}
	if fileSum(t, img) != before {
		t.Fatal("a refused write changed the image")
	}
	cp := filepath.Join(dir, "copy")
	if out, err := exec.Command("cp", "--sparse=always", img, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	data := randBytes(1<<20 + 100)
	in := writeFile(t, dir, "data", data)
	if code, _, stderr := run(t, nil, "write", cp, "--volume-key-file", vkf, "--fvault2-read-write", "--input", in, "--offset-bytes", "1000"); code != 0 {
		t.Fatalf("write: exit %d %s", code, stderr)
	}
	code, got, stderr := run(t, nil, "read", cp, "--key-file", pass, "--offset-bytes", "1000", "--length", "1048676")
	if code != 0 || got != string(data) {
		t.Fatalf("read back after write: exit %d %s", code, stderr)
	}
	if code, _, _ := run(t, nil, "dump", cp); code != 0 {
		t.Fatal("dump after write")
	}
}
