package luks2_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// TestPowerCutConvert sweeps both conversions with two active keyslots,
// which go through free keyslot areas: every cut opens with both
// passphrases, as LUKS1 or LUKS2, for cryptsetup and for us. The eight
// keyslot case moves the keyslot areas in place, as cryptsetup does, so
// what is promised there is weaker (docs/security.md): every cut opens
// with both, or a header backup taken before the conversion restores it
// (cryptsetup luksHeaderRestore), the data untouched; the test logs how
// many cuts need the backup.
func TestPowerCutConvert(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	old, other := []byte("old passphrase"), []byte("other passphrase")
	both := lukstest.Expect{Must: []lukstest.Key{lukstest.SlotKey(old, 0), lukstest.SlotKey(other, 1)}}
	const size = 3 << 20
	mk := func(name string, add []string, format ...string) (base, backup []byte) {
		p := lukstest.NewImage(t, dir, name, size)
		cs.MustRun(append(append([]string{"luksFormat", "--batch-mode", "--key-file", cs.KeyFile(old)}, format...), p)...)
		cs.MustRun(append(append([]string{"luksAddKey", "--batch-mode", "--key-file", cs.KeyFile(old)}, add...), p, cs.KeyFile(other))...)
		// Data, so that "untouched" means something.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(bytes.Repeat([]byte("data"), 1<<16), 2<<20)
		f.Close()
		bp := filepath.Join(dir, name+".backup")
		cs.MustRun("luksHeaderBackup", p, "--header-backup-file", bp)
		return lukstest.ReadImage(t, p), lukstest.ReadImage(t, bp)
	}
	l1, l1backup := mk("l1.img", []string{"--pbkdf-force-iterations", "1000"}, "--type", "luks1", "--pbkdf-force-iterations", "1000")
	// All eight LUKS1 keyslots in use: no free area, the in-place move.
	full := lukstest.NewImage(t, dir, "full.img", size)
	if err := os.WriteFile(full, l1, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 8; i++ {
		cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), full, cs.KeyFile(other))
	}
	fullBackup := filepath.Join(dir, "full.backup")
	cs.MustRun("luksHeaderBackup", full, "--header-backup-file", fullBackup)
	l1full, l1fullBackup := lukstest.ReadImage(t, full), lukstest.ReadImage(t, fullBackup)
	l2, l2backup := mk("l2.img", csFast, "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--sector-size", "512", "--offset", "4096")
	for _, tc := range []struct {
		name   string
		base   []byte
		backup []byte
		// safe: no cut may need the backup (the keyslots hop through
		// free areas instead of moving in place)
		safe bool
		op   func(dev *powercut.Device) error
	}{
		{"luks1-to-luks2", l1, l1backup, true, func(dev *powercut.Device) error {
			h, err := luks1.Read(dev)
			if err != nil {
				return err
			}
			_, err = luks2.FromLUKS1(dev, h)
			return err
		}},
		{"luks1-to-luks2-eight-keyslots", l1full, l1fullBackup, false, func(dev *powercut.Device) error {
			h, err := luks1.Read(dev)
			if err != nil {
				return err
			}
			_, err = luks2.FromLUKS1(dev, h)
			return err
		}},
		{"luks2-to-luks1", l2, l2backup, true, func(dev *powercut.Device) error {
			h, err := luks2.Read(dev)
			if err != nil {
				return err
			}
			_, err = h.ToLUKS1(dev)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := cs.With(t)
			bp := filepath.Join(t.TempDir(), "backup")
			if err := os.WriteFile(bp, tc.backup, 0o600); err != nil {
				t.Fatal(err)
			}
			restored := filepath.Join(t.TempDir(), "restored.img")
			window, images := 0, 0
			lukstest.Sweep{Seed: 3, Random: 6}.Run(t, tc.base, tc.op, func(t *testing.T, img, what string) {
				images++
				cut := lukstest.ReadImage(t, img)
				if !bytes.Equal(cut[2<<20:], tc.base[2<<20:]) {
					t.Fatalf("%s: the data area changed", what)
				}
				if cs.JudgeErr(img, oursLUKS2, both) == nil {
					return
				}
				window++
				if tc.safe {
					t.Fatalf("%s: %v", what, cs.JudgeErr(img, oursLUKS2, both))
				}
				if err := os.WriteFile(restored, cut, 0o600); err != nil {
					t.Fatal(err)
				}
				cs.MustRun("luksHeaderRestore", "--batch-mode", restored, "--header-backup-file", bp)
				cs.Judge(t, restored, what+", restored from the backup", oursLUKS2, both)
			})
			t.Logf("%d of %d cut images need the header backup", window, images)
		})
	}
}
