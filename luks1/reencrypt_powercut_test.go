package luks1_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// The power-cut model for a LUKS1 reencryption, whose state is spread over
// the device and the files in a directory: the device and every file are
// each an internal/powercut disk (writes volatile until that disk's own
// Sync, then lost, reordered or torn per sector, independently of the
// other disks). Directory entries are simpler: a Create or Remove is
// durable at once, in order (the run syncs the directory after each
// change, and the sweep does not lose entries). A cut is a point in the
// one sequence of every disk's writes and syncs and the directory's
// changes.

type pcEvent struct {
	create, remove bool
	f              *pcFile // the file (nil: the device) the event is about
	name           string
}

type pcWorld struct {
	mu     sync.Mutex
	events []pcEvent
	dev    *pcFile
	live   map[string]*pcFile
}

type pcFile struct {
	w    *pcWorld
	name string
	d    *powercut.Device
}

func (f *pcFile) ReadAt(p []byte, off int64) (int, error) { return f.d.ReadAt(p, off) }
func (f *pcFile) WriteAt(p []byte, off int64) (int, error) {
	f.w.note(pcEvent{f: f})
	return f.d.WriteAt(p, off)
}
func (f *pcFile) Sync() error {
	f.w.note(pcEvent{f: f})
	return f.d.Sync()
}
func (f *pcFile) Size() (int64, error) { return f.d.Size() }
func (f *pcFile) Close() error         { return nil }

func (w *pcWorld) note(e pcEvent) {
	w.mu.Lock()
	w.events = append(w.events, e)
	w.mu.Unlock()
}

func (w *pcWorld) Create(name string, perm fs.FileMode, size int64) (luks1.ReencryptFile, error) {
	if w.live[name] != nil {
		return nil, fmt.Errorf("create %s: %w", name, fs.ErrExist)
	}
	f := &pcFile{w: w, name: name, d: powercut.New(make([]byte, size))}
	w.live[name] = f
	w.note(pcEvent{create: true, f: f, name: name})
	return f, nil
}

func (w *pcWorld) Open(name string) (luks1.ReencryptFile, error) {
	if f := w.live[name]; f != nil {
		return f, nil
	}
	return nil, fmt.Errorf("open %s: %w", name, fs.ErrNotExist)
}

func (w *pcWorld) Remove(name string) error {
	if w.live[name] != nil {
		delete(w.live, name)
		w.note(pcEvent{remove: true, name: name})
	}
	return nil
}

func (w *pcWorld) Sync() error { return nil }

// state is what survives a cut after the first k events: for the device
// and each file present, its possible contents (the powercut extremes and
// n random survivor sets).
type pcState struct {
	devImgs []powercut.Image
	devCut  *powercut.Cut
	files   map[string]*powercut.Cut
	imgs    map[string][]powercut.Image
}

func (w *pcWorld) cutAfter(k int, seed uint64, n int) pcState {
	files := map[string]*pcFile{}
	ops := map[*pcFile]int{}
	for _, e := range w.events[:k] {
		switch {
		case e.create:
			files[e.name] = e.f
		case e.remove:
			delete(files, e.name)
		default:
			ops[e.f]++
		}
	}
	st := pcState{files: map[string]*powercut.Cut{}, imgs: map[string][]powercut.Image{}}
	st.devCut = w.dev.d.CutAfter(ops[w.dev])
	st.devImgs = st.devCut.Images(seed, n)
	for name, f := range files {
		c := f.d.CutAfter(ops[f])
		st.files[name] = c
		st.imgs[name] = c.Images(seed+uint64(len(name)), n)
	}
	return st
}

// TestReencryptPowerCut cuts power at every event of a whole LUKS1
// reencryption (start, four blocks, finish) and, for each cut, under
// several survivor choices, runs blkcrypt's resume in the surviving
// directory: it must finish, and cryptsetup must then open the volume with
// both passphrases, under a new key with which OpenSSL decrypts the
// original plaintext.
func TestReencryptPowerCut(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	dir := t.TempDir()
	// A small layout: 256-bit keys, the payload right after the keyslots.
	img := lukstest.NewImage(t, dir, "base.img", 2056*512+64<<10)
	pass := [][]byte{[]byte("cut zero"), []byte("cut one")}
	cs.MustRun("luksFormat", "--type", "luks1", "--batch-mode", "--key-size", "256", "--align-payload", "8",
		"--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass[0]), img)
	cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass[0]), img, cs.KeyFile(pass[1]))
	oldKey := cs.VolumeKey(img, pass[0])
	const dataOff = 2056 * 512
	plain := make([]byte, 64<<10)
	for i := range plain {
		plain[i] = byte(i*7 + i>>9)
	}
	writeAt(t, img, xts(t, o, oldKey, plain, 0, true), dataOff)
	base := lukstest.ReadImage(t, img)

	w := &pcWorld{live: map[string]*pcFile{}}
	w.dev = &pcFile{w: w, name: "device", d: powercut.New(base)}
	opts := luks1.ReencryptOptions{Passphrases: map[int][]byte{0: pass[0], 1: pass[1]}, Keyslot: fast, BlockSize: 16 << 10, Dir: w}
	if err := luks1.Reencrypt(context.Background(), w.dev, opts); err != nil {
		t.Fatalf("the reencryption failed without a power cut: %v", err)
	}
	if len(w.live) != 0 {
		t.Fatalf("files left after the run: %v", w.live)
	}

	// BLKCRYPT_POWERCUT_SEED and BLKCRYPT_POWERCUT_RANDOM shift the seed
	// and set the random sets per disk and cut, as for lukstest.Sweep.
	n, seed := 4, uint64(15)
	if testing.Short() {
		n = 1
	}
	if v, err := strconv.ParseUint(os.Getenv("BLKCRYPT_POWERCUT_SEED"), 10, 64); err == nil {
		seed += v
	}
	if v, err := strconv.Atoi(os.Getenv("BLKCRYPT_POWERCUT_RANDOM")); err == nil && v > 0 {
		n = v
	}
	work := filepath.Join(t.TempDir(), "work")
	cutImg := filepath.Join(t.TempDir(), "cut.img")
	seen := map[[32]byte]bool{}
	judged, cuts, marks := 0, 0, 0
	for k := 0; k <= len(w.events); k++ {
		st := w.cutAfter(k, seed, n)
		cuts++
		names := make([]string, 0, len(st.imgs))
		most := len(st.devImgs)
		for name, ims := range st.imgs {
			names = append(names, name)
			most = max(most, len(ims))
		}
		sort.Strings(names)
		// Combination i takes each disk's i-th image (its last when it has
		// fewer): all kept, none kept, then random sets, across all disks.
		for i := 0; i < most; i++ {
			pick := func(ims []powercut.Image) powercut.Image { return ims[min(i, len(ims)-1)] }
			h := sha256.New()
			di := pick(st.devImgs)
			h.Write(di.Sum[:])
			for _, name := range names {
				fi := pick(st.imgs[name])
				h.Write([]byte(name))
				h.Write(fi.Sum[:])
			}
			var sum [32]byte
			h.Sum(sum[:0])
			if seen[sum] {
				continue
			}
			seen[sum] = true
			judged++
			what := fmt.Sprintf("cut after event %d of %d, combination %d (seed %d, files %v)", k, len(w.events), i, seed, names)

			os.RemoveAll(work)
			if err := os.Mkdir(work, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				c := st.files[name]
				b := append([]byte(nil), c.Durable()...)
				pick(st.imgs[name]).Apply(b)
				if err := os.WriteFile(filepath.Join(work, name), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			b := append([]byte(nil), st.devCut.Durable()...)
			di.Apply(b)
			if err := os.WriteFile(cutImg, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if marked, _ := luks1.ReencryptionInProgress(bytes.NewReader(b)); marked {
				// cryptsetup takes the state for its own: it finds the log,
				// opens the .new header and gets to its temporary dm-crypt
				// devices (which this machine lacks; it changes nothing
				// before them).
				out, _ := runCryptsetupIn(cs, work, "reencrypt", "--batch-mode", "--verbose", "--key-file", cs.KeyFile(pass[1]), "--key-slot", "1", cutImg)
				if !strings.Contains(out, "exists, resuming reencryption") || !strings.Contains(out, "Activating temporary device using old LUKS header") {
					if !leftoversIn(work) {
						t.Fatalf("%s: cryptsetup finished the reencryption itself; this test expects a machine without device-mapper", what)
					}
					t.Fatalf("%s: cryptsetup does not resume from this state:\n%s", what, out)
				}
				if cur := lukstest.ReadImage(t, cutImg); !bytes.Equal(cur, b) {
					t.Fatalf("%s: cryptsetup's stopped resume changed the device", what)
				}
				marks++
			}
			f, err := os.OpenFile(cutImg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			ro := opts
			ro.Dir = luks1.DirFS(work)
			err = luks1.Reencrypt(context.Background(), luks1.File{File: f}, ro)
			f.Close()
			if err != nil {
				t.Fatalf("%s: resume failed: %v", what, err)
			}
			if ents, _ := os.ReadDir(work); len(ents) != 0 {
				t.Fatalf("%s: files left after the resume: %v", what, ents)
			}
			for s, p := range pass {
				if !cs.TestPassphrase(cutImg, p, s) {
					t.Fatalf("%s: cryptsetup refuses keyslot %d after the resume", what, s)
				}
			}
			key := cs.VolumeKey(cutImg, pass[1])
			if bytes.Equal(key, oldKey) {
				t.Fatalf("%s: the volume key did not change", what)
			}
			got := xts(t, o, key, lukstest.ReadImage(t, cutImg)[dataOff:], 0, false)
			if !bytes.Equal(got, plain) {
				t.Fatalf("%s: the plaintext differs after the resume", what)
			}
		}
	}
	t.Logf("%d events, %d cut points, %d distinct power-cut states resumed and judged (%d of them marked, each taken up by cryptsetup)", len(w.events), cuts, judged, marks)
	if marks == 0 {
		t.Fatal("no cut left a marked device")
	}
}

// The sweep fails without the journal: a negative control, so the sweep
// is known to catch a lost block. Cutting while a block is written and
// deleting the journal before the resume must lose data in some state.
func TestReencryptPowerCutNeedsJournal(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	o := oracle.New(t)
	dir := t.TempDir()
	img := lukstest.NewImage(t, dir, "base.img", 2056*512+32<<10)
	pass := []byte("no journal")
	cs.MustRun("luksFormat", "--type", "luks1", "--batch-mode", "--key-size", "256", "--align-payload", "8",
		"--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass), img)
	oldKey := cs.VolumeKey(img, pass)
	plain := bytes.Repeat([]byte("plaintext block "), 2<<10)
	writeAt(t, img, xts(t, o, oldKey, plain, 0, true), 2056*512)
	base := lukstest.ReadImage(t, img)
	w := &pcWorld{live: map[string]*pcFile{}}
	w.dev = &pcFile{w: w, name: "device", d: powercut.New(base)}
	opts := luks1.ReencryptOptions{Passphrases: map[int][]byte{0: pass}, Keyslot: fast, BlockSize: 16 << 10, Dir: w}
	if err := luks1.Reencrypt(context.Background(), w.dev, opts); err != nil {
		t.Fatal(err)
	}
	lost := false
	work := filepath.Join(t.TempDir(), "work")
	cutImg := filepath.Join(t.TempDir(), "cut.img")
	for k := 0; k <= len(w.events) && !lost; k++ {
		st := w.cutAfter(k, 1, 0)
		if _, ok := st.files["LUKS-"+mustUUID(t, base)+".jnl"]; !ok {
			continue
		}
		os.RemoveAll(work)
		os.Mkdir(work, 0o700)
		for name, c := range st.files {
			if filepath.Ext(name) == ".jnl" {
				continue // the journal is what this control takes away
			}
			b := append([]byte(nil), c.Durable()...)
			st.imgs[name][len(st.imgs[name])-1].Apply(b)
			os.WriteFile(filepath.Join(work, name), b, 0o600)
		}
		b := append([]byte(nil), st.devCut.Durable()...)
		st.devImgs[len(st.devImgs)-1].Apply(b) // every device write kept
		os.WriteFile(cutImg, b, 0o600)
		f, _ := os.OpenFile(cutImg, os.O_RDWR, 0)
		ro := opts
		ro.Dir = luks1.DirFS(work)
		err := luks1.Reencrypt(context.Background(), luks1.File{File: f}, ro)
		f.Close()
		if err != nil {
			continue
		}
		key := cs.VolumeKey(cutImg, pass)
		if !bytes.Equal(xts(t, o, key, lukstest.ReadImage(t, cutImg)[2056*512:], 0, false), plain) {
			lost = true
		}
	}
	if !lost {
		t.Fatal("no power-cut state lost data without the journal: the sweep cannot see a lost block")
	}
}

func leftoversIn(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "LUKS-*.log"))
	return len(m) > 0
}

func mustUUID(t *testing.T, img []byte) string {
	t.Helper()
	p, err := luks1.ParsePhdr(img)
	if err != nil {
		t.Fatal(err)
	}
	return p.UUID()
}
