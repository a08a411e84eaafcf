package cli

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/luks2"
)

var reencFast = []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}

// normDump drops what differs only in layout between our dump and
// cryptsetup's (blank lines, trailing blanks).
func normDump(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, " \t"); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var dumpSections = regexp.MustCompile(`(?s)Data segments:.*?Tokens:`)

// sameDump checks that blkcrypt dump opens img and shows the segments and
// keyslots cryptsetup's luksDump shows.
func sameDump(t *testing.T, img, stage string) string {
	t.Helper()
	code, ours, e := run(t, nil, "dump", img)
	if code != 0 {
		t.Fatalf("%s: blkcrypt dump: %s", stage, e)
	}
	theirs, err := cryptsetup(t, "luksDump", img)
	if err != nil {
		t.Fatalf("%s: cryptsetup luksDump: %v\n%s", stage, err, theirs)
	}
	a, b := dumpSections.FindString(normDump(ours)), dumpSections.FindString(normDump(theirs))
	if a == "" || a != b {
		t.Fatalf("%s: dumps differ\nblkcrypt:\n%s\ncryptsetup:\n%s", stage, a, b)
	}
	return theirs
}

// TestReencryptCLI: blkcrypt reencrypt with a new cipher and key size;
// cryptsetup opens the result, OpenSSL with cryptsetup's dumped key
// decrypts every sector to the plaintext written before, and the dumps
// agree at every stage (init-only, an interrupted cryptsetup run, done).
func TestReencryptCLI(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "r.img")
	pass := writeFile(t, dir, "p", []byte("cli reencrypt"))
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", "41943040", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--sector-size", "512", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	plain := randBytes(24 << 20)
	in := writeFile(t, dir, "in", plain)
	if code, _, e := run(t, nil, "write", img, "-i", in, "--key-file", pass); code != 0 {
		t.Fatalf("write: %s", e)
	}
	sameDump(t, img, "before")
	// init-only, then a cryptsetup run killed part-way, then we finish.
	args := append([]string{"reencrypt", img, "--init-only", "--cipher", "aes-xts-plain64", "--key-size", "512", "--resilience", "journal", "--key-file", pass}, reencFast...)
	if code, _, e := run(t, nil, args...); code != 0 {
		t.Fatalf("reencrypt --init-only: %s", e)
	}
	d := sameDump(t, img, "after --init-only")
	if !strings.Contains(d, "online-reencrypt-v2") || !strings.Contains(d, "Resilience: journal") || !strings.Contains(d, "backup-final") {
		t.Fatalf("cryptsetup does not see our initialised reencryption:\n%s", d)
	}
	needTool(t, "cryptsetup", "cryptsetup-bin")
	interrupted := false
	for _, after := range []string{"0.2", "0.4", "0.8"} {
		exec.Command("timeout", "-s", "KILL", after, "cryptsetup", "reencrypt", "--resume-only", "--force-offline-reencrypt",
			"--hotzone-size", "64k", "-q", "--key-file", pass, img).Run()
		d, _ := cryptsetup(t, "luksDump", img)
		if !strings.Contains(d, "online-reencrypt-v2") {
			break
		}
		if strings.Count(d, "cipher: aes-xts-plain64") > 1 && strings.Contains(d, "cipher: aes-cbc-essiv:sha256") {
			interrupted = true
			sameDump(t, img, "cryptsetup killed after "+after+"s")
			break
		}
	}
	if code, _, e := run(t, nil, "reencrypt", img, "--resume-only", "--key-file", pass); code != 0 && !(strings.Contains(e, "not in progress") && !interrupted) {
		t.Fatalf("reencrypt --resume-only: %s", e)
	}
	if !interrupted {
		t.Log("cryptsetup was not killed mid-way (it finished or had not begun); resumed from our own state")
	}
	d = sameDump(t, img, "done")
	if strings.Contains(d, "reencrypt") || !strings.Contains(d, "cipher: aes-xts-plain64") || strings.Contains(d, "essiv") {
		t.Fatalf("reencryption not finished:\n%s", d)
	}
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup does not open the reencrypted volume: %s", out)
	}
	code, got, e := run(t, nil, "read", img, "--key-file", pass, "--length", "25165824")
	if code != 0 || got != string(plain) {
		t.Fatalf("read after reencryption: exit %d %s (plaintext equal: %v)", code, e, got == string(plain))
	}
	dump, err := cryptsetup(t, "luksDump", "--dump-volume-key", "-q", "--key-file", pass, img)
	if err != nil {
		t.Fatal(dump)
	}
	vk, _ := hex.DecodeString(volumeKeyOf(dump))
	if len(vk) != 64 {
		t.Fatalf("volume key of %d bytes", len(vk))
	}
	o := oracle.New(t)
	raw, _ := os.ReadFile(img)
	const off = 16 << 20
	for i := 0; i < len(plain)/512; i += 97 {
		pt, err := o.Crypt("aes-256-xts", vk, plainIV(uint64(i)), raw[off+i*512:off+(i+1)*512], false)
		if err != nil || !bytes.Equal(pt, plain[i*512:(i+1)*512]) {
			t.Fatalf("OpenSSL with cryptsetup's key does not decrypt sector %d (%v)", i, err)
		}
	}
}

// TestReencryptCLIBadInput: each refusal is one clear line, cryptsetup's
// exit code, and the device unchanged byte for byte.
func TestReencryptCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "b.img")
	pass := writeFile(t, dir, "p", []byte("right"))
	wrong := writeFile(t, dir, "w", []byte("wrong"))
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", "20971520", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	// A volume whose keyslots area is full: no space for the new keyslot.
	full := filepath.Join(dir, "full.img")
	if code, _, e := run(t, nil, append([]string{"format", full, "--type", "luks2", "--size", "20971520", "--offset", "1024", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	check := func(img string, want int, args ...string) {
		t.Helper()
		before := fileSum(t, img)
		code, _, e := run(t, nil, append(append([]string{"reencrypt", img}, args...), reencFast...)...)
		if code != want || strings.Count(e, "\n") != 1 || !strings.HasPrefix(e, "blkcrypt: ") {
			t.Errorf("%v: exit %d (want %d), stderr %q", args, code, want, e)
		}
		if fileSum(t, img) != before {
			t.Errorf("%v: the device was written to", args)
		}
	}
	check(img, 2, "--key-file", wrong)
	check(img, 1, "--key-file", pass, "--cipher", "nosuch-xts-plain64")
	check(img, 1, "--key-file", pass, "--key-size", "200", "--cipher", "aes-xts-plain64")
	check(img, 1, "--key-file", pass, "--resilience", "bogus")
	check(img, 1, "--key-file", pass, "--resilience", "journal", "--hash", "sha256")
	check(img, 1, "--key-file", pass, "--hash", "nosuchhash")
	check(img, 1, "--key-file", pass, "--hotzone-size", "12q")
	check(img, 1, "--key-file", pass, "--init-only", "--resume-only")
	check(img, 1, "--key-file", pass, "--encrypt")
	check(img, 1, "--key-file", pass, "--decrypt")
	check(img, 1, "--key-file", pass, "--sector-size", "4000")
	check(img, 1, "--key-file", pass, "--resume-only")
	check(full, 1, "--key-file", pass)
	// In progress: contradicting flags, a second init, a wrong passphrase.
	if code, _, e := run(t, nil, append([]string{"reencrypt", img, "--init-only", "--key-file", pass}, reencFast...)...); code != 0 {
		t.Fatalf("init-only: %s", e)
	}
	check(img, 5, "--key-file", pass, "--init-only")
	check(img, 1, "--key-file", pass, "--resilience", "journal")
	check(img, 1, "--key-file", pass, "--resume-only", "--cipher", "serpent-xts-plain64")
	check(img, 1, "--key-file", pass, "--cipher", "serpent-xts-plain64")
	check(img, 2, "--key-file", wrong)
	check(img, 2, "--key-file", wrong, "--resume-only")
}

// TestReencryptCLILock: blkcrypt takes cryptsetup's reencryption lock
// (/run/cryptsetup/LN_LUKS2-reencryption-UUID): while we hold it,
// cryptsetup refuses to resume, and while it is held, we refuse (busy).
func TestReencryptCLILock(t *testing.T) {
	// cryptsetup makes its locking directory when it first locks; so do
	// we here, so the test runs on a machine where cryptsetup never ran.
	if err := os.MkdirAll(luks2.ReencryptLockDir, 0o700); err != nil {
		testenv.Missing(t, "cannot create cryptsetup's locking directory %s: %v", luks2.ReencryptLockDir, err)
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "l.img")
	pass := writeFile(t, dir, "p", []byte("lock"))
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", "20971520", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	if code, _, e := run(t, nil, append([]string{"reencrypt", img, "--init-only", "--key-file", pass}, reencFast...)...); code != 0 {
		t.Fatalf("init-only: %s", e)
	}
	uuidOut, err := cryptsetup(t, "luksUUID", img)
	if err != nil {
		t.Fatal(uuidOut)
	}
	unlock, err := luks2.LockReencryption(strings.TrimSpace(uuidOut))
	if err != nil {
		t.Fatal(err)
	}
	out, err := cryptsetup(t, "reencrypt", "--resume-only", "--force-offline-reencrypt", "-q", "--key-file", pass, img)
	if err == nil || !strings.Contains(strings.ToLower(out), "reencryption process is already running") && !strings.Contains(strings.ToLower(out), "lock") {
		unlock()
		t.Fatalf("cryptsetup resumed while we held the reencryption lock: %v\n%s", err, out)
	}
	before := fileSum(t, img)
	code, _, e := run(t, nil, "reencrypt", img, "--resume-only", "--key-file", pass)
	unlock()
	if code != 5 || fileSum(t, img) != before {
		t.Fatalf("a second reencryption under the held lock: exit %d, %q", code, e)
	}
	if code, _, e := run(t, nil, "reencrypt", img, "--resume-only", "--key-file", pass); code != 0 {
		t.Fatalf("resume after the lock was released: %s", e)
	}
}

// TestReencryptCLIDetachedHeader: a volume with a detached header is
// reencrypted by blkcrypt (then a reencryption cryptsetup initialised is
// finished by blkcrypt); the data reads back and cryptsetup opens it.
func TestReencryptCLIDetachedHeader(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	data := filepath.Join(dir, "data.img")
	hdr := filepath.Join(dir, "hdr.img")
	pass := writeFile(t, dir, "p", []byte("detached"))
	if err := os.WriteFile(data, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hdr, make([]byte, 16<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cryptsetup(t, append([]string{"luksFormat", "--type", "luks2", "-q", "--header", hdr, "--key-file", pass, data}, reencFast...)...); err != nil {
		t.Fatalf("luksFormat: %v\n%s", err, out)
	}
	plain := randBytes(8 << 20)
	if code, _, e := run(t, nil, "write", data, "--header", hdr, "-i", writeFile(t, dir, "in", plain), "--key-file", pass); code != 0 {
		t.Fatalf("write: %s", e)
	}
	dataBefore, _ := os.ReadFile(data)
	if code, _, e := run(t, nil, append([]string{"reencrypt", data, "--header", hdr, "--hotzone-size", "1m", "--key-file", pass}, reencFast...)...); code != 0 {
		t.Fatalf("reencrypt: %s", e)
	}
	if after, _ := os.ReadFile(data); bytes.Equal(after, dataBefore) {
		t.Fatal("the data device was not reencrypted")
	}
	if out, err := cryptsetup(t, append([]string{"reencrypt", "--init-only", "--force-offline-reencrypt", "-q", "--header", hdr, "--key-file", pass, data}, reencFast...)...); err != nil {
		t.Fatalf("cryptsetup --init-only: %v\n%s", err, out)
	}
	if code, _, e := run(t, nil, "reencrypt", data, "--header", hdr, "--resume-only", "--key-file", pass); code != 0 {
		t.Fatalf("resume: %s", e)
	}
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--header", hdr, "--key-file", pass, data); err != nil {
		t.Fatalf("cryptsetup does not open it: %s", out)
	}
	code, got, e := run(t, nil, "read", data, "--header", hdr, "--key-file", pass)
	if code != 0 || got != string(plain) {
		t.Fatalf("read: exit %d %s, plaintext equal %v", code, e, got == string(plain))
	}
}
