package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/sector"
)

// Issue #25, bug 8: Close on a nil *Volume or a zero Volume, and
// NewVolume(nil, …), panicked. Every method of both is called here; none
// may panic, requests are ErrClosed.
func TestNilAndZeroVolume(t *testing.T) {
	for name, v := range map[string]*blkcrypt.Volume{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			calls := map[string]func() error{
				"Close":          v.Close,
				"Flush":          v.Flush,
				"ReadAt":         func() error { _, err := v.ReadAt(make([]byte, 512), 0); return err },
				"WriteAt":        func() error { _, err := v.WriteAt(make([]byte, 512), 0); return err },
				"WriteAtInPlace": func() error { _, err := v.WriteAtInPlace(make([]byte, 512), 0); return err },
				"WriteZeroes":    func() error { return v.WriteZeroes(0, 512) },
				"Discard":        func() error { return v.Discard(0, 512) },
				"Reencrypt":      func() error { return v.Reencrypt(context.Background(), nil) },
			}
			for call, f := range calls {
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s panicked: %v", call, r)
						}
					}()
					if err := f(); !errors.Is(err, blkcrypt.ErrClosed) {
						t.Errorf("%s: %v, want ErrClosed", call, err)
					}
				}()
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("an accessor panicked: %v", r)
					}
				}()
				_ = v.Size() + int64(v.SectorSize()+v.BlockSize()+v.QueueDepth()) + v.DataOffset()
				_, _, _ = v.Reencrypting()
				_, _, _ = v.Type(), v.Note(), v.Cipher()
				if !v.ReadOnly() {
					t.Error("a volume without a device says it takes writes")
				}
				if v.StartWriteAt(make([]byte, 512), 0, func(error) { t.Error("done called") }) {
					t.Error("StartWriteAt started a write")
				}
			}()
		})
	}
	c, err := sector.New("aes-xts-plain64", make([]byte, 64), sector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Wipe()
	if _, err := blkcrypt.NewVolume(nil, c, 0, 4096, false); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("NewVolume(nil device): %v, want ErrInvalidOptions", err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := blkcrypt.NewVolume(f, nil, 0, 4096, false); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("NewVolume(nil cipher): %v, want ErrInvalidOptions", err)
	}
}

func fileHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x/%d", sha256.Sum256(b), len(b))
}

// cryptsetupOpens reports whether cryptsetup opens img with pass (in slot,
// or any keyslot when slot < 0).
func cryptsetupOpens(t *testing.T, img, pass string, slot int) bool {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	args := []string{"open", "--test-passphrase", "--key-file", "-", img}
	if slot >= 0 {
		args = append(args, "--key-slot", fmt.Sprint(slot))
	}
	cmd := exec.Command(cs, args...)
	cmd.Stdin = strings.NewReader(pass)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		// 2: no keyslot opens with it; 1 with this message: none is left.
		if errors.As(err, &ee) && (ee.ExitCode() == 2 || ee.ExitCode() == 1 && strings.Contains(string(out), "No usable keyslot")) {
			return false
		}
		t.Fatalf("cryptsetup %v: %v\n%s", args, err, out)
	}
	return true
}

// Safe defaults (issue #25): Format over a header, and removing the last
// keyslot, are ErrWouldDestroy unless forced, and change nothing; empty
// passphrases are refused; cryptsetup judges what is left.
func TestWouldDestroy(t *testing.T) {
	ctx := context.Background()
	fast := blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "v.img")
			if err := blkcrypt.Format(ctx, img, []byte("pw"), blkcrypt.FormatOptions{Type: typ, Size: 20 << 20, PBKDF: fast}); err != nil {
				t.Fatal(err)
			}
			before := fileHash(t, img)
			// Over the header, even when the call would also grow the file.
			err := blkcrypt.Format(ctx, img, []byte("other"), blkcrypt.FormatOptions{Type: typ, Size: 30 << 20, PBKDF: fast})
			if !errors.Is(err, blkcrypt.ErrWouldDestroy) || !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Fatalf("format over a header: %v, want ErrWouldDestroy", err)
			}
			if _, err := blkcrypt.RemoveKey(ctx, img, []byte("pw")); !errors.Is(err, blkcrypt.ErrWouldDestroy) {
				t.Fatalf("removing the last keyslot: %v, want ErrWouldDestroy", err)
			}
			h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if err := h.KillSlot(ctx, 0, blkcrypt.KeyOptions{}); !errors.Is(err, blkcrypt.ErrWouldDestroy) {
				t.Fatalf("kill-slot of the last keyslot: %v, want ErrWouldDestroy", err)
			}
			if _, err := h.AddKey(ctx, []byte("pw"), nil, blkcrypt.KeyOptions{PBKDF: fast}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Fatalf("empty new passphrase: %v, want ErrInvalidOptions", err)
			}
			if err := blkcrypt.Format(ctx, filepath.Join(t.TempDir(), "n.img"), nil, blkcrypt.FormatOptions{Size: 20 << 20, PBKDF: fast}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Fatalf("format with an empty passphrase: %v, want ErrInvalidOptions", err)
			}
			if got := fileHash(t, img); got != before {
				t.Fatal("a refused call changed the image")
			}
			if !cryptsetupOpens(t, img, "pw", 0) {
				t.Fatal("cryptsetup no longer opens keyslot 0 after the refusals")
			}
			// Forced, both go through.
			if _, err := h.RemoveKey(ctx, []byte("pw"), blkcrypt.KeyOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			if cryptsetupOpens(t, img, "pw", -1) {
				t.Fatal("cryptsetup still opens the removed keyslot")
			}
			if err := blkcrypt.Format(ctx, img, []byte("other"), blkcrypt.FormatOptions{Type: typ, PBKDF: fast, Force: true}); err != nil {
				t.Fatalf("forced format: %v", err)
			}
			if !cryptsetupOpens(t, img, "other", -1) {
				t.Fatal("cryptsetup does not open the forced format")
			}
		})
	}
}

// The formats blkcrypt does not own open read-only unless ReadWrite asks
// (issue #25: the zero OpenOptions opened BitLocker read-write); plain
// mode without a secret is refused.
func TestOpenReadOnlyDefaults(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(lukstest.Extract(t, "bitlk-images.tar.xz"), "bitlk-images")
	img := filepath.Join(dir, "bitlk-aes-xts-128.img")
	before := fileHash(t, img)
	for _, typ := range []string{"", "bitlk"} {
		v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Type: typ, Passphrase: []byte("anaconda")})
		if err != nil {
			t.Fatal(err)
		}
		if !v.ReadOnly() {
			t.Errorf("type %q: BitLocker opened read-write by the zero options", typ)
		}
		if _, err := v.WriteAt(make([]byte, 512), 0); !errors.Is(err, blkcrypt.ErrReadOnly) {
			t.Errorf("type %q: write: %v, want ErrReadOnly", typ, err)
		}
		v.Close()
	}
	if fileHash(t, img) != before {
		t.Fatal("a read-only open changed the image")
	}
	v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("anaconda"), ReadWrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if v.ReadOnly() {
		t.Error("ReadWrite did not allow writes")
	}
	v.Close()
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("anaconda"), ReadWrite: true, ReadOnly: true}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("ReadOnly with ReadWrite: %v, want ErrInvalidOptions", err)
	}
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Type: "plain"}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("plain without a secret: %v, want ErrInvalidOptions", err)
	}
	if _, err := blkcrypt.Open(ctx, t.TempDir(), blkcrypt.OpenOptions{Passphrase: []byte("x")}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("a directory: %v, want ErrInvalidOptions", err)
	}
}

// memDevice is an in-memory disk: what a Go program that keeps an image in
// memory (or behind its own transport) hands the library.
type memDevice struct{ b []byte }

func (m *memDevice) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, os.ErrClosed
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, fmt.Errorf("short read")
	}
	return n, nil
}

func (m *memDevice) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(len(m.b)) {
		return 0, fmt.Errorf("write past the end")
	}
	return copy(m.b[off:], p), nil
}

func (m *memDevice) Size() int64 { return int64(len(m.b)) }

// TestLUKSHandle runs the key operations of the LUKS handle over a file
// and over memory, LUKS1 and LUKS2, and has cryptsetup judge each result:
// which keyslot each passphrase opens, as cryptsetup's own verbs leave it.
func TestLUKSHandle(t *testing.T) {
	ctx := context.Background()
	fast := blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	for _, typ := range []string{"luks1", "luks2"} {
		for _, where := range []string{"file", "memory"} {
			t.Run(typ+"/"+where, func(t *testing.T) {
				img := filepath.Join(t.TempDir(), "v.img")
				var h *blkcrypt.LUKS
				var mem *memDevice
				var err error
				if where == "file" {
					if err = blkcrypt.Format(ctx, img, []byte("zero"), blkcrypt.FormatOptions{Type: typ, Size: 20 << 20, PBKDF: fast}); err != nil {
						t.Fatal(err)
					}
					h, err = blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{Type: typ})
				} else {
					mem = &memDevice{b: make([]byte, 20<<20)}
					if err = blkcrypt.FormatDevice(ctx, mem, []byte("zero"), blkcrypt.FormatOptions{Type: typ, PBKDF: fast}); err != nil {
						t.Fatal(err)
					}
					h, err = blkcrypt.OpenLUKSDevice(ctx, mem, blkcrypt.LUKSOptions{Type: typ})
				}
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close()
				sync := func() {
					if mem != nil {
						if err := os.WriteFile(img, mem.b, 0o600); err != nil {
							t.Fatal(err)
						}
					}
				}
				// add-key: keyslot 1 (first free), then keyslot 5 by number.
				if s, err := h.AddKey(ctx, []byte("zero"), []byte("one"), blkcrypt.KeyOptions{PBKDF: fast}); err != nil || s != 1 {
					t.Fatalf("AddKey: slot %d, %v", s, err)
				}
				if s, err := h.AddKey(ctx, []byte("one"), []byte("five"), blkcrypt.KeyOptions{PBKDF: fast, NewKeyslot: blkcrypt.Slot(5), Keyslot: blkcrypt.Slot(1)}); err != nil || s != 5 {
					t.Fatalf("AddKey into 5: slot %d, %v", s, err)
				}
				if _, err := h.AddKey(ctx, []byte("one"), []byte("x"), blkcrypt.KeyOptions{PBKDF: fast, Keyslot: blkcrypt.Slot(0)}); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
					t.Fatalf("AddKey with keyslot 1's passphrase restricted to keyslot 0: %v", err)
				}
				// change-key: LUKS2 keeps the number, LUKS1 takes the first free.
				want := map[string]int{"luks1": 2, "luks2": 1}[typ]
				if s, err := h.ChangeKey(ctx, []byte("one"), []byte("uno"), blkcrypt.KeyOptions{PBKDF: fast}); err != nil || s != want {
					t.Fatalf("ChangeKey: slot %d, %v; want %d", s, err, want)
				}
				// remove-key, kill-slot.
				if s, err := h.RemoveKey(ctx, []byte("five"), blkcrypt.KeyOptions{}); err != nil || s != 5 {
					t.Fatalf("RemoveKey: slot %d, %v", s, err)
				}
				if err := h.KillSlot(ctx, 5, blkcrypt.KeyOptions{}); !errors.Is(err, blkcrypt.ErrSlotInactive) || !errors.Is(err, blkcrypt.ErrInvalidOptions) {
					t.Fatalf("KillSlot of an inactive keyslot: %v", err)
				}
				if s, err := h.TestPassphrase(ctx, []byte("uno"), blkcrypt.KeyOptions{}); err != nil || s != want {
					t.Fatalf("TestPassphrase: slot %d, %v", s, err)
				}
				hd, err := h.Header(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(hd.ActiveKeyslots()); got != fmt.Sprint([]int{0, want}) {
					t.Fatalf("active keyslots %s, want [0 %d]", got, want)
				}
				sync()
				for _, c := range []struct {
					pass string
					slot int
					ok   bool
				}{{"zero", 0, true}, {"uno", want, true}, {"one", -1, false}, {"five", -1, false}} {
					if got := cryptsetupOpens(t, img, c.pass, c.slot); got != c.ok {
						t.Errorf("cryptsetup with %q (keyslot %d): opens %v, want %v", c.pass, c.slot, got, c.ok)
					}
				}
				// kill-slot with a key file: the passphrase must open
				// another keyslot; keyslot 0's own does not authorise it.
				if err := h.KillSlotWith(ctx, 0, []byte("zero"), blkcrypt.KeyOptions{}); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
					t.Fatalf("KillSlotWith keyslot 0's passphrase: %v, want ErrWrongPassphrase", err)
				}
				sync()
				if !cryptsetupOpens(t, img, "zero", 0) {
					t.Fatal("a refused KillSlotWith removed keyslot 0")
				}
				if err := h.KillSlotWith(ctx, 0, []byte("uno"), blkcrypt.KeyOptions{}); err != nil {
					t.Fatal(err)
				}
				sync()
				if cryptsetupOpens(t, img, "zero", -1) {
					t.Error("cryptsetup opens a killed keyslot")
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := h.Header(ctx); !errors.Is(err, blkcrypt.ErrClosed) {
					t.Errorf("Header after Close: %v", err)
				}
			})
		}
	}
	// A read-only handle refuses changes before deriving any key.
	mem := &memDevice{b: make([]byte, 20<<20)}
	if err := blkcrypt.FormatDevice(ctx, mem, []byte("pw"), blkcrypt.FormatOptions{PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	before := bytes.Clone(mem.b)
	h, err := blkcrypt.OpenLUKSDevice(ctx, readerOnly{mem}, blkcrypt.LUKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddKey(ctx, []byte("pw"), []byte("new"), blkcrypt.KeyOptions{PBKDF: fast}); !errors.Is(err, blkcrypt.ErrReadOnly) {
		t.Fatalf("AddKey on a reader: %v, want ErrReadOnly", err)
	}
	if !bytes.Equal(before, mem.b) {
		t.Fatal("a read-only handle wrote")
	}
	var nilHandle *blkcrypt.LUKS
	if err := nilHandle.Close(); err != nil {
		t.Fatal(err)
	}
}

type readerOnly struct{ m *memDevice }

func (r readerOnly) ReadAt(p []byte, off int64) (int, error) { return r.m.ReadAt(p, off) }
func (r readerOnly) Size() int64                             { return r.m.Size() }

// ReadHeader takes any io.ReaderAt of known size: a read-only reader in
// memory reads the header a Format wrote (issue #25: it wanted a writable
// device to read).
func TestReadHeaderReadOnly(t *testing.T) {
	ctx := context.Background()
	mem := &memDevice{b: make([]byte, 20<<20)}
	if err := blkcrypt.FormatDevice(ctx, mem, []byte("pw"), blkcrypt.FormatOptions{Label: "lbl", PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatal(err)
	}
	h, err := blkcrypt.ReadHeader(bytes.NewReader(mem.b))
	if err != nil {
		t.Fatal(err)
	}
	if h.Version() != 2 || fmt.Sprint(h.ActiveKeyslots()) != "[0]" {
		t.Fatalf("version %d, keyslots %v", h.Version(), h.ActiveKeyslots())
	}
	if _, err := blkcrypt.ReadHeader(bytes.NewReader(make([]byte, 1<<20))); !errors.Is(err, blkcrypt.ErrNoHeader) {
		t.Fatalf("zeros: %v, want ErrNoHeader", err)
	}
}

// A cascade is one Volume whose map runs every cipher (issue #25: it was a
// stack of Volumes, and Cipher named one of three): Ciphers lists them
// from the device up, CipherSpec names them all, and the data is what
// the image holds (a FAT boot sector with VeraCrypt's test serial).
func TestCascadeVolume(t *testing.T) {
	dir := filepath.Join(lukstest.Extract(t, "tcrypt-images.tar.xz"), "tcrypt-images")
	v, err := blkcrypt.Open(context.Background(), filepath.Join(dir, "vc_1-sha512-xts-camellia-serpent-kuznyechik"),
		blkcrypt.OpenOptions{Type: blkcrypt.TypeTCRYPT, Passphrase: []byte("aaaaaaaaaaaa"), TCRYPT: blkcrypt.TCRYPTOptions{Hash: "sha512"}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var names []string
	for _, c := range v.Ciphers() {
		names = append(names, c.Spec().String())
	}
	if len(names) != 3 || v.CipherSpec() != strings.Join(names, "+") || v.Cipher() != v.Ciphers()[2] {
		t.Fatalf("ciphers %q, spec %q", names, v.CipherSpec())
	}
	for i, want := range []string{"kuznyechik", "serpent", "camellia"} {
		if !strings.HasPrefix(names[i], want) {
			t.Errorf("layer %d is %s, want %s (VeraCrypt's camellia-serpent-kuznyechik, outermost first)", i, names[i], want)
		}
	}
	boot := make([]byte, 512)
	if _, err := v.ReadAt(boot, 0); err != nil {
		t.Fatal(err)
	}
	// FAT12/16: the volume serial at byte 39; the test images have
	// DEADBABE (cryptsetup's tests/tcrypt-images).
	if boot[510] != 0x55 || boot[511] != 0xaa || !bytes.Equal(boot[39:43], []byte{0xbe, 0xba, 0xad, 0xde}) {
		t.Fatalf("the first sector is not the images' FAT boot sector: % x", boot[:48])
	}
}

// Resize through the handle grows and shrinks an image's data area; what
// it leaves opens in cryptsetup; a refusal (a size off the sector grid)
// changes nothing.
func TestLUKSResize(t *testing.T) {
	ctx := context.Background()
	img := filepath.Join(t.TempDir(), "v.img")
	if err := blkcrypt.Format(ctx, img, []byte("pw"), blkcrypt.FormatOptions{Size: 20 << 20, SectorSize: 4096, PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatal(err)
	}
	h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	hd, err := h.Header(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := fileHash(t, img)
	if err := h.Resize(ctx, blkcrypt.ResizeOptions{Size: 4096*100 + 512}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Fatalf("a size off the 4096-byte grid: %v", err)
	}
	if fileHash(t, img) != before {
		t.Fatal("a refused resize changed the image")
	}
	for _, size := range []int64{32 << 20, 8 << 20} {
		if err := h.Resize(ctx, blkcrypt.ResizeOptions{Size: size}); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(img)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != hd.DataOffset()+size {
			t.Fatalf("file of %d bytes after a resize to %d", st.Size(), size)
		}
		if !cryptsetupOpens(t, img, "pw", 0) {
			t.Fatalf("cryptsetup does not open the image resized to %d", size)
		}
	}
}
