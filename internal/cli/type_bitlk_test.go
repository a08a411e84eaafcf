package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// runHash runs blkcrypt in-process with stdout going into SHA-256 (the
// BitLocker images decrypt to 100 MiB and more).
func runHash(t *testing.T, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	h := sha256.New()
	var errb bytes.Buffer
	env := &Env{Stdin: bytes.NewReader(stdin), Stdout: h, Stderr: &errb}
	code := Main(context.Background(), args, env)
	return code, hex.EncodeToString(h.Sum(nil)), errb.String()
}

// bitlkFixture unpacks the BitLocker images and reads images.conf, the
// upstream table of expectations inside the archive.
func bitlkFixture(t *testing.T) (string, map[string]map[string]string) {
	t.Helper()
	dir := filepath.Join(unpack(t, "bitlk-images.tar.xz"), "bitlk-images")
	f, err := os.Open(filepath.Join(dir, "images.conf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conf := map[string]map[string]string{}
	var cur map[string]string
	s := bufio.NewScanner(f)
	for s.Scan() {
		l := strings.TrimSpace(s.Text())
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			cur = map[string]string{}
			conf[l[1:len(l)-1]+".img"] = cur
		} else if k, v, ok := strings.Cut(l, "="); ok && cur != nil {
			cur[k] = v
		}
	}
	if len(conf) != 21 {
		t.Fatalf("%d images in images.conf, want 21", len(conf))
	}
	return dir, conf
}

func sortedKeys[V any](m map[string]V) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// TestBitlkFixtureRead: every image with a SHA256SUM in images.conf reads
// (type detected from the signature) to exactly that hash with its
// password and with each recovery password on stdin, with its startup key
// as --key-file, or with no secret for the clear-key image; the volume key
// from dump --dump-volume-key reads the same through --volume-key-file.
// Wrong secrets exit 2; encrypt-on-write and partially encrypted images
// are refused with a message saying so.
func TestBitlkFixtureRead(t *testing.T) {
	dir, conf := bitlkFixture(t)
	kdir := t.TempDir()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for _, name := range sortedKeys(conf) {
		c := conf[name]
		img := filepath.Join(dir, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			type secret struct {
				what  string
				stdin []byte
				args  []string
			}
			var secrets []secret
			for _, k := range []string{"PW", "RP", "RP2"} {
				if c[k] != "" {
					secrets = append(secrets, secret{k, []byte(c[k] + "\n"), nil})
				}
			}
			if g := c["SK_VMK_GUID"]; g != "" {
				secrets = append(secrets, secret{"startup key", nil, []string{"--key-file", filepath.Join(dir, strings.ToUpper(g)+".BEK")}})
			}
			if c["CLEARKEY_VMK_GUID"] != "" {
				secrets = append(secrets, secret{"clear key", nil, nil})
			}
			want := c["SHA256SUM"]
			for _, s := range secrets {
				code, sum, stderr := runHash(t, s.stdin, append([]string{"read", img}, s.args...)...)
				if want == "" {
					if code == 0 || !strings.Contains(stderr, "encrypt-on-write") {
						t.Errorf("%s with %s: exit %d %q, want a refusal naming encrypt-on-write", name, s.what, code, stderr)
					}
					continue
				}
				if code != 0 {
					t.Errorf("%s with %s: exit %d: %s", name, s.what, code, stderr)
				} else if sum != want {
					t.Errorf("%s with %s: SHA-256 %s, images.conf says %s", name, s.what, sum, want)
				}
			}
			if want == "" {
				return
			}
			// The volume key as dumped opens it too.
			s := secrets[0]
			vkf := filepath.Join(kdir, name+".vk")
			code, out, stderr := run(t, s.stdin, append([]string{"dump", img, "--dump-volume-key", "--volume-key-file", vkf, "-q"}, s.args...)...)
			if code != 0 || !strings.Contains(out, "Key stored to file "+vkf) {
				t.Errorf("%s: dump --dump-volume-key: exit %d %q %q", name, code, out, stderr)
				return
			}
			if code, sum, stderr := runHash(t, nil, "read", img, "--type", "bitlk", "--volume-key-file", vkf); code != 0 || sum != want {
				t.Errorf("%s with --volume-key-file: exit %d %s %s", name, code, sum, stderr)
			}
			if code, _, _ := run(t, nil, "test-passphrase", img, "--volume-key-file", vkf); code == 0 {
				t.Errorf("%s: test-passphrase accepted a volume key file", name)
			}
		}()
	}
	wg.Wait()

	// Wrong secrets: a wrong password, a well-formed wrong recovery
	// password, the other image's startup key.
	img := filepath.Join(dir, "bitlk-aes-xts-128-startup-key.img")
	for _, w := range []struct {
		stdin []byte
		args  []string
	}{
		{[]byte("anaconda2\n"), nil},
		{[]byte("235818-357951-253979-013365-241120-245575-342914-591910\n"), nil},
		{nil, []string{"--key-file", filepath.Join(dir, "AA80A52B-9B66-47AE-B097-33F536FFBB07.BEK")}},
	} {
		for _, verb := range []string{"read", "test-passphrase"} {
			if code, _, stderr := runHash(t, w.stdin, append([]string{verb, img}, w.args...)...); code != 2 {
				t.Errorf("%s with a wrong secret %q %v: exit %d, want 2 (%s)", verb, w.stdin, w.args, code, stderr)
			}
		}
	}
	if code, _, stderr := run(t, []byte("anaconda\n"), "test-passphrase", filepath.Join(dir, "bitlk-aes-xts-128-unicode.img")); code != 2 {
		t.Errorf("unicode image: the ASCII part of the password opened it (exit %d %s)", code, stderr)
	}
	if code, _, stderr := run(t, []byte("anaconda\u00a3\n"), "open", "--test-passphrase", filepath.Join(dir, "bitlk-aes-xts-128-unicode.img")); code != 0 {
		t.Errorf("unicode image: open --test-passphrase with the password: exit %d %s", code, stderr)
	}
}

var clearKeyLine = regexp.MustCompile(`(VMK protected with clear key\n\tSalt:[^\n]*\n)\tKey data size:\t32 \[bytes\]\n`)

var dumpVMK = regexp.MustCompile(`(?m)^\tGUID:       \t(\S+)\n\tProtection: \tVMK protected with (.*)$`)

// TestBitlkFixtureDump: bitlkDump's fields as bitlk-compat-test checks
// them against images.conf, and byte for byte what the installed
// cryptsetup prints (apart from what newer cryptsetup prints
// differently, and the crc image, whose first copy cryptsetup 2.6.1 takes
// without checking its CRC).
func TestBitlkFixtureDump(t *testing.T) {
	dir, conf := bitlkFixture(t)
	// Without cryptsetup the byte-for-byte half is left out, which only
	// outside CI is allowed.
	_, haveCS := testenv.LookPath("cryptsetup")
	if haveCS != nil && testenv.InCI() {
		t.Fatal("cryptsetup is needed to compare bitlkDump byte for byte (CI is set): apt-get install -y cryptsetup-bin")
	}
	for _, name := range sortedKeys(conf) {
		c := conf[name]
		img := filepath.Join(dir, name)
		code, out, stderr := run(t, nil, "dump", img)
		if code != 0 {
			t.Errorf("%s: dump: exit %d %s", name, code, stderr)
			continue
		}
		if !regexp.MustCompile(`(?m)^Version:      \t2\nGUID:         \t` + c["GUID"] + `$`).MatchString(out) {
			t.Errorf("%s: GUID %s not found after Version:\n%s", name, c["GUID"], out)
		}
		cn := regexp.MustCompile(`(?m)^Cipher name:  \t(\S+)\nCipher mode:  \t(\S+)$`).FindStringSubmatch(out)
		if cn == nil || cn[1]+"-"+cn[2] != c["CIPHER"] {
			t.Errorf("%s: cipher %v, want %s", name, cn, c["CIPHER"])
		}
		if !regexp.MustCompile(`(?m)^Description:  \t(DESKTOP|WIN)`).MatchString(out) {
			t.Errorf("%s: description", name)
		}
		vmks := map[string][]string{}
		for _, m := range dumpVMK.FindAllStringSubmatch(out, -1) {
			vmks[m[2]] = append(vmks[m[2]], m[1])
		}
		for k, prot := range map[string]string{"PW_VMK_GUID": "passphrase", "RP_VMK_GUID": "recovery passphrase",
			"SK_VMK_GUID": "startup key", "SC_VMK_GUID": "smart card", "CLEARKEY_VMK_GUID": "clear key"} {
			if g := c[k]; g != "" && (len(vmks[prot]) == 0 || vmks[prot][0] != g) {
				t.Errorf("%s: %s VMK %v, images.conf says %s", name, prot, vmks[prot], g)
			}
		}
		if g := c["RP2_VMK_GUID"]; g != "" && (len(vmks["recovery passphrase"]) != 2 || vmks["recovery passphrase"][1] != g) {
			t.Errorf("%s: second recovery VMK %v, want %s", name, vmks["recovery passphrase"], g)
		}
		if haveCS != nil || strings.HasSuffix(name, "-crc.img") {
			continue
		}
		cmd := exec.Command("cryptsetup", "bitlkDump", name)
		cmd.Dir = dir
		ref, err := cmd.Output()
		if err != nil {
			t.Errorf("%s: cryptsetup bitlkDump: %v", name, err)
			continue
		}
		// cryptsetup 2.6.1 prints "256 bits" where newer versions print
		// "256 [bits]", and does not list the clear key of a clear-key VMK
		// (newer versions list it before the encrypted VMK).
		mine := strings.Replace(out, img, name, 1)
		mine = strings.Replace(mine, " [bits]\n", " bits\n", 1)
		mine = clearKeyLine.ReplaceAllString(mine, "$1")
		if string(ref) != mine {
			t.Errorf("%s: dump differs from cryptsetup's:\n%s\n--- cryptsetup:\n%s", name, mine, ref)
		}
	}
	// The crc image: our dump shows the intact third copy.
	_, out, _ := run(t, nil, "dump", filepath.Join(dir, "bitlk-aes-xts-128-crc.img"))
	if !strings.Contains(out, "Description:  \tDESKTOP-NPM7RCA H: 7/4/2019\n") {
		t.Errorf("crc image: description from a damaged copy:\n%s", out)
	}
	// Not BitLocker: refused with exit 4.
	plainImg := writeFile(t, t.TempDir(), "zero", make([]byte, 1<<20))
	if code, _, _ := run(t, nil, "dump", plainImg, "--type", "bitlk"); code != 4 {
		t.Errorf("dump --type bitlk of zeros: exit %d, want 4", code)
	}
}

// TestBitlkFixtureDumpVolumeKey: the volume key matches cryptsetup's
// (for images cryptsetup 2.6.1 can unlock: not the non-ASCII password).
func TestBitlkFixtureDumpVolumeKey(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir, _ := bitlkFixture(t)
	for _, name := range []string{"bitlk-aes-cbc-elephant-128.img", "bitlk-aes-xts-256.img", "bitlk-aes-cbc-128-4k.img"} {
		img := filepath.Join(dir, name)
		pw := writeFile(t, t.TempDir(), "pw", []byte("anaconda"))
		_, mine, _ := run(t, nil, "dump", img, "--dump-volume-key", "--key-file", pw)
		ref, err := exec.Command("cryptsetup", "bitlkDump", "--dump-volume-key", "-q", "--key-file", pw, img).Output()
		if err != nil {
			t.Fatalf("cryptsetup: %v", err)
		}
		if mine != string(ref) {
			t.Errorf("%s:\n%s--- cryptsetup:\n%s", name, mine, ref)
		}
	}
}

// TestBitlkServe: `serve` exports a BitLocker volume read-only by default;
// nbdcopy reads the same bytes as `read`; --bitlk-read-write makes it writable.
func TestBitlkServe(t *testing.T) {
	needTool(t, "nbdcopy", "libnbd-bin")
	needTool(t, "nbdinfo", "libnbd-bin")
	dir, conf := bitlkFixture(t)
	name := "bitlk-aes-xts-128-4k.img"
	img := filepath.Join(dir, name)
	pw := writeFile(t, t.TempDir(), "pw", []byte("anaconda"))
	sock, stop := serveInBackground(t, img, "--key-file", pw)
	uri := "nbd+unix:///?socket=" + sock
	info, err := exec.Command("nbdinfo", uri).CombinedOutput()
	if err != nil || !regexp.MustCompile(`is_read_only: true`).Match(info) {
		t.Errorf("nbdinfo: %v\n%s", err, info)
	}
	if !regexp.MustCompile(`block_size_minimum: 4096`).Match(info) {
		t.Errorf("4096-byte sectors not advertised:\n%s", info)
	}
	out := filepath.Join(t.TempDir(), "out")
	if b, err := exec.Command("nbdcopy", uri, out).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v %s", err, b)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	f, _ := os.Open(out)
	h := sha256.New()
	io.Copy(h, f)
	f.Close()
	if got := hex.EncodeToString(h.Sum(nil)); got != conf[name]["SHA256SUM"] {
		t.Errorf("served volume hashes to %s, want %s", got, conf[name]["SHA256SUM"])
	}
	sock, stop = serveInBackground(t, img, "--key-file", pw, "--bitlk-read-write")
	info, err = exec.Command("nbdinfo", "nbd+unix:///?socket="+sock).CombinedOutput()
	if err != nil || !regexp.MustCompile(`is_read_only: false`).Match(info) {
		t.Errorf("--bitlk-read-write: nbdinfo: %v\n%s", err, info)
	}
	stop()
}

// TestBitlkWrite: with --bitlk-read-write, `write` changes the volume (on
// a copy of the clear-key image, which opens without a secret) and the
// data reads back, across the relocated volume header and a metadata
// area, which reads as zeros; without the flag writes are refused and the
// image is unchanged.
func TestBitlkWrite(t *testing.T) {
	dir, conf := bitlkFixture(t)
	name := "bitlk-aes-xts-128-clearkey-only.img"
	img := filepath.Join(dir, name)
	before := fileSum(t, img)
	tmp := t.TempDir()
	data := randBytes(1 << 20)
	in := writeFile(t, tmp, "data", data)
	if code, _, stderr := run(t, nil, "write", img, "--input", in); code == 0 || !strings.Contains(stderr, "read-only") {
		t.Fatalf("write without --bitlk-read-write: exit %d %q", code, stderr)
	}
	if fileSum(t, img) != before {
		t.Fatal("a refused write changed the image")
	}
	if code, _, stderr := run(t, nil, "write", img, "--input", in, "--bitlk-read-write"); code != 0 {
		t.Fatalf("write: exit %d %s", code, stderr)
	}
	code, got, stderr := run(t, nil, "read", img, "--length", "1048576")
	if code != 0 || got != string(data) {
		t.Fatalf("read back: exit %d %s", code, stderr)
	}
	// Across the end of the first metadata area (35213312 + 65536), which
	// the stored volume header (8192 bytes) follows: both read as zeros.
	const at = 35213312 + 65536 - 4096
	if code, _, stderr := run(t, nil, "write", img, "--input", in, "--bitlk-read-write", "--offset-bytes", fmt.Sprint(at)); code != 0 {
		t.Fatalf("write: exit %d %s", code, stderr)
	}
	_, got, _ = run(t, nil, "read", img, "--offset-bytes", fmt.Sprint(at), "--length", "1048576")
	want := append(make([]byte, 4096+8192), data[4096+8192:]...)
	if got != string(want) {
		t.Fatal("a write across a metadata area reads back wrong")
	}
	code, out, _ := run(t, nil, "dump", img)
	if code != 0 || !strings.Contains(out, conf[name]["GUID"]) {
		t.Fatalf("dump after writes: exit %d", code)
	}
	if code, _, stderr := run(t, nil, "test-passphrase", img); code != 0 {
		t.Fatalf("clear key after writes: exit %d %s", code, stderr)
	}
}
