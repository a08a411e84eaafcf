package luks2_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// A small datashift layout: a 1 MiB shift (--reduce-device-size 2M) and
// 3.5 MiB of plaintext, so the run has every kind of hotzone: two whole
// ones, a short one (0.5 MiB) and the last from the moved copy.
const (
	esShift = 1 << 20
	esData  = 3<<20 + 512<<10
	esDev   = esData + 2*esShift
)

// plainImage writes a device of size bytes whose first n bytes are random
// plaintext (the rest random too: a shrunk filesystem leaves garbage).
func plainImage(t *testing.T, dir, name string, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func openRW(t *testing.T, p string) luks2.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return luks2.File{File: f}
}

// dataWithKey decrypts n bytes of the finished volume whose header is hdr
// (its data on data) with the volume key cryptsetup dumps.
func dataWithKey(t *testing.T, cs *lukstest.Cryptsetup, hdr, data string, pass []byte, n int) []byte {
	t.Helper()
	_, h := readImage(t, hdr)
	if h.ReencryptionStatus() != nil {
		t.Fatalf("%s: the reencryption is not finished", hdr)
	}
	key := cs.VolumeKey(hdr, pass)
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize(), IVOffset: h.IVTweak()})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, n)
	if err := c.DecryptSectors(out, raw[h.DataOffset():h.DataOffset()+int64(n)], 0); err != nil {
		t.Fatal(err)
	}
	return out
}

func csResume(t *testing.T, cs *lukstest.Cryptsetup, pass []byte, img string, extra ...string) {
	t.Helper()
	cs.MustRun(append(append([]string{"reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass)}, extra...), img)...)
}

func needDump(t *testing.T, cs *lukstest.Cryptsetup, img string, want ...string) string {
	t.Helper()
	out := cs.MustRun("luksDump", img)
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("cryptsetup luksDump of %s lacks %q:\n%s", img, w, out)
		}
	}
	return out
}

// TestEncryptDatashiftInterop: --encrypt with the header on the device, both
// ways: a blkcrypt run stopped after two hotzones is finished by cryptsetup,
// and cryptsetup's initialised run is finished by blkcrypt. cryptsetup's
// volume key decrypts the data at the new offset to the original
// plaintext, and cryptsetup opens the result.
func TestEncryptDatashiftInterop(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("encrypt in place")
	for _, who := range []string{"blkcrypt-then-cryptsetup", "cryptsetup-then-blkcrypt"} {
		t.Run(who, func(t *testing.T) {
			cs := cs.With(t)
			img, orig := plainImage(t, dir, who+".img", esDev)
			if who == "blkcrypt-then-cryptsetup" {
				err := luks2.Encrypt(context.Background(), openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * esShift, Keyslot: reencKDF, StopAfter: 2})
				if err != nil {
					t.Fatal(err)
				}
				needDump(t, cs, img, "Mode:       encrypt", "Direction:  backward", "Resilience: datashift", "backup-moved-segment", "online-reencrypt-v2")
				csResume(t, cs, pass, img)
			} else {
				cs.MustRun(append([]string{"reencrypt", "--encrypt", "--type", "luks2", "--reduce-device-size", "2M", "--init-only",
					"--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass)}, append(csFast, img)...)...)
				err := luks2.Reencrypt(context.Background(), openRW(t, img), pass, luks2.ReencryptOptions{ResumeOnly: true})
				if err != nil {
					t.Fatal(err)
				}
			}
			out := needDump(t, cs, img, "offset: 1048576 [bytes]", "length: (whole device)")
			if strings.Contains(out, "reencrypt") || strings.Contains(out, "linear") {
				t.Fatalf("not finished:\n%s", out)
			}
			if !cs.TestPassphrase(img, pass, -1) {
				t.Fatal("cryptsetup does not open the encrypted volume")
			}
			if got := dataWithKey(t, cs, img, img, pass, esData); !bytes.Equal(got, orig[:esData]) {
				t.Fatal("the encrypted volume does not hold the original plaintext")
			}
			// The moved copy of the first MiB of plaintext is wiped.
			raw, _ := os.ReadFile(img)
			if bytes.Contains(raw[esDev-esShift:], orig[:4096]) {
				t.Fatal("the moved plaintext copy is still on the device")
			}
		})
	}
}

// TestEncryptDetachedInterop: --encrypt --header FILE keeps the data in
// place and the device size; a run stopped after one hotzone is finished
// by cryptsetup, and cryptsetup's initialised run by blkcrypt.
func TestEncryptDetachedInterop(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("detached")
	const size = 4 << 20
	for _, tc := range []struct{ who, res string }{
		{"blkcrypt-then-cryptsetup", "checksum"}, {"cryptsetup-then-blkcrypt", "checksum"},
		{"blkcrypt-then-cryptsetup", "journal"}, {"cryptsetup-then-blkcrypt", "journal"},
		{"blkcrypt-then-cryptsetup", "none"}, {"cryptsetup-then-blkcrypt", "none"},
	} {
		who := tc.who + "-" + tc.res
		t.Run(who, func(t *testing.T) {
			cs := cs.With(t)
			img, orig := plainImage(t, dir, who+".img", size)
			hdr := filepath.Join(dir, who+".hdr")
			if tc.who == "blkcrypt-then-cryptsetup" {
				f, err := os.OpenFile(hdr, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				err = luks2.Encrypt(context.Background(), openRW(t, img), pass, luks2.EncryptOptions{Header: luks2.File{File: f}, Resilience: tc.res, Keyslot: reencKDF, HotzoneSize: 1 << 20, StopAfter: 1})
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				needDump(t, cs, hdr, "Mode:       encrypt", "Direction:  forward", "Resilience: "+tc.res)
				csResume(t, cs, pass, img, "--header", hdr)
			} else {
				cs.MustRun(append([]string{"reencrypt", "--encrypt", "--type", "luks2", "--header", hdr, "--init-only", "--resilience", tc.res,
					"--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass)}, append(csFast, img)...)...)
				f := openRW(t, hdr)
				err := luks2.Reencrypt(context.Background(), f, pass, luks2.ReencryptOptions{ResumeOnly: true, Data: openRW(t, img), HotzoneSize: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
			}
			if st, _ := os.Stat(img); st.Size() != size {
				t.Fatalf("the data device changed size to %d", st.Size())
			}
			if !cs.TestPassphrase(hdr, pass, -1) {
				t.Fatal("cryptsetup does not open the encrypted volume")
			}
			if got := dataWithKey(t, cs, hdr, img, pass, size); !bytes.Equal(got, orig) {
				t.Fatal("the encrypted volume does not hold the original plaintext")
			}
		})
	}
}

// detachedVolume formats hdr for the data file img with cryptsetup and
// fills img with random plaintext encrypted under the volume key.
func detachedVolume(t *testing.T, cs *lukstest.Cryptsetup, dir, name string, pass []byte, size int) (hdr, img string, plain []byte) {
	t.Helper()
	img, plain = plainImage(t, dir, name+".img", size)
	hdr = filepath.Join(dir, name+".hdr")
	cs.MustRun(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--header", hdr, "--luks2-keyslots-size", "1M", "--key-file", cs.KeyFile(pass)}, append(csFast, img)...)...)
	_, h := readImage(t, hdr)
	c, err := sector.New(h.Cipher(), cs.VolumeKey(hdr, pass), sector.Options{SectorSize: h.SectorSize()})
	if err != nil {
		t.Fatal(err)
	}
	ct := make([]byte, size)
	if err := c.EncryptSectors(ct, plain, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, ct, 0o600); err != nil {
		t.Fatal(err)
	}
	return hdr, img, plain
}

// TestDecryptDetachedInterop: --decrypt --header FILE both ways; the data
// device ends as the original plaintext byte for byte, and the header as
// cryptsetup leaves it (one linear segment, no keyslots).
func TestDecryptDetachedInterop(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("decrypt me")
	const size = 3 << 20
	for _, tc := range []struct{ who, res string }{
		{"blkcrypt-then-cryptsetup", "checksum"}, {"cryptsetup-then-blkcrypt", "checksum"},
		{"blkcrypt-then-cryptsetup", "journal"}, {"cryptsetup-then-blkcrypt", "none"},
	} {
		who := tc.who + "-" + tc.res
		t.Run(who, func(t *testing.T) {
			cs := cs.With(t)
			hdr, img, plain := detachedVolume(t, cs, dir, who, pass, size)
			if tc.who == "blkcrypt-then-cryptsetup" {
				err := luks2.Decrypt(context.Background(), openRW(t, hdr), openRW(t, img), pass, luks2.DecryptOptions{Resilience: tc.res, Keyslot: reencKDF, HotzoneSize: 1 << 20, StopAfter: 1})
				if err != nil {
					t.Fatal(err)
				}
				needDump(t, cs, hdr, "Mode:       decrypt", "Direction:  backward", "Resilience: "+tc.res, "linear")
				csResume(t, cs, pass, img, "--header", hdr)
			} else {
				cs.MustRun(append([]string{"reencrypt", "--decrypt", "--header", hdr, "--init-only", "--resilience", tc.res,
					"--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass)}, img)...)
				err := luks2.Reencrypt(context.Background(), openRW(t, hdr), pass, luks2.ReencryptOptions{ResumeOnly: true, Data: openRW(t, img), HotzoneSize: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
			}
			got, _ := os.ReadFile(img)
			if !bytes.Equal(got, plain) {
				t.Fatal("the decrypted device is not the original plaintext")
			}
			out := needDump(t, cs, hdr, "0: linear")
			if strings.Contains(out, "luks2") || strings.Contains(out, "reencrypt") {
				t.Fatalf("keyslots or reencryption left:\n%s", out)
			}
		})
	}
}

// TestEncryptDecryptBadInput: each refusal leaves every byte as it was.
func TestEncryptDecryptBadInput(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("right")
	ctx := context.Background()
	same := func(t *testing.T, p string, before []byte) {
		t.Helper()
		after, _ := os.ReadFile(p)
		if !bytes.Equal(before, after) {
			t.Fatalf("%s was written", p)
		}
	}
	t.Run("reduce smaller than the header", func(t *testing.T) {
		img, orig := plainImage(t, dir, "small-reduce.img", esDev)
		err := luks2.Encrypt(ctx, openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 256 << 10, Keyslot: reencKDF})
		if !errors.Is(err, luks2.ErrInvalidOptions) || !strings.Contains(err.Error(), "header") {
			t.Fatalf("got %v", err)
		}
		same(t, img, orig)
	})
	t.Run("device too small", func(t *testing.T) {
		img, orig := plainImage(t, dir, "tiny.img", 2*esShift+esShift/2)
		err := luks2.Encrypt(ctx, openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * esShift, Keyslot: reencKDF})
		if !errors.Is(err, luks2.ErrDeviceTooSmall) {
			t.Fatalf("got %v", err)
		}
		same(t, img, orig)
	})
	t.Run("unknown cipher", func(t *testing.T) {
		img, orig := plainImage(t, dir, "cipher.img", esDev)
		err := luks2.Encrypt(ctx, openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * esShift, Cipher: "nosuch-xts-plain64", Keyslot: reencKDF})
		if !errors.Is(err, luks2.ErrInvalidOptions) {
			t.Fatalf("got %v", err)
		}
		same(t, img, orig)
	})
	t.Run("already LUKS", func(t *testing.T) {
		img, _ := plainImage(t, dir, "luks.img", esDev)
		cs.MustRun(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--key-file", cs.KeyFile(pass)}, append(csFast, img)...)...)
		orig, _ := os.ReadFile(img)
		err := luks2.Encrypt(ctx, openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * esShift, Keyslot: reencKDF})
		if !errors.Is(err, luks2.ErrAlreadyLUKS) || !errors.Is(err, luks2.ErrInvalidOptions) {
			t.Fatalf("got %v", err)
		}
		same(t, img, orig)
	})
	t.Run("in progress", func(t *testing.T) {
		img, _ := plainImage(t, dir, "progress.img", esDev)
		if err := luks2.Encrypt(ctx, openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * esShift, Keyslot: reencKDF, InitOnly: true}); err != nil {
			t.Fatal(err)
		}
		orig, _ := os.ReadFile(img)
		for name, run := range map[string]func() error{
			"wrong passphrase": func() error {
				return luks2.Reencrypt(ctx, openRW(t, img), []byte("wrong"), luks2.ReencryptOptions{ResumeOnly: true})
			},
			"other resilience": func() error {
				return luks2.Reencrypt(ctx, openRW(t, img), pass, luks2.ReencryptOptions{ResumeOnly: true, Resilience: "journal"})
			},
			"new cipher": func() error {
				return luks2.Reencrypt(ctx, openRW(t, img), pass, luks2.ReencryptOptions{ResumeOnly: true, Cipher: "serpent-xts-plain64"})
			},
			"decrypt": func() error {
				return luks2.Decrypt(ctx, openRW(t, img), openRW(t, img), pass, luks2.DecryptOptions{})
			},
			"init again": func() error {
				return luks2.Encrypt(ctx, openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * esShift, InitOnly: true})
			},
		} {
			err := run()
			want := luks2.ErrReencryptInProgress
			if name == "wrong passphrase" {
				want = luks2.ErrWrongPassphrase
			}
			if !errors.Is(err, want) {
				t.Errorf("%s: got %v, want %v", name, err, want)
			}
			same(t, img, orig)
		}
	})
	t.Run("decrypt wrong passphrase and attached", func(t *testing.T) {
		hdr, img, _ := detachedVolume(t, cs, dir, "dec-bad", pass, 1<<20)
		h0, _ := os.ReadFile(hdr)
		d0, _ := os.ReadFile(img)
		err := luks2.Decrypt(ctx, openRW(t, hdr), openRW(t, img), []byte("wrong"), luks2.DecryptOptions{Keyslot: reencKDF})
		if !errors.Is(err, luks2.ErrWrongPassphrase) {
			t.Fatalf("got %v", err)
		}
		same(t, hdr, h0)
		same(t, img, d0)
		att, _ := plainImage(t, dir, "att.img", 20<<20)
		cs.MustRun(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--key-file", cs.KeyFile(pass)}, append(csFast, att)...)...)
		a0, _ := os.ReadFile(att)
		f := openRW(t, att)
		if err := luks2.Decrypt(ctx, f, f, pass, luks2.DecryptOptions{}); !errors.Is(err, luks2.ErrUnsupported) {
			t.Fatalf("attached decrypt: got %v", err)
		}
		same(t, att, a0)
	})
}

// attachedVolume formats img (its header at the start, data from 1 MiB)
// with cryptsetup and fills the data with random plaintext encrypted
// under the volume key.
func attachedVolume(t *testing.T, cs *lukstest.Cryptsetup, dir, name string, pass []byte, dataLen int) (img string, plain []byte) {
	t.Helper()
	img, _ = plainImage(t, dir, name+".img", dataLen+1<<20)
	cs.MustRun(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--offset", "2048", "--luks2-keyslots-size", "512k", "--sector-size", "512", "--key-file", cs.KeyFile(pass)}, append(csFast, img)...)...)
	plain = make([]byte, dataLen)
	rand.Read(plain)
	writePlain(t, cs, img, pass, plain)
	return img, plain
}

// TestDecryptAttachedInterop: --decrypt of a volume whose header is on the
// data device, as cryptsetup 2.6 does it (the header exported to a new
// --header file, the data moved to the start as it is decrypted), both
// ways; the device then starts with the original plaintext.
func TestDecryptAttachedInterop(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("decrypt attached")
	const dataLen = 3<<20 + 512<<10
	for _, who := range []string{"blkcrypt-then-cryptsetup", "cryptsetup-then-blkcrypt"} {
		t.Run(who, func(t *testing.T) {
			cs := cs.With(t)
			img, plain := attachedVolume(t, cs, dir, who, pass, dataLen)
			hdr := filepath.Join(dir, who+".hdr")
			if who == "blkcrypt-then-cryptsetup" {
				f, err := os.OpenFile(hdr, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				err = luks2.Decrypt(context.Background(), luks2.File{File: f}, openRW(t, img), pass, luks2.DecryptOptions{Keyslot: reencKDF, HotzoneSize: 256 << 10, StopAfter: 2})
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				needDump(t, cs, hdr, "Mode:       decrypt", "Direction:  forward", "Resilience: datashift-checksum", "backup-moved-segment", "online-reencrypt-v3")
				csResume(t, cs, pass, img, "--header", hdr)
			} else {
				cs.MustRun("reencrypt", "--decrypt", "--header", hdr, "--init-only", "--hotzone-size", "256k",
					"--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), img)
				err := luks2.Reencrypt(context.Background(), openRW(t, hdr), pass, luks2.ReencryptOptions{ResumeOnly: true, Data: openRW(t, img)})
				if err != nil {
					t.Fatal(err)
				}
			}
			got, _ := os.ReadFile(img)
			if !bytes.Equal(got[:dataLen], plain) {
				t.Fatal("the decrypted device does not start with the original plaintext")
			}
			out := needDump(t, cs, hdr, "0: linear")
			if strings.Contains(out, "luks2") || strings.Contains(out, "reencrypt") {
				t.Fatalf("keyslots or reencryption left:\n%s", out)
			}
		})
	}
}

// TestEncryptCancel: a context cancelled mid-run stops between hotzones
// with its error, the read-ahead is dropped, and a resume finishes to the
// original plaintext.
func TestEncryptCancel(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("cancel me")
	img, orig := plainImage(t, dir, "cancel.img", esDev)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	err := luks2.Encrypt(ctx, openRW(t, img), pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * esShift, Keyslot: reencKDF,
		Progress: func(done, total uint64) {
			calls++
			if calls == 1 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("got %v after %d hotzones", err, calls)
	}
	needDump(t, cs, img, "online-reencrypt-v2")
	if err := luks2.Reencrypt(context.Background(), openRW(t, img), pass, luks2.ReencryptOptions{ResumeOnly: true}); err != nil {
		t.Fatal(err)
	}
	if got := dataWithKey(t, cs, img, img, pass, esData); !bytes.Equal(got, orig[:esData]) {
		t.Fatal("the plaintext differs after the resume")
	}
}
