package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Reencryption through the LUKS handle, judged by cryptsetup 2.6.1: the
// passphrases its keyslots take, the volume key it dumps (which decrypts
// the data to the plaintext written before), and luksDump.

var reencFastKDF = blkcrypt.PBKDFOptions{Type: "pbkdf2", Hash: "sha256", Iterations: 1000}

// csVolume formats img (size bytes) with cryptsetup, one keyslot per
// passphrase in order, and fills the data area with random plaintext under
// the volume key cryptsetup dumps; it returns the plaintext.
func csVolume(t *testing.T, cs *lukstest.Cryptsetup, img, typ string, size int64, pass ...[]byte) []byte {
	t.Helper()
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	fast := []string{"--batch-mode", "--pbkdf-force-iterations", "1000"}
	if typ == "luks2" {
		fast = append(fast, "--pbkdf", "pbkdf2")
	}
	cs.MustRun(append([]string{"luksFormat", "--type", typ, "--key-file", cs.KeyFile(pass[0]), img}, fast...)...)
	for _, p := range pass[1:] {
		cs.MustRun(append([]string{"luksAddKey", "--key-file", cs.KeyFile(pass[0]), img, cs.KeyFile(p)}, fast...)...)
	}
	h := readHeaderFile(t, img)
	plain := make([]byte, size-h.DataOffset())
	rand.Read(plain)
	c := csCipher(t, cs, img, pass[0])
	ct := make([]byte, len(plain))
	if err := c.EncryptSectors(ct, plain, 0); err != nil {
		t.Fatal(err)
	}
	writeAt(t, img, ct, h.DataOffset())
	return plain
}

func readHeaderFile(t *testing.T, path string) blkcrypt.Header {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := blkcrypt.ReadHeader(f)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// csCipher is the data cipher of the header at hdr with the volume key
// cryptsetup reads with pass.
func csCipher(t *testing.T, cs *lukstest.Cryptsetup, hdr string, pass []byte) *sector.Cipher {
	t.Helper()
	h := readHeaderFile(t, hdr)
	c, err := sector.New(h.Cipher(), cs.VolumeKey(hdr, pass), sector.Options{SectorSize: h.SectorSize()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// csPlain decrypts n bytes at off of data with the key cryptsetup reads
// from hdr with pass.
func csPlain(t *testing.T, cs *lukstest.Cryptsetup, hdr, data string, pass []byte, off int64, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	got := b[off : off+int64(n)]
	if err := csCipher(t, cs, hdr, pass).DecryptSectors(got, got, 0); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestLUKSReencryptHandle: LUKS.Reencrypt on a LUKS2 volume with two
// keyslots keeping keyslot 1's passphrase (cryptsetup's -S 1), and on a LUKS1 volume
// (the legacy run, chosen by the version): cryptsetup then opens the kept
// keyslot only, dumps a new volume key, and that key decrypts the data to
// the plaintext written before.
func TestLUKSReencryptHandle(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	ctx := context.Background()
	p0, p1 := []byte("keyslot zero"), []byte("keyslot one")
	for _, typ := range []string{"luks2", "luks1"} {
		t.Run(typ, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "vol.img")
			plain := csVolume(t, cs, img, typ, 24<<20, p0, p1)
			oldKey := cs.VolumeKey(img, p0)
			h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			o := blkcrypt.LUKSReencryptOptions{Keyslot: blkcrypt.Slot(1), PBKDF: reencFastKDF, HotzoneSize: 1 << 20, Dir: dir}
			if typ == "luks1" {
				o.HotzoneSize = 0
			}
			plan, err := h.PlanReencrypt(ctx, o)
			if err != nil || plan.Resume || plan.Version != map[string]int{"luks1": 1, "luks2": 2}[typ] {
				t.Fatalf("plan: %+v, %v", plan, err)
			}
			var calls int
			o.Progress = func(done, total uint64) { calls++ }
			if err := h.Reencrypt(ctx, p1, o); err != nil {
				t.Fatalf("Reencrypt: %v", err)
			}
			if calls == 0 {
				t.Error("no progress reported")
			}
			// LUKS2 gives the kept passphrase a new keyslot, LUKS1 keeps its
			// number, as cryptsetup does.
			if cs.TestPassphrase(img, p0, -1) || !cs.TestPassphrase(img, p1, -1) {
				t.Fatalf("after reencryption cryptsetup opens keyslot 0's passphrase %v, keyslot 1's %v; want false, true",
					cs.TestPassphrase(img, p0, -1), cs.TestPassphrase(img, p1, -1))
			}
			if typ == "luks1" && !cs.TestPassphrase(img, p1, 1) {
				t.Fatal("LUKS1: keyslot 1 does not take its passphrase after the run")
			}
			if bytes.Equal(cs.VolumeKey(img, p1), oldKey) {
				t.Fatal("the volume key did not change")
			}
			off := readHeaderFile(t, img).DataOffset()
			if got := csPlain(t, cs, img, img, p1, off, len(plain)); !bytes.Equal(got, plain) {
				t.Fatal("the data does not decrypt to the plaintext with cryptsetup's new volume key")
			}
			if d := cs.MustRun("luksDump", img); strings.Contains(d, "reencrypt") {
				t.Fatalf("a reencryption is left in the header:\n%s", d)
			}
			if _, err := h.PlanReencrypt(ctx, blkcrypt.LUKSReencryptOptions{ResumeOnly: true, Dir: dir}); !errors.Is(err, blkcrypt.ErrNoReencryption) {
				t.Fatalf("PlanReencrypt ResumeOnly after the run: %v, want ErrNoReencryption", err)
			}
		})
	}
}

// TestLUKSReencryptRefusals: what Reencrypt refuses writes nothing: a
// wrong passphrase, several keyslots without Keyslot (cryptsetup's rule
// for a key file), LUKS1-only options on LUKS2, ResumeOnly without a run,
// a read-only handle.
func TestLUKSReencryptRefusals(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	ctx := context.Background()
	dir := t.TempDir()
	img := filepath.Join(dir, "vol.img")
	p0, p1 := []byte("keyslot zero"), []byte("keyslot one")
	csVolume(t, cs, img, "luks2", 20<<20, p0, p1)
	before, _ := os.ReadFile(img)
	h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ro, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, tc := range []struct {
		name string
		h    *blkcrypt.LUKS
		pass []byte
		o    blkcrypt.LUKSReencryptOptions
		want error
	}{
		{"wrong passphrase", h, []byte("wrong"), blkcrypt.LUKSReencryptOptions{Keyslot: blkcrypt.Slot(0)}, blkcrypt.ErrWrongPassphrase},
		{"two keyslots, any", h, p0, blkcrypt.LUKSReencryptOptions{}, blkcrypt.ErrInvalidOptions},
		{"LUKS1 block size", h, p0, blkcrypt.LUKSReencryptOptions{Keyslot: blkcrypt.Slot(0), BlockSize: 1 << 20}, blkcrypt.ErrInvalidOptions},
		{"resume only", h, p0, blkcrypt.LUKSReencryptOptions{ResumeOnly: true}, blkcrypt.ErrNoReencryption},
		{"read-only handle", ro, p0, blkcrypt.LUKSReencryptOptions{Keyslot: blkcrypt.Slot(0)}, blkcrypt.ErrReadOnly},
	} {
		o := tc.o
		o.PBKDF = reencFastKDF
		if err := tc.h.Reencrypt(ctx, tc.pass, o); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if after, _ := os.ReadFile(img); !bytes.Equal(after, before) {
			t.Fatalf("%s: the refused reencryption wrote the device", tc.name)
		}
	}
}

// TestEncryptDecryptHandle: Encrypt of a plaintext file with a detached
// header that does not exist yet (cryptsetup then opens it and its volume
// key decrypts the data to the plaintext), and LUKS.Decrypt back (the file
// holds the plaintext again; cryptsetup dumps a header without keyslots).
// A refused Encrypt leaves no header file.
func TestEncryptDecryptHandle(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	ctx := context.Background()
	dir := t.TempDir()
	img, hdr := filepath.Join(dir, "data.img"), filepath.Join(dir, "hdr.img")
	plain := make([]byte, 8<<20)
	rand.Read(plain)
	if err := os.WriteFile(img, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	pass := []byte("encrypt me")
	o := blkcrypt.EncryptOptions{Header: hdr, PBKDF: reencFastKDF, HotzoneSize: 1 << 20}
	if err := blkcrypt.Encrypt(ctx, img, nil, o); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Fatalf("Encrypt with an empty passphrase: %v", err)
	}
	if _, err := os.Stat(hdr); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Encrypt left the header file (%v)", err)
	}
	plan, err := blkcrypt.PlanEncrypt(ctx, img, o)
	if err != nil || plan.Resume {
		t.Fatalf("PlanEncrypt: %+v, %v", plan, err)
	}
	if err := blkcrypt.Encrypt(ctx, img, pass, o); err != nil {
		t.Fatalf("Encrypt: %v", err)
	}
	if !cs.TestPassphrase(hdr, pass, 0) {
		t.Fatal("cryptsetup does not open keyslot 0 of the new header")
	}
	if got := csPlain(t, cs, hdr, img, pass, 0, len(plain)); !bytes.Equal(got, plain) {
		t.Fatal("the encrypted data does not decrypt to the plaintext with cryptsetup's volume key")
	}
	if _, err := blkcrypt.PlanEncrypt(ctx, img, o); !errors.Is(err, blkcrypt.ErrAlreadyLUKS) {
		t.Fatalf("PlanEncrypt of an encrypted volume: %v, want ErrAlreadyLUKS", err)
	}

	h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{Header: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	do := blkcrypt.DecryptOptions{PBKDF: reencFastKDF, HotzoneSize: 1 << 20}
	if p, err := h.PlanDecrypt(ctx, do); err != nil || p.Resume || p.Export {
		t.Fatalf("PlanDecrypt: %+v, %v", p, err)
	}
	if err := h.Decrypt(ctx, []byte("wrong"), do); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
		t.Fatalf("Decrypt with a wrong passphrase: %v", err)
	}
	if err := h.Decrypt(ctx, pass, do); err != nil {
		t.Fatalf("Decrypt: %v", err)
	}
	if got, _ := os.ReadFile(img); !bytes.Equal(got, plain) {
		t.Fatal("the decrypted file is not the plaintext")
	}
	if d := cs.MustRun("luksDump", hdr); strings.Contains(d, ": luks2\n") || !strings.Contains(d, "linear") {
		t.Fatalf("cryptsetup's dump after decryption:\n%s", d)
	}
}

// TestDumpUnboundLikeCryptsetup: the "(unbound)" marks of Dump follow
// cryptsetup's rule (LUKS2_keyslot_for_segment with CRYPT_ONE_SEGMENT) in
// every state a reencryption passes through, stopped by a failed write
// after each of its first writes: while the first hotzone is in
// reencryption, segment 0 lists both digests and the one stored first
// (the old key's) takes it, so cryptsetup marks the new key's keyslot
// unbound; blkcrypt's dump used to call it bound there, which made
// TestReencryptCLI's kill stage flaky.
func TestDumpUnboundLikeCryptsetup(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	ctx := context.Background()
	dir := t.TempDir()
	img := filepath.Join(dir, "vol.img")
	pass := []byte("unbound?")
	csVolume(t, cs, img, "luks2", 20<<20, pass)
	base, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	slotLine := regexp.MustCompile(`(?m)^  [0-9]+: [a-z0-9]+( \(unbound\))?$`)
	hotUnbound := 0
	for limit := 1; limit <= 24; limit++ {
		mem := luksutil.NewMemDevice(len(base), append([]byte(nil), base...))
		fd := &lukstest.FaultDevice{Device: mem, Limit: limit}
		err := luks2.Reencrypt(ctx, fd, pass, luks2.ReencryptOptions{Keyslot: luks2.KeyslotOptions{PBKDF: reencFastKDF}, HotzoneSize: 1 << 20})
		if !fd.Failed() {
			break // the run ended before this write
		}
		if !errors.Is(err, lukstest.ErrInjected) {
			t.Fatalf("write %d failed: %v", limit, err)
		}
		if err := os.WriteFile(img, mem.Buf, 0o600); err != nil {
			t.Fatal(err)
		}
		theirs, err := cs.Run("luksDump", img)
		if err != nil {
			t.Fatalf("after write %d: cryptsetup luksDump: %v\n%s", limit, err, theirs)
		}
		h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var ours strings.Builder
		err = h.Dump(ctx, &ours, blkcrypt.DumpOptions{})
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		want, got := slotLine.FindAllString(theirs, -1), slotLine.FindAllString(ours.String(), -1)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("after write %d the keyslots dump as\n%s\ncryptsetup's:\n%s\n(full dump:\n%s)", limit, strings.Join(got, "\n"), strings.Join(want, "\n"), theirs)
		}
		if strings.Contains(theirs, "in-reencryption") && strings.Contains(theirs, ": luks2 (unbound)") {
			hotUnbound++
		}
	}
	if hotUnbound == 0 {
		t.Fatal("no state had the new keyslot unbound beside a hotzone in reencryption: the sweep missed the case")
	}
}
