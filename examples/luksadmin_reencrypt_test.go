package examples

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/sector"
)

// TestLuksadminReencrypt: luksadmin reencrypt (LUKS.Reencrypt, the public
// API alone) over an image file and over the image held in memory, LUKS2
// (the one engine) and LUKS1 (the legacy run, with its log files in the
// working directory), on a cryptsetup volume with two keyslots, keeping
// keyslot 1 and changing the cipher (LUKS1: its IV generator). cryptsetup 2.6.1 judges: keyslot 0's
// passphrase no longer opens and keyslot 1's does, the cipher is the new
// one, the volume key it dumps changed, and that key decrypts the data
// area to the plaintext written under the old one.
func TestLuksadminReencrypt(t *testing.T) {
	cs := need(t, "cryptsetup", "cryptsetup-bin")
	bin := buildProgram(t, "luksadmin")
	for _, typ := range []string{"luks1", "luks2"} {
		for _, mem := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mem=%v", typ, mem), func(t *testing.T) {
				dir := t.TempDir()
				img := filepath.Join(dir, "v.img")
				if err := os.WriteFile(img, make([]byte, 24<<20), 0o600); err != nil {
					t.Fatal(err)
				}
				keyFile := func(pass string) string {
					f := filepath.Join(t.TempDir(), "key")
					os.WriteFile(f, []byte(pass), 0o600)
					return f
				}
				crypt := func(args ...string) (string, error) {
					out, err := exec.Command(cs, args...).CombinedOutput()
					return string(out), err
				}
				must := func(args ...string) string {
					t.Helper()
					out, err := crypt(args...)
					if err != nil {
						t.Fatalf("cryptsetup %v: %v\n%s", args, err, out)
					}
					return out
				}
				fast := []string{"--batch-mode", "--pbkdf-force-iterations", "1000"}
				if typ == "luks2" {
					fast = append(fast, "--pbkdf", "pbkdf2")
				}
				must(append([]string{"luksFormat", "--type", typ, "--key-file", keyFile("zero"), img}, fast...)...)
				must(append([]string{"luksAddKey", "--key-file", keyFile("zero"), img, keyFile("one")}, fast...)...)
				opens := func(pass string) bool {
					_, err := crypt("open", "--test-passphrase", "--batch-mode", "--key-file", keyFile(pass), img)
					return err == nil
				}

				// Plaintext under the volume key cryptsetup reads.
				plain := make([]byte, 4<<20)
				rand.Read(plain)
				oldKey := volumeKey(t, must, img, keyFile("one"))
				c, off := dataCipher(t, img, oldKey)
				ct := make([]byte, len(plain))
				if err := c.EncryptSectors(ct, plain, 0); err != nil {
					t.Fatal(err)
				}
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteAt(ct, off)
				f.Close()

				// LUKS1 keyslots are encrypted with the data cipher, which
				// cryptsetup takes from the kernel: one it always has.
				newCipher, inDump := "serpent-xts-plain64", "serpent-xts-plain64"
				if typ == "luks1" {
					newCipher, inDump = "aes-xts-plain", "xts-plain\n"
				}
				args := []string{img, "reencrypt", "1", newCipher}
				if mem {
					args = append([]string{"-mem"}, args...)
				}
				cmd := exec.Command(bin, args...)
				cmd.Dir = dir // a LUKS1 run's log files
				cmd.Stdin = strings.NewReader("one\n")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("luksadmin reencrypt: %v\n%s", err, out)
				}
				if !strings.HasPrefix(string(out), typ+" reencrypted in ") || strings.HasSuffix(strings.TrimSpace(string(out)), " 0 steps") {
					t.Fatalf("luksadmin reencrypt said %q", out)
				}
				if opens("zero") || !opens("one") {
					t.Fatalf("after reencryption cryptsetup opens keyslot 0's passphrase %v, keyslot 1's %v", opens("zero"), opens("one"))
				}
				dump := must("luksDump", img)
				if !strings.Contains(dump, inDump) || strings.Contains(dump, "reencrypt") {
					t.Fatalf("cryptsetup's dump after the run:\n%s", dump)
				}
				newKey := volumeKey(t, must, img, keyFile("one"))
				if bytes.Equal(newKey, oldKey) {
					t.Fatal("the volume key did not change")
				}
				c, off = dataCipher(t, img, newKey)
				b, _ := os.ReadFile(img)
				got := b[off : off+int64(len(plain))]
				if err := c.DecryptSectors(got, got, 0); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, plain) {
					t.Fatal("the data does not decrypt to the plaintext under cryptsetup's new volume key")
				}
				if left, _ := filepath.Glob(filepath.Join(dir, "LUKS-*")); len(left) != 0 {
					t.Fatalf("the run left %v", left)
				}
			})
		}
	}
}

// volumeKey is the volume key cryptsetup dumps for img with keyFile.
func volumeKey(t *testing.T, must func(...string) string, img, keyFile string) []byte {
	t.Helper()
	out := must("luksDump", "--dump-volume-key", "--batch-mode", "--key-file", keyFile, img)
	var hexs strings.Builder
	in := false
	for _, line := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(line, "MK dump:"); ok {
			in = true
			hexs.WriteString(rest)
			continue
		}
		if in && (strings.HasPrefix(line, "\t") || strings.HasPrefix(line, " ")) {
			hexs.WriteString(line)
		} else {
			in = false
		}
	}
	var key []byte
	for _, f := range strings.Fields(hexs.String()) {
		var b byte
		if _, err := fmt.Sscanf(f, "%02x", &b); err != nil {
			t.Fatalf("unexpected volume key dump: %q", out)
		}
		key = append(key, b)
	}
	if len(key) == 0 {
		t.Fatalf("no volume key in cryptsetup's dump: %q", out)
	}
	return key
}

// dataCipher is the data cipher of img's header with key, and the data
// offset.
func dataCipher(t *testing.T, img string, key []byte) (*sector.Cipher, int64) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := blkcrypt.ReadHeader(f)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize()})
	if err != nil {
		t.Fatal(err)
	}
	return c, h.DataOffset()
}
