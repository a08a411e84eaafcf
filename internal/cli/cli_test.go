package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
)

// run executes blkcrypt in-process and returns exit code, stdout, stderr.
func run(t *testing.T, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdin: bytes.NewReader(stdin), Stdout: &out, Stderr: &errb}
	code := Main(context.Background(), args, env)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func fileSum(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func plainIV(n uint64) []byte {
	iv := make([]byte, 16)
	binary.LittleEndian.PutUint64(iv, n)
	return iv
}

// TestPlainAgainstOpenSSL: a plain volume written by blkcrypt decrypts with
// OpenSSL-computed sectors, and sectors OpenSSL encrypted read back through
// blkcrypt — with a data offset, an IV skip and 4096-byte sectors.
func TestPlainAgainstOpenSSL(t *testing.T) {
	o := oracle.New(t)
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(1<<20))
	vk := randBytes(64)
	vkf := writeFile(t, dir, "vk", vk)
	data := randBytes(256 << 10)
	in := writeFile(t, dir, "data", data)
	const offsetSectors, skip, ss, at = 8, 16, 4096, 8192
	common := []string{"--type", "plain", "--cipher", "aes-xts-plain64", "--key-size", "512", "--volume-key-file", vkf,
		"--offset", "8", "--skip", "16", "--sector-size", "4096"}
	if code, _, stderr := run(t, nil, append([]string{"write", img, "-i", in, "--offset-bytes", "8192"}, common...)...); code != 0 {
		t.Fatalf("write: %d %s", code, stderr)
	}
	raw, _ := os.ReadFile(img)
	for i := 0; i < len(data)/ss; i++ {
		pos := offsetSectors*512 + at + i*ss
		n := uint64(skip + (at+i*ss)/512)
		pt, err := o.Crypt("aes-256-xts", vk, plainIV(n), raw[pos:pos+ss], false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pt, data[i*ss:(i+1)*ss]) {
			t.Fatalf("sector %d: OpenSSL decrypts blkcrypt's write to something else", i)
		}
	}
	// The reverse: OpenSSL encrypts, blkcrypt reads.
	want := randBytes(64 << 10)
	for i := 0; i < len(want)/ss; i++ {
		pos := offsetSectors*512 + i*ss
		ct, err := o.Crypt("aes-256-xts", vk, plainIV(uint64(skip+i*ss/512)), want[i*ss:(i+1)*ss], true)
		if err != nil {
			t.Fatal(err)
		}
		copy(raw[pos:], ct)
	}
	os.WriteFile(img, raw, 0o600)
	code, out, stderr := run(t, nil, append([]string{"read", img, "--length", "65536"}, common...)...)
	if code != 0 || out != string(want) {
		t.Fatalf("read: code %d, %d bytes, match %v: %s", code, len(out), out == string(want), stderr)
	}
	// Unaligned read in the middle of a sector.
	code, out, _ = run(t, nil, append([]string{"read", img, "--offset-bytes", "5000", "--length", "3000"}, common...)...)
	if code != 0 || out != string(want[5000:8000]) {
		t.Fatalf("unaligned read: code %d", code)
	}
}

// TestPlainPassphraseAESCBCESSIV checks a passphrase-hashed essiv volume
// against OpenSSL, with the key derived the way cryptsetup derives it.
func TestPlainPassphraseESSIV(t *testing.T) {
	o := oracle.New(t)
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", make([]byte, 64<<10))
	data := randBytes(8192)
	in := writeFile(t, dir, "data", data)
	args := []string{"--type", "plain", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--hash", "sha256"}
	if code, _, e := run(t, []byte("hunter2\n"), append([]string{"write", img, "-i", in}, args...)...); code != 0 {
		t.Fatal(e)
	}
	key := sha256.Sum256([]byte("hunter2")) // cryptsetup: one sha256 round fills a 256-bit key
	salt := sha256.Sum256(key[:])
	raw, _ := os.ReadFile(img)
	for i := 0; i < 16; i++ {
		iv, _ := o.Crypt("aes-256-ecb", salt[:], nil, plainIV(uint64(i)), true)
		pt, err := o.Crypt("aes-256-cbc", key[:], iv, raw[i*512:(i+1)*512], false)
		if err != nil || !bytes.Equal(pt, data[i*512:(i+1)*512]) {
			t.Fatalf("sector %d differs from OpenSSL (%v)", i, err)
		}
	}
}

// TestBadInputExitCodes: every bad parameter exits non-zero with one line
// on stderr and leaves the device unchanged.
func TestBadInputExitCodes(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(64<<10))
	vkf := writeFile(t, dir, "vk", randBytes(64))
	in := writeFile(t, dir, "data", randBytes(4096))
	big := writeFile(t, dir, "big", randBytes(128<<10))
	empty := writeFile(t, dir, "empty", nil)
	before := fileSum(t, img)
	plain := []string{"--type", "plain", "--volume-key-file", vkf, "--key-size", "512"}
	for _, c := range []struct {
		name string
		code int
		args []string
		msg  string
	}{
		{"unaligned iv offset", 1, append([]string{"write", img, "-i", in, "--sector-size", "4096", "--skip", "3"}, plain...), "not a multiple"},
		{"sector size 768", 1, append([]string{"write", img, "-i", in, "--sector-size", "768"}, plain...), "768"},
		{"random IV", 1, append([]string{"write", img, "-i", in, "--cipher", "aes-cbc-random"}, plain...), "integrity"},
		{"wrong key size", 1, []string{"write", img, "-i", in, "--type", "plain", "--volume-key-file", vkf, "--key-size", "200"}, "key"},
		{"unknown cipher", 1, append([]string{"write", img, "-i", in, "--cipher", "nosuch-xts-plain64"}, plain...), "nosuch"},
		{"input too large", 1, append([]string{"write", img, "-i", big}, plain...), "does not fit"},
		{"write past end", 1, append([]string{"write", img, "-i", in, "--offset-bytes", "65000"}, plain...), "does not fit"},
		{"negative offset", 1, append([]string{"write", img, "-i", in, "--offset-bytes", "-1"}, plain...), "negative"},
		{"missing device", 4, append([]string{"write", filepath.Join(dir, "nope"), "-i", in}, plain...), "does not exist"},
		{"directory", 4, append([]string{"write", dir, "-i", in}, plain...), "directory"},
		{"not LUKS", 4, []string{"read", img, "--volume-key-file", vkf}, "not a valid LUKS device"},
		{"empty key file", 1, []string{"write", img, "-i", in, "--type", "plain", "--key-file", empty}, "empty"},
		{"short keyfile-size", 1, []string{"write", img, "-i", in, "--type", "plain", "--key-file", vkf, "--keyfile-size", "100"}, "shorter"},
		{"unknown option", 1, []string{"read", img, "--frobnicate"}, "unknown option"},
		{"unknown action", 1, []string{"frobnicate", img}, "unknown action"},
		{"no device", 1, []string{"read"}, "expected one DEVICE"},
		{"read past end", 1, append([]string{"read", img, "--offset-bytes", "60000", "--length", "10000"}, plain...), "past the end"},
		{"bad number", 1, []string{"read", img, "--keyfile-offset", "abc"}, "not a whole number"},
		{"bad size", 1, []string{"read", img, "--length", "64Q"}, "not a size"},
	} {
		code, _, stderr := run(t, nil, c.args...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d (%s)", c.name, code, c.code, stderr)
		}
		if !strings.HasPrefix(stderr, "blkcrypt: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.msg) {
			t.Errorf("%s: stderr %q, want one line mentioning %q", c.name, stderr, c.msg)
		}
		if fileSum(t, img) != before {
			t.Fatalf("%s: the device changed", c.name)
		}
	}
}

func TestSpeedCommand(t *testing.T) {
	code, out, e := run(t, nil, "speed", "xts(aes)", "--list-drivers")
	if code != 0 || !strings.Contains(out, "xts-aes-") {
		t.Fatalf("list-drivers: %d %q %s", code, out, e)
	}
	lines := strings.Fields(out)
	code, out, e = run(t, nil, "speed", "cbc(aes)", "--driver", "cbc(aes-generic)", "--sec", "0.001")
	if code != 0 || !strings.HasPrefix(out, "testing speed of cbc(aes) (cbc(aes-generic)) encryption\n") || strings.Count(out, "\n") != 22 {
		t.Fatalf("speed: %d %q %s", code, out, e)
	}
	_ = lines
	if code, _, _ := run(t, nil, "speed", "cbc(nosuch)"); code != 1 {
		t.Fatalf("speed of an unknown algorithm exits %d", code)
	}
}

// TestBenchmarkLayout checks the cryptsetup benchmark layout: PBKDF lines,
// the cipher table header and one row per cipher and key size, and the
// engine line.
func TestBenchmarkLayout(t *testing.T) {
	code, out, e := run(t, nil, "benchmark", "--sec", "0.01", "--iter-time", "50", "--pbkdf-memory", "8192")
	if code != 0 {
		t.Fatalf("benchmark: %d %s", code, e)
	}
	for _, want := range []string{"PBKDF2-sha256", "iterations per second for 256-bit key", "argon2id", "#     Algorithm |       Key |      Encryption |      Decryption", "break-even"} {
		if !strings.Contains(out, want) {
			t.Errorf("benchmark output lacks %q:\n%s", want, out)
		}
	}
	rows := regexp.MustCompile(`(?m)^\s+(aes|serpent|twofish)-(cbc|xts)\s+(128|256|512)b\s+[0-9.]+ MiB/s\s+[0-9.]+ MiB/s$`).FindAllString(out, -1)
	if len(rows) != 12 {
		t.Fatalf("%d cipher rows, want 12:\n%s", len(rows), out)
	}
	code, out, _ = run(t, nil, "benchmark", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--sec", "0.01")
	if code != 0 || !strings.Contains(out, "aes-cbc      256b") {
		t.Fatalf("single spec: %d %s", code, out)
	}
	if code, _, _ := run(t, nil, "benchmark", "--cipher", "nosuch-xts-plain64", "--sec", "0.01"); code != 1 {
		t.Fatalf("unknown cipher exits %d", code)
	}
}

// TestDemo runs the README's first command in-process: it must format,
// write, read back, serve over NBD and exit 0 without a terminal.
func TestDemo(t *testing.T) {
	code, out, e := run(t, nil, "demo", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("demo: exit %d: %s", code, e)
	}
	for _, want := range []string{"$ blkcrypt format", "$ blkcrypt serve", "nbdinfo nbd://127.0.0.1:", "sha256sum"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
