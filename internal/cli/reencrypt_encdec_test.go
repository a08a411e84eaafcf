package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// killedCryptsetupResume runs cryptsetup reencrypt --resume-only killed
// after growing delays until it stops mid-way; it reports whether it did
// (the dumps are compared there).
func killedCryptsetupResume(t *testing.T, img string, args ...string) bool {
	t.Helper()
	hdr := img
	for i, a := range args {
		if a == "--header" {
			hdr = args[i+1]
		}
	}
	segments := func(d string) string {
		i, j := strings.Index(d, "Data segments:"), strings.Index(d, "Keyslots:")
		if i < 0 || j < i {
			return d
		}
		return d[i:j]
	}
	before, _ := cryptsetup(t, "luksDump", hdr)
	for _, after := range []string{"0.1", "0.2", "0.4", "0.8"} {
		exec.Command("timeout", append([]string{"-s", "KILL", after, "cryptsetup", "reencrypt", "--resume-only", "--force-offline-reencrypt", "-q"}, append(args, img)...)...).Run()
		d, _ := cryptsetup(t, "luksDump", hdr)
		if !strings.Contains(d, "online-reencrypt-v2") {
			return false
		}
		if segments(d) != segments(before) {
			sameDump(t, hdr, "cryptsetup killed after "+after+"s")
			return true
		}
	}
	return false
}

// TestReencryptEncryptCLI: reencrypt --encrypt --reduce-device-size on a
// plaintext image: blkcrypt initialises, cryptsetup runs part of it and is
// killed, blkcrypt finishes; the dumps agree at every stage, cryptsetup
// opens the result and OpenSSL with cryptsetup's volume key decrypts the
// data, now 1 MiB further on, to the original plaintext.
func TestReencryptEncryptCLI(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	const data = 40 << 20
	orig := randBytes(data + 2<<20)
	img := writeFile(t, dir, "e.img", orig)
	pass := writeFile(t, dir, "p", []byte("encrypt cli"))
	args := append([]string{"reencrypt", "--encrypt", "--type", "luks2", "--reduce-device-size", "2M", "--init-only", "--key-file", pass}, reencFast...)
	if code, _, e := run(t, nil, append(args, img)...); code != 0 {
		t.Fatalf("reencrypt --encrypt --init-only: %s", e)
	}
	d := sameDump(t, img, "after --init-only")
	if !strings.Contains(d, "Mode:       encrypt") || !strings.Contains(d, "Shift size: 1048576[bytes]") || !strings.Contains(d, "backup-moved-segment") {
		t.Fatalf("cryptsetup does not see our initialised encryption:\n%s", d)
	}
	interrupted := killedCryptsetupResume(t, img, "--key-file", pass)
	if code, _, e := run(t, nil, "reencrypt", img, "--resume-only", "--key-file", pass); code != 0 && !(strings.Contains(e, "not in progress") && !interrupted) {
		t.Fatalf("reencrypt --resume-only: %s", e)
	}
	if !interrupted {
		t.Log("cryptsetup was not killed mid-way; resumed from our own state")
	}
	d = sameDump(t, img, "done")
	if strings.Contains(d, "reencrypt") || strings.Contains(d, "linear") || !strings.Contains(d, "offset: 1048576 [bytes]") {
		t.Fatalf("encryption not finished:\n%s", d)
	}
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup does not open the encrypted volume: %s", out)
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
	const off = 1 << 20
	for i := 0; i < data/512; i += 211 {
		pt, err := o.Crypt("aes-256-xts", vk, plainIV(uint64(i)), raw[off+i*512:off+(i+1)*512], false)
		if err != nil || !bytes.Equal(pt, orig[i*512:(i+1)*512]) {
			t.Fatalf("OpenSSL with cryptsetup's key does not decrypt sector %d to the original plaintext (%v)", i, err)
		}
	}
	code, got, e := run(t, nil, "read", img, "--key-file", pass, "--length", "41943040")
	if code != 0 || got != string(orig[:data]) {
		t.Fatalf("read after encryption: exit %d %s", code, e)
	}
}

// TestReencryptDetachedCLI: --encrypt --header FILE creates the header
// file and leaves the data device's size; --decrypt --header gives back
// the original bytes, with a cryptsetup run killed part-way between.
func TestReencryptDetachedCLI(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	const size = 24 << 20
	orig := randBytes(size)
	img := writeFile(t, dir, "d.img", orig)
	hdr := filepath.Join(dir, "d.hdr")
	pass := writeFile(t, dir, "p", []byte("detached cli"))
	if code, _, e := run(t, nil, append([]string{"reencrypt", "--encrypt", img, "--header", hdr, "--hotzone-size", "4M", "--key-file", pass}, reencFast...)...); code != 0 {
		t.Fatalf("reencrypt --encrypt --header: %s", e)
	}
	if st, _ := os.Stat(img); st.Size() != size {
		t.Fatalf("the data device changed size to %d", st.Size())
	}
	sameDump(t, hdr, "encrypted")
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--header", hdr, "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup does not open the encrypted volume: %s", out)
	}
	code, got, e := run(t, nil, "read", img, "--header", hdr, "--key-file", pass)
	if code != 0 || got != string(orig) {
		t.Fatalf("read after encryption: exit %d %s", code, e)
	}
	if raw, _ := os.ReadFile(img); bytes.Equal(raw[:4096], orig[:4096]) {
		t.Fatal("the data is still plaintext")
	}
	if code, _, e := run(t, nil, append([]string{"reencrypt", "--decrypt", img, "--header", hdr, "--init-only", "--key-file", pass}, reencFast...)...); code != 0 {
		t.Fatalf("reencrypt --decrypt --init-only: %s", e)
	}
	d := sameDump(t, hdr, "decrypt --init-only")
	if !strings.Contains(d, "Mode:       decrypt") {
		t.Fatalf("cryptsetup does not see our initialised decryption:\n%s", d)
	}
	interrupted := killedCryptsetupResume(t, img, "--header", hdr, "--hotzone-size", "1M", "--key-file", pass)
	if code, _, e := run(t, nil, "reencrypt", img, "--decrypt", "--header", hdr, "--resume-only", "--key-file", pass); code != 0 && !(strings.Contains(e, "not in progress") && !interrupted) {
		t.Fatalf("reencrypt --decrypt --resume-only: %s", e)
	}
	if raw, _ := os.ReadFile(img); !bytes.Equal(raw, orig) {
		t.Fatal("the decrypted device is not the original plaintext")
	}
	d = sameDump(t, hdr, "decrypted")
	if !strings.Contains(d, "0: linear") || strings.Contains(d, "luks2") {
		t.Fatalf("decryption not finished:\n%s", d)
	}
}

// TestReencryptEncDecCLIBadInput: each refusal is one line with
// cryptsetup's exit code, and nothing is written.
func TestReencryptEncDecCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("right"))
	wrong := writeFile(t, dir, "w", []byte("wrong"))
	plain := writeFile(t, dir, "plain.img", randBytes(8<<20))
	tiny := writeFile(t, dir, "tiny.img", randBytes(2<<20))
	luks := writeFile(t, dir, "luks.img", nil)
	if code, _, e := run(t, nil, append([]string{"format", luks, "--type", "luks2", "--size", "20971520", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	inprog := writeFile(t, dir, "inprog.img", randBytes(8<<20))
	if code, _, e := run(t, nil, append([]string{"reencrypt", "--encrypt", inprog, "--reduce-device-size", "2M", "--init-only", "--key-file", pass}, reencFast...)...); code != 0 {
		t.Fatalf("init: %s", e)
	}
	for _, tc := range []struct {
		name string
		img  string
		code int
		want string
		args []string
	}{
		{"reduce smaller than the header", plain, 1, "header", []string{"--encrypt", "--reduce-device-size", "64k", "--key-file", pass}},
		{"device too small", tiny, 1, "cannot hold", []string{"--encrypt", "--reduce-device-size", "2M", "--key-file", pass}},
		{"no header, no reduction", plain, 1, "--reduce-device-size", []string{"--encrypt", "--key-file", pass}},
		{"unknown cipher", plain, 1, "cipher", []string{"--encrypt", "--reduce-device-size", "2M", "--cipher", "nosuch-xts-plain64", "--key-file", pass}},
		{"already LUKS", luks, 1, "already", []string{"--encrypt", "--reduce-device-size", "2M", "--key-file", pass}},
		{"encrypt and decrypt", plain, 1, "contradict", []string{"--encrypt", "--decrypt", "--key-file", pass}},
		{"decrypt without header", luks, 1, "--header", []string{"--decrypt", "--key-file", pass}},
		{"wrong passphrase", inprog, 2, "", []string{"--resume-only", "--key-file", wrong}},
		{"contradicting resilience", inprog, 1, "resilience", []string{"--resume-only", "--resilience", "journal", "--key-file", pass}},
		{"contradicting mode", inprog, 1, "", []string{"--decrypt", "--header", inprog, "--key-file", pass}},
		{"init again", inprog, 1, "", []string{"--encrypt", "--reduce-device-size", "2M", "--init-only", "--key-file", pass}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fileSum(t, tc.img)
			code, _, e := run(t, nil, append(append([]string{"reencrypt", tc.img}, tc.args...), reencFast...)...)
			if code != tc.code || strings.Count(strings.TrimSpace(e), "\n") != 0 || !strings.Contains(e, tc.want) {
				t.Fatalf("exit %d (want %d), stderr %q (want one line with %q)", code, tc.code, e, tc.want)
			}
			if fileSum(t, tc.img) != before {
				t.Fatal("the device was written")
			}
		})
	}
}

// TestReencryptEncryptKillRealProcess kills the real `blkcrypt reencrypt
// --encrypt --reduce-device-size` with SIGKILL at random moments until at
// least 3 kills leave an encryption in progress (at most 30 runs), and
// resumes each, alternately by blkcrypt and by cryptsetup (repair of a
// crashed hotzone, then --resume-only). Every volume must then read back
// the original plaintext. A kill before the header is written leaves a
// plaintext device whose first MiB is in place or in its copy at the end.
func TestReencryptEncryptKillRealProcess(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pass := writeFile(t, dir, "p", []byte("kill the encryption"))
	const shift, data = 1 << 20, 24 << 20
	orig := randBytes(data + 2*shift)
	img := filepath.Join(dir, "k.img")
	args := append([]string{"reencrypt", img, "--encrypt", "--reduce-device-size", "2M", "--key-file", pass}, reencFast...)
	os.WriteFile(img, orig, 0o600)
	start := time.Now()
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("reencrypt --encrypt: %v\n%s", err, out)
	}
	whole := time.Since(start)
	rng := mrand.New(mrand.NewPCG(151, 151))
	kills := 0
	for runN := 0; runN < 30 && kills < 3; runN++ {
		os.WriteFile(img, orig, 0o600)
		delay, killed := killedRun(t, bin, args, rng, whole)
		dump, err := cryptsetup(t, "luksDump", img)
		if err != nil {
			raw, _ := os.ReadFile(img)
			if !bytes.Equal(raw[shift:data], orig[shift:data]) || !bytes.Equal(raw[:shift], orig[:shift]) && !bytes.Equal(raw[data+shift:], orig[:shift]) {
				t.Fatalf("killed at %v before the header: the plaintext is not recoverable", delay)
			}
			continue
		}
		if killed && strings.Contains(dump, "online-reencrypt-v2") {
			kills++
			resumeKilled(t, img, pass, dump, kills%2 == 1, delay)
		}
		if d, _ := cryptsetup(t, "luksDump", img); strings.Contains(d, "online-reencrypt-v2") {
			t.Fatalf("after a kill at %v and a resume, the encryption is still in progress:\n%s", delay, d)
		}
		code, got, e := run(t, nil, "read", img, "--key-file", pass, "--length", fmt.Sprint(data))
		if code != 0 || got != string(orig[:data]) {
			t.Fatalf("after a kill at %v (run %d): read exit %d %s, plaintext equal %v", delay, runN, code, e, got == string(orig[:data]))
		}
	}
	if kills < 3 {
		t.Fatalf("only %d kills landed during the encryption", kills)
	}
}

// TestReencryptDecryptAttachedCLI: --decrypt --header NEWFILE of a volume
// whose header is on the device, both ways: cryptsetup initialises (it
// exports the header), blkcrypt finishes; and blkcrypt runs it whole. The
// dumps agree, and the device then starts with the plaintext written.
func TestReencryptDecryptAttachedCLI(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("attached cli"))
	const data = 12 << 20
	plain := randBytes(data)
	for _, who := range []string{"cryptsetup-then-blkcrypt", "blkcrypt"} {
		t.Run(who, func(t *testing.T) {
			img := writeFile(t, dir, who+".img", nil)
			if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", fmt.Sprint(data + 2<<20), "--offset", "4096", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
				t.Fatalf("format: %s", e)
			}
			if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, who+".in", plain), "--key-file", pass); code != 0 {
				t.Fatalf("write: %s", e)
			}
			hdr := filepath.Join(dir, who+".hdr")
			if who == "cryptsetup-then-blkcrypt" {
				if out, err := cryptsetup(t, "reencrypt", "--decrypt", "--header", hdr, "--init-only", "--force-offline-reencrypt", "-q", "--key-file", pass, img); err != nil {
					t.Fatalf("cryptsetup reencrypt --decrypt --init-only: %v\n%s", err, out)
				}
				d := sameDump(t, hdr, "cryptsetup's --init-only")
				if !strings.Contains(d, "datashift-checksum") {
					t.Fatalf("not a datashift decryption:\n%s", d)
				}
				if code, _, e := run(t, nil, "reencrypt", img, "--decrypt", "--header", hdr, "--resume-only", "--key-file", pass); code != 0 {
					t.Fatalf("reencrypt --decrypt --resume-only: %s", e)
				}
			} else {
				if code, _, e := run(t, nil, append([]string{"reencrypt", img, "--decrypt", "--header", hdr, "--hotzone-size", "1M", "-q", "--key-file", pass}, reencFast...)...); code != 0 {
					t.Fatalf("reencrypt --decrypt --header NEWFILE: %s", e)
				}
			}
			d := sameDump(t, hdr, "decrypted")
			if !strings.Contains(d, "0: linear") || strings.Contains(d, "luks2") || strings.Contains(d, "reencrypt") {
				t.Fatalf("decryption not finished:\n%s", d)
			}
			if raw, _ := os.ReadFile(img); !bytes.Equal(raw[:data], plain) {
				t.Fatal("the device does not start with the plaintext")
			}
		})
	}
}

// TestReencryptEncDecDumpStages: blkcrypt dump and cryptsetup luksDump
// agree on the states a stopped blkcrypt run leaves, after each hotzone,
// in every encrypt and decrypt layout.
func TestReencryptEncDecDumpStages(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	pass := []byte("dump stages")
	kdfOpts := luks2.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Hash: "sha256", Iterations: 1000}}
	ctx := context.Background()
	open := func(p string) luks2.File {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return luks2.File{File: f}
	}
	stages := func(name, hdr string, step func() error) {
		for i := 1; ; i++ {
			if err := step(); err != nil {
				t.Fatalf("%s: hotzone %d: %v", name, i, err)
			}
			d := sameDump(t, hdr, fmt.Sprintf("%s after hotzone %d", name, i))
			if !strings.Contains(d, "reencrypt") {
				if i < 3 {
					t.Fatalf("%s: finished after %d hotzones: no stage in between was seen", name, i)
				}
				t.Logf("%s: %d stages agree", name, i)
				return
			}
			if i > 12 {
				t.Fatalf("%s: not finished after %d hotzones", name, i)
			}
		}
	}
	// --encrypt --reduce-device-size: 5.5 MiB device, 1 MiB shift.
	img := writeFile(t, dir, "shift.img", randBytes(5<<20+512<<10))
	stages("encrypt datashift", img, func() error {
		return luks2.Encrypt(ctx, open(img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 << 20, Keyslot: kdfOpts, StopAfter: 1})
	})
	// --encrypt --header: 3 MiB, 1 MiB hotzones.
	img = writeFile(t, dir, "det.img", randBytes(3<<20))
	hdr := filepath.Join(dir, "det.hdr")
	stages("encrypt detached", hdr, func() error {
		return luks2.Encrypt(ctx, open(img), pass, luks2.EncryptOptions{Header: open(hdr), Keyslot: kdfOpts, HotzoneSize: 1 << 20, StopAfter: 1})
	})
	// --decrypt --header of that volume.
	stages("decrypt detached", hdr, func() error {
		return luks2.Decrypt(ctx, open(hdr), open(img), pass, luks2.DecryptOptions{Keyslot: kdfOpts, HotzoneSize: 1 << 20, StopAfter: 1})
	})
	// --decrypt of an attached header, exported.
	img = writeFile(t, dir, "att.img", nil)
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", "5242880", "--offset", "2048", "--key-file", writeFile(t, dir, "p", pass), "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	hdr = filepath.Join(dir, "att.hdr")
	stages("decrypt attached", hdr, func() error {
		return luks2.Decrypt(ctx, open(hdr), open(img), pass, luks2.DecryptOptions{Keyslot: kdfOpts, HotzoneSize: 512 << 10, StopAfter: 1})
	})
}
