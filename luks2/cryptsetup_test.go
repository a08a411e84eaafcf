package luks2_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/luks2"
)

const imgSize = 20 << 20

// argonFast is the cheapest argon2id cryptsetup accepts.
var argonFast = luks2.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.Argon2id, Iterations: 4, MemoryKiB: 32, Parallel: 1}}

func randKey(n int) []byte {
	k := make([]byte, n)
	rand.Read(k)
	return k
}

func fileSHA(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// cryptsetup luksFormat → we read, unlock and get the dumped volume key.
func TestUnlockCryptsetupImages(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	for i, args := range [][]string{
		{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"},
		{"--pbkdf", "argon2id", "--pbkdf-memory", "32", "--iter-time", "1"},
		{"--pbkdf", "argon2i", "--pbkdf-force-iterations", "4", "--pbkdf-memory", "64", "--pbkdf-parallel", "2"},
		{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--hash", "sha512", "--sector-size", "512"},
		{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--luks2-metadata-size", "64k", "--luks2-keyslots-size", "1m", "--label", "lab", "--subsystem", "sub"},
		{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--offset", "8192", "--sector-size", "2048", "--cipher", "aes-xts-plain64", "--key-size", "256"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("cs%d.img", i), imgSize)
			pass := []byte(fmt.Sprintf("pass %d", i))
			out, err := cs.Run(append(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--key-file", cs.KeyFile(pass)}, args...), img)...)
			if err != nil {
				t.Fatalf("cryptsetup luksFormat: %v\n%s", err, out)
			}
			dev, h := readImage(t, img)
			key, slot, err := h.Unlock(dev, pass, luks2.AnySlot)
			if err != nil || slot != 0 {
				t.Fatalf("unlock: %d %v", slot, err)
			}
			if want := cs.VolumeKey(img, pass); !bytes.Equal(key, want) {
				t.Fatalf("volume key %x, cryptsetup %x", key, want)
			}
			dump := cs.MustRun("luksDump", img)
			if !strings.Contains(dump, fmt.Sprintf("sector: %d [bytes]", h.SectorSize())) ||
				!strings.Contains(dump, fmt.Sprintf("offset: %d [bytes]", h.DataOffset())) ||
				!strings.Contains(dump, "cipher: "+h.Cipher()) {
				t.Fatalf("our view (sector %d, offset %d, %s) differs from luksDump:\n%s", h.SectorSize(), h.DataOffset(), h.Cipher(), dump)
			}
			// cryptsetup edits, we follow.
			p2 := []byte("second")
			cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass), img, cs.KeyFile(p2))
			cs.MustRun("config", "--priority", "prefer", "--key-slot", "1", img)
			_, h = readImage(t, img)
			if _, slot, err := h.Unlock(dev, p2, luks2.AnySlot); err != nil || slot != 1 {
				t.Fatalf("unlock cryptsetup-added key: %d %v", slot, err)
			}
			if h.Keyslots()[1].Priority != luks2.PriorityPrefer {
				t.Fatalf("priority %v", h.Keyslots()[1].Priority)
			}
		})
	}
}

// We format and edit; cryptsetup reads, tests passphrases, dumps the key.
func TestCryptsetupReadsOurImages(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	for i, tc := range []struct {
		opts luks2.FormatOptions
		key  int
		size int64
	}{
		{luks2.FormatOptions{}, 64, imgSize},
		{luks2.FormatOptions{Cipher: "aes-cbc-essiv:sha256", SectorSize: 512, Label: "our label", Subsystem: "sub"}, 32, imgSize},
		{luks2.FormatOptions{MetadataSize: 0x10000, KeyslotsSize: 2 << 20, UUID: "01234567-89ab-cdef-0123-456789abcdef"}, 64, imgSize},
		{luks2.FormatOptions{DataOffset: 4 << 20, Cipher: "aes-cbc-plain64"}, 32, imgSize + 512},
		{luks2.FormatOptions{MetadataSize: 0x400000, DataOffset: 16 << 20}, 32, imgSize},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			cs := cs.With(t)
			img := lukstest.NewImage(t, dir, fmt.Sprintf("our%d.img", i), tc.size)
			dev := lukstest.Open(t, img)
			key := randKey(tc.key)
			p0 := []byte("first")
			opts := tc.opts
			opts.Keyslot = argonFast
			h, err := luks2.Format(dev, key, p0, opts)
			if err != nil {
				t.Fatal(err)
			}
			dump := cs.MustRun("luksDump", img)
			if !strings.Contains(dump, h.UUID()) || !strings.Contains(dump, fmt.Sprintf("sector: %d [bytes]", h.SectorSize())) {
				t.Fatalf("luksDump:\n%s", dump)
			}
			if tc.opts.Label != "" && !strings.Contains(dump, "Label:          \t"+tc.opts.Label) && !strings.Contains(dump, tc.opts.Label) {
				t.Fatalf("label missing from luksDump:\n%s", dump)
			}
			if !bytes.Equal(cs.VolumeKey(img, p0), key) {
				t.Fatal("cryptsetup dumps another volume key")
			}
			if i == 0 && (h.SectorSize() != 4096 || h.DataOffset() != 16<<20 || h.KeyslotsSize() != 16<<20-0x8000) {
				t.Fatalf("defaults: sector %d offset %d keyslots %d", h.SectorSize(), h.DataOffset(), h.KeyslotsSize())
			}
			p1, p2, p3 := []byte("one"), []byte("two"), []byte("three")
			s1, err := h.AddKey(dev, key, p1, fast)
			if err != nil {
				t.Fatal(err)
			}
			s2, err := h.AddKey(dev, key, p2, luks2.KeyslotOptions{Slot: keyslot.Slot(7), PBKDF: argonFast.PBKDF, Priority: luks2.PriorityPrefer})
			if err != nil || s2 != 7 {
				t.Fatalf("add to slot 7: %d %v", s2, err)
			}
			s3, err := h.AddKey(dev, key, p3, fast)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.RemoveKey(dev, s1); err != nil {
				t.Fatal(err)
			}
			if _, err := h.ChangeKey(dev, p3, []byte("changed"), luks2.AnySlot, fast); err != nil {
				t.Fatal(err)
			}
			tok := []byte(`{"type":"some_type","keyslots":["7"],"base64_data":"zxI7vKB1Qwl4VPB4D-N-OgcC14hPCG0IDu8O7eCqaQ"}`)
			if err := h.SetToken(dev, 3, tok); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				pass []byte
				slot int
				ok   bool
			}{{p0, 0, true}, {p1, s1, false}, {p2, 7, true}, {p3, s3, false}, {[]byte("changed"), s3, true}} {
				if got := cs.TestPassphrase(img, c.pass, -1); got != c.ok {
					t.Errorf("cryptsetup --test-passphrase %q: %v, want %v", c.pass, got, c.ok)
				}
				if c.ok && !cs.TestPassphrase(img, c.pass, c.slot) {
					t.Errorf("cryptsetup refuses %q in keyslot %d", c.pass, c.slot)
				}
			}
			out := cs.MustRun("token", "export", "--token-id", "3", img)
			if strings.TrimSpace(out) != string(tok) {
				t.Fatalf("token export: %s", out)
			}
			if !strings.Contains(cs.MustRun("luksDump", img), "Priority:   prefer") {
				t.Fatal("priority prefer not in luksDump")
			}
			// cryptsetup removes slot 7; our token reference follows.
			cs.MustRun("luksKillSlot", "--batch-mode", img, "7")
			_, h = readImage(t, img)
			var tk struct{ Keyslots []string }
			json.Unmarshal(h.Tokens()[3], &tk)
			if len(tk.Keyslots) != 0 || len(h.ActiveKeyslots()) != 2 {
				t.Fatalf("after luksKillSlot: token %s, keyslots %v", h.Tokens()[3], h.ActiveKeyslots())
			}
			if !bytes.Equal(cs.VolumeKey(img, []byte("changed")), key) {
				t.Fatal("volume key changed")
			}
		})
	}
}

func TestUnboundKeys(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	img := lukstest.NewImage(t, t.TempDir(), "u.img", imgSize)
	dev := lukstest.Open(t, img)
	key := randKey(64)
	h, err := luks2.Format(dev, key, []byte("vk pass"), luks2.FormatOptions{Keyslot: fast})
	if err != nil {
		t.Fatal(err)
	}
	ukey := randKey(32)
	slot, err := h.AddUnboundKey(dev, ukey, []byte("unbound pass"), fast)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Unlock(dev, []byte("unbound pass"), slot); !errors.Is(err, luks2.ErrUnbound) {
		t.Fatalf("unbound keyslot as volume key: %v", err)
	}
	got, _, bound, err := h.UnlockUnbound(dev, []byte("unbound pass"), luks2.AnySlot)
	if err != nil || bound || !bytes.Equal(got, ukey) {
		t.Fatalf("unbound unlock: %v %v", bound, err)
	}
	if _, err := cs.Run("open", "--test-passphrase", "--unbound", "--key-slot", fmt.Sprint(slot), "--key-file", cs.KeyFile([]byte("unbound pass")), img); err != nil {
		t.Fatalf("cryptsetup refuses our unbound keyslot: %v", err)
	}
	if !strings.Contains(cs.MustRun("luksDump", img), "unbound") {
		t.Fatal("luksDump does not show the unbound keyslot")
	}
}

func TestRecovery(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	base := lukstest.NewImage(t, dir, "base.img", imgSize)
	dev := lukstest.Open(t, base)
	key := randKey(64)
	h, err := luks2.Format(dev, key, []byte("pass"), luks2.FormatOptions{Keyslot: fast})
	if err != nil {
		t.Fatal(err)
	}
	seq := h.SeqID()
	for _, off := range []int64{100, 5000, 0x4000 + 100, 0x4000 + 5000} {
		img := lukstest.CopyFile(t, base, t.TempDir())
		f, _ := os.OpenFile(img, os.O_RDWR, 0)
		f.WriteAt([]byte("XXXXXXXX"), off)
		f.Close()
		d := lukstest.Open(t, img)
		h, err := luks2.Read(d)
		if err != nil {
			t.Fatalf("damage at %d: %v", off, err)
		}
		if !h.NeedsRepair() || h.SeqID() != seq {
			t.Fatalf("damage at %d: needs repair %v, seqid %d", off, h.NeedsRepair(), h.SeqID())
		}
		if _, _, err := h.Unlock(d, []byte("pass"), luks2.AnySlot); err != nil {
			t.Fatalf("damage at %d: unlock %v", off, err)
		}
		if err := h.Repair(d); err != nil {
			t.Fatal(err)
		}
		h, err = luks2.Read(d)
		if err != nil || h.NeedsRepair() || h.SeqID() != seq+1 {
			t.Fatalf("after repair: %v %v %d", err, h != nil && h.NeedsRepair(), h.SeqID())
		}
		if !cs.TestPassphrase(img, []byte("pass"), -1) {
			t.Fatal("cryptsetup refuses the repaired image")
		}
	}
}

func TestWrongPassphraseWritesNothing(t *testing.T) {
	img := lukstest.NewImage(t, t.TempDir(), "w.img", imgSize)
	dev := lukstest.Open(t, img)
	h, err := luks2.Format(dev, randKey(64), []byte("right"), luks2.FormatOptions{Keyslot: fast})
	if err != nil {
		t.Fatal(err)
	}
	before := fileSHA(t, img)
	fd := &lukstest.FaultDevice{Device: dev, Limit: -1}
	if _, _, err := h.Unlock(fd, []byte("wrong"), luks2.AnySlot); !errors.Is(err, luks2.ErrWrongPassphrase) {
		t.Fatalf("unlock: %v", err)
	}
	if _, err := h.ChangeKey(fd, []byte("wrong"), []byte("new"), luks2.AnySlot, fast); !errors.Is(err, luks2.ErrWrongPassphrase) {
		t.Fatalf("change: %v", err)
	}
	if _, err := h.AddKey(fd, randKey(64), []byte("new"), fast); !errors.Is(err, luks2.ErrWrongKey) {
		t.Fatalf("add with a wrong key: %v", err)
	}
	if fd.Writes != 0 || fileSHA(t, img) != before {
		t.Fatalf("%d writes, image changed: %v", fd.Writes, fileSHA(t, img) != before)
	}
}

func TestErrors(t *testing.T) {
	img := lukstest.NewImage(t, t.TempDir(), "e.img", imgSize)
	dev := lukstest.Open(t, img)
	key := randKey(64)
	if _, err := luks2.Format(dev, key, []byte("p"), luks2.FormatOptions{MetadataSize: 12345, Keyslot: fast}); !errors.Is(err, luks2.ErrInvalidOptions) {
		t.Fatalf("bad metadata size: %v", err)
	}
	if _, err := luks2.Format(dev, key, []byte("p"), luks2.FormatOptions{SectorSize: 1000, Keyslot: fast}); !errors.Is(err, luks2.ErrInvalidOptions) {
		t.Fatalf("bad sector size: %v", err)
	}
	small := lukstest.NewImage(t, t.TempDir(), "s.img", 8<<20)
	if _, err := luks2.Format(lukstest.Open(t, small), key, []byte("p"), luks2.FormatOptions{Keyslot: fast}); !errors.Is(err, luks2.ErrDeviceTooSmall) {
		t.Fatalf("8 MiB device: %v", err)
	}
	// A small keyslots area runs out of space before it runs out of ids.
	h, err := luks2.Format(dev, key, []byte("p"), luks2.FormatOptions{KeyslotsSize: 3 * 258048, Keyslot: fast})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := h.AddKey(dev, key, []byte{byte(i)}, fast); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.AddKey(dev, key, []byte("x"), fast); !errors.Is(err, luks2.ErrNoFreeSlot) {
		t.Fatalf("full keyslots area: %v", err)
	}
	if _, err := h.ChangeKey(dev, []byte("p"), []byte("q"), luks2.AnySlot, fast); !errors.Is(err, luks2.ErrNoFreeSlot) {
		t.Fatalf("change without space: %v", err)
	}
	if _, err := h.AddKey(dev, key, []byte("x"), luks2.KeyslotOptions{Slot: keyslot.Slot(0), PBKDF: fast.PBKDF}); !errors.Is(err, luks2.ErrSlotInUse) {
		t.Fatalf("occupied slot: %v", err)
	}
	if err := h.RemoveKey(dev, 32); !errors.Is(err, luks2.ErrInvalidSlot) {
		t.Fatalf("slot 32: %v", err)
	}
	if err := h.RemoveKey(dev, 20); !errors.Is(err, luks2.ErrSlotInactive) {
		t.Fatalf("slot 20: %v", err)
	}
	if err := h.SetLabel(dev, strings.Repeat("l", 48), ""); !errors.Is(err, luks2.ErrInvalidOptions) {
		t.Fatalf("long label: %v", err)
	}
	if err := h.SetToken(dev, 1, []byte(`{"type":"x","keyslots":["9"]}`)); !errors.Is(err, luks2.ErrCorruptHeader) {
		t.Fatalf("token naming a missing keyslot: %v", err)
	}
	if !testing.Short() {
		// Default argon2id benchmark with a short target.
		img2 := lukstest.NewImage(t, t.TempDir(), "b.img", imgSize)
		h2, err := luks2.Format(lukstest.Open(t, img2), key, []byte("p"), luks2.FormatOptions{
			Keyslot: luks2.KeyslotOptions{PBKDF: kdf.Options{IterTime: 100e6, MemoryKiB: 16 * 1024}}})
		if err != nil {
			t.Fatal(err)
		}
		k := h2.Keyslots()[0]
		t.Logf("benchmarked keyslot: %s, digest iterations %d", k.KDF, h2.Digests()[0].Iterations)
		if k.KDF.Type != kdf.Argon2id || k.KDF.Iterations < 4 || k.KDF.MemoryKiB > 16*1024 || h2.Digests()[0].Iterations < 1000 {
			t.Fatalf("benchmarked parameters %+v", k.KDF)
		}
	}
}
