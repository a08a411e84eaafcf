//go:build linux

package cephtest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/cephtest"
	"github.com/blkcrypt/blkcrypt/internal/cli"
)

func TestMain(m *testing.M) { cephtest.Main(m) }

// imageSize is every test image's size: room for LUKS2's 16 MiB of header
// and keyslots and 16 MiB of data.
const imageSize = 32 << 20

func randBytes(t testing.TB, n int64) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// blkcryptCLI runs a blkcrypt verb in-process and fails the test unless it
// exits 0; it returns stdout.
func blkcryptCLI(t testing.TB, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cli.Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb}
	if code := cli.Main(context.Background(), args, env); code != 0 {
		t.Fatalf("blkcrypt %v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

var keyBitsRE = regexp.MustCompile(`(?m)^(?:MK bits:|\s+Key:)\s+(\d+)`)

// keyBits is the volume key size `blkcrypt dump` shows.
func keyBits(t testing.TB, uri string) int {
	t.Helper()
	out := blkcryptCLI(t, "dump", uri)
	m := keyBitsRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no key size in blkcrypt dump:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// readAll reads the whole volume.
func readAll(t testing.TB, v *blkcrypt.Volume) []byte {
	t.Helper()
	b := make([]byte, v.Size())
	if _, err := v.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatalf("reading the volume: %v", err)
	}
	return b
}

// writeMixed writes want over the whole volume in requests of varying
// size, some not sector-aligned (read-modify-write inside the Volume), as
// a file system would, and flushes.
func writeMixed(t testing.TB, v *blkcrypt.Volume, want []byte) {
	t.Helper()
	sizes := []int{1 << 20, 4096, 65536, 1000, 3 << 20, 513, 128 << 10}
	for off, i := 0, 0; off < len(want); i++ {
		n := min(sizes[i%len(sizes)], len(want)-off)
		if _, err := v.WriteAt(want[off:off+n], int64(off)); err != nil {
			t.Fatalf("write of %d at %d: %v", n, off, err)
		}
		off += n
	}
	if err := v.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// checkLayout checks what librbd's own format gives an image and what its
// loader needs: aes-xts-plain64, the data offset a multiple of the object
// size, 4096-byte sectors for LUKS2 (LUKS1 has 512), the data running to
// the end of the image.
func checkLayout(t testing.TB, c *cephtest.Cluster, image, luksType string, v *blkcrypt.Volume) {
	t.Helper()
	obj := c.ObjectSize(t, image)
	if v.DataOffset()%obj != 0 {
		t.Errorf("data offset %d is not a multiple of the object size %d", v.DataOffset(), obj)
	}
	if v.DataOffset()+v.Size() != imageSize {
		t.Errorf("data offset %d + size %d != image size %d", v.DataOffset(), v.Size(), imageSize)
	}
	want := 4096
	if luksType == "luks1" {
		want = 512
	}
	if v.SectorSize() != want {
		t.Errorf("sector size %d, want %d", v.SectorSize(), want)
	}
	if s := v.Cipher().Spec().String(); s != "aes-xts-plain64" {
		t.Errorf("cipher %s, want aes-xts-plain64", s)
	}
}

func open(t testing.TB, uri string, pass []byte, readOnly bool) *blkcrypt.Volume {
	t.Helper()
	v, err := blkcrypt.Open(context.Background(), uri, blkcrypt.OpenOptions{Passphrase: pass, ReadOnly: readOnly})
	if err != nil {
		t.Fatalf("blkcrypt.Open %s: %v", uri, err)
	}
	return v
}

// TestRBDLibrbdFormatted: images encrypted by `rbd encryption format`
// (LUKS1; LUKS2 with the default aes-256 and with --cipher-alg aes-128),
// both ways; for LUKS1 also a wrong passphrase, refused by both. qemu writes plaintext through librbd's encryption; blkcrypt,
// over qemu-nbd's raw export of the same image as an NBD URI, reads exactly
// those bytes. Then blkcrypt writes new plaintext through the URI (aligned
// and unaligned requests) and librbd, through qemu's rbd driver, reads
// exactly that.
func TestRBDLibrbdFormatted(t *testing.T) {
	c := cephtest.Get(t)
	for _, tc := range []struct {
		name, typ, alg string
		keyBits        int
	}{
		{"luks1", "luks1", "", 512},
		{"luks2", "luks2", "", 512},
		{"luks2-aes128", "luks2", "aes-128", 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// `rbd encryption format` benchmarks its KDF for seconds;
			// the three images are formatted side by side.
			t.Parallel()
			pass := []byte("librbd passphrase for " + tc.name)
			passFile := writeFile(t, "pass", pass)
			img := c.NewImage(t, imageSize)
			args := []string{"encryption", "format", "rbd/" + img, tc.typ, passFile}
			if tc.alg != "" {
				args = append(args, "--cipher-alg", tc.alg)
			}
			c.Run(t, "rbd", args...)
			qf := cephtest.QemuFormat(tc.typ)
			size := c.LibrbdSize(t, img, qf, passFile)

			// librbd writes, blkcrypt reads.
			first := randBytes(t, size)
			c.LibrbdWrite(t, img, qf, passFile, writeFile(t, "first", first))
			e := c.Export(t, img, 1)
			if got := keyBits(t, e.URI); got != tc.keyBits {
				t.Errorf("volume key of %d bits, want %d", got, tc.keyBits)
			}
			if tc.typ == "luks1" {
				checkWrongPassphrase(t, c, img, e.URI)
			}
			v := open(t, e.URI, pass, false)
			if v.Size() != size {
				t.Fatalf("blkcrypt sees %d bytes of plaintext, librbd %d", v.Size(), size)
			}
			checkLayout(t, c, img, tc.typ, v)
			if !bytes.Equal(readAll(t, v), first) {
				t.Fatal("blkcrypt read other bytes than librbd wrote")
			}

			// blkcrypt writes, librbd reads.
			second := randBytes(t, size)
			writeMixed(t, v, second)
			if err := v.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			// qemu-nbd closes the image (flushing librbd's cache and
			// releasing the exclusive lock) before librbd opens it again.
			e.Stop(t)
			if !bytes.Equal(c.LibrbdRead(t, img, qf, passFile), second) {
				t.Fatal("librbd read other bytes than blkcrypt wrote")
			}
		})
	}
}

// TestRBDBlkcryptFormatted: `blkcrypt format` over qemu-nbd's raw export
// of a fresh RBD image, with the recipe of docs/scaling.md: LUKS1 with
// --align-payload at the object size (its default 2 MiB offset is not a
// multiple of 4 MiB objects), LUKS2 with the defaults (16 MiB offset,
// 4096-byte sectors). blkcrypt writes, librbd (qemu's rbd driver with
// encrypt.format) reads the same plaintext; librbd writes, blkcrypt reads.
func TestRBDBlkcryptFormatted(t *testing.T) {
	c := cephtest.Get(t)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			pass := []byte("blkcrypt passphrase for " + typ)
			passFile := writeFile(t, "pass", pass)
			img := c.NewImage(t, imageSize)
			obj := c.ObjectSize(t, img)
			e := c.Export(t, img, 1)
			args := []string{"format", "-q", e.URI, "--type", typ, "--key-file", passFile}
			if typ == "luks1" {
				args = append(args, "--align-payload", strconv.FormatInt(obj/512, 10), "--pbkdf-force-iterations", "1000")
			} else {
				args = append(args, "--pbkdf", "argon2id", "--pbkdf-memory", "65536", "--pbkdf-force-iterations", "4")
			}
			blkcryptCLI(t, args...)
			v := open(t, e.URI, pass, false)
			checkLayout(t, c, img, typ, v)
			want := randBytes(t, v.Size())
			writeMixed(t, v, want)
			if err := v.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			e.Stop(t)

			qf := cephtest.QemuFormat(typ)
			if size := c.LibrbdSize(t, img, qf, passFile); size != int64(len(want)) {
				t.Fatalf("librbd sees %d bytes of plaintext, blkcrypt %d", size, len(want))
			}
			if !bytes.Equal(c.LibrbdRead(t, img, qf, passFile), want) {
				t.Fatal("librbd read other bytes than blkcrypt wrote")
			}

			// And back: librbd overwrites the first 3 MiB.
			head := randBytes(t, 3<<20)
			c.LibrbdWrite(t, img, qf, passFile, writeFile(t, "head", head))
			copy(want, head)
			e = c.Export(t, img, 1)
			v = open(t, e.URI, pass, true)
			defer v.Close()
			if !bytes.Equal(readAll(t, v), want) {
				t.Fatal("blkcrypt read other bytes than librbd wrote")
			}
		})
	}
}

// checkWrongPassphrase: a wrong passphrase on a librbd-formatted image is
// refused by blkcrypt as by librbd, and nothing is written.
func checkWrongPassphrase(t *testing.T, c *cephtest.Cluster, img, uri string) {
	t.Helper()
	before := rawHash(t, uri)
	_, err := blkcrypt.Open(context.Background(), uri, blkcrypt.OpenOptions{Passphrase: []byte("a wrong one")})
	if err == nil {
		t.Fatal("a wrong passphrase opened the image")
	}
	if !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
		t.Errorf("wrong passphrase: %v, want ErrWrongPassphrase", err)
	}
	if after := rawHash(t, uri); after != before {
		t.Fatal("a refused open changed the image")
	}
	wrong := writeFile(t, "wrong", []byte("a wrong one"))
	if out, err := c.Try("qemu-img", "info", "--object", "secret,id=sec0,file="+wrong, "--image-opts", c.EncryptedOpts(img, "luks")); err == nil {
		t.Fatalf("librbd opened the image with the wrong passphrase: %s", out)
	}
}

// rawHash is a digest of the image's raw bytes (header and ciphertext).
func rawHash(t testing.TB, uri string) string {
	t.Helper()
	d, err := blkcrypt.OpenURI(context.Background(), uri, true)
	if err != nil {
		t.Fatalf("OpenURI: %v", err)
	}
	defer d.Close()
	size, err := d.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	if _, err := d.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
