package lukstest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
)

// Sweep runs an operation once on a powercut.Device holding base, then
// judges the device content left by a power cut after every one of the
// operation's writes and syncs: for each cut point the two extremes (no
// unsynced write kept, all kept) and Random seeded random survivor sets
// (fewer with -short), each distinct content once per sweep.
type Sweep struct {
	// Seed makes the random survivor sets repeatable; a failure names it.
	Seed uint64
	// Random is the number of random survivor sets per cut point (0: 12,
	// or 3 with -short).
	Random int
}

// SweepStats says how much a sweep covered.
type SweepStats struct {
	Ops, Cuts, Images int
}

// Run records op over base and calls judge with the path of an image
// file holding each distinct power-cut state (the file is rewritten
// between calls; judge must not keep it). what names the cut for
// failure messages. op must succeed: the sweep is about crashes, not
// about errors.
func (s Sweep) Run(t *testing.T, base []byte, op func(dev *powercut.Device) error, judge func(t *testing.T, img, what string)) SweepStats {
	t.Helper()
	n := s.Random
	if n == 0 {
		n = 12
		if testing.Short() {
			n = 3
		}
	}
	// Soak runs: BLKCRYPT_POWERCUT_SEED shifts every sweep's seed and
	// BLKCRYPT_POWERCUT_RANDOM sets the random sets per cut.
	if v, err := strconv.ParseUint(os.Getenv("BLKCRYPT_POWERCUT_SEED"), 10, 64); err == nil {
		s.Seed += v
	}
	if v, err := strconv.Atoi(os.Getenv("BLKCRYPT_POWERCUT_RANDOM")); err == nil && v > 0 {
		n = v
	}
	dev := powercut.New(base)
	if err := op(dev); err != nil {
		t.Fatalf("the operation failed without a power cut: %v", err)
	}
	st := SweepStats{Ops: dev.Ops()}
	img := filepath.Join(t.TempDir(), "cut.img")
	onDisk := append([]byte(nil), base...)
	if err := os.WriteFile(img, onDisk, 0o600); err != nil {
		t.Fatal(err)
	}
	seen := map[[32]byte]bool{}
	buf := make([]byte, len(base))
	for k := 0; k <= st.Ops; k++ {
		c := dev.CutAfter(k)
		st.Cuts++
		for _, im := range c.Images(s.Seed, n) {
			if seen[im.Sum] {
				continue
			}
			seen[im.Sum] = true
			st.Images++
			copy(buf, c.Durable())
			im.Apply(buf)
			if err := syncFile(img, onDisk, buf); err != nil {
				t.Fatal(err)
			}
			judge(t, img, fmt.Sprintf("cut after %d of %d ops, %d unsynced writes, survivors %s (seed %d)", k, st.Ops, c.Pending(), im.Survivors, s.Seed))
			if t.Failed() {
				t.FailNow()
			}
			// The judge may have changed the file (cryptsetup repairs a
			// header it reads); reread so the next diff starts from it.
			b, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			copy(onDisk, b)
		}
	}
	t.Logf("%d ops, %d cut points, %d distinct power-cut images judged", st.Ops, st.Cuts, st.Images)
	return st
}

// syncFile makes the file at path hold want, writing only the 4 KiB
// blocks that differ from have (its current content), and updates have.
func syncFile(path string, have, want []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	const blk = 4096
	for off := 0; off < len(want); off += blk {
		end := min(off+blk, len(want))
		if !bytes.Equal(have[off:end], want[off:end]) {
			if _, err := f.WriteAt(want[off:end], int64(off)); err != nil {
				return err
			}
			copy(have[off:end], want[off:end])
		}
	}
	return nil
}

// Key is a passphrase and the keyslot to try it in (-1: any).
type Key struct {
	Pass []byte
	Slot int
}

// AnySlotKey is pass tried in every keyslot.
func AnySlotKey(pass []byte) Key { return Key{Pass: pass, Slot: -1} }

// SlotKey is pass tried in keyslot slot only (--key-slot).
func SlotKey(pass []byte, slot int) Key { return Key{Pass: pass, Slot: slot} }

// Expect is what must hold after a power cut; every key named anywhere
// must open for cryptsetup exactly when it opens for us.
type Expect struct {
	Must   []Key // open always
	AnyOf  []Key // at least one of them opens
	Others []Key // may open
	// NotLUKS accepts an image that is no LUKS volume at all, for
	// cryptsetup (isLuks fails) and for us (no header), instead of AnyOf:
	// a format cut before its header is durable.
	NotLUKS bool
}

// Ours opens img with our code: whether key opens it, and an error when
// no header can be read at all.
type Ours func(img string, k Key) (bool, error)

// Judge checks e on img with cryptsetup and with ours, failing the test
// on the first violation.
func (c *Cryptsetup) Judge(t *testing.T, img, what string, ours Ours, e Expect) {
	t.Helper()
	if err := c.JudgeErr(img, ours, e); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// JudgeErr checks e on img with cryptsetup and with ours and returns the
// first violation. Ours reads first: cryptsetup repairs a header with one
// damaged copy as it reads it (even isLuks writes), and our reader must be
// judged on the image the power cut left.
func (c *Cryptsetup) JudgeErr(img string, ours Ours, e Expect) error {
	all := append(append(append([]Key(nil), e.Must...), e.AnyOf...), e.Others...)
	opened := make([]bool, len(all))
	var readErr error
	for i, k := range all {
		o, err := ours(img, k)
		if err != nil {
			readErr = err
			break
		}
		opened[i] = o
	}
	_, csErr := c.Run("isLuks", img)
	if e.NotLUKS && csErr != nil {
		if readErr == nil {
			return fmt.Errorf("cryptsetup sees no LUKS header, but we read one")
		}
		return nil
	}
	if csErr != nil {
		return fmt.Errorf("cryptsetup no longer sees a LUKS header")
	}
	if readErr != nil {
		return fmt.Errorf("cryptsetup reads the header, we do not: %w", readErr)
	}
	for i, k := range all {
		if th := c.TestPassphrase(img, k.Pass, k.Slot); opened[i] != th {
			return fmt.Errorf("%q (keyslot %d) opens for us: %v, for cryptsetup: %v", k.Pass, k.Slot, opened[i], th)
		}
	}
	for i, k := range e.Must {
		if !opened[i] {
			return fmt.Errorf("%q (keyslot %d) no longer opens", k.Pass, k.Slot)
		}
	}
	if len(e.AnyOf) > 0 {
		any := false
		for i := range e.AnyOf {
			any = any || opened[len(e.Must)+i]
		}
		if !any {
			return fmt.Errorf("none of the %d passphrases that should open it does (and it still is a LUKS header)", len(e.AnyOf))
		}
	}
	return nil
}

// ReadImage reads a whole image file.
func ReadImage(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
