package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/luks2"
	"github.com/blkcrypt/blkcrypt/sector"
)

var onlineKDF = luks2.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Hash: "sha256", Iterations: 1000}}

// onlineImage formats a LUKS2 image (16 MiB header, dataMiB of data) with
// 512-byte sectors and fills it with random plaintext, which it returns.
func onlineImage(t *testing.T, pass []byte, dataMiB int) (string, []byte) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "online.img")
	err := blkcrypt.Format(context.Background(), img, pass, blkcrypt.FormatOptions{
		SectorSize: 512, Size: int64(16+dataMiB) << 20,
		PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass})
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, v.Size())
	rand.Read(plain)
	if _, err := v.WriteAt(plain, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	return img, plain
}

// shadowIO runs two clients that write and read random runs of 4 KiB
// blocks (and unaligned pieces of them) against v and a shadow copy until
// stop closes; a block's lock is held across the volume call and the
// shadow update, so the shadow is what the volume must hold. It counts the
// requests that ran while the reencryption was part way, and reports the
// first mismatch.
type shadowIO struct {
	v      *blkcrypt.Volume
	shadow []byte
	locks  []sync.Mutex
	mid    atomic.Int64
	ops    atomic.Int64
	errs   chan error
	wg     sync.WaitGroup
}

func startShadowIO(v *blkcrypt.Volume, shadow []byte, stop chan struct{}) *shadowIO {
	s := &shadowIO{v: v, shadow: shadow, locks: make([]sync.Mutex, len(shadow)/4096), errs: make(chan error, 2)}
	for w := 0; w < 2; w++ {
		s.wg.Add(1)
		go func(seed uint64) {
			defer s.wg.Done()
			rng := mrand.New(mrand.NewPCG(seed, seed))
			buf := make([]byte, 8*4096)
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + rng.IntN(8)
				b0 := rng.IntN(len(s.locks) - n + 1)
				if d, _, ok := v.Reencrypting(); ok && rng.IntN(2) == 0 {
					// Half the requests go near the boundary, where a
					// routing or locking mistake would show.
					b0 = min(max(int(d/4096)-8+rng.IntN(16), 0), len(s.locks)-n)
				}
				for i := b0; i < b0+n; i++ {
					s.locks[i].Lock()
				}
				off, ln := int64(b0)*4096, n*4096
				if rng.IntN(4) == 0 { // an unaligned piece: read-modify-write
					skip := rng.IntN(4000)
					off += int64(skip)
					ln -= skip + rng.IntN(ln-skip)
				}
				done, _, inProgress := v.Reencrypting()
				var err error
				if rng.IntN(2) == 0 {
					rand.Read(buf[:ln])
					if _, err = v.WriteAt(buf[:ln], off); err == nil {
						copy(s.shadow[off:], buf[:ln])
					}
				} else if _, err = v.ReadAt(buf[:ln], off); err == nil && !bytes.Equal(buf[:ln], s.shadow[off:off+int64(ln)]) {
					err = errors.New("a read differs from the shadow copy")
				}
				for i := b0; i < b0+n; i++ {
					s.locks[i].Unlock()
				}
				if err != nil {
					s.errs <- err
					return
				}
				s.ops.Add(1)
				if inProgress && done > 0 && done < v.Size() {
					s.mid.Add(1)
				}
			}
		}(uint64(w + 1))
	}
	return s
}

func (s *shadowIO) wait(t *testing.T) {
	t.Helper()
	s.wg.Wait()
	select {
	case err := <-s.errs:
		t.Fatalf("client: %v", err)
	default:
	}
}

// judgeOnline has cryptsetup open the finished volume and decrypts its
// data area with the volume key cryptsetup dumps: it must be want.
func judgeOnline(t *testing.T, cs *lukstest.Cryptsetup, img string, pass, want []byte, cipher string, ss int) {
	t.Helper()
	if !cs.TestPassphrase(img, pass, -1) {
		t.Fatal("cryptsetup does not open the reencrypted volume")
	}
	dump := cs.MustRun("luksDump", img)
	if strings.Contains(dump, "online-reencrypt") || !strings.Contains(dump, "cipher: "+cipher) || !strings.Contains(dump, "sector: "+strconv.Itoa(ss)) {
		t.Fatalf("luksDump after the online reencryption:\n%s", dump)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := luks2.Read(luks2.File{File: f})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sector.New(h.Cipher(), cs.VolumeKey(img, pass), sector.Options{SectorSize: h.SectorSize(), IVOffset: h.IVTweak()})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, h.DataOffset()); err != nil {
		t.Fatal(err)
	}
	if err := c.DecryptSectors(got, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the data cryptsetup's volume key decrypts differs from the shadow copy")
	}
}

// TestOnlineReencrypt: Volume.Reencrypt runs while two clients write and
// read random ranges against a shadow copy, for each resilience mode (and
// a new cipher and sector size under checksum); no read differs, some
// requests ran part way through, and cryptsetup opens the result and its
// volume key decrypts the shadow.
func TestOnlineReencrypt(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	for _, tc := range []struct {
		res, cipher string
		ss          int
	}{
		{"checksum", "aes-cbc-essiv:sha256", 4096},
		{"journal", "aes-xts-plain64", 512},
		{"none", "aes-xts-plain64", 512},
	} {
		t.Run(tc.res, func(t *testing.T) {
			pass := []byte("online " + tc.res)
			img, shadow := onlineImage(t, pass, 8)
			ro := &blkcrypt.ReencryptOptions{Resilience: tc.res, HotzoneSize: 64 << 10, Keyslot: onlineKDF}
			if tc.cipher != "aes-xts-plain64" {
				ro.Cipher, ro.KeySize = tc.cipher, 32
			}
			ro.SectorSize = tc.ss
			v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass, Reencrypt: ro})
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			s := startShadowIO(v, shadow, stop)
			steps := 0
			err = v.Reencrypt(context.Background(), func(done, total int64) { steps++ })
			close(stop)
			s.wait(t)
			if err != nil {
				t.Fatalf("reencrypt: %v", err)
			}
			if _, _, ok := v.Reencrypting(); !ok || steps < 8 {
				t.Fatalf("after the run: in progress %v, %d steps", ok, steps)
			}
			if s.mid.Load() == 0 {
				t.Fatalf("no client request ran during the reencryption (%d in all)", s.ops.Load())
			}
			got := make([]byte, len(shadow))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, shadow) {
				t.Fatalf("whole read after the run: %v, equal %v", err, bytes.Equal(got, shadow))
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			judgeOnline(t, cs, img, pass, shadow, tc.cipher, tc.ss)
			t.Logf("%d client requests, %d during the reencryption, %d steps", s.ops.Load(), s.mid.Load(), steps)
		})
	}
}

// TestOnlineReencryptStopResume: a run stopped part way (ctx) leaves a
// header that opens without Reencrypt, following the segments (reads and
// writes land on the right key), that blkcrypt resumes online, and that
// cryptsetup resumes offline; both end at the shadow copy.
func TestOnlineReencryptStopResume(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	for _, finisher := range []string{"blkcrypt", "cryptsetup"} {
		t.Run(finisher, func(t *testing.T) {
			pass := []byte("stop and resume")
			img, shadow := onlineImage(t, pass, 8)
			ro := &blkcrypt.ReencryptOptions{HotzoneSize: 512 << 10, Keyslot: onlineKDF}
			v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass, Reencrypt: ro})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			err = v.Reencrypt(ctx, func(done, total int64) {
				if done >= total/2 {
					cancel()
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("stopped run: %v", err)
			}
			v.Close()
			if d := cs.MustRun("luksDump", img); !strings.Contains(d, "online-reencrypt-v2") {
				t.Fatalf("no reencryption in progress after a stop:\n%s", d)
			}
			// Open to follow the segments: both sides read and write.
			v, err = blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass})
			if err != nil {
				t.Fatalf("open of a volume in reencryption: %v", err)
			}
			done, _, ok := v.Reencrypting()
			if !ok || done == 0 || done >= v.Size() {
				t.Fatalf("reencrypting %v, done %d of %d", ok, done, v.Size())
			}
			if err := v.Reencrypt(context.Background(), nil); !errors.Is(err, blkcrypt.ErrNoReencryption) {
				t.Fatalf("Reencrypt without OpenOptions.Reencrypt: %v", err)
			}
			patch := make([]byte, 64<<10)
			rand.Read(patch)
			at := done - 32<<10 // across the boundary
			if _, err := v.WriteAt(patch, at); err != nil {
				t.Fatal(err)
			}
			copy(shadow[at:], patch)
			got := make([]byte, len(shadow))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, shadow) {
				t.Fatalf("read of a volume in reencryption: %v, equal %v", err, bytes.Equal(got, shadow))
			}
			v.Close()
			if finisher == "cryptsetup" {
				cs.MustRun("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), img)
			} else {
				v, err = blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass, Reencrypt: &blkcrypt.ReencryptOptions{ResumeOnly: true}})
				if err != nil {
					t.Fatal(err)
				}
				if err := v.Reencrypt(context.Background(), nil); err != nil {
					t.Fatal(err)
				}
				v.Close()
			}
			judgeOnline(t, cs, img, pass, shadow, "aes-xts-plain64", 512)
		})
	}
}

// tornDevice tears the one data write at failAt: half of it lands, then
// an error, as a device failing part way through a hotzone.
type tornDevice struct {
	*os.File
	failAt int64
	torn   bool
}

func (d *tornDevice) WriteAt(p []byte, off int64) (int, error) {
	if !d.torn && off == d.failAt && len(p) > 4096 {
		d.torn = true
		n, _ := d.File.WriteAt(p[:len(p)/2], off)
		return n, errors.New("injected write error")
	}
	return d.File.WriteAt(p, off)
}

func (d *tornDevice) Size() (int64, error) {
	st, err := d.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// TestOnlineReencryptFailedStep: a hotzone write that fails half way
// fails Reencrypt, fences that hotzone (its requests fail; the rest of the
// volume reads as written), and leaves a crashed hotzone on disk. A
// read-only open of that state is refused; a read-write open recovers it
// from the resilience data, as cryptsetup's open does, and cryptsetup
// finishes the run to the same plaintext.
func TestOnlineReencryptFailedStep(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	for _, res := range []string{"checksum", "journal"} {
		t.Run(res, func(t *testing.T) {
			pass := []byte("torn " + res)
			img, shadow := onlineImage(t, pass, 4)
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			dev := &tornDevice{File: f, failAt: 16<<20 + 1<<20}
			ro := &blkcrypt.ReencryptOptions{Resilience: res, HotzoneSize: 256 << 10, Keyslot: onlineKDF}
			v, err := blkcrypt.OpenDevice(context.Background(), dev, blkcrypt.OpenOptions{Passphrase: pass, Reencrypt: ro})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Reencrypt(context.Background(), nil); err == nil || !dev.torn {
				t.Fatalf("Reencrypt over a failing write: %v (torn %v)", err, dev.torn)
			}
			buf := make([]byte, 4096)
			if _, err := v.ReadAt(buf, 1<<20+8192); err == nil {
				t.Fatal("a read in the failed hotzone succeeded")
			}
			for _, at := range []int64{0, 1<<20 - 4096, 1<<20 + 256<<10, 3 << 20} {
				if _, err := v.ReadAt(buf, at); err != nil || !bytes.Equal(buf, shadow[at:at+4096]) {
					t.Fatalf("read at %d outside the failed hotzone: %v, equal %v", at, err, bytes.Equal(buf, shadow[at:at+4096]))
				}
			}
			v.Close()
			if d := cs.MustRun("luksDump", img); !strings.Contains(d, "in-reencryption") {
				t.Fatalf("no crashed hotzone on disk after the failed step:\n%s", d)
			}
			if _, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass, ReadOnly: true}); !errors.Is(err, blkcrypt.ErrInvalidOptions) || !strings.Contains(err.Error(), "read-write") {
				t.Fatalf("read-only open of a crashed hotzone: %v", err)
			}
			v, err = blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass})
			if err != nil {
				t.Fatalf("read-write open of a crashed hotzone: %v", err)
			}
			got := make([]byte, len(shadow))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, shadow) {
				t.Fatalf("after the recovery on open: %v, equal %v", err, bytes.Equal(got, shadow))
			}
			v.Close()
			if d := cs.MustRun("luksDump", img); strings.Contains(d, "in-reencryption") || !strings.Contains(d, "online-reencrypt-v2") {
				t.Fatalf("after the recovery on open:\n%s", d)
			}
			cs.MustRun("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), img)
			judgeOnline(t, cs, img, pass, shadow, "aes-xts-plain64", 512)
		})
	}
}

// TestOnlineReencryptDetachedHeader: with a detached header the metadata
// and resilience data go to the header file and the data is reencrypted
// in place under live I/O; cryptsetup opens the result with --header.
func TestOnlineReencryptDetachedHeader(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	pass := []byte("detached")
	img, hdr := filepath.Join(dir, "data.img"), filepath.Join(dir, "hdr.img")
	err := blkcrypt.Format(context.Background(), img, pass, blkcrypt.FormatOptions{
		Header: hdr, SectorSize: 512, Size: 8 << 20, PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass, Header: hdr})
	if err != nil {
		t.Fatal(err)
	}
	shadow := make([]byte, v.Size())
	rand.Read(shadow)
	if _, err := v.WriteAt(shadow, 0); err != nil {
		t.Fatal(err)
	}
	v.Close()
	ro := &blkcrypt.ReencryptOptions{Resilience: "journal", HotzoneSize: 64 << 10, Keyslot: onlineKDF}
	if v, err = blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass, Header: hdr, Reencrypt: ro}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	s := startShadowIO(v, shadow, stop)
	err = v.Reencrypt(context.Background(), nil)
	close(stop)
	s.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	if d := cs.MustRun("luksDump", hdr); strings.Contains(d, "online-reencrypt") {
		t.Fatalf("luksDump of the header after the run:\n%s", d)
	}
	if _, err := cs.Run("open", "--test-passphrase", "--batch-mode", "--header", hdr, "--key-file", cs.KeyFile(pass), img); err != nil {
		t.Fatalf("cryptsetup open --test-passphrase --header: %v", err)
	}
	f, err := os.Open(hdr)
	if err != nil {
		t.Fatal(err)
	}
	h, err := luks2.Read(luks2.File{File: f})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, err := sector.New(h.Cipher(), cs.VolumeKey(hdr, pass), sector.Options{SectorSize: h.SectorSize(), IVOffset: h.IVTweak()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	got = got[h.DataOffset() : h.DataOffset()+int64(len(shadow))]
	if err := c.DecryptSectors(got, got, 0); err != nil || !bytes.Equal(got, shadow) {
		t.Fatalf("data under cryptsetup's key: %v, equal %v", err, bytes.Equal(got, shadow))
	}
}

// TestOnlineReencryptResumesCryptsetup: a reencryption cryptsetup
// initialised (and ran part way, killed) opens following its segments
// and is finished online by Volume.Reencrypt under live I/O.
func TestOnlineReencryptResumesCryptsetup(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	pass := []byte("cryptsetup began")
	img, shadow := onlineImage(t, pass, 8)
	kf := cs.KeyFile(pass)
	cs.MustRun("reencrypt", "--init-only", "--batch-mode", "--resilience", "journal", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", kf, img)
	for _, after := range []string{"0.05", "0.1", "0.2", "0.4"} {
		cmd := exec.Command("timeout", "-s", "KILL", after, cs.Path, "reencrypt", "--resume-only", "--force-offline-reencrypt", "--hotzone-size", "64k", "--batch-mode", "--key-file", kf, img)
		cmd.Run()
		if d := cs.MustRun("luksDump", img); !strings.Contains(d, "online-reencrypt-v2") {
			t.Fatalf("cryptsetup finished within %s s, before it was killed: nothing left to resume", after)
		} else if strings.Count(d, "\tcipher:") > 3 {
			break // it has moved the boundary
		}
	}
	v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass, Reencrypt: &blkcrypt.ReencryptOptions{ResumeOnly: true}})
	if err != nil {
		t.Fatalf("open of cryptsetup's reencryption: %v", err)
	}
	done, total, _ := v.Reencrypting()
	got := make([]byte, len(shadow))
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, shadow) {
		t.Fatalf("read of cryptsetup's state (done %d of %d): %v, equal %v", done, total, err, bytes.Equal(got, shadow))
	}
	stop := make(chan struct{})
	s := startShadowIO(v, shadow, stop)
	err = v.Reencrypt(context.Background(), nil)
	close(stop)
	s.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	judgeOnline(t, cs, img, pass, shadow, "aes-xts-plain64", 512)
	t.Logf("cryptsetup had done %d of %d bytes", done, total)
}
