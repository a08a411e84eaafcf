package luks2_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// TestReencryptPowerCutPieces is the power-cut sweep of
// TestReencryptPowerCut with hotzones of three read-ahead pieces and a
// shorter last one (64 KiB pieces, 192 KiB hotzones over 1 MiB), so a cut
// falls between the piece writes of one hotzone: every cut state resumes,
// by blkcrypt (every image) and by cryptsetup (every 7th), to the
// original plaintext, for journal and for checksum on 512-byte sectors.
func TestReencryptPowerCutPieces(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	defer luks2.SetPieceSize(64 << 10)()
	dir := t.TempDir()
	pass := []byte("power cut")
	for _, tc := range []struct{ res, ss string }{{"journal", "4096"}, {"checksum", "512"}} {
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
			var dataWrites int
			op := func(dev *powercut.Device) error {
				err := luks2.Reencrypt(context.Background(), dev, pass, luks2.ReencryptOptions{Resilience: tc.res, HotzoneSize: 192 << 10, Keyslot: reencKDF})
				dataWrites = 0
				for _, o := range dev.Trace() {
					if !o.Sync && o.Off >= off {
						dataWrites++
					}
				}
				return err
			}
			n := 0
			csDir := t.TempDir()
			st := lukstest.Sweep{Seed: 16, Random: 1}.Run(t, base, op, func(t *testing.T, img, what string) {
				n++
				if n%7 == 1 {
					cp := lukstest.CopyFile(t, img, csDir)
					if out, _ := cs.Run("luksDump", cp); strings.Contains(out, "in-reencryption") {
						if out, err := cs.Run("repair", "--batch-mode", "--key-file", cs.KeyFile(pass), cp); err != nil {
							t.Fatalf("%s: cryptsetup repair: %v\n%s", what, err, out)
						}
					}
					if out, _ := cs.Run("luksDump", cp); strings.Contains(out, "online-reencrypt") {
						if out, err := cs.Run("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), cp); err != nil {
							t.Fatalf("%s: cryptsetup reencrypt --resume-only: %v\n%s", what, err, out)
						}
					}
					if got, err := decryptData(cp, pass, len(plain)); err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("%s: after cryptsetup resumed, the plaintext differs (%v)", what, err)
					}
				}
				if err := resumeFile(img, pass); err != nil {
					t.Fatalf("%s: blkcrypt resume: %v", what, err)
				}
				if got, err := decryptData(img, pass, len(plain)); err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("%s: after resuming, the plaintext differs (%v)", what, err)
				}
			})
			// 1 MiB in 64 KiB pieces: 16 data writes, more than one per
			// hotzone, or the sweep did not cut between pieces.
			if dataWrites < 16 {
				t.Fatalf("%d data writes: the hotzones were not written in pieces", dataWrites)
			}
			if st.Ops < 40 {
				t.Fatalf("only %d operations recorded: the run is not a whole reencryption", st.Ops)
			}
		})
	}
}
