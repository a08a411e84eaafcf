package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

func sum(t *testing.T, v *blkcrypt.Volume) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(v, 0, v.Size())); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestOpenEveryFormat: cryptsetup's own images of every format with a
// signature open through blkcrypt.Open with only a passphrase, Type
// detected; a VeraCrypt image (no signature) with its Type, and without it
// ErrNoHeader, as cryptsetup; a wrong passphrase is ErrWrongPassphrase
// whatever the format.
func TestOpenEveryFormat(t *testing.T) {
	ctx := context.Background()
	luks1 := filepath.Join(lukstest.Extract(t, "compatimage.img.xz"), "compatimage.img")
	luks2 := filepath.Join(lukstest.Extract(t, "compatimage2.img.xz"), "compatimage2.img")
	bitlkDir := filepath.Join(lukstest.Extract(t, "bitlk-images.tar.xz"), "bitlk-images")
	tcDir := filepath.Join(lukstest.Extract(t, "tcrypt-images.tar.xz"), "tcrypt-images")
	fvDir := filepath.Join(lukstest.Extract(t, "fvault2-images.tar.xz"), "fvault2-images")
	for _, c := range []struct {
		name, path, typ, pass, sha string
		narrow                     blkcrypt.TCRYPTOptions // keeps the wrong-passphrase search short
	}{
		{"luks1", luks1, "luks1", "compatkey", "", blkcrypt.TCRYPTOptions{}},
		{"luks2", luks2, "luks2", "compatkey", "", blkcrypt.TCRYPTOptions{}},
		// SHA-256 of the whole decrypted volume, from images.conf.
		{"bitlk", filepath.Join(bitlkDir, "bitlk-aes-xts-128.img"), "bitlk", "anaconda", "674e3a976927fd62f3fc26df2c695cac75b8d364e3b45393717efa971f16db0f", blkcrypt.TCRYPTOptions{}},
		{"veracrypt", filepath.Join(tcDir, "vc_1-sha512-xts-camellia-serpent-kuznyechik"), "tcrypt", "aaaaaaaaaaaa", "", blkcrypt.TCRYPTOptions{Hash: "sha512", Cipher: "kuznyechik"}},
		{"fvault2", filepath.Join(fvDir, "small"), "fvault2", "heslo123", "", blkcrypt.TCRYPTOptions{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := ""
			if c.typ == blkcrypt.TypeTCRYPT {
				if _, err := blkcrypt.Open(ctx, c.path, blkcrypt.OpenOptions{Passphrase: []byte(c.pass), ReadOnly: true}); !errors.Is(err, blkcrypt.ErrNoHeader) {
					t.Fatalf("VeraCrypt without its type: %v, want ErrNoHeader", err)
				}
				name = c.typ
			}
			v, err := blkcrypt.Open(ctx, c.path, blkcrypt.OpenOptions{Type: name, Passphrase: []byte(c.pass), ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if v.Type() != c.typ {
				t.Errorf("Type() = %q, want %q", v.Type(), c.typ)
			}
			if v.Size() <= 0 {
				t.Errorf("size %d", v.Size())
			}
			if c.sha != "" {
				if got := sum(t, v); got != c.sha {
					t.Errorf("decrypted SHA-256 %s, want %s", got, c.sha)
				}
			}
			v.Close()
			_, err = blkcrypt.Open(ctx, c.path, blkcrypt.OpenOptions{Type: name, Passphrase: []byte("wrong passphrase"), ReadOnly: true, TCRYPT: c.narrow})
			if !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
				t.Errorf("wrong passphrase: %v, want ErrWrongPassphrase", err)
			}
		})
	}
}

func fastFormat(t *testing.T, typ string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "v.img")
	if err := blkcrypt.Format(context.Background(), img, []byte("pw"), blkcrypt.FormatOptions{Type: typ, Size: 20 << 20,
		PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatal(err)
	}
	return img
}

// TestOpenAnyKeyslot: the zero OpenOptions tries every keyslot, so a
// passphrase in keyslot 1 opens; Keyslot restricts the search.
func TestOpenAnyKeyslot(t *testing.T) {
	ctx := context.Background()
	img := fastFormat(t, "luks2")
	if _, err := blkcrypt.AddKey(ctx, img, []byte("pw"), []byte("second"), blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}); err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("second")})
	if err != nil {
		t.Fatalf("passphrase of keyslot 1 with zero options: %v", err)
	}
	v.Close()
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("second"), Keyslot: blkcrypt.Slot(0)}); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
		t.Fatalf("keyslot 0 only: %v", err)
	}
}

// TestOpenDevice: any io.ReaderAt works; without WriterAt the volume is
// read-only; *os.File works as it is.
func TestOpenDevice(t *testing.T) {
	ctx := context.Background()
	img := fastFormat(t, "luks1")
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.OpenDevice(ctx, bytes.NewReader(raw), blkcrypt.OpenOptions{Passphrase: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	if !v.ReadOnly() || v.Type() != "luks1" {
		t.Errorf("reader-only device: read-only %v, type %q", v.ReadOnly(), v.Type())
	}
	if _, err := v.WriteAt([]byte{1}, 0); !errors.Is(err, blkcrypt.ErrReadOnly) {
		t.Errorf("write: %v", err)
	}
	v.Close()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err = blkcrypt.OpenDevice(ctx, f, blkcrypt.OpenOptions{Passphrase: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 5000)
	rand.Read(data)
	if _, err := v.WriteAt(data, 777); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	v, err = blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("pw"), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, len(data))
	if _, err := v.ReadAt(got, 777); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := blkcrypt.OpenDevice(ctx, bytes.NewReader(make([]byte, 1<<20)), blkcrypt.OpenOptions{}); !errors.Is(err, blkcrypt.ErrNoHeader) {
		t.Errorf("zeros, no passphrase: %v, want ErrNoHeader", err)
	}
}

// TestOpenCancel: an Argon2 keyslot of a high cost, and a TrueCrypt header
// search, return promptly with the context's error.
func TestOpenCancel(t *testing.T) {
	img := filepath.Join(t.TempDir(), "v.img")
	start := time.Now()
	if err := blkcrypt.Format(context.Background(), img, []byte("pw"), blkcrypt.FormatOptions{Size: 20 << 20,
		PBKDF: blkcrypt.PBKDFOptions{Type: "argon2id", Iterations: 4, MemoryKiB: 256 << 10, Parallel: 1}}); err != nil {
		t.Fatal(err)
	}
	derive := time.Since(start) // one derivation of the keyslot key
	t.Logf("one argon2id derivation (t=4, m=256 MiB): %v", derive)
	for _, c := range []struct {
		name string
		o    blkcrypt.OpenOptions
		path string
	}{
		{"argon2id", blkcrypt.OpenOptions{Passphrase: []byte("wrong")}, img},
		{"tcrypt search", blkcrypt.OpenOptions{Type: "tcrypt", Passphrase: []byte("wrong"), ReadOnly: true}, img},
	} {
		for _, want := range []error{context.Canceled, context.DeadlineExceeded} {
			var ctx context.Context
			var cancel context.CancelFunc
			if want == context.Canceled {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			}
			start := time.Now()
			_, err := blkcrypt.Open(ctx, c.path, c.o)
			took := time.Since(start)
			cancel()
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v in the chain", c.name, err, want)
			}
			// Generous: the point is not waiting for the whole derivation.
			if took > 100*time.Millisecond+time.Second || (c.name == "argon2id" && took > derive/2+200*time.Millisecond) {
				t.Errorf("%s: returned after %v (a derivation takes %v)", c.name, took, derive)
			}
		}
	}
}

// TestOpenLocking: a read-write open is exclusive, read-only opens share;
// the lock lasts until Close; cryptsetup (which takes the same flock on an
// image file) waits for it.
func TestOpenLocking(t *testing.T) {
	ctx := context.Background()
	img := fastFormat(t, "luks2")
	pw := []byte("pw")
	v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: pw})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: pw}); !errors.Is(err, blkcrypt.ErrBusy) {
		t.Errorf("second read-write open: %v, want ErrBusy", err)
	} else if !strings.Contains(err.Error(), "this process") {
		t.Errorf("busy error does not name the holder: %v", err)
	}
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: pw, ReadOnly: true}); !errors.Is(err, blkcrypt.ErrBusy) {
		t.Errorf("read-only open beside a read-write one: %v, want ErrBusy", err)
	}
	if _, err := blkcrypt.AddKey(ctx, img, pw, []byte("new"), blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}); !errors.Is(err, blkcrypt.ErrBusy) {
		t.Errorf("add-key while open: %v, want ErrBusy", err)
	}
	if cs, err := exec.LookPath("cryptsetup"); err == nil {
		// cryptsetup blocks on the lock: it must not finish while we hold it.
		cmd := exec.Command("timeout", "2", cs, "luksDump", img)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("cryptsetup luksDump ran while the image was locked:\n%s", out)
		}
	} else if os.Getenv("CI") != "" {
		t.Fatal("cryptsetup is needed (apt-get install cryptsetup-bin)")
	}
	v.Close()
	r1, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: pw, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: pw, ReadOnly: true})
	if err != nil {
		t.Fatalf("two read-only opens: %v", err)
	}
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: pw}); !errors.Is(err, blkcrypt.ErrBusy) {
		t.Errorf("read-write open beside read-only ones: %v, want ErrBusy", err)
	}
	r1.Close()
	r2.Close()
	if cs, err := exec.LookPath("cryptsetup"); err == nil {
		if out, err := exec.Command("timeout", "20", cs, "luksDump", img).CombinedOutput(); err != nil {
			t.Errorf("cryptsetup luksDump after Close: %v\n%s", err, out)
		}
	}
}
