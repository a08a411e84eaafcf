package luks2_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// opensAfterCrash reads img afresh (LUKS1 or LUKS2, by the version in the
// primary header, as cryptsetup decides) and tries pass.
func opensAfterCrash(t *testing.T, img string, pass []byte) bool {
	t.Helper()
	dev := lukstest.Open(t, img)
	var hdr luksutil.Header
	var ver [8]byte
	dev.ReadAt(ver[:], 0)
	if string(ver[:4]) == "LUKS" && ver[7] == 1 {
		h, err := luks1.Read(dev)
		if err != nil {
			t.Fatalf("LUKS1 header unreadable after the crash: %v", err)
		}
		hdr = h
	} else {
		h, err := luks2.Read(dev)
		if err != nil {
			t.Fatalf("LUKS2 header unreadable after the crash: %v", err)
		}
		hdr = h
	}
	key, _, err := hdr.Unlock(dev, pass, luksutil.AnySlot)
	if err != nil && !errors.Is(err, luksutil.ErrWrongPassphrase) {
		t.Fatalf("unlock: %v", err)
	}
	clear(key)
	return err == nil
}

type op func(dev luksutil.Device) error

// crashEveryWrite runs op on a copy of base with a device that stops at
// write N, for every N until op completes, and checks with our code and
// with cryptsetup that some passphrase in want opens the result and that
// every passphrase in must does. With noHeaderOK, an image that neither
// cryptsetup nor we see as LUKS also passes (a format that erased an old
// header it could not keep).
func crashEveryWrite(t *testing.T, cs *lukstest.Cryptsetup, base string, tear bool, o op, want, must [][]byte, noHeaderOK ...bool) {
	t.Helper()
	for n := 0; n < 300; n++ {
		img := lukstest.CopyFile(t, base, t.TempDir())
		dev := lukstest.Open(t, img)
		fd := &lukstest.FaultDevice{Device: dev, Limit: n, Tear: tear}
		if err := o(fd); err != nil && !fd.Failed() {
			t.Fatalf("N=%d: operation failed by itself: %v", n, err)
		}
		if len(noHeaderOK) > 0 && noHeaderOK[0] {
			if _, err := cs.Run("isLuks", img); err != nil {
				if _, err := luks2.Read(lukstest.Open(t, img)); err == nil {
					t.Fatalf("N=%d: we read a LUKS2 header cryptsetup does not see", n)
				}
				os.Remove(img)
				continue // fd.Failed(): a complete format leaves a header
			}
		}
		any := false
		for _, p := range want {
			ours, theirs := opensAfterCrash(t, img, p), cs.TestPassphrase(img, p, -1)
			if ours != theirs {
				t.Fatalf("N=%d: %q opens for us: %v, for cryptsetup: %v", n, p, ours, theirs)
			}
			any = any || ours
		}
		if !any {
			t.Fatalf("N=%d: no passphrase opens the image", n)
		}
		for _, p := range must {
			if !opensAfterCrash(t, img, p) || !cs.TestPassphrase(img, p, -1) {
				t.Fatalf("N=%d: %q stopped working", n, p)
			}
		}
		os.Remove(img) // keep the disk footprint to one image
		if !fd.Failed() {
			t.Logf("completed after %d writes; every crash point checked", fd.Writes)
			return
		}
	}
	t.Fatal("operation never completed")
}

func TestCrashSafety(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	old, other, nw := []byte("old passphrase"), []byte("other passphrase"), []byte("new passphrase")
	base := lukstest.NewImage(t, dir, "base2.img", imgSize)
	cs.MustRun("luksFormat", "--type", "luks2", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), base)
	cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), base, cs.KeyFile(other))
	key := cs.VolumeKey(base, old)
	base1 := lukstest.NewImage(t, dir, "base1.img", imgSize)
	cs.MustRun("luksFormat", "--type", "luks1", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), base1)
	cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), base1, cs.KeyFile(other))

	read := func(dev luksutil.Device) (*luks2.Header, error) { return luks2.Read(dev) }
	for _, tear := range []bool{false, true} {
		sfx := ""
		if tear {
			sfx = "-torn"
		}
		t.Run("add-key"+sfx, func(t *testing.T) {
			crashEveryWrite(t, cs, base, tear, func(dev luksutil.Device) error {
				h, err := read(dev)
				if err != nil {
					return err
				}
				_, err = h.AddKey(dev, key, nw, fast)
				return err
			}, [][]byte{nw, old}, [][]byte{old, other})
		})
		t.Run("change-key"+sfx, func(t *testing.T) {
			crashEveryWrite(t, cs, base, tear, func(dev luksutil.Device) error {
				h, err := read(dev)
				if err != nil {
					return err
				}
				_, err = h.ChangeKey(dev, old, nw, luks2.AnySlot, fast)
				return err
			}, [][]byte{old, nw}, [][]byte{other})
		})
		t.Run("remove-key"+sfx, func(t *testing.T) {
			crashEveryWrite(t, cs, base, tear, func(dev luksutil.Device) error {
				h, err := read(dev)
				if err != nil {
					return err
				}
				return h.RemoveKey(dev, 0)
			}, [][]byte{old, other}, [][]byte{other})
		})
	}
	for _, tc := range []struct {
		name string
		base string
		f    func(dev luksutil.Device) error
		// LUKS1's first keyslot lies under the new LUKS2 metadata: Format
		// erases the old header first, so "no header" is a valid crash state.
		noHeaderOK bool
	}{
		{"luks2-over-luks2", base, func(dev luksutil.Device) error {
			_, err := luks2.Format(dev, randKey(64), nw, luks2.FormatOptions{Keyslot: fast})
			return err
		}, false},
		{"luks2-over-luks1", base1, func(dev luksutil.Device) error {
			_, err := luks2.Format(dev, randKey(64), nw, luks2.FormatOptions{Keyslot: fast})
			return err
		}, true},
		{"luks1-over-luks2", base, func(dev luksutil.Device) error {
			_, err := luks1.Format(dev, randKey(64), nw, luks1.FormatOptions{Keyslot: luks1.KeyslotOptions{PBKDF: fast.PBKDF}})
			return err
		}, false},
	} {
		t.Run("format-"+tc.name, func(t *testing.T) {
			crashEveryWrite(t, cs, tc.base, false, tc.f, [][]byte{old, nw}, nil, tc.noHeaderOK)
			img := lukstest.CopyFile(t, tc.base, t.TempDir())
			if err := tc.f(lukstest.Open(t, img)); err != nil {
				t.Fatal(err)
			}
			if cs.TestPassphrase(img, old, -1) || !cs.TestPassphrase(img, nw, -1) {
				t.Fatal("after format the old passphrase still opens or the new one does not")
			}
			out := cs.MustRun("luksDump", img)
			t.Logf("new header: %d bytes of luksDump", len(out))
		})
	}
	_ = fmt.Sprint
}
