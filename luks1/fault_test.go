package luks1_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// unlocks reports whether our code opens img with pass (reading the header
// afresh, as after a reboot).
func unlocks(t *testing.T, img string, pass []byte) bool {
	t.Helper()
	dev := lukstest.Open(t, img)
	h, err := luks1.Read(dev)
	if err != nil {
		t.Fatalf("header unreadable after the crash: %v", err)
	}
	key, _, err := h.Unlock(dev, pass, luks1.AnySlot)
	if err != nil && !errors.Is(err, luks1.ErrWrongPassphrase) {
		t.Fatalf("unlock: %v", err)
	}
	clear(key)
	return err == nil
}

// crashEveryWrite runs op on a copy of base once for every N, with a device
// that stops after N writes, and after each run checks with our code and
// with cryptsetup that at least one passphrase of want opens the image;
// must lists passphrases that must always open it. It stops when op
// completes without hitting the limit.
func crashEveryWrite(t *testing.T, cs *lukstest.Cryptsetup, base string, op func(dev luks1.Device, h *luks1.Header) error, want [][]byte, must [][]byte) {
	t.Helper()
	for n := 0; n < 200; n++ {
		dir := t.TempDir()
		img := lukstest.CopyFile(t, base, dir)
		dev := lukstest.Open(t, img)
		var h *luks1.Header
		var err error
		if h, err = luks1.Read(dev); err != nil {
			h = nil
		}
		fd := &lukstest.FaultDevice{Device: dev, Limit: n}
		opErr := op(fd, h)
		if opErr != nil && !fd.Failed() {
			t.Fatalf("N=%d: operation failed by itself: %v", n, opErr)
		}
		anyOK := false
		for _, p := range want {
			ours := unlocks(t, img, p)
			theirs := cs.TestPassphrase(img, p, -1)
			if ours != theirs {
				t.Fatalf("N=%d: we say %q opens: %v, cryptsetup: %v", n, p, ours, theirs)
			}
			anyOK = anyOK || ours
		}
		if !anyOK {
			t.Fatalf("N=%d: no passphrase opens the image after the crash", n)
		}
		for _, p := range must {
			if !unlocks(t, img, p) || !cs.TestPassphrase(img, p, -1) {
				t.Fatalf("N=%d: %q no longer opens the image", n, p)
			}
		}
		os.Remove(img) // keep the disk footprint to one image
		if !fd.Failed() {
			t.Logf("operation completed after %d writes; every crash point checked", fd.Writes)
			return
		}
	}
	t.Fatal("operation never completed")
}

func TestCrashSafety(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	old, other, nw := []byte("old passphrase"), []byte("other passphrase"), []byte("new passphrase")
	base := lukstest.NewImage(t, dir, "base.img", imgSize)
	cs.MustRun("luksFormat", "--type", "luks1", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), base)
	cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), base, cs.KeyFile(other))
	key := cs.VolumeKey(base, old)

	t.Run("add-key", func(t *testing.T) {
		crashEveryWrite(t, cs, base, func(dev luks1.Device, h *luks1.Header) error {
			_, err := h.AddKey(dev, key, nw, fast)
			return err
		}, [][]byte{nw, old}, [][]byte{old, other})
	})
	t.Run("change-key", func(t *testing.T) {
		crashEveryWrite(t, cs, base, func(dev luks1.Device, h *luks1.Header) error {
			_, err := h.ChangeKey(dev, old, nw, luks1.AnySlot, fast)
			return err
		}, [][]byte{old, nw}, [][]byte{other})
	})
	t.Run("remove-key", func(t *testing.T) {
		crashEveryWrite(t, cs, base, func(dev luks1.Device, h *luks1.Header) error {
			return h.RemoveKey(dev, 0)
		}, [][]byte{old, other}, [][]byte{other})
	})
	t.Run("format-over-existing", func(t *testing.T) {
		crashEveryWrite(t, cs, base, func(dev luks1.Device, h *luks1.Header) error {
			_, err := luks1.Format(dev, randKey(64), nw, luks1.FormatOptions{Keyslot: fast})
			return err
		}, [][]byte{old, nw}, nil)
		// And the finished format holds only the new passphrase.
		img := lukstest.CopyFile(t, base, t.TempDir())
		dev := lukstest.Open(t, img)
		if _, err := luks1.Format(dev, randKey(64), nw, luks1.FormatOptions{Keyslot: fast}); err != nil {
			t.Fatal(err)
		}
		if cs.TestPassphrase(img, old, -1) || !cs.TestPassphrase(img, nw, -1) {
			t.Fatal("after format the old passphrase still opens or the new one does not")
		}
	})
	_ = filepath.Join
}
