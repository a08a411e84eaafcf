package luks1_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// fast keeps keyslot KDFs cheap: cryptsetup's minimum of 1000 iterations.
var fast = luks1.KeyslotOptions{PBKDF: kdf.Options{Iterations: 1000}}

const imgSize = 4 << 20

func randKey(n int) []byte {
	k := make([]byte, n)
	rand.Read(k)
	return k
}

// Images made by cryptsetup luksFormat open with our code and give the
// volume key cryptsetup dumps.
func TestUnlockCryptsetupImages(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	for i, tc := range []struct {
		cipher string
		bits   int
		hash   string
	}{
		{"aes-xts-plain64", 512, "sha256"},
		{"aes-xts-plain64", 256, "sha1"},
		{"aes-cbc-essiv:sha256", 256, "sha512"},
		{"aes-cbc-essiv:sha256", 128, "ripemd160"},
		{"aes-xts-plain64", 512, "whirlpool"},
		{"aes-cbc-plain64", 192, "sha256"},
	} {
		t.Run(fmt.Sprintf("%s-%d-%s", tc.cipher, tc.bits, tc.hash), func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("cs%d.img", i), imgSize)
			pass := []byte(fmt.Sprintf("pass phrase %d", i))
			out, err := cs.Run("luksFormat", "--type", "luks1", "--batch-mode", "--cipher", tc.cipher,
				"--key-size", fmt.Sprint(tc.bits), "--hash", tc.hash, "--pbkdf-force-iterations", "1000",
				"--key-file", cs.KeyFile(pass), img)
			if err != nil {
				// cryptsetup 2.6.1 with OpenSSL 3 formats every row (whirlpool
				// and ripemd160 through the legacy provider): a refusal is a
				// broken peer, not a reason to test nothing.
				t.Fatalf("cryptsetup luksFormat %s/%s: %v\n%s", tc.cipher, tc.hash, err, out)
			}
			dev, h := openImage(t, img)
			if h.Cipher() != tc.cipher || h.KeySize()*8 != tc.bits || h.Hash() != tc.hash {
				t.Fatalf("header says %s %d %s", h.Cipher(), h.KeySize()*8, h.Hash())
			}
			key, slot, err := h.Unlock(dev, pass, luks1.AnySlot)
			if err != nil || slot != 0 {
				t.Fatalf("unlock: %d %v", slot, err)
			}
			if want := cs.VolumeKey(img, pass); !bytes.Equal(key, want) {
				t.Fatalf("volume key %x, cryptsetup says %x", key, want)
			}
			// cryptsetup adds a key; we open it too.
			pass2 := []byte("second")
			cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass), img, cs.KeyFile(pass2))
			_, h = openImage(t, img)
			if _, slot, err := h.Unlock(dev, pass2, luks1.AnySlot); err != nil || slot != 1 {
				t.Fatalf("unlock cryptsetup-added key: %d %v", slot, err)
			}
		})
	}
}

func sha(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// Images we format and edit are accepted by cryptsetup: luksDump parses
// them, --test-passphrase takes every key we add and refuses every key we
// remove, and the dumped volume key is ours.
func TestCryptsetupReadsOurImages(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	for i, tc := range []struct {
		opts luks1.FormatOptions
		bits int
	}{
		{luks1.FormatOptions{}, 512},
		{luks1.FormatOptions{Cipher: "aes-cbc-essiv:sha256", Hash: "sha1"}, 256},
		{luks1.FormatOptions{Cipher: "aes-xts-plain64", Hash: "sha512", Align: 8}, 256},
		{luks1.FormatOptions{Cipher: "aes-cbc-essiv:sha256", Hash: "whirlpool", UUID: "01234567-89ab-cdef-0123-456789abcdef"}, 128},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("our%d.img", i), imgSize)
			dev := lukstest.Open(t, img)
			key := randKey(tc.bits / 8)
			p0 := []byte("first passphrase")
			opts := tc.opts
			opts.Keyslot = fast
			h, err := luks1.Format(dev, key, p0, opts)
			if err != nil {
				t.Fatal(err)
			}
			dump := cs.MustRun("luksDump", img)
			if !strings.Contains(dump, "Version:       \t1") || !strings.Contains(dump, h.UUID()) {
				t.Fatalf("luksDump:\n%s", dump)
			}
			if tc.opts.UUID != "" && h.UUID() != tc.opts.UUID {
				t.Fatalf("uuid %s", h.UUID())
			}
			if !bytes.Equal(cs.VolumeKey(img, p0), key) {
				t.Fatal("cryptsetup dumps another volume key")
			}
			var passes [][]byte
			for j := 0; j < 3; j++ {
				p := []byte(fmt.Sprintf("added %d", j))
				slot, err := h.AddKey(dev, key, p, fast)
				if err != nil || slot != j+1 {
					t.Fatalf("add key %d: slot %d %v", j, slot, err)
				}
				passes = append(passes, p)
			}
			if err := h.RemoveKey(dev, 2); err != nil {
				t.Fatal(err)
			}
			newSlot, err := h.ChangeKey(dev, passes[2], []byte("changed"), luks1.AnySlot, fast)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("change moved slot 3 to %d", newSlot)
			for _, c := range []struct {
				pass []byte
				slot int
				ok   bool
			}{
				{p0, 0, true}, {passes[0], 1, true}, {passes[1], 2, false}, {passes[2], 3, false},
				{[]byte("changed"), newSlot, true},
			} {
				if got := cs.TestPassphrase(img, c.pass, -1); got != c.ok {
					t.Errorf("cryptsetup --test-passphrase %q: %v, want %v", c.pass, got, c.ok)
				}
				_, slot, err := h.Unlock(dev, c.pass, luks1.AnySlot)
				if (err == nil) != c.ok || c.ok && slot != c.slot {
					t.Errorf("our unlock %q: slot %d err %v", c.pass, slot, err)
				}
			}
			if !bytes.Equal(cs.VolumeKey(img, []byte("changed")), key) {
				t.Fatal("volume key differs after change")
			}
			if !cs.TestPassphrase(img, []byte("changed"), newSlot) {
				t.Fatal("cryptsetup refuses the changed passphrase in its slot")
			}
		})
	}
}

func TestWrongPassphraseWritesNothing(t *testing.T) {
	dir := t.TempDir()
	img := lukstest.NewImage(t, dir, "w.img", imgSize)
	dev := lukstest.Open(t, img)
	key := randKey(32)
	h, err := luks1.Format(dev, key, []byte("right"), luks1.FormatOptions{Keyslot: fast})
	if err != nil {
		t.Fatal(err)
	}
	before := sha(t, img)
	fd := &lukstest.FaultDevice{Device: dev, Limit: -1}
	if _, _, err := h.Unlock(fd, []byte("wrong"), luks1.AnySlot); !errors.Is(err, luks1.ErrWrongPassphrase) {
		t.Fatalf("unlock: %v", err)
	}
	if _, err := h.ChangeKey(fd, []byte("wrong"), []byte("new"), luks1.AnySlot, fast); !errors.Is(err, luks1.ErrWrongPassphrase) {
		t.Fatalf("change: %v", err)
	}
	if _, err := h.AddKey(fd, randKey(32), []byte("new"), fast); !errors.Is(err, luks1.ErrWrongKey) {
		t.Fatalf("add with a wrong volume key: %v", err)
	}
	if fd.Writes != 0 || sha(t, img) != before {
		t.Fatalf("%d writes; image changed: %v", fd.Writes, sha(t, img) != before)
	}
}

func TestKeyslotErrors(t *testing.T) {
	dev := luksutil.NewMemDevice(imgSize, nil)
	key := randKey(32)
	h, err := luks1.Format(dev, key, []byte("p"), luks1.FormatOptions{Keyslot: fast})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 8; i++ {
		if _, err := h.AddKey(dev, key, []byte{byte(i)}, fast); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.AddKey(dev, key, []byte("x"), fast); !errors.Is(err, luks1.ErrNoFreeSlot) {
		t.Fatalf("ninth key: %v", err)
	}
	if _, err := h.ChangeKey(dev, []byte("p"), []byte("q"), 0, fast); !errors.Is(err, luks1.ErrNoFreeSlot) {
		t.Fatalf("change without a free slot: %v", err)
	}
	if err := h.RemoveKey(dev, 8); !errors.Is(err, luks1.ErrInvalidSlot) {
		t.Fatalf("remove 8: %v", err)
	}
	if err := h.RemoveKey(dev, 3); err != nil {
		t.Fatal(err)
	}
	if err := h.RemoveKey(dev, 3); !errors.Is(err, luks1.ErrSlotInactive) {
		t.Fatalf("remove twice: %v", err)
	}
	if _, err := h.AddKey(dev, key, []byte("x"), luks1.KeyslotOptions{Slot: keyslot.Slot(0), PBKDF: fast.PBKDF}); !errors.Is(err, luks1.ErrSlotInUse) {
		t.Fatalf("add into active slot: %v", err)
	}
	if _, err := h.AddKey(dev, key, []byte("x"), luks1.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.Argon2id, Iterations: 4}}); !errors.Is(err, luks1.ErrInvalidOptions) {
		t.Fatalf("argon2 on LUKS1: %v", err)
	}
	if _, err := h.AddKey(dev, key, []byte("x"), luks1.KeyslotOptions{PBKDF: kdf.Options{Iterations: 10}}); !errors.Is(err, luks1.ErrInvalidOptions) {
		t.Fatalf("10 iterations: %v", err)
	}
	if _, err := luks1.Format(luksutil.NewMemDevice(1<<20, nil), key, []byte("p"), luks1.FormatOptions{Keyslot: fast}); !errors.Is(err, luks1.ErrDeviceTooSmall) {
		t.Fatalf("format on 1 MiB: %v", err)
	}
	if _, err := luks1.Format(dev, key, []byte("p"), luks1.FormatOptions{Cipher: "nope-xts-plain64", Keyslot: fast}); !errors.Is(err, luks1.ErrInvalidOptions) {
		t.Fatalf("bad cipher: %v", err)
	}
	if _, err := luks1.Format(dev, key, []byte("p"), luks1.FormatOptions{UUID: "not-a-uuid", Keyslot: fast}); !errors.Is(err, luks1.ErrInvalidOptions) {
		t.Fatalf("bad uuid: %v", err)
	}
	// Default KDF options run the cryptsetup benchmark; check it once.
	if testing.Short() {
		return
	}
	h2, err := luks1.Format(luksutil.NewMemDevice(imgSize, nil), key, []byte("p"), luks1.FormatOptions{Keyslot: luks1.KeyslotOptions{PBKDF: kdf.Options{IterTime: 50e6}}})
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := h2.Keyslot(0)
	if ks.Iterations < 1000 || h2.Phdr().MKDigestIterations < 1000 {
		t.Fatalf("benchmarked iterations %d / digest %d", ks.Iterations, h2.Phdr().MKDigestIterations)
	}
}
