package loopaes

// Known answers come from aespipe (Debian package aespipe, Jari Ruusu's
// loop-AES userspace tool, independent of blkcrypt and cryptsetup), run at
// test time: it encrypts random data with random key files of 1, 64 and 65
// lines, for every key length and password hash it offers, at several IV
// offsets, and blkcrypt must decrypt it. A missing aespipe fails the test.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func needAespipe(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("aespipe")
	if err != nil {
		t.Fatalf("aespipe not found: install the Debian package aespipe (loop-AES's userspace tool), which the loop-AES known answers come from")
	}
	return p
}

const keyChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// keyfile makes n random key lines of length l, as loop-AES's key
// generation prints them (base64-like text, one per line).
func keyfile(n, l int) []byte {
	var b bytes.Buffer
	r := make([]byte, l)
	for i := 0; i < n; i++ {
		rand.Read(r)
		for _, c := range r {
			b.WriteByte(keyChars[int(c)%len(keyChars)])
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func aespipe(t *testing.T, bin string, args []string, keys, in []byte) []byte {
	t.Helper()
	kf := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(kf, keys, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(args, "-P", kf)...)
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("aespipe %v: %v: %s", args, err, errb.String())
	}
	return out.Bytes()
}

func TestAgainstAespipe(t *testing.T) {
	bin := needAespipe(t)
	plain := make([]byte, 70*512) // more than 64 sectors: every lmk subkey
	rand.Read(plain)
	n := 0
	for _, keys := range []int{1, 64, 65} {
		for _, e := range []struct {
			mode string
			size int
		}{{"aes128", 16}, {"aes192", 24}, {"aes256", 32}} {
			for _, h := range []string{"", "sha256", "sha384", "sha512", "rmd160"} {
				if h == "rmd160" && e.size > 20 {
					continue // RIPEMD-160 gives 20 bytes only
				}
				for _, iv := range []uint64{0, 3, 64, 4294967290} {
					if h != "" && iv != 3 {
						continue
					}
					kf := keyfile(keys, 20+keys%7)
					args := []string{"-e", e.mode, "-O", fmt.Sprint(iv)}
					if h != "" {
						args = append(args, "-H", h)
					}
					ct := aespipe(t, bin, args, kf, plain)
					name := fmt.Sprintf("%d keys, %s, hash %q, IV offset %d", keys, e.mode, h, iv)
					c, count, err := NewCipher(kf, Options{KeySize: e.size, Hash: h, Skip: iv})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if count != keys {
						t.Errorf("%s: %d keys parsed", name, count)
					}
					got := make([]byte, len(ct))
					if err := c.DecryptSectors(got, ct, 0); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, plain) {
						t.Errorf("%s: blkcrypt does not decrypt aespipe's output", name)
					}
					again := make([]byte, len(plain))
					if err := c.EncryptSectors(again, plain, 0); err != nil || !bytes.Equal(again, ct) {
						t.Errorf("%s: blkcrypt's encryption differs from aespipe's (%v)", name, err)
					}
					// And aespipe decrypts what blkcrypt wrote.
					if back := aespipe(t, bin, append(args, "-d"), kf, again); !bytes.Equal(back, plain) {
						t.Errorf("%s: aespipe does not decrypt blkcrypt's output", name)
					}
					n++
				}
			}
		}
	}
	t.Logf("%d aespipe cases", n)
}

// TestVolume: data at an offset, IV numbers from --skip (default: the
// offset), through the Volume.
func TestVolume(t *testing.T) {
	bin := needAespipe(t)
	kf := keyfile(65, 32)
	plain := make([]byte, 100*512)
	rand.Read(plain)
	for _, c := range []struct{ offset, skip uint64 }{{0, 0}, {8, 8}, {8, 0}, {16, 1000}} {
		ct := aespipe(t, bin, []string{"-e", "aes256", "-O", fmt.Sprint(c.skip)}, kf, plain)
		img := append(make([]byte, c.offset*512), ct...)
		dev := &memDev{b: img}
		v, err := Open(dev, int64(len(img)), kf, Options{KeySize: 32, Offset: c.offset, Skip: c.skip, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(plain))
		if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, plain) || v.Size() != int64(len(plain)) {
			t.Errorf("offset %d skip %d: %v, size %d", c.offset, c.skip, err, v.Size())
		}
		if _, err := v.WriteAt(got[:10], 0); err == nil {
			t.Error("read-only volume accepted a write")
		}
		v.Close()
	}
	if _, err := Open(&memDev{b: make([]byte, 4096)}, 4096, kf, Options{Offset: 8}); !errors.Is(err, ErrInvalid) {
		t.Errorf("offset at the end: %v", err)
	}
	if _, err := Open(&memDev{b: make([]byte, 4096)}, 4096, kf, Options{Offset: 1, Size: 8}); !errors.Is(err, ErrInvalid) {
		t.Errorf("size too large: %v", err)
	}
}

func TestParseKeyfile(t *testing.T) {
	line := strings.Repeat("k", 20)
	lines := func(n int, sep string) string { return strings.Repeat(line+sep, n) }
	for _, c := range []struct {
		name, text string
		keys       int
		err        error
	}{
		{"one", line + "\n", 1, nil},
		{"one CRLF", line + "\r\n", 1, nil},
		{"64", lines(64, "\n"), 64, nil},
		{"65 with blank lines", lines(65, "\n\n\r\n"), 65, nil},
		{"leading blank line", "\n" + lines(64, "\n"), 0, ErrKeyfile}, // an empty first key, as cryptsetup reads it
		{"empty", "", 0, ErrKeyfile},
		{"unterminated", line, 0, ErrKeyfile},
		{"2 keys", lines(2, "\n"), 0, ErrKeyfile},
		{"63 keys", lines(63, "\n"), 0, ErrKeyfile},
		{"66 keys", lines(66, "\n"), 0, ErrKeyfile},
		{"unequal", lines(63, "\n") + "x\n", 0, ErrKeyfile},
		{"blank only", "\n\n", 0, ErrKeyfile},
		{"gpg", "-----BEGIN PGP MESSAGE-----\n\nhQEMA...\n", 0, ErrGPG},
	} {
		keys, err := ParseKeyfile([]byte(c.text))
		if !errors.Is(err, c.err) || len(keys) != c.keys {
			t.Errorf("%s: %d keys, %v; want %d, %v", c.name, len(keys), err, c.keys, c.err)
		}
		for _, k := range keys {
			if string(k) != line {
				t.Errorf("%s: key %q", c.name, k)
			}
		}
	}
}

func TestVolumeKeyAndSpec(t *testing.T) {
	keys := [][]byte{[]byte("abc")}
	// SHA-256("abc") = ba7816bf…; one key: no tweak.
	k, err := VolumeKey(keys, 16, "")
	if err != nil || fmt.Sprintf("%x", k) != "ba7816bf8f01cfea414140de5dae2223" {
		t.Errorf("%x %v", k, err)
	}
	keys64 := make([][]byte, 64)
	for i := range keys64 {
		keys64[i] = []byte("abc")
	}
	k, _ = VolumeKey(keys64, 16, "")
	if len(k) != 64*16 || k[0] != 0xba^0x55 || k[16] != 0xba^0x55 {
		t.Errorf("64 keys: % x", k[:17])
	}
	k, _ = VolumeKey(append(keys64, []byte("abc")), 32, "")
	if len(k) != 65*32 || k[0] != 0xdd^0xf4 { // SHA-512("abc") = ddaf35a1…
		t.Errorf("65 keys: % x", k[:2])
	}
	if _, err := VolumeKey(keys, 24, "rmd160"); !errors.Is(err, ErrInvalid) {
		t.Errorf("24-byte key from RIPEMD-160: %v", err)
	}
	if _, err := VolumeKey(keys, 16, "md5"); !errors.Is(err, ErrInvalid) {
		t.Errorf("md5: %v", err)
	}
	if _, err := VolumeKey(keys, 20, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("160-bit key without a hash: %v", err)
	}
	for n, want := range map[int]string{1: "aes-cbc-plain64", 64: "aes:64-cbc-lmk", 65: "aes:64-cbc-lmk"} {
		if s := Spec("aes", n); s != want {
			t.Errorf("Spec(%d) = %s", n, s)
		}
	}
}

type memDev struct{ b []byte }

func (m *memDev) ReadAt(p []byte, off int64) (int, error)  { return copy(p, m.b[off:]), nil }
func (m *memDev) WriteAt(p []byte, off int64) (int, error) { return copy(m.b[off:], p), nil }
func (m *memDev) Sync() error                              { return nil }
func (m *memDev) Close() error                             { return nil }
