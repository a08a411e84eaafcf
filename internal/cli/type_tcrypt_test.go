package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The TrueCrypt/VeraCrypt images of cryptsetup's tcrypt-compat-test (see
// the fixtures README): every image dumps and opens with its secrets and
// holds a FAT filesystem with the serial DEAD-BABE (CAFE-BABE for hidden
// volumes), except the ones listed in tcryptRefused.

const (
	tcPass       = "aaaaaaaaaaaa"
	tcPassHidden = "bbbbbbbbbbbb"
	tcPass72     = "aaaaaaaaaaaabbbbbbbbbbbbccccccccccccddddddddddddeeeeeeeeeeeeffffffffffff"
	tcPassPIM    = "cccccccccccccccccccc"
)

// tcryptRefused are the images blkcrypt dumps but does not map, and why.
// cryptsetup refuses them too ("TCRYPT legacy mode": dm-crypt has no
// outer-CBC or little-endian Blowfish mode); the tcrypt-compat-test accepts
// that refusal.
var tcryptRefused = map[string]string{
	"tc_1-ripemd160-cbc-blowfish":                   "legacy mode",
	"tc_1-sha1-cbc-blowfish":                        "legacy mode",
	"tc_2-ripemd160-cbc-aes-blowfish":               "legacy mode",
	"tc_2-ripemd160-cbc-aes-blowfish-serpent":       "legacy mode",
	"tc_2-ripemd160-cbc-aes-twofish":                "legacy mode",
	"tc_2-ripemd160-cbc-aes-twofish-serpent":        "legacy mode",
	"tc_2-ripemd160-cbc-serpent-aes":                "legacy mode",
	"tc_2-ripemd160-cbc-serpent-twofish-aes":        "legacy mode",
	"tc_2-ripemd160-cbc-serpent-twofish-aes-hidden": "legacy mode",
	"tc_2-ripemd160-cbc-twofish-serpent":            "legacy mode",
}

// tcryptNotFound are images whose header blkcrypt cannot decrypt, and why.
var tcryptNotFound = map[string]string{} // none since Streebog landed

type tcImage struct {
	name, hash, cipher string
	args               []string // secrets and options besides -h/-c
	stdin              string
	hidden             bool // has a hidden volume
}

// tcImages lists the images as the upstream test reads their names:
// PREFIX-HASH-MODE-CIPHERS; -h takes HASH, -c the first cipher.
func tcImages(t *testing.T, dir string) []tcImage {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*-*"))
	var imgs []tcImage
	pim := regexp.MustCompile(`^vcpim_1_(\d+)-`)
	for _, p := range names {
		n := filepath.Base(p)
		f := strings.Split(n, "-")
		if len(f) < 4 {
			continue
		}
		im := tcImage{name: n, hash: f[1], cipher: f[3], stdin: tcPass + "\n", hidden: strings.HasSuffix(n, "-hidden")}
		switch {
		case pim.MatchString(n):
			im.args = []string{"--veracrypt-pim", pim.FindStringSubmatch(n)[1]}
			im.stdin = tcPassPIM + "\n"
		case strings.HasPrefix(n, "sys_"):
			im.args = []string{"--tcrypt-system"}
		case strings.HasPrefix(n, "tck_"), strings.HasPrefix(n, "vck_"):
			im.args = []string{"--key-file", filepath.Join(dir, "keyfile1"), "--tcrypt-keyfiles", filepath.Join(dir, "keyfile2")}
			switch {
			case strings.HasPrefix(n, "vck_1_nopw"):
				im.stdin = "\n"
			case strings.HasPrefix(n, "vck_1_pw72"):
				im.stdin = tcPass72 + "\n"
			}
		}
		imgs = append(imgs, im)
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].name < imgs[j].name })
	return imgs
}

func tcryptDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(unpack(t, "tcrypt-images.tar.xz"), "tcrypt-images")
	if _, err := os.Stat(filepath.Join(dir, "keyfile1")); err != nil {
		t.Fatalf("tcrypt-images.tar.xz did not unpack as expected: %v", err)
	}
	return dir
}

// readUUID decrypts the volume with args and returns its blkid UUID, or the
// exit code and stderr on failure.
func readUUID(t *testing.T, stdin string, args ...string) (string, int, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "vol")
	code, _, e := run(t, []byte(stdin), append([]string{"read", "-o", out}, args...)...)
	if code != 0 {
		return "", code, e
	}
	u := blkidUUID(t, out)
	os.Remove(out)
	return u, 0, e
}

// tcryptCLISubset are the VeraCrypt images opened through the command line;
// every TrueCrypt image is (their derivations are cheap). The package test
// tcrypt.TestFixtureImages opens all 93 with one header search each; a
// VeraCrypt search costs seconds (PBKDF2 with 200000-655331 iterations,
// Argon2id with up to 1 GiB), so the CLI repeats a representative few.
var tcryptCLISubset = map[string]bool{
	"vc_1-sha512-xts-aes-twofish-serpent": true, "vc_1-sha256-xts-aes": true, "vc_1-sha512-xts-aes-hidden": true,
	"vc_1-sha512-xts-kuznyechik-camellia": true, "vc_1-stribog512-xts-camellia": true,
	"vcpim_1_1234-sha256-xts-aes": true, "vck_1_pw72-sha256-xts-aes": true, "vck_1_nopw-sha256-xts-aes": true,
}

func TestFixtureTCRYPT(t *testing.T) {
	dir := tcryptDir(t)
	imgs := tcImages(t, dir)
	if len(imgs) != 93 {
		t.Fatalf("%d images, want 93", len(imgs))
	}
	counts := map[string]int{}
	for _, im := range imgs {
		if strings.HasPrefix(im.name, "sys_") || (strings.HasPrefix(im.name, "v") && !tcryptCLISubset[im.name]) {
			continue // sys_: TestFixtureTCRYPTSystem
		}
		t.Run(im.name, func(t *testing.T) {
			path := filepath.Join(dir, im.name)
			base := append([]string{"--type", "tcrypt", "-h", im.hash, "-c", im.cipher}, im.args...)
			// Dump with the stated secrets.
			code, out, e := run(t, []byte(im.stdin), append([]string{"dump", path}, base...)...)
			if why, ok := tcryptNotFound[im.name]; ok {
				if code != 2 || !strings.Contains(e, why) {
					t.Errorf("exit %d %q, want 2 mentioning %q", code, e, why)
				}
				counts["not found"]++
				return
			}
			if code != 0 {
				t.Fatalf("dump: exit %d: %s", code, e)
			}
			if !strings.Contains(out, "Cipher chain:\t") || !regexp.MustCompile(`(?m)^Cipher chain:\t.*\b`+regexp.QuoteMeta(im.cipher)).MatchString(out) {
				t.Errorf("dump does not show cipher %s:\n%s", im.cipher, out)
			}
			if !strings.Contains(out, "PBKDF2 hash:\t"+im.hash) && !(im.hash == "argon2id" && strings.Contains(out, "PBKDF:\t\tArgon2id")) {
				t.Errorf("dump does not show hash %s:\n%s", im.hash, out)
			}
			wantMagic := "TCRYPT"
			if strings.HasPrefix(im.name, "v") || strings.HasPrefix(im.name, "sys_vc") {
				wantMagic = "VERACRYPT"
			}
			if !strings.HasPrefix(out, wantMagic+" header information for ") {
				t.Errorf("dump starts %q, want %s", strings.SplitN(out, "\n", 2)[0], wantMagic)
			}
			// Open and check the filesystem.
			u, code, e := readUUID(t, im.stdin, append([]string{path}, base...)...)
			if why, ok := tcryptRefused[im.name]; ok {
				if code == 0 || !strings.Contains(e, why) {
					t.Errorf("opened (exit %d, %q); want a refusal mentioning %q", code, e, why)
				}
				counts["refused"]++
			} else if code != 0 {
				t.Errorf("read: exit %d: %s", code, e)
			} else if u != "DEAD-BABE" {
				t.Errorf("UUID %q, want DEAD-BABE", u)
			} else {
				counts["opened"]++
			}
			if !im.hidden {
				return
			}
			// The hidden volume.
			hargs := append([]string{"--type", "tcrypt", "--tcrypt-hidden", "-h", im.hash, "-c", im.cipher}, im.args...)
			if code, out, e := run(t, []byte(tcPassHidden+"\n"), append([]string{"dump", path}, hargs...)...); code != 0 || !strings.Contains(out, "Hidden size:") {
				t.Errorf("hidden dump: exit %d %s %s", code, e, out)
			}
			u, code, e = readUUID(t, tcPassHidden+"\n", append([]string{path}, hargs...)...)
			if why, ok := tcryptRefused[im.name]; ok {
				if code == 0 || !strings.Contains(e, why) {
					t.Errorf("hidden volume opened (exit %d, %q); want a refusal mentioning %q", code, e, why)
				}
			} else if code != 0 || u != "CAFE-BABE" {
				t.Errorf("hidden volume: exit %d %s, UUID %q, want CAFE-BABE", code, e, u)
			} else {
				counts["hidden opened"]++
			}
		})
	}
	t.Logf("%v", counts)
}

// TestFixtureTCRYPTOptions: the other expectations of tcrypt-compat-test,
// on the cheaper images.
func TestFixtureTCRYPTOptions(t *testing.T) {
	dir := tcryptDir(t)
	img := func(n string) string { return filepath.Join(dir, n) }
	pass := []byte(tcPass + "\n")
	// -h sha512 -c aes works; an unknown hash or cipher does not.
	for _, n := range []string{"tc_3-sha512-xts-aes", "tc_4-sha512-xts-aes", "tc_5-sha512-xts-aes"} {
		if code, _, e := run(t, pass, "dump", img(n), "--type", "tcrypt", "-h", "sha512", "-c", "aes"); code != 0 {
			t.Errorf("%s: %s", n, e)
		}
		if code, _, _ := run(t, pass, "dump", img(n), "--type", "tcrypt", "-h", "xxxx"); code == 0 {
			t.Errorf("%s: -h xxxx accepted", n)
		}
		if code, _, _ := run(t, pass, "dump", img(n), "--type", "tcrypt", "-h", "sha512", "-c", "xxx"); code == 0 {
			t.Errorf("%s: -c xxx accepted", n)
		}
	}
	// VeraCrypt images are not found with VeraCrypt disabled (exit 2),
	// and --veracrypt-pim is refused with it.
	for _, n := range []string{"vc_1-sha512-xts-aes", "vc_1-sha256-xts-aes", "vc_1-sha512-xts-aes-hidden"} {
		if code, _, e := run(t, pass, "dump", img(n), "--type", "tcrypt", "--disable-veracrypt", "-h", "sha", "-c", "aes"); code != 2 {
			t.Errorf("%s with --disable-veracrypt: exit %d %s", n, code, e)
		}
	}
	if code, _, _ := run(t, pass, "dump", img("vcpim_1_1234-sha256-xts-aes"), "--type", "tcrypt", "--disable-veracrypt", "--veracrypt-pim", "1234"); code != 1 {
		t.Errorf("--veracrypt-pim with --disable-veracrypt: exit %d", code)
	}
	// Wrong secrets exit 2: passphrase, hidden passphrase, PIM, key files.
	for _, c := range []struct {
		stdin string
		args  []string
	}{
		{"wrong\n", []string{"dump", img("tc_5-sha512-xts-aes"), "-h", "sha512", "-c", "aes"}},
		{"wrong\n", []string{"read", img("tc_2-ripemd160-cbc-aes"), "-h", "ripemd160", "-c", "aes", "--disable-veracrypt"}},
		{tcPass + "\n", []string{"read", img("tc_5-sha512-xts-aes-hidden"), "--tcrypt-hidden", "-h", "sha512", "-c", "aes"}},
		{tcPassPIM + "\n", []string{"read", img("vcpim_1_1234-sha256-xts-aes"), "--veracrypt-pim", "1", "-h", "sha256", "-c", "aes"}},
		{tcPass + "\n", []string{"read", img("tck_5-sha512-xts-aes"), "--key-file", img("keyfile1"), "-h", "sha512", "-c", "aes"}},
		{tcPass + "\n", []string{"read", img("tck_5-sha512-xts-aes"), "-h", "sha512", "-c", "aes", "--disable-veracrypt"}},
	} {
		code, _, e := run(t, []byte(c.stdin), append(c.args, "--type", "tcrypt")...)
		if code != 2 {
			t.Errorf("%v: exit %d %s, want 2", c.args, code, e)
		}
		if strings.Count(e, "\n") != 1 {
			t.Errorf("%v: want one line on stderr, got %q", c.args, e)
		}
	}
	// The PIM can be asked for (second line of stdin).
	if u, code, e := readUUID(t, tcPassPIM+"\n1234\n", img("vcpim_1_1234-sha256-xts-aes"), "--type", "tcrypt", "--veracrypt-query-pim", "-h", "sha256", "-c", "aes"); code != 0 || u != "DEAD-BABE" {
		t.Errorf("--veracrypt-query-pim: exit %d %s %q", code, e, u)
	}
	for _, bad := range []string{"0", "x", "", "4294967296"} {
		if code, _, _ := run(t, []byte(tcPassPIM+"\n"+bad+"\n"), "dump", img("vcpim_1_1234-sha256-xts-aes"), "--type", "tcrypt", "--veracrypt-query-pim", "-h", "sha256", "-c", "aes"); code != 1 {
			t.Errorf("PIM %q: exit %d, want 1", bad, code)
		}
	}
	// The backup header at the end of a TrueCrypt 6+ volume.
	if u, code, e := readUUID(t, tcPass+"\n", img("tc_5-sha512-xts-aes"), "--type", "tcrypt", "--tcrypt-backup", "-h", "sha512", "-c", "aes"); code != 0 || u != "DEAD-BABE" {
		t.Errorf("backup header: exit %d %s %q", code, e, u)
	}
	// --dump-volume-key shows what fixture_volume_keys.json records.
	code, out, e := run(t, pass, "dump", img("tc_5-sha512-xts-aes"), "--type", "tcrypt", "-h", "sha512", "-c", "aes", "--dump-volume-key")
	if code != 0 || strings.ReplaceAll(volumeKeyOf(out), " ", "") != "e87dd14403a547b440f459aa8284da62db364658a286b94ba2f3c7957c03f290266d38facd211e12cd0abfc5b41555df6019d73374f85fbcb23fd4efc43b0c64" ||
		!strings.Contains(out, "Payload offset:\t256\n") {
		t.Errorf("--dump-volume-key: exit %d %s\n%s", code, e, out)
	}
	// Reading is read-only by default: a write is refused and changes
	// nothing; --tcrypt-read-write allows it.
	w := filepath.Join(t.TempDir(), "w")
	b, _ := os.ReadFile(img("tc_5-sha512-xts-aes"))
	os.WriteFile(w, b, 0o600)
	in := writeFile(t, t.TempDir(), "in", []byte("hello"))
	if code, _, _ := run(t, pass, "write", w, "--type", "tcrypt", "-h", "sha512", "-c", "aes", "-i", in, "--offset-bytes", "4096"); code == 0 {
		t.Error("write without --tcrypt-read-write succeeded")
	}
	if code, _, e := run(t, pass, "write", w, "--type", "tcrypt", "-h", "sha512", "-c", "aes", "-i", in, "--offset-bytes", "4096", "--tcrypt-read-write"); code != 0 {
		t.Errorf("write: %s", e)
	}
	if code, out, e := run(t, pass, "read", w, "--type", "tcrypt", "-h", "sha512", "-c", "aes", "--offset-bytes", "4096", "--length", "5"); code != 0 || out != "hello" {
		t.Errorf("read back: %q %s", out, e)
	}
}

// TestFixtureTCRYPTSystem: the system images open through the whole drive
// image (the header records the partition) and, with the drive image as
// --header, through a copy of the encrypted partition alone, which is how
// the whole-drive (_full) image must be opened.
func TestFixtureTCRYPTSystem(t *testing.T) {
	dir := tcryptDir(t)
	for _, c := range []struct {
		name, hash   string
		start, count int64 // the encrypted partition, 512-byte sectors
	}{
		{"sys_vc_1_gpt_part-sha512-xts-aes", "sha512", 67584, 32768},
		{"sys_vc_1_mbr_part-sha256-xts-aes", "sha256", 2048, 32768},
		{"sys_vc_1_mbr_full-sha256-xts-aes", "sha256", 2048, 32768},
	} {
		img := filepath.Join(dir, c.name)
		if !strings.Contains(c.name, "_full") {
			if u, code, e := readUUID(t, tcPass+"\n", img, "--type", "tcrypt", "--tcrypt-system", "-h", c.hash, "-c", "aes"); code != 0 || u != "DEAD-BABE" {
				t.Errorf("%s through the image: exit %d %s %q", c.name, code, e, u)
			}
		}
		part := filepath.Join(t.TempDir(), "part")
		if out, err := exec.Command("dd", "if="+img, "of="+part, "bs=512", "skip="+itoa(c.start), "count="+itoa(c.count), "status=none").CombinedOutput(); err != nil {
			t.Fatalf("dd: %v %s", err, out)
		}
		if u, code, e := readUUID(t, tcPass+"\n", part, "--header", img, "--type", "tcrypt", "--tcrypt-system", "-h", c.hash, "-c", "aes"); code != 0 || u != "DEAD-BABE" {
			t.Errorf("%s through the partition copy: exit %d %s %q", c.name, code, e, u)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestServeTCRYPT: a VeraCrypt volume (key files, empty passphrase) served
// over NBD is read-only by default and reads as `blkcrypt read` does. The
// empty passphrase is an empty line: empty stdin is "nothing to read on
// input", as in cryptsetup.
func TestServeTCRYPT(t *testing.T) {
	needTool(t, "nbdinfo", "libnbd-bin")
	needTool(t, "nbdcopy", "libnbd-bin")
	dir := tcryptDir(t)
	vol := []string{filepath.Join(dir, "vck_1_nopw-sha256-xts-aes"), "--type", "tcrypt", "-h", "sha256", "-c", "aes",
		"--key-file", filepath.Join(dir, "keyfile1"), "--tcrypt-keyfiles", filepath.Join(dir, "keyfile2")}
	code, want, e := run(t, []byte("\n"), append([]string{"read"}, vol...)...)
	if code != 0 {
		t.Fatalf("read: %s", e)
	}
	sock, stop := serveWithStdin(t, []byte("\n"), vol...)
	uri := "nbd+unix:///?socket=" + sock
	info, err := exec.Command("nbdinfo", "--json", uri).Output()
	if err != nil {
		t.Fatalf("nbdinfo: %v", err)
	}
	if !strings.Contains(string(info), `"is_read_only": true`) {
		t.Errorf("export is not read-only: %s", info)
	}
	out := filepath.Join(t.TempDir(), "copy")
	if b, err := exec.Command("nbdcopy", uri, out).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v %s", err, b)
	}
	got, _ := os.ReadFile(out)
	if string(got) != want {
		t.Errorf("NBD copy (%d bytes) differs from blkcrypt read (%d bytes)", len(got), len(want))
	}
	if u := blkidUUID(t, out); u != "DEAD-BABE" {
		t.Errorf("UUID %q", u)
	}
	if code := stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
}
