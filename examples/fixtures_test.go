package examples

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
)

// Facts below come from the fixtures' README (shared/fixtures/cryptsetup),
// which restates cryptsetup's own test programs, and from images.conf in
// bitlk-images.tar.xz; none of them were computed by blkcrypt.
const (
	// compatimage.img: SHA-256 of the whole mapped device (compat-test).
	luks1Sum = "7428e8f2436882a07eb32765086f5c899474c08b5576f556b573d2aabdf923e8"
	// compatimage2.img: volume key; its one data sector is zero on disk.
	luks2Key = "d47ee2cdc40f39be9a3e8d72a149cc4d"
	// fvault2-images/small: SHA-256 of the mapped logical volume.
	fvault2Sum = "2c662e36c0f7e2f5583e6a939bbcbdc660805692d0fccaa45ad4052beb3b8e18"
)

func volumeSum(t *testing.T, v *blkcrypt.Volume) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(v, 0, v.Size())); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// bitlkConf reads images.conf's PW and SHA256SUM for one image.
func bitlkConf(t *testing.T, conf, image string) (pw, sum string) {
	t.Helper()
	f, err := os.Open(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			in = line == "["+image+"]"
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && in {
			switch k {
			case "PW":
				pw = v
			case "SHA256SUM":
				sum = v
			}
		}
	}
	if pw == "" || sum == "" {
		t.Fatalf("images.conf has no PW and SHA256SUM for %s", image)
	}
	return pw, sum
}

// essivCBCZeroSector is what a zero ciphertext sector 0 decrypts to under
// aes-cbc-essiv:sha256 with key, computed by OpenSSL: the IV is the
// sector number encrypted with SHA-256(key), then one CBC decryption.
func essivCBCZeroSector(t *testing.T, key []byte) []byte {
	t.Helper()
	openssl := need(t, "openssl", "openssl")
	salt := sha256.Sum256(key)
	run := func(stdin []byte, args ...string) []byte {
		cmd := exec.Command(openssl, args...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("openssl %v: %v", args, err)
		}
		return out
	}
	iv := run(make([]byte, 16), "enc", "-aes-256-ecb", "-nopad", "-K", hex.EncodeToString(salt[:]))
	return run(make([]byte, 512), "enc", "-d", "-aes-128-cbc", "-nopad", "-K", hex.EncodeToString(key), "-iv", hex.EncodeToString(iv))
}

// fatSerial reads the volume serial of a FAT boot sector (FAT32 keeps it
// at 0x43, FAT12/16 at 0x27).
func fatSerial(boot []byte) uint32 {
	if string(boot[0x52:0x57]) == "FAT32" {
		return binary.LittleEndian.Uint32(boot[0x43:])
	}
	return binary.LittleEndian.Uint32(boot[0x27:])
}

// TestOpenFixtures opens cryptsetup's test images of five formats through
// blkcrypt.Open with only a passphrase (and, for VeraCrypt, which has no
// signature, its type): the type is detected, the plaintext is what the
// fixtures' README says, and a wrong passphrase is
// blkcrypt.ErrWrongPassphrase for every format.
func TestOpenFixtures(t *testing.T) {
	ctx := context.Background()
	bitlkDir := filepath.Join(fixture(t, "bitlk-images.tar.xz"), "bitlk-images")
	bitlkPW, bitlkSum := bitlkConf(t, filepath.Join(bitlkDir, "images.conf"), "bitlk-aes-xts-128")
	key2, _ := hex.DecodeString(luks2Key)
	for _, c := range []struct {
		name, archive, file, typ, pass string
		check                          func(t *testing.T, v *blkcrypt.Volume)
	}{
		{"luks1", "compatimage.img.xz", "compatimage.img", "luks1", "compatkey", func(t *testing.T, v *blkcrypt.Volume) {
			if got := volumeSum(t, v); got != luks1Sum {
				t.Errorf("plaintext SHA-256 %s, want %s", got, luks1Sum)
			}
		}},
		{"luks2", "compatimage2.img.xz", "compatimage2.img", "luks2", "compatkey", func(t *testing.T, v *blkcrypt.Volume) {
			got := make([]byte, v.Size())
			if _, err := v.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if want := essivCBCZeroSector(t, key2); !bytes.Equal(got, want) {
				t.Errorf("plaintext differs from OpenSSL's decryption of the zero sector")
			}
		}},
		{"veracrypt", "tcrypt-images.tar.xz", "tcrypt-images/vc_1-sha256-xts-aes", "tcrypt", "aaaaaaaaaaaa", func(t *testing.T, v *blkcrypt.Volume) {
			boot := make([]byte, 512)
			if _, err := v.ReadAt(boot, 0); err != nil {
				t.Fatal(err)
			}
			if s := fatSerial(boot); s != 0xDEADBABE {
				t.Errorf("FAT serial %08X, want DEADBABE", s)
			}
		}},
		{"bitlk", "", filepath.Join(bitlkDir, "bitlk-aes-xts-128.img"), "bitlk", bitlkPW, func(t *testing.T, v *blkcrypt.Volume) {
			if got := volumeSum(t, v); got != bitlkSum {
				t.Errorf("plaintext SHA-256 %s, want %s", got, bitlkSum)
			}
		}},
		{"fvault2", "fvault2-images.tar.xz", "fvault2-images/small", "fvault2", "heslo123", func(t *testing.T, v *blkcrypt.Volume) {
			if got := volumeSum(t, v); got != fvault2Sum {
				t.Errorf("plaintext SHA-256 %s, want %s", got, fvault2Sum)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.file
			if c.archive != "" {
				path = filepath.Join(fixture(t, c.archive), c.file)
			}
			// A device without a signature is searched for a
			// TrueCrypt/VeraCrypt header only when asked, as cryptsetup.
			name := ""
			if c.typ == blkcrypt.TypeTCRYPT {
				name = c.typ
			}
			v, err := blkcrypt.Open(ctx, path, blkcrypt.OpenOptions{Type: name, Passphrase: []byte(c.pass)})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer v.Close()
			if v.Type() != c.typ {
				t.Errorf("Type() = %q, want %q", v.Type(), c.typ)
			}
			c.check(t, v)
			if err := v.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			_, err = blkcrypt.Open(ctx, path, blkcrypt.OpenOptions{Type: name, Passphrase: []byte("not the passphrase")})
			if !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
				t.Errorf("wrong passphrase: %v, want an error matching blkcrypt.ErrWrongPassphrase", err)
			}
		})
	}
}
