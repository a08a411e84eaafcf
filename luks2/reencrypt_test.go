package luks2_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

var reencKDF = luks2.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Hash: "sha256", Iterations: 1000}}

const reencImg = 24 << 20 // 8 MiB of data after the 16 MiB header

// reencVolume formats img with cryptsetup and fills its data area with
// random plaintext encrypted under the volume key cryptsetup dumps.
func reencVolume(t *testing.T, cs *lukstest.Cryptsetup, img string, pass []byte, extra ...string) []byte {
	t.Helper()
	args := append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass)}, extra...)
	cs.MustRun(append(args, img)...)
	plain := make([]byte, reencImg-16<<20)
	rand.Read(plain)
	writePlain(t, cs, img, pass, plain)
	return plain
}

// volumeCipher is the data segment cipher with cryptsetup's volume key.
func volumeCipher(t *testing.T, cs *lukstest.Cryptsetup, img string, pass []byte) (*sector.Cipher, int64) {
	t.Helper()
	_, h := readImage(t, img)
	if err := h.Reencryption(); err != nil {
		t.Fatalf("after reencryption: %v", err)
	}
	key := cs.VolumeKey(img, pass)
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize(), IVOffset: h.IVTweak()})
	if err != nil {
		t.Fatal(err)
	}
	return c, h.DataOffset()
}

func writePlain(t *testing.T, cs *lukstest.Cryptsetup, img string, pass, plain []byte) {
	t.Helper()
	c, off := volumeCipher(t, cs, img, pass)
	ct := make([]byte, len(plain))
	if err := c.EncryptSectors(ct, plain, 0); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ct, off); err != nil {
		t.Fatal(err)
	}
}

// checkPlain decrypts the data area with the key cryptsetup dumps now.
func checkPlain(t *testing.T, cs *lukstest.Cryptsetup, img string, pass, plain []byte) {
	t.Helper()
	if !cs.TestPassphrase(img, pass, -1) {
		t.Fatal("cryptsetup does not open the reencrypted volume")
	}
	c, off := volumeCipher(t, cs, img, pass)
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	got := b[off : off+int64(len(plain))]
	if err := c.DecryptSectors(got, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) {
		n := 0
		for n < len(got) && got[n] == plain[n] {
			n++
		}
		t.Fatalf("plaintext differs after reencryption (first at byte %d)", n)
	}
}

func reencrypt(t *testing.T, img string, pass []byte, o luks2.ReencryptOptions) error {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if o.Keyslot.PBKDF.Type == "" {
		o.Keyslot = reencKDF
	}
	return luks2.Reencrypt(context.Background(), luks2.File{File: f}, pass, o)
}

func TestReencryptCryptsetupJudges(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("reencrypt me")
	for i, tc := range []struct {
		name string
		fmt  []string
		o    luks2.ReencryptOptions
	}{
		{"checksum", nil, luks2.ReencryptOptions{}},
		{"journal", nil, luks2.ReencryptOptions{Resilience: "journal", HotzoneSize: 1 << 20}},
		{"none", nil, luks2.ReencryptOptions{Resilience: "none"}},
		{"new cipher 512", []string{"--sector-size", "512", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256"}, luks2.ReencryptOptions{Cipher: "aes-xts-plain64", KeySize: 64, HotzoneSize: 3 << 20, Hash: "sha512"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("r%d.img", i), reencImg)
			plain := reencVolume(t, cs, img, pass, tc.fmt...)
			old := cs.VolumeKey(img, pass)
			if err := reencrypt(t, img, pass, tc.o); err != nil {
				t.Fatalf("reencrypt: %v", err)
			}
			if bytes.Equal(cs.VolumeKey(img, pass), old) {
				t.Fatal("the volume key did not change")
			}
			checkPlain(t, cs, img, pass, plain)
			dump := cs.MustRun("luksDump", img)
			if strings.Contains(dump, "reencrypt") || strings.Contains(dump, "backup") {
				t.Fatalf("reencryption state left behind:\n%s", dump)
			}
			if tc.o.Cipher != "" && !strings.Contains(dump, tc.o.Cipher) {
				t.Fatalf("cipher not changed:\n%s", dump)
			}
		})
	}
}

// Interrupted by us (StopAfter), finished by cryptsetup; and the reverse.
func TestReencryptResumeBothWays(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("resume me")
	for i, res := range []string{"checksum", "journal", "none"} {
		t.Run("blkcrypt-then-cryptsetup-"+res, func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("a%d.img", i), reencImg)
			plain := reencVolume(t, cs, img, pass)
			if err := reencrypt(t, img, pass, luks2.ReencryptOptions{Resilience: res, HotzoneSize: 1 << 20, StopAfter: 3}); err != nil {
				t.Fatalf("reencrypt: %v", err)
			}
			dump := cs.MustRun("luksDump", img)
			if !strings.Contains(dump, "online-reencrypt-v2") || !strings.Contains(dump, "Resilience: "+res) {
				t.Fatalf("cryptsetup does not see the reencryption:\n%s", dump)
			}
			cs.MustRun("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), img)
			checkPlain(t, cs, img, pass, plain)
		})
		t.Run("cryptsetup-then-blkcrypt-"+res, func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("b%d.img", i), reencImg)
			plain := reencVolume(t, cs, img, pass)
			cs.MustRun("reencrypt", "--init-only", "--force-offline-reencrypt", "--batch-mode", "--resilience", res,
				"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass), img)
			if err := reencrypt(t, img, pass, luks2.ReencryptOptions{ResumeOnly: true, HotzoneSize: 1 << 20}); err != nil {
				t.Fatalf("resume: %v", err)
			}
			checkPlain(t, cs, img, pass, plain)
		})
	}
}

// A cryptsetup run killed mid-way, in a crash state (an in-reencryption
// hotzone whose recovery cryptsetup leaves to "repair"), is finished by
// blkcrypt to the original plaintext.
func TestReencryptResumeKilledCryptsetup(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("killed")
	args := func(img string) []string {
		return []string{"reencrypt", "--force-offline-reencrypt", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
			"--hotzone-size", "32k", "--key-file", cs.KeyFile(pass), img}
	}
	// Aim the kills inside a whole run as long as it takes here.
	probe := lukstest.NewImage(t, dir, "probe.img", reencImg)
	reencVolume(t, cs, probe, pass)
	start := time.Now()
	cs.MustRun(args(probe)...)
	whole := time.Since(start)
	rng := mrand.New(mrand.NewPCG(15, 15))
	crashes := 0
	for i := 0; i < 20 && crashes < 2; i++ {
		img := lukstest.NewImage(t, dir, fmt.Sprintf("k%d.img", i), reencImg)
		plain := reencVolume(t, cs, img, pass)
		after := time.Duration(float64(whole) * (0.1 + 0.8*rng.Float64()))
		cmd := exec.Command(cs.Path, args(img)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(after, func() { cmd.Process.Kill() })
		cmd.Wait()
		timer.Stop()
		dump, _ := cs.Run("luksDump", img)
		crashed := strings.Contains(dump, "in-reencryption")
		if err := reencrypt(t, img, pass, luks2.ReencryptOptions{ResumeOnly: true}); err != nil && !errors.Is(err, luks2.ErrNoReencryption) {
			t.Fatalf("resume after a kill at %v: %v", after, err)
		}
		checkPlain(t, cs, img, pass, plain)
		if crashed {
			crashes++
		}
	}
	if crashes == 0 {
		t.Fatalf("no kill in 20 landed while cryptsetup was inside a hotzone (a whole run takes %v)", whole)
	}
}

// A new sector size (and cipher: one cryptsetup runs in userspace, since
// without device-mapper it cannot use the others), both ways: started by one tool,
// interrupted, finished by the other.
func TestReencryptSectorSize(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("sector size")
	for i, tc := range []struct{ from, to string }{{"512", "4096"}, {"4096", "512"}, {"512", "2048"}} {
		t.Run("blkcrypt-"+tc.from+"-"+tc.to, func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("s%d.img", i), reencImg)
			plain := reencVolume(t, cs, img, pass, "--sector-size", tc.from)
			var ss int
			fmt.Sscan(tc.to, &ss)
			if err := reencrypt(t, img, pass, luks2.ReencryptOptions{SectorSize: ss, Cipher: "aes-cbc-essiv:sha256", KeySize: 32, HotzoneSize: 1 << 20, StopAfter: 2}); err != nil {
				t.Fatalf("reencrypt: %v", err)
			}
			cs.MustRun("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), img)
			if d := cs.MustRun("luksDump", img); !strings.Contains(d, "sector: "+tc.to) || !strings.Contains(d, "aes-cbc-essiv:sha256") {
				t.Fatalf("sector size or cipher not changed:\n%s", d)
			}
			checkPlain(t, cs, img, pass, plain)
		})
		t.Run("cryptsetup-"+tc.from+"-"+tc.to, func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("c%d.img", i), reencImg)
			plain := reencVolume(t, cs, img, pass, "--sector-size", tc.from)
			cs.MustRun("reencrypt", "--init-only", "--force-offline-reencrypt", "--batch-mode", "--sector-size", tc.to,
				"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass), img)
			if err := reencrypt(t, img, pass, luks2.ReencryptOptions{ResumeOnly: true, HotzoneSize: 1 << 20}); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if d := cs.MustRun("luksDump", img); !strings.Contains(d, "sector: "+tc.to) {
				t.Fatalf("sector size not changed:\n%s", d)
			}
			checkPlain(t, cs, img, pass, plain)
		})
	}
}
