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
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

// A datashift run small enough to sweep: a 512 KiB shift and 1.25 MiB of
// plaintext (hotzones of 512, 256 and 512 KiB, the last from the copy).
// csEvery: cryptsetup judges every csEvery-th image (1: all).
var csEvery = 7

const (
	pcsShift = 512 << 10
	pcsData  = 1<<20 + 256<<10
	pcsDev   = pcsData + 2*pcsShift
)

// plainOf decrypts n bytes of the finished volume in img (header and data
// in one file, or the header in hdr) with the key pass opens.
func plainOf(hdr, data string, pass []byte, n int) ([]byte, error) {
	hf, err := os.Open(hdr)
	if err != nil {
		return nil, err
	}
	defer hf.Close()
	h, err := luks2.Read(luks2.File{File: hf})
	if err != nil {
		return nil, err
	}
	if h.ReencryptionStatus() != nil {
		return nil, errors.New("the reencryption is not finished")
	}
	key, _, err := h.Unlock(luks2.File{File: hf}, pass, luks2.AnySlot)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize(), IVOffset: h.IVTweak()})
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(data)
	if err != nil {
		return nil, err
	}
	if int(h.DataOffset())+n > len(raw) {
		return nil, errors.New("data device too short")
	}
	out := make([]byte, n)
	return out, c.DecryptSectors(out, raw[h.DataOffset():h.DataOffset()+int64(n)], 0)
}

// TestEncryptDatashiftPowerCut cuts the power after every write and sync
// of a whole --encrypt --reduce-device-size run (the copy of the first
// shift bytes to the end, the header, three hotzones, the wipe of the copy
// and the finish). At every cut:
//   - with a LUKS2 header on the device, blkcrypt resumes to a volume
//     holding the original plaintext (and cryptsetup, on a copy of every
//     7th image, does too);
//   - before the header exists, the plaintext after the shift is in place
//     and its first shift bytes are in place or in the synced copy at the
//     end of the device (cryptsetup has the same window; see
//     docs/security.md).
func TestEncryptDatashiftPowerCut(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	pass := []byte("power cut encrypt")
	base := make([]byte, pcsDev)
	rand.Read(base)
	orig := append([]byte(nil), base...)
	op := func(dev *powercut.Device) error {
		return luks2.Encrypt(context.Background(), dev, pass, luks2.EncryptOptions{ReduceDeviceSize: 2 * pcsShift, Keyslot: reencKDF})
	}
	csDir := t.TempDir()
	n, headerless := 0, 0
	st := lukstest.Sweep{Seed: 151, Random: 4}.Run(t, base, op, func(t *testing.T, img, what string) {
		n++
		raw, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := luks2.Read(luks2.File{File: f})
		f.Close()
		if rerr != nil {
			headerless++
			moved := raw[pcsDev-pcsShift:]
			if !bytes.Equal(raw[pcsShift:pcsData], orig[pcsShift:pcsData]) ||
				!bytes.Equal(raw[:pcsShift], orig[:pcsShift]) && !bytes.Equal(moved, orig[:pcsShift]) {
				t.Fatalf("%s: no LUKS2 header (%v) and the plaintext is not recoverable", what, rerr)
			}
			return
		}
		if n%csEvery == 1%csEvery {
			cp := lukstest.CopyFile(t, img, csDir)
			csFinish(t, cs, pass, what, cp, cp)
			got, err := plainOf(cp, cp, pass, pcsData)
			if err != nil || !bytes.Equal(got, orig[:pcsData]) {
				t.Fatalf("%s: after cryptsetup resumed, the plaintext differs (%v)", what, err)
			}
			os.Remove(cp)
		}
		if err := luks2.Reencrypt(context.Background(), openRW(t, img), pass, luks2.ReencryptOptions{ResumeOnly: true}); err != nil && !errors.Is(err, luks2.ErrNoReencryption) {
			t.Fatalf("%s: blkcrypt resume: %v", what, err)
		}
		got, err := plainOf(img, img, pass, pcsData)
		if err != nil || !bytes.Equal(got, orig[:pcsData]) {
			t.Fatalf("%s: after resuming, the plaintext differs (%v)", what, err)
		}
	})
	if st.Ops < 30 || headerless == 0 || headerless == n {
		t.Fatalf("%d operations, %d of %d images without a header: not a whole run", st.Ops, headerless, n)
	}
}

// csFinish has cryptsetup finish whatever run the header hdr (data on
// data) holds, as a user would: repair a crashed hotzone, then resume.
func csFinish(t *testing.T, cs *lukstest.Cryptsetup, pass []byte, what, hdr, data string) {
	t.Helper()
	var hd []string
	if hdr != data {
		hd = []string{"--header", hdr}
	}
	out, err := cs.Run(append(append([]string{"luksDump"}, hd...), data)...)
	if err != nil {
		t.Fatalf("%s: cryptsetup luksDump: %v\n%s", what, err, out)
	}
	if strings.Contains(out, "in-reencryption") {
		if out, err := cs.Run(append(append([]string{"repair", "--batch-mode", "--key-file", cs.KeyFile(pass)}, hd...), data)...); err != nil {
			t.Fatalf("%s: cryptsetup repair: %v\n%s", what, err, out)
		}
	}
	if out, _ := cs.Run(append(append([]string{"luksDump"}, hd...), data)...); strings.Contains(out, "online-reencrypt") {
		if out, err := cs.Run(append(append([]string{"reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass)}, hd...), data)...); err != nil {
			t.Fatalf("%s: cryptsetup reencrypt --resume-only: %v\n%s", what, err, out)
		}
	}
}

// part is a window [off, off+n) of a device: a detached header and its
// data device on one power-cut disk.
type part struct {
	d      luks2.Device
	off, n int64
}

func (p part) ReadAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) > p.n {
		b = b[:max(0, p.n-off)]
	}
	return p.d.ReadAt(b, p.off+off)
}

func (p part) WriteAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) > p.n {
		return 0, errors.New("write beyond the part")
	}
	return p.d.WriteAt(b, p.off+off)
}

func (p part) Sync() error          { return p.d.Sync() }
func (p part) Size() (int64, error) { return p.n, nil }

// TestDecryptPowerCut sweeps a whole --decrypt --header run (checksum
// resilience, 512-byte sectors, four hotzones). The header and the data
// share one power-cut disk, so a sync of either syncs both: the sweep
// checks the order of the writes, not that the data device is synced
// before the header names it (the engine's step does both in that
// order). Every cut resumes, by blkcrypt (every image) and cryptsetup (every 7th), to
// the original plaintext.
func TestDecryptPowerCut(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("power cut decrypt")
	const dataLen = 1 << 20
	img, plain := plainImage(t, dir, "data.img", dataLen)
	hdr := filepath.Join(dir, "hdr")
	cs.MustRun(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--header", hdr, "--luks2-keyslots-size", "512k", "--sector-size", "512", "--key-file", cs.KeyFile(pass)}, append(csFast, img)...)...)
	_, h := readImage(t, hdr)
	c, err := sector.New(h.Cipher(), cs.VolumeKey(hdr, pass), sector.Options{SectorSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	ct := make([]byte, dataLen)
	if err := c.EncryptSectors(ct, plain, 0); err != nil {
		t.Fatal(err)
	}
	hb, _ := os.ReadFile(hdr)
	hl := int64(len(hb))
	base := append(hb, ct...)
	op := func(dev *powercut.Device) error {
		return luks2.Decrypt(context.Background(), part{dev, 0, hl}, part{dev, hl, dataLen}, pass, luks2.DecryptOptions{Keyslot: reencKDF, HotzoneSize: 256 << 10})
	}
	n := 0
	csDir := t.TempDir()
	st := lukstest.Sweep{Seed: 152, Random: 4}.Run(t, base, op, func(t *testing.T, cut, what string) {
		n++
		raw, err := os.ReadFile(cut)
		if err != nil {
			t.Fatal(err)
		}
		split := func(d string) (string, string) { return splitImage(t, raw, int64(hl), d) }
		check := func(who, d string) {
			if got, _ := os.ReadFile(d); !bytes.Equal(got, plain) {
				t.Fatalf("%s: after %s resumed, the data is not the original plaintext", what, who)
			}
		}
		hp, dp := split(t.TempDir())
		if n%csEvery == 1%csEvery {
			ch, cd := split(csDir)
			who := "cryptsetup"
			if _, h := readImage(t, ch); h.ReencryptionStatus() == nil && h.Segments()[0].Type == "crypt" {
				cs.MustRun("reencrypt", "--decrypt", "--force-offline-reencrypt", "--batch-mode", "--header", ch, "--key-file", cs.KeyFile(pass), cd)
			} else if lastHotzoneOfDecrypt(h) {
				// cryptsetup 2.6.1's repair of the last hotzone leaves one
				// linear segment, which its resume takes for the start of
				// the run and decrypts the plaintext again. blkcrypt
				// finishes that repaired state.
				cs.MustRun("repair", "--batch-mode", "--header", ch, "--key-file", cs.KeyFile(pass), cd)
				if err := luks2.Decrypt(context.Background(), openRW(t, ch), openRW(t, cd), pass, luks2.DecryptOptions{}); err != nil {
					t.Fatalf("%s: blkcrypt after cryptsetup repair: %v", what, err)
				}
				who = "cryptsetup repair and blkcrypt"
			} else {
				csFinish(t, cs, pass, what, ch, cd)
			}
			check(who, cd)
		}
		err = luks2.Decrypt(context.Background(), openRW(t, hp), openRW(t, dp), pass, luks2.DecryptOptions{Keyslot: reencKDF, HotzoneSize: 256 << 10})
		if err != nil {
			if _, h := readImage(t, hp); h.Segments()[0].Type != "linear" {
				t.Fatalf("%s: blkcrypt resume: %v", what, err)
			}
		}
		check("blkcrypt", dp)
	})
	if st.Ops < 30 {
		t.Fatalf("only %d operations recorded: not a whole run", st.Ops)
	}
}

// lastHotzoneOfDecrypt reports a decryption cut in its last hotzone (the
// one at offset 0, in reencryption).
func lastHotzoneOfDecrypt(h *luks2.Header) bool {
	st := h.ReencryptionStatus()
	if st == nil || st.Mode != "decrypt" || !st.Crashed {
		return false
	}
	s := h.Segments()[0]
	for _, f := range s.Flags {
		if f == "in-reencryption" {
			return true
		}
	}
	return false
}

// TestEncryptDetachedPowerCut sweeps a whole --encrypt --header run with
// journal resilience (four hotzones; the header and data on one power-cut
// disk, as in TestDecryptPowerCut). Before the header's metadata exists
// the data is untouched; from then on every cut resumes, by blkcrypt
// (every image) and cryptsetup (every 7th), to a volume holding the
// original plaintext.
func TestEncryptDetachedPowerCut(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	pass := []byte("power cut detached")
	const hl, dataLen = luks2.DefaultDataOffset, 1 << 20
	base := make([]byte, hl+dataLen)
	rand.Read(base[hl:])
	plain := append([]byte(nil), base[hl:]...)
	op := func(dev *powercut.Device) error {
		return luks2.Encrypt(context.Background(), part{dev, hl, dataLen}, pass, luks2.EncryptOptions{Header: part{dev, 0, hl}, Resilience: "journal", Keyslot: reencKDF, HotzoneSize: 256 << 10})
	}
	n, fresh := 0, 0
	csDir := t.TempDir()
	lukstest.Sweep{Seed: 153, Random: 3}.Run(t, base, op, func(t *testing.T, cut, what string) {
		n++
		raw, err := os.ReadFile(cut)
		if err != nil {
			t.Fatal(err)
		}
		split := func(d string) (string, string) { return splitImage(t, raw, int64(hl), d) }
		hp, dp := split(t.TempDir())
		hf, _ := os.Open(hp)
		_, rerr := luks2.Read(luks2.File{File: hf})
		hf.Close()
		if rerr != nil {
			fresh++
			if !bytes.Equal(raw[hl:], plain) {
				t.Fatalf("%s: no header yet, but the data was written", what)
			}
			return
		}
		if n%csEvery == 1%csEvery {
			ch, cd := split(csDir)
			csFinish(t, cs, pass, what, ch, cd)
			if got, err := plainOf(ch, cd, pass, dataLen); err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("%s: after cryptsetup resumed, the plaintext differs (%v)", what, err)
			}
		}
		err = luks2.Reencrypt(context.Background(), openRW(t, hp), pass, luks2.ReencryptOptions{ResumeOnly: true, Data: openRW(t, dp)})
		if err != nil && !errors.Is(err, luks2.ErrNoReencryption) {
			t.Fatalf("%s: blkcrypt resume: %v", what, err)
		}
		if got, err := plainOf(hp, dp, pass, dataLen); err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%s: after resuming, the plaintext differs (%v)", what, err)
		}
	})
	if fresh == 0 || fresh == n {
		t.Fatalf("%d of %d images without a header: not a whole run", fresh, n)
	}
}

// TestDecryptAttachedPowerCut sweeps a whole --decrypt of a volume whose
// header is on its device, exported to a new header (one power-cut disk
// holds both): the export, the signature wipe, the moved first segment,
// four shifted hotzones, the moved one in place, the finish. At every cut
// a header opens the volume and decrypting again (a resume, or a new start
// from the header on the device or from the exported copy) gives the
// original plaintext at the start of the device: by blkcrypt every image,
// by cryptsetup every 7th (where it can: it will not start from a plain
// detached header with a data offset, which blkcrypt does).
func TestDecryptAttachedPowerCut(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("power cut attached")
	const dataLen = 1 << 20
	img, plain := attachedVolume(t, cs, dir, "att", pass, dataLen)
	dev, _ := os.ReadFile(img)
	_, h := readImage(t, img)
	hl := int64(h.HeaderSize())
	dl := int64(len(dev))
	base := append(make([]byte, hl), dev...)
	opts := luks2.DecryptOptions{Keyslot: reencKDF, HotzoneSize: 256 << 10}
	op := func(d *powercut.Device) error {
		return luks2.Decrypt(context.Background(), part{d, 0, hl}, part{d, hl, dl}, pass, opts)
	}
	n := 0
	csDir := t.TempDir()
	st := lukstest.Sweep{Seed: 154, Random: 3}.Run(t, base, op, func(t *testing.T, cut, what string) {
		n++
		raw, err := os.ReadFile(cut)
		if err != nil {
			t.Fatal(err)
		}
		split := func(d string) (string, string) { return splitImage(t, raw, int64(hl), d) }
		exported := func(hp string) (*luks2.Header, bool) {
			f, _ := os.Open(hp)
			defer f.Close()
			h, err := luks2.Read(luks2.File{File: f})
			return h, err == nil
		}
		check := func(who, d string) {
			if got, _ := os.ReadFile(d); !bytes.Equal(got[:dataLen], plain) {
				t.Fatalf("%s: after %s, the device does not start with the original plaintext", what, who)
			}
		}
		if n%csEvery == 1%csEvery {
			ch, cd := split(csDir)
			who := "cryptsetup"
			eh, ok := exported(ch)
			switch {
			case !ok:
				os.Remove(ch)
				cs.MustRun("reencrypt", "--decrypt", "--header", ch, "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), cd)
			case eh.ReencryptionStatus() == nil && eh.Segments()[0].Type == "linear":
				who = "the finished run"
			case eh.ReencryptionStatus() == nil:
				who = "blkcrypt from the exported header (cryptsetup refuses a detached header with a data offset)"
				if err := luks2.Decrypt(context.Background(), openRW(t, ch), openRW(t, cd), pass, opts); err != nil {
					t.Fatalf("%s: %s: %v", what, who, err)
				}
			case hotAtEnd(eh) || movedOnly(eh):
				// With every shifted hotzone done and the moved one left,
				// cryptsetup 2.6.1's resume asks for a hotzone of the
				// shift's length at 0, over the plaintext segment, and
				// fails ("Overlapping segments"); so after its repair of
				// the hotzone that reaches the end. blkcrypt finishes it.
				if eh.ReencryptionStatus().Crashed {
					cs.MustRun("repair", "--batch-mode", "--header", ch, "--key-file", cs.KeyFile(pass), cd)
				}
				if out, err := cs.Run("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--header", ch, "--key-file", cs.KeyFile(pass), cd); err == nil {
					t.Logf("%s: cryptsetup resumed a repaired last shifted hotzone (%s)", what, out)
				} else {
					who = "cryptsetup repair and blkcrypt"
					if err := luks2.Decrypt(context.Background(), openRW(t, ch), openRW(t, cd), pass, opts); err != nil {
						t.Fatalf("%s: %s: %v", what, who, err)
					}
				}
			default:
				csFinish(t, cs, pass, what, ch, cd)
			}
			check(who, cd)
		}
		hp, dp := split(t.TempDir())
		if _, ok := exported(hp); !ok {
			os.Truncate(hp, 0)
		}
		if err := luks2.Decrypt(context.Background(), openRW(t, hp), openRW(t, dp), pass, opts); err != nil {
			if eh, ok := exported(hp); !ok || eh.Segments()[0].Type != "linear" {
				t.Fatalf("%s: blkcrypt: %v", what, err)
			}
		}
		check("blkcrypt", dp)
	})
	if st.Ops < 30 {
		t.Fatalf("only %d operations recorded: not a whole run", st.Ops)
	}
}

// hotAtEnd reports a crashed hotzone that is the last live segment.
func hotAtEnd(h *luks2.Header) bool {
	st := h.ReencryptionStatus()
	if st == nil || !st.Crashed {
		return false
	}
	segs := h.Segments()
	for i, s := range segs {
		for _, f := range s.Flags {
			if f == "in-reencryption" {
				if i+1 == len(segs) {
					return true
				}
				for _, g := range segs[i+1].Flags {
					if strings.HasPrefix(g, "backup-") {
						return true
					}
				}
				return false
			}
		}
	}
	return false
}

// movedOnly reports a datashift decryption whose only old-key data left is
// the moved first segment.
func movedOnly(h *luks2.Header) bool {
	var live []luks2.Segment
	for _, s := range h.Segments() {
		backup := false
		for _, f := range s.Flags {
			backup = backup || strings.HasPrefix(f, "backup-")
		}
		if !backup {
			live = append(live, s)
		}
	}
	return len(live) == 2 && live[0].Type == "crypt" && live[0].Offset == 0 && live[1].Type == "linear" && live[1].Dynamic && len(live[1].Flags) == 0
}

// splitImage writes the header part (the first hl bytes of raw) and the
// data part of a power-cut image to files in dir.
func splitImage(t *testing.T, raw []byte, hl int64, dir string) (string, string) {
	t.Helper()
	hp, dp := filepath.Join(dir, "h"), filepath.Join(dir, "d")
	if os.WriteFile(hp, raw[:hl], 0o600) != nil || os.WriteFile(dp, raw[hl:], 0o600) != nil {
		t.Fatal("writing the split images")
	}
	return hp, dp
}
