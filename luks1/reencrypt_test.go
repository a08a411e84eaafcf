package luks1_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// rvol is a LUKS1 image made by cryptsetup whose data area holds known
// plaintext encrypted by OpenSSL (aes-xts-plain64) with the volume key
// cryptsetup dumps: nothing of ours made it.
type rvol struct {
	img, dir string
	pass     [][]byte
	plain    []byte
	key      []byte
	uuid     string
	dataOff  int64
}

const rvData = 1 << 20

func newRVol(t *testing.T, cs *lukstest.Cryptsetup, o *oracle.Oracle, extra ...string) *rvol {
	t.Helper()
	dir := t.TempDir()
	v := &rvol{dir: filepath.Join(dir, "work"), pass: [][]byte{[]byte("first pass"), []byte("second pass")}}
	if err := os.Mkdir(v.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v.img = lukstest.NewImage(t, dir, "vol.img", 2<<20+rvData)
	args := append([]string{"luksFormat", "--type", "luks1", "--batch-mode", "--pbkdf-force-iterations", "1000",
		"--key-file", cs.KeyFile(v.pass[0])}, extra...)
	cs.MustRun(append(args, v.img)...)
	cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(v.pass[0]), v.img, cs.KeyFile(v.pass[1]))
	dump := cs.MustRun("luksDump", v.img)
	v.uuid = dumpField(t, dump, "UUID")
	po, err := strconv.ParseInt(dumpField(t, dump, "Payload offset"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	v.dataOff = po * 512
	v.key = cs.VolumeKey(v.img, v.pass[0])
	size := lukstest.ReadImage(t, v.img)
	v.plain = make([]byte, int64(len(size))-v.dataOff)
	rand.Read(v.plain)
	ct := xts(t, o, v.key, v.plain, 0, true)
	writeAt(t, v.img, ct, v.dataOff)
	return v
}

func dumpField(t *testing.T, dump, name string) string {
	t.Helper()
	for _, line := range strings.Split(dump, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %q in luksDump:\n%s", name, dump)
	return ""
}

// xts runs aes-xts-plain64 over whole sectors through OpenSSL.
func xts(t *testing.T, o *oracle.Oracle, key, data []byte, firstSector uint64, enc bool) []byte {
	t.Helper()
	name := map[int]string{32: "aes-128-xts", 64: "aes-256-xts"}[len(key)]
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); i += 512 {
		iv := make([]byte, 16)
		binary.LittleEndian.PutUint64(iv, firstSector+uint64(i/512))
		b, err := o.Crypt(name, key, iv, data[i:i+512], enc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// qemuPlain reads the volume's plaintext with qemu-img's LUKS driver.
func qemuPlain(t *testing.T, img string, pass []byte) []byte {
	t.Helper()
	q := testenv.Need(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	secret := filepath.Join(dir, "pass")
	if err := os.WriteFile(secret, pass, 0o600); err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(dir, "plain.raw")
	spec := `json:{"driver":"luks","key-secret":"sec0","file":{"driver":"file","filename":"` + img + `"}}`
	if b, err := exec.Command(q, "convert", "--object", "secret,id=sec0,file="+secret, "-O", "raw", spec, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img cannot read the volume: %v\n%s", err, b)
	}
	b, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// judge checks a finished reencryption with cryptsetup, qemu-img and
// OpenSSL: the same UUID, the cipher and key size asked for, a new volume
// key (unless keep), every passphrase (at its slot), the plaintext, and
// no file left in the directory.
func (v *rvol) judge(t *testing.T, cs *lukstest.Cryptsetup, o *oracle.Oracle, cipher string, bits int, keep bool, slots map[int][]byte) []byte {
	t.Helper()
	dump := cs.MustRun("luksDump", v.img)
	name, mode, _ := strings.Cut(cipher, "-")
	if dumpField(t, dump, "UUID") != v.uuid || dumpField(t, dump, "Cipher name") != name ||
		dumpField(t, dump, "Cipher mode") != mode || dumpField(t, dump, "MK bits") != fmt.Sprint(bits) {
		t.Fatalf("cryptsetup luksDump after reencryption:\n%s", dump)
	}
	for s := 0; s < 8; s++ {
		want := "DISABLED"
		if slots[s] != nil {
			want = "ENABLED"
		}
		if got := dumpField(t, dump, fmt.Sprintf("Key Slot %d", s)); got != want {
			t.Fatalf("keyslot %d is %s, want %s:\n%s", s, got, want, dump)
		}
	}
	var key []byte
	for s, p := range slots {
		if !cs.TestPassphrase(v.img, p, s) {
			t.Fatalf("cryptsetup open --test-passphrase refuses keyslot %d", s)
		}
		key = cs.VolumeKey(v.img, p)
	}
	if bytes.Equal(key, v.key) != keep {
		t.Fatalf("volume key changed: %v, want %v", !bytes.Equal(key, v.key), !keep)
	}
	for _, p := range slots {
		if got := qemuPlain(t, v.img, p); !bytes.Equal(got, v.plain) {
			t.Fatalf("qemu-img reads a plaintext that differs from the original (%d bytes)", len(got))
		}
		break
	}
	if cipher == "aes-xts-plain64" {
		// OpenSSL decrypts the first and the last sector with the new key.
		img := lukstest.ReadImage(t, v.img)
		for _, s := range []int64{0, int64(len(v.plain))/512 - 1} {
			got := xts(t, o, key, img[v.dataOff+s*512:v.dataOff+s*512+512], uint64(s), false)
			if !bytes.Equal(got, v.plain[s*512:s*512+512]) {
				t.Fatalf("OpenSSL decrypts sector %d with the new key to something else", s)
			}
		}
	}
	if ents, _ := os.ReadDir(v.dir); len(ents) != 0 {
		t.Fatalf("files left in the directory: %v", ents)
	}
	return key
}

func fastOpts(v *rvol, pass map[int][]byte) luks1.ReencryptOptions {
	return luks1.ReencryptOptions{Passphrases: pass, Keyslot: fast, BlockSize: 64 << 10, Dir: luks1.DirFS(v.dir)}
}

func TestReencryptNewKey(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	v := newRVol(t, cs, o)
	slots := map[int][]byte{0: v.pass[0], 1: v.pass[1]}
	if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), fastOpts(v, slots)); err != nil {
		t.Fatal(err)
	}
	v.judge(t, cs, o, "aes-xts-plain64", 512, false, slots)
}

// With one passphrase given for a volume with two keyslots, the new header
// keeps only that keyslot, as cryptsetup does with --key-slot.
func TestReencryptOneSlotNewCipher(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	v := newRVol(t, cs, o)
	opts := fastOpts(v, map[int][]byte{1: v.pass[1]})
	opts.Cipher, opts.KeySize, opts.Hash = "aes-cbc-essiv:sha256", 32, "sha512"
	if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), opts); err != nil {
		t.Fatal(err)
	}
	v.judge(t, cs, o, "aes-cbc-essiv:sha256", 256, false, map[int][]byte{1: v.pass[1]})
	if h := dumpField(t, cs.MustRun("luksDump", v.img), "Hash spec"); h != "sha512" {
		t.Fatalf("hash %s, want sha512", h)
	}
	if cs.TestPassphrase(v.img, v.pass[0], -1) {
		t.Fatal("the keyslot not given survived")
	}
}

// --keep-key rewrites the header and keyslots only; the data area is left
// as it was, byte for byte.
func TestReencryptKeepKey(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	v := newRVol(t, cs, o)
	before := sha256.Sum256(lukstest.ReadImage(t, v.img)[v.dataOff:])
	opts := fastOpts(v, map[int][]byte{0: v.pass[0], 1: v.pass[1]})
	opts.KeepKey, opts.Hash = true, "sha1"
	if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), opts); err != nil {
		t.Fatal(err)
	}
	v.judge(t, cs, o, "aes-xts-plain64", 512, true, map[int][]byte{0: v.pass[0], 1: v.pass[1]})
	if after := sha256.Sum256(lukstest.ReadImage(t, v.img)[v.dataOff:]); after != before {
		t.Fatal("--keep-key changed the data area")
	}
	if h := dumpField(t, cs.MustRun("luksDump", v.img), "Hash spec"); h != "sha1" {
		t.Fatalf("hash %s, want sha1", h)
	}
}

// runCryptsetupIn runs cryptsetup with dir as its working directory, where
// LUKS1 reencryption keeps its files.
func runCryptsetupIn(cs *lukstest.Cryptsetup, dir string, args ...string) (string, error) {
	cmd := exec.Command(cs.Path, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func leftovers(t *testing.T, dir, uuid string) bool {
	t.Helper()
	log, org, nw, _ := luks1.ReencryptFiles(uuid)
	n := 0
	for _, f := range []string{log, org, nw} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n++
		}
	}
	return n == 3
}

// cryptsetup starts; blkcrypt finishes. This machine has no device-mapper,
// so cryptsetup stops where it would activate its temporary dm-crypt
// devices: after writing its log and both headers and marking the device,
// before the data. From that state, and from a mid-run state made from it
// with OpenSSL (the first 192 KiB reencrypted to the key of cryptsetup's
// .new header, the log's offset moved there as cryptsetup writes it),
// blkcrypt resumes to cryptsetup's new key and the original plaintext.
func TestReencryptResumesCryptsetupRun(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	for _, mid := range []int{0, 192 << 10} {
		t.Run(fmt.Sprintf("offset-%d", mid), func(t *testing.T) {
			cs := cs.With(t)
			v := newRVol(t, cs, o)
			out, err := runCryptsetupIn(cs, v.dir, "reencrypt", "--batch-mode", "--pbkdf-force-iterations", "1000",
				"--key-file", cs.KeyFile(v.pass[0]), "--key-slot", "0", "--block-size", "1", v.img)
			if !leftovers(t, v.dir, v.uuid) {
				// A machine with device-mapper: cryptsetup did it all.
				if err != nil {
					t.Fatalf("cryptsetup reencrypt: %v\n%s", err, out)
				}
				t.Logf("cryptsetup finished on its own (device-mapper available); judging its result")
				v.judge(t, cs, o, "aes-xts-plain64", 512, false, map[int][]byte{0: v.pass[0]})
				return
			}
			if err == nil || !strings.Contains(out, "device-mapper") {
				t.Fatalf("cryptsetup stopped for another reason than device-mapper: %v\n%s", err, out)
			}
			if marked, _ := luks1.ReencryptionInProgress(lukstest.Open(t, v.img)); !marked {
				t.Fatal("cryptsetup did not mark the device")
			}
			logN, _, newN, _ := luks1.ReencryptFiles(v.uuid)
			newKey := cs.VolumeKey(filepath.Join(v.dir, newN), v.pass[0])
			if mid > 0 {
				img := lukstest.ReadImage(t, v.img)
				pt := xts(t, o, v.key, img[v.dataOff:v.dataOff+int64(mid)], 0, false)
				writeAt(t, v.img, xts(t, o, newKey, pt, 0, true), v.dataOff)
				lp := filepath.Join(v.dir, logN)
				lb, err := os.ReadFile(lp)
				if err != nil || !bytes.Contains(lb, []byte("offset = 0\n")) {
					t.Fatalf("cryptsetup's log: %v %q", err, lb)
				}
				lb = bytes.Replace(lb, []byte("offset = 0\n"), []byte(fmt.Sprintf("offset = %d\n", mid)), 1)
				if err := os.WriteFile(lp, lb[:512], 0o600); err != nil {
					t.Fatal(err)
				}
			}
			opts := fastOpts(v, map[int][]byte{0: v.pass[0]})
			if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), opts); err != nil {
				t.Fatal(err)
			}
			if got := v.judge(t, cs, o, "aes-xts-plain64", 512, false, map[int][]byte{0: v.pass[0]}); !bytes.Equal(got, newKey) {
				t.Fatal("the finished volume's key is not the one of cryptsetup's .new header")
			}
		})
	}
}

// blkcrypt starts; cryptsetup takes over. A run stopped mid-data leaves
// what cryptsetup resumes from: it reports the log, unlocks the .new
// header and goes on to its temporary devices (where, without
// device-mapper, it stops; blkcrypt then finishes). A --keep-key run cut
// after marking the device is finished by cryptsetup itself, which needs
// no device-mapper for it.
func TestReencryptCryptsetupResumesOurs(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	t.Run("data", func(t *testing.T) {
		cs := cs.With(t)
		v := newRVol(t, cs, o)
		opts := fastOpts(v, map[int][]byte{0: v.pass[0], 1: v.pass[1]})
		opts.StopAfter = 5
		if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), opts); !errors.Is(err, luks1.ErrReencryptStopped) {
			t.Fatalf("stopped run: %v", err)
		}
		logN, _, newN, _ := luks1.ReencryptFiles(v.uuid)
		lb, _ := os.ReadFile(filepath.Join(v.dir, logN))
		if !bytes.Contains(lb, []byte(fmt.Sprintf("\noffset = %d\n", 5*64<<10))) {
			t.Fatalf("log after 5 blocks: %q", bytes.TrimRight(lb, "\x00"))
		}
		if out, err := cs.Run("isLuks", v.img); err == nil {
			t.Fatalf("cryptsetup takes the device in reencryption for LUKS: %s", out)
		}
		// cryptsetup reads our .new header with both passphrases.
		for s, p := range v.pass {
			if !cs.TestPassphrase(filepath.Join(v.dir, newN), p, s) {
				t.Fatalf("cryptsetup refuses keyslot %d of our .new header", s)
			}
		}
		out, err := runCryptsetupIn(cs, v.dir, "reencrypt", "--batch-mode", "--verbose", "--key-file", cs.KeyFile(v.pass[1]), "--key-slot", "1", v.img)
		if !leftovers(t, v.dir, v.uuid) {
			if err != nil {
				t.Fatalf("cryptsetup reencrypt: %v\n%s", err, out)
			}
			v.judge(t, cs, o, "aes-xts-plain64", 512, false, map[int][]byte{0: v.pass[0], 1: v.pass[1]})
			return
		}
		// It opens our .new header with the key file (a wrong one stops it
		// before "Activating", checked below) and goes on to activation.
		for _, want := range []string{"exists, resuming reencryption", "Activating temporary device using old LUKS header"} {
			if !strings.Contains(out, want) {
				t.Fatalf("cryptsetup's resume did not get as far as %q:\n%s", want, out)
			}
		}
		if out, _ := runCryptsetupIn(cs, v.dir, "reencrypt", "--batch-mode", "--verbose", "--key-file", cs.KeyFile([]byte("wrong")), "--key-slot", "1", v.img); strings.Contains(out, "Activating") || !strings.Contains(out, "No key available") {
			t.Fatalf("cryptsetup's resume with a wrong passphrase:\n%s", out)
		}
		lb2, _ := os.ReadFile(filepath.Join(v.dir, logN))
		if !bytes.Equal(lb, lb2) {
			t.Fatal("cryptsetup's failed resume changed the log")
		}
		if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), fastOpts(v, map[int][]byte{1: v.pass[1]})); err != nil {
			t.Fatal(err)
		}
		v.judge(t, cs, o, "aes-xts-plain64", 512, false, map[int][]byte{0: v.pass[0], 1: v.pass[1]})
	})
	t.Run("keep-key", func(t *testing.T) {
		cs := cs.With(t)
		v := newRVol(t, cs, o)
		// Writes: log, .org, .new (one each, in their files), then the
		// mark on the device: the header restore is the device's second.
		dev := &lukstest.FaultDevice{Device: lukstest.Open(t, v.img), Limit: 1}
		opts := fastOpts(v, map[int][]byte{0: v.pass[0]})
		opts.KeepKey = true
		if err := luks1.Reencrypt(context.Background(), dev, opts); !errors.Is(err, lukstest.ErrInjected) {
			t.Fatalf("cut run: %v", err)
		}
		if marked, _ := luks1.ReencryptionInProgress(lukstest.Open(t, v.img)); !marked || !leftovers(t, v.dir, v.uuid) {
			t.Fatal("the cut run did not leave a marked device and its files")
		}
		out, err := runCryptsetupIn(cs, v.dir, "reencrypt", "--batch-mode", "--keep-key", "--key-file", cs.KeyFile(v.pass[0]), v.img)
		if err != nil {
			t.Fatalf("cryptsetup reencrypt --keep-key on our interrupted run: %v\n%s", err, out)
		}
		v.judge(t, cs, o, "aes-xts-plain64", 512, true, map[int][]byte{0: v.pass[0]})
	})
}

// Bad input: a clear error, and neither the device nor the directory
// changed.
func TestReencryptBadInput(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	v := newRVol(t, cs, o)
	unchanged := func(t *testing.T, before [32]byte) {
		t.Helper()
		if sha256.Sum256(lukstest.ReadImage(t, v.img)) != before {
			t.Fatal("the device was written")
		}
		if ents, _ := os.ReadDir(v.dir); len(ents) != 0 {
			t.Fatalf("files written: %v", ents)
		}
	}
	before := sha256.Sum256(lukstest.ReadImage(t, v.img))
	for _, tc := range []struct {
		name string
		mod  func(o *luks1.ReencryptOptions)
		want error
	}{
		{"wrong-passphrase", func(o *luks1.ReencryptOptions) { o.Passphrases = map[int][]byte{0: []byte("nope")} }, luks1.ErrWrongPassphrase},
		{"one-good-one-wrong", func(o *luks1.ReencryptOptions) { o.Passphrases[1] = []byte("nope") }, luks1.ErrWrongPassphrase},
		{"any-slot-of-two", func(o *luks1.ReencryptOptions) { o.Passphrases = map[int][]byte{luks1.AnySlot: v.pass[0]} }, luks1.ErrInvalidOptions},
		{"unknown-cipher", func(o *luks1.ReencryptOptions) { o.Cipher = "nosuch-xts-plain64" }, luks1.ErrInvalidOptions},
		{"bad-key-size", func(o *luks1.ReencryptOptions) { o.KeySize = 20 }, luks1.ErrInvalidOptions},
		{"unknown-hash", func(o *luks1.ReencryptOptions) { o.Hash = "nosuch" }, luks1.ErrInvalidOptions},
		{"keep-key-new-cipher", func(o *luks1.ReencryptOptions) { o.KeepKey, o.Cipher = true, "aes-cbc-essiv:sha256" }, luks1.ErrInvalidOptions},
		{"block-size", func(o *luks1.ReencryptOptions) { o.BlockSize = 100 }, luks1.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := fastOpts(v, map[int][]byte{0: v.pass[0]})
			tc.mod(&opts)
			err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			unchanged(t, before)
		})
	}
	t.Run("stale-header-file", func(t *testing.T) {
		_, org, _, _ := luks1.ReencryptFiles(v.uuid)
		p := filepath.Join(v.dir, org)
		if err := os.WriteFile(p, []byte("a file of the user's"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
		err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), fastOpts(v, map[int][]byte{0: v.pass[0], 1: v.pass[1]}))
		if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("got %v", err)
		}
		if sha256.Sum256(lukstest.ReadImage(t, v.img)) != before {
			t.Fatal("the device was written")
		}
		if ents, _ := os.ReadDir(v.dir); len(ents) != 1 {
			t.Fatalf("files written: %v", ents)
		}
		if b, _ := os.ReadFile(p); string(b) != "a file of the user's" {
			t.Fatal("the existing file was changed")
		}
	})
	t.Run("key-too-big-for-header", func(t *testing.T) {
		// A 256-bit header packed at 2056 sectors has no room for 512-bit
		// keyslots (4040 sectors): cryptsetup's "data offset must be large
		// enough".
		cs := cs.With(t)
		w := newRVol(t, cs, o, "--key-size", "256", "--align-payload", "8")
		b := sha256.Sum256(lukstest.ReadImage(t, w.img))
		opts := fastOpts(w, map[int][]byte{0: w.pass[0], 1: w.pass[1]})
		opts.KeySize = 64
		err := luks1.Reencrypt(context.Background(), lukstest.Open(t, w.img), opts)
		if !errors.Is(err, luks1.ErrInvalidOptions) {
			t.Fatalf("got %v", err)
		}
		if sha256.Sum256(lukstest.ReadImage(t, w.img)) != b {
			t.Fatal("the device was written")
		}
	})
	t.Run("no-data-area", func(t *testing.T) {
		dir := t.TempDir()
		img := lukstest.NewImage(t, dir, "hdr.img", 2<<20)
		cs.MustRun("luksFormat", "--type", "luks1", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(v.pass[0]), img)
		b := sha256.Sum256(lukstest.ReadImage(t, img))
		err := luks1.Reencrypt(context.Background(), lukstest.Open(t, img), luks1.ReencryptOptions{Passphrases: map[int][]byte{0: v.pass[0]}, Keyslot: fast, Dir: luks1.DirFS(dir)})
		if !errors.Is(err, luks1.ErrDeviceTooSmall) {
			t.Fatalf("got %v", err)
		}
		if sha256.Sum256(lukstest.ReadImage(t, img)) != b {
			t.Fatal("the device was written")
		}
	})
	t.Run("not-luks", func(t *testing.T) {
		dir := t.TempDir()
		img := lukstest.NewImage(t, dir, "zero.img", 1<<20)
		err := luks1.Reencrypt(context.Background(), lukstest.Open(t, img), luks1.ReencryptOptions{Passphrases: map[int][]byte{0: v.pass[0]}, Dir: luks1.DirFS(dir)})
		if !errors.Is(err, luks1.ErrNotLUKS) {
			t.Fatalf("got %v", err)
		}
	})
}

// A device marked by a reencryption whose files are not here, or whose
// log is damaged or of a mode we do not run, is refused with nothing
// written.
func TestReencryptRefusesForeignState(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	v := newRVol(t, cs, o)
	opts := fastOpts(v, map[int][]byte{0: v.pass[0], 1: v.pass[1]})
	opts.StopAfter = 1
	if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), opts); !errors.Is(err, luks1.ErrReencryptStopped) {
		t.Fatal(err)
	}
	logN, _, _, _ := luks1.ReencryptFiles(v.uuid)
	lp := filepath.Join(v.dir, logN)
	good, _ := os.ReadFile(lp)
	before := sha256.Sum256(lukstest.ReadImage(t, v.img))
	other := t.TempDir()
	o2 := fastOpts(v, map[int][]byte{0: v.pass[0]})
	o2.Dir = luks1.DirFS(other)
	if err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), o2); !errors.Is(err, luks1.ErrReencryptInProgress) {
		t.Fatalf("no log here: %v", err)
	}
	for _, tc := range []struct {
		name string
		log  []byte
		want error
	}{
		{"garbage", bytes.Repeat([]byte("x\n"), 256), luks1.ErrReencryptLog},
		{"other-uuid", bytes.Replace(good, []byte(v.uuid), []byte("00000000-0000-0000-0000-000000000000"), 1), luks1.ErrReencryptLog},
		{"decrypt-mode", bytes.Replace(good, []byte("mode = 0"), []byte("mode = 2"), 1), luks1.ErrUnsupported},
		{"backward", bytes.Replace(good, []byte("direction = 0"), []byte("direction = 1"), 1), luks1.ErrUnsupported},
		{"offset-past-end", bytes.Replace(good, []byte("offset = 65536"), []byte("offset = 99999999"), 1), luks1.ErrReencryptLog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(lp, tc.log[:512], 0o600); err != nil {
				t.Fatal(err)
			}
			err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), fastOpts(v, map[int][]byte{0: v.pass[0]}))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if sha256.Sum256(lukstest.ReadImage(t, v.img)) != before {
				t.Fatal("the device was written")
			}
		})
	}
	t.Run("wrong-passphrase-on-resume", func(t *testing.T) {
		os.WriteFile(lp, good, 0o600)
		err := luks1.Reencrypt(context.Background(), lukstest.Open(t, v.img), fastOpts(v, map[int][]byte{0: []byte("nope")}))
		if !errors.Is(err, luks1.ErrWrongPassphrase) {
			t.Fatalf("got %v", err)
		}
		if sha256.Sum256(lukstest.ReadImage(t, v.img)) != before {
			t.Fatal("the device was written")
		}
	})
}

// The UUID names the files; a crafted one with a path in it is refused
// before any file is opened or made.
func TestReencryptHostileUUID(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	img := lukstest.NewImage(t, dir, "evil.img", 3<<20)
	hdr := make([]byte, 592)
	copy(hdr, luks1.NoMagic[:])
	hdr[7] = 1
	copy(hdr[0xa8:], "../../escaped")
	writeAt(t, img, hdr, 0)
	err := luks1.Reencrypt(context.Background(), lukstest.Open(t, img), luks1.ReencryptOptions{Passphrases: map[int][]byte{0: []byte("x")}, Dir: luks1.DirFS(work)})
	if !errors.Is(err, luks1.ErrCorruptHeader) {
		t.Fatalf("got %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 2 {
		t.Fatalf("files outside the directory: %v", m)
	}
}
