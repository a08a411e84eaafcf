package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestFormatIntegrityCLI: format --integrity makes a LUKS2 volume with
// authenticated sectors that cryptsetup describes as asked (the
// segment's integrity, the volume key with the HMAC's key added) and
// unlocks; the new volume reads as zeros. A bad --integrity, or one for
// LUKS1, is refused with exit 1 and writes nothing.
func TestFormatIntegrityCLI(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("pw"))
	for _, c := range []struct {
		name, cipher, integ string
		bits                []string
		dumpInteg, dumpKey  string
	}{
		{"hmac", "aes-xts-plain64", "hmac-sha256", nil, "hmac(sha256)", "768 bits"},
		{"hmac512", "aes-cbc-essiv:sha256", "hmac-sha512", []string{"-s", "256"}, "hmac(sha512)", "768 bits"},
		{"gcm", "aes-gcm-random", "aead", nil, "aead", "256 bits"},
	} {
		img := filepath.Join(dir, c.name+".img")
		args := append([]string{"format", "-q", "--key-file", pass, "--size", "4M", "--offset", "2048", "--sector-size", "4096",
			"--cipher", c.cipher, "--integrity", c.integ}, fmtKDF...)
		if code, _, e := run(t, nil, append(append(args, c.bits...), img)...); code != 0 {
			t.Fatalf("%s: format: exit %d: %s", c.name, code, e)
		}
		out, err := cryptsetup(t, "luksDump", img)
		if err != nil {
			t.Fatalf("%s: cryptsetup luksDump: %v\n%s", c.name, err, out)
		}
		if !strings.Contains(out, "integrity: "+c.dumpInteg+"\n") || !strings.Contains(out, "cipher: "+c.cipher+"\n") ||
			!strings.Contains(out, "Key:        "+c.dumpKey) {
			t.Errorf("%s: cryptsetup luksDump:\n%s", c.name, out)
		}
		if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass, img); err != nil {
			t.Errorf("%s: cryptsetup open --test-passphrase: %v\n%s", c.name, err, out)
		}
		code, data, e := run(t, nil, "read", "--key-file", pass, img)
		if code != 0 || len(data) == 0 || strings.Trim(data, "\x00") != "" {
			t.Errorf("%s: read: exit %d, %d bytes, not all zeros: %s", c.name, code, len(data), e)
		}
	}
	before := bytes.Repeat([]byte{7}, 1<<20)
	for _, bad := range [][]string{{"--integrity", "md5"}, {"--integrity", "aead", "--type", "luks1"}, {"--integrity", "aead", "--cipher", "aes-xts-plain64"}} {
		img := writeFile(t, dir, "bad.img", before)
		args := append(append([]string{"format", "-q", "--key-file", pass}, fmtKDF...), append(bad, img)...)
		if code, _, e := run(t, nil, args...); code != ExitUsage || strings.Count(e, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want %d and one line", bad, code, e, ExitUsage)
		}
		if got, _ := os.ReadFile(img); !bytes.Equal(got, before) {
			t.Errorf("%v: the image was written", bad)
		}
	}
}

// TestFormatTypeIntegrityCLI: format --type integrity on the command line
// is integritysetup format with its flags (--integrity, --sector-size,
// --tag-size, the key file): integritysetup dump reads the superblock
// asked for, and read with the same --integrity and key reads the new
// volume as zeros (its tags were written), while a wrong key fails on the
// first sector.
func TestFormatTypeIntegrityCLI(t *testing.T) {
	isetup := testenv.Need(t, "integritysetup", "cryptsetup-bin")
	dir := t.TempDir()
	key := writeFile(t, dir, "k", bytes.Repeat([]byte{1}, 32))
	other := writeFile(t, dir, "o", bytes.Repeat([]byte{2}, 32))
	img := writeFile(t, dir, "i.img", make([]byte, 2<<20))
	if code, _, e := run(t, nil, "format", "--type", "integrity", "-q", "--integrity", "hmac-sha256", "--integrity-key-file", key,
		"--sector-size", "4096", "--tag-size", "16", img); code != 0 {
		t.Fatalf("format --type integrity: exit %d: %s", code, e)
	}
	out, err := exec.Command(isetup, "dump", img).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sector_size 4096") || !strings.Contains(string(out), "tag_size 16") {
		t.Fatalf("integritysetup dump: %v\n%s", err, out)
	}
	open := []string{"read", "--type", "integrity", "--integrity", "hmac-sha256", "--tag-size", "16", "--integrity-key-file"}
	code, data, e := run(t, nil, append(open, key, img)...)
	if code != 0 || len(data) == 0 || strings.Trim(data, "\x00") != "" {
		t.Errorf("read: exit %d, %d bytes, not all zeros: %s", code, len(data), e)
	}
	if code, _, _ := run(t, nil, append(open, other, img)...); code != ExitDevice {
		t.Errorf("read with another key: exit %d, want %d", code, ExitDevice)
	}
}
