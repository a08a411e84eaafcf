package luks2_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// decryptData reads the whole data area of img with the key pass opens
// now (no reencryption may be left).
func decryptData(img string, pass []byte, n int) ([]byte, error) {
	f, err := os.Open(img)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dev := luks2.File{File: f}
	h, err := luks2.Read(dev)
	if err != nil {
		return nil, err
	}
	key, _, err := h.Unlock(dev, pass, luks2.AnySlot)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize(), IVOffset: h.IVTweak()})
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, h.DataOffset()); err != nil {
		return nil, err
	}
	return b, c.DecryptSectors(b, b, 0)
}

func resumeFile(img string, pass []byte) error {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	err = luks2.Reencrypt(context.Background(), luks2.File{File: f}, pass, luks2.ReencryptOptions{ResumeOnly: true, Keyslot: reencKDF, HotzoneSize: 192 << 10})
	if errors.Is(err, luks2.ErrNoReencryption) {
		return nil
	}
	return err
}

// TestReencryptPowerCut cuts the power after every write and sync of a
// whole reencryption (init, four hotzones, finish) on the internal/powercut
// model. Every cut state must resume, by blkcrypt (every image) and by
// cryptsetup (every 9th image, on a copy), to the original plaintext:
//   - journal, 4096-byte sectors: always (the journal holds the whole
//     hotzone, so torn data writes are rewritten from it);
//   - checksum, 512-byte sectors: always (a 512-byte block is either old
//     or new ciphertext in this model, and the checksum tells which);
//   - none: the header survives and the passphrase opens at every cut
//     (both tools), and the plaintext is intact at cuts before the first
//     data write and after the last metadata commit; in between, data is
//     lost, as cryptsetup documents for --resilience none.
//
// Checksum resilience with 4096-byte sectors is not in the sweep: a
// 4096-byte block torn at a 512-byte boundary matches neither checksum
// and is taken as new, in cryptsetup as here (see docs/security.md).
func TestReencryptPowerCut(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("power cut")
	const hot = 256 << 10
	for _, tc := range []struct {
		res string
		ss  string
	}{{"journal", "4096"}, {"checksum", "512"}, {"none", "4096"}} {
		t.Run(tc.res, func(t *testing.T) {
			cs := cs.With(t)
			p := lukstest.NewImage(t, dir, tc.res+".img", pcSize)
			cs.MustRun(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--key-file", cs.KeyFile(pass),
				"--offset", pcDataOffS, "--luks2-keyslots-size", pcKeyslotsS, "--sector-size", tc.ss}, append(csFast, p)...)...)
			plain := make([]byte, pcSize-pcDataOff)
			rand.Read(plain)
			c, off := volumeCipher(t, cs, p, pass)
			ct := make([]byte, len(plain))
			if err := c.EncryptSectors(ct, plain, 0); err != nil {
				t.Fatal(err)
			}
			base := lukstest.ReadImage(t, p)
			copy(base[off:], ct)
			// Where the data writes are in the trace, for "none".
			var firstData, lastOp int
			op := func(dev *powercut.Device) error {
				err := luks2.Reencrypt(context.Background(), dev, pass, luks2.ReencryptOptions{Resilience: tc.res, HotzoneSize: hot, Keyslot: reencKDF})
				firstData = -1
				for i, o := range dev.Trace() {
					if !o.Sync && o.Off >= off && firstData < 0 {
						firstData = i
					}
				}
				lastOp = dev.Ops()
				return err
			}
			n, lost := 0, 0
			csDir := t.TempDir()
			random := 4
			if testing.Short() {
				random = 1
			}
			st := lukstest.Sweep{Seed: 15, Random: random}.Run(t, base, op, func(t *testing.T, img, what string) {
				n++
				var k int
				fmt.Sscanf(what, "cut after %d", &k)
				// The last metadata commit is followed by the wipes of the
				// old keyslot and reencryption areas only.
				intact := tc.res != "none" || k <= firstData || k >= lastOp-4
				if n%9 == 1 {
					cp := lukstest.CopyFile(t, img, csDir)
					if out, err := cs.Run("luksDump", cp); err != nil {
						t.Fatalf("%s: cryptsetup luksDump: %v\n%s", what, err, out)
					} else if strings.Contains(out, "in-reencryption") {
						// cryptsetup recovers a crashed hotzone only in
						// repair (which finishes a run whose last hotzone
						// it was).
						if out, err := cs.Run("repair", "--batch-mode", "--key-file", cs.KeyFile(pass), cp); err != nil {
							t.Fatalf("%s: cryptsetup repair: %v\n%s", what, err, out)
						}
					}
					if out, _ := cs.Run("luksDump", cp); strings.Contains(out, "online-reencrypt") {
						if out, err := cs.Run("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), cp); err != nil {
							t.Fatalf("%s: cryptsetup reencrypt --resume-only: %v\n%s", what, err, out)
						}
					}
					if !cs.TestPassphrase(cp, pass, -1) {
						t.Fatalf("%s: cryptsetup does not open the volume after resuming", what)
					}
					if intact {
						got, err := decryptData(cp, pass, len(plain))
						if err != nil || !bytes.Equal(got, plain) {
							t.Fatalf("%s: after cryptsetup resumed, the plaintext differs (%v)", what, err)
						}
					}
					os.Remove(cp)
				}
				if err := resumeFile(img, pass); err != nil {
					t.Fatalf("%s: blkcrypt resume: %v", what, err)
				}
				got, err := decryptData(img, pass, len(plain))
				if err != nil {
					t.Fatalf("%s: after resuming: %v", what, err)
				}
				if intact && !bytes.Equal(got, plain) {
					t.Fatalf("%s: the plaintext differs after resuming", what)
				}
				if !bytes.Equal(got, plain) {
					lost++
				}
			})
			// none commits no metadata per hotzone: four data writes, a
			// sync, the final commit and the wipes.
			want := 40
			if tc.res == "none" {
				want = 15
			}
			// The control: the sweep sees the data that none loses.
			if tc.res == "none" && lost == 0 {
				t.Fatal("no cut lost data with resilience none: the sweep cannot see a loss")
			}
			if st.Ops < want {
				t.Fatalf("only %d operations recorded: the run is not a whole reencryption", st.Ops)
			}
		})
	}
}
