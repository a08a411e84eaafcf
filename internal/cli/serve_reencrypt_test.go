package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient"
)

// nbdShadow is what the NBD clients wrote, per 512-byte sector, with the
// other contents a sector may hold after a write that was cut by a kill
// (it may or may not have reached the device).
type nbdShadow struct {
	data  []byte
	maybe map[int64][][]byte
	locks []sync.Mutex // per 4 KiB block, held across a request and its shadow update
	mu    sync.Mutex   // guards maybe, which both clients change
	ops   atomic.Int64
	// reenc is set by a poller of the header while it shows a
	// reencryption in progress; during counts the requests that began
	// and ended with it set.
	reenc  atomic.Bool
	during atomic.Int64
}

func newNBDShadow(plain []byte) *nbdShadow {
	return &nbdShadow{data: append([]byte(nil), plain...), maybe: map[int64][][]byte{}, locks: make([]sync.Mutex, len(plain)/4096)}
}

// client writes and reads random runs of blocks (some unaligned) until
// stop closes or a request fails (the server was killed). A read that
// succeeds must equal the shadow; a failed write leaves its new contents
// possible.
func (s *nbdShadow) client(c *nbdclient.Client, seed uint64, stop chan struct{}, mismatch chan<- error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	buf := make([]byte, 16*4096)
	for {
		select {
		case <-stop:
			return
		default:
		}
		before := s.reenc.Load()
		n := 1 + rng.IntN(16)
		b0 := rng.IntN(len(s.locks) - n + 1)
		for i := b0; i < b0+n; i++ {
			s.locks[i].Lock()
		}
		off, ln := int64(b0)*4096, n*4096
		if rng.IntN(4) == 0 {
			skip := rng.IntN(4000)
			off += int64(skip)
			ln -= skip + rng.IntN(ln-skip)
		}
		var err error
		if rng.IntN(2) == 0 {
			crand(rng, buf[:ln])
			if _, err = c.WriteAt(buf[:ln], off); err == nil {
				copy(s.data[off:], buf[:ln])
			} else {
				// Cut by a kill: each sector is old or new.
				s.mu.Lock()
				for sec := off / 512; sec*512 < off+int64(ln); sec++ {
					alt := append([]byte(nil), s.data[sec*512:sec*512+512]...)
					lo, hi := max(sec*512, off), min(sec*512+512, off+int64(ln))
					copy(alt[lo-sec*512:], buf[lo-off:hi-off])
					s.maybe[sec] = append(s.maybe[sec], alt)
				}
				s.mu.Unlock()
			}
		} else if _, err = c.ReadAt(buf[:ln], off); err == nil && !s.readOK(buf[:ln], off) {
			mismatch <- fmt.Errorf("a read of %d bytes at %d differs from what the clients wrote", ln, off)
		}
		for i := b0; i < b0+n; i++ {
			s.locks[i].Unlock()
		}
		if err != nil {
			return
		}
		s.ops.Add(1)
		if before && s.reenc.Load() {
			s.during.Add(1)
		}
	}
}

func crand(rng *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
}

// readOK compares a read with the shadow; a sector a cut write left
// uncertain may hold any of its contents, and what it holds is settled.
func (s *nbdShadow) readOK(got []byte, off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sec := off / 512; sec*512 < off+int64(len(got)); sec++ {
		lo, hi := max(sec*512, off), min(sec*512+512, off+int64(len(got)))
		g := got[lo-off : hi-off]
		if bytes.Equal(g, s.data[lo:hi]) {
			if lo == sec*512 && hi == sec*512+512 {
				delete(s.maybe, sec) // the cut write did not land here
			}
			continue
		}
		ok := false
		for _, alt := range s.maybe[sec] {
			if bytes.Equal(g, alt[lo-sec*512:hi-sec*512]) {
				if lo == sec*512 && hi == sec*512+512 {
					copy(s.data[lo:hi], alt)
					delete(s.maybe, sec)
				}
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// verifyAll reads the whole volume through c and settles the uncertain
// sectors; afterwards the shadow is exact.
func (s *nbdShadow) verifyAll(t *testing.T, c interface {
	ReadAt([]byte, int64) (int, error)
}, what string) {
	t.Helper()
	got := make([]byte, len(s.data))
	if _, err := c.ReadAt(got, 0); err != nil {
		t.Fatalf("%s: reading the whole volume: %v", what, err)
	}
	if !s.readOK(got, 0) {
		t.Fatalf("%s: the volume differs from what the clients wrote", what)
	}
	if len(s.maybe) != 0 {
		t.Fatalf("%s: %d sectors still uncertain", what, len(s.maybe))
	}
}

// inReencryption reads the primary LUKS2 header's JSON straight from the
// image (cryptsetup luksDump would take the lock the server holds).
func inReencryption(t *testing.T, img string) bool {
	t.Helper()
	in, err := headerInReencryption(img)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// inReencryptionErr is inReencryption for a goroutine: an image it cannot
// read is reported as not in reencryption (the test then fails for want of
// requests counted inside one, never passes by it).
func inReencryptionErr(img string) bool {
	in, _ := headerInReencryption(img)
	return in
}

func headerInReencryption(img string) (bool, error) {
	f, err := os.Open(img)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b := make([]byte, 16<<10)
	if _, err := f.ReadAt(b, 0); err != nil {
		return false, err
	}
	return bytes.Contains(b, []byte("online-reencrypt-v2")), nil
}

func hotzoneInHeader(t *testing.T, img string) bool {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b[:16<<10], []byte("in-reencryption"))
}

// TestServeReencryptOnline is the online acceptance test: the real
// `blkcrypt serve --reencrypt` reencrypts a LUKS2 volume while two NBD
// clients (two nbdclient connections) write and read random ranges
// against a shadow copy. The server is killed with SIGKILL at random
// moments, at least 3 times with a reencryption in progress, and started
// again, which resumes it (or, when one finished, starts the next); every
// restart must serve exactly what the clients wrote. A last run goes to
// the end (checksum), or cryptsetup finishes the killed server's state
// (journal); cryptsetup then finds no reencryption, opens the volume, and
// its dumped volume key decrypts sectors through OpenSSL to the shadow.
func TestServeReencryptOnline(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	for _, res := range []string{"checksum", "journal"} {
		t.Run(res, func(t *testing.T) { serveReencryptOnline(t, res, res == "journal") })
	}
}

// serveReencryptOnline runs the test for one resilience mode; with
// byCryptsetup the last kill's state is finished by cryptsetup (repair,
// then reencrypt --resume-only) instead of a last server run.
func serveReencryptOnline(t *testing.T, res string, byCryptsetup bool) {
	dir := t.TempDir()
	bin := buildBlkcrypt(t, dir)
	pass := writeFile(t, dir, "p", []byte("online "+res))
	img := filepath.Join(dir, "v.img")
	const dataSize = 24 << 20
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", fmt.Sprint(16<<20 + dataSize), "--sector-size", "512", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	plain := randBytes(dataSize)
	if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, "in", plain), "--key-file", pass); code != 0 {
		t.Fatalf("write: %s", e)
	}
	sh := newNBDShadow(plain)
	sock := filepath.Join(dir, "nbd.sock")
	uri := "nbd+unix:///?socket=" + sock
	args := append([]string{"serve", img, "--listen", "unix:" + sock, "--key-file", pass, "--reencrypt", "--resilience", res, "--hotzone-size", "64k"}, reencFast...)
	rng := rand.New(rand.NewPCG(7, uint64(len(res))))
	pollDone := make(chan struct{})
	defer close(pollDone)
	go func() {
		for {
			select {
			case <-pollDone:
				return
			case <-time.After(time.Millisecond):
			}
			sh.reenc.Store(inReencryptionErr(img))
		}
	}()
	kills, started, crashed := 0, 0, 0
	lastKillMid := false
	for round := 0; round < 14; round++ {
		final := kills >= 3 || round == 13
		if final && byCryptsetup && lastKillMid {
			break // cryptsetup finishes what the killed server left
		}
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var c1, c2 *nbdclient.Client
		for i := 0; ; i++ {
			var err error
			if c1, err = nbdclient.Dial(context.Background(), uri, nbdclient.Options{Conns: 1, Timeout: 20 * time.Second}); err == nil {
				break
			}
			if i == 400 {
				cmd.Process.Kill()
				t.Fatalf("round %d: the server did not come up: %v\n%s", round, err, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		c2, err := nbdclient.Dial(context.Background(), uri, nbdclient.Options{Conns: 1, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// What the last (killed) server acknowledged must be there now.
		sh.verifyAll(t, c1, fmt.Sprintf("round %d, after a restart", round))
		if inReencryption(t, img) {
			started++
		}
		stop := make(chan struct{})
		mismatch := make(chan error, 2)
		var wg sync.WaitGroup
		for i, c := range []*nbdclient.Client{c1, c2} {
			wg.Add(1)
			go func() { defer wg.Done(); sh.client(c, uint64(round*2+i+1), stop, mismatch) }()
		}
		if !final {
			time.Sleep(time.Duration(20+rng.IntN(300)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			wg.Wait()
			close(stop)
			c1.Close()
			c2.Close()
			lastKillMid = inReencryption(t, img)
			if lastKillMid {
				kills++
				if hotzoneInHeader(t, img) {
					crashed++
				}
			}
		} else {
			opsAtStart, duringAtStart := sh.ops.Load(), sh.during.Load()
			deadline := time.Now().Add(2 * time.Minute)
			for inReencryption(t, img) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			during := sh.ops.Load() - opsAtStart
			if inReencryption(t, img) {
				t.Fatalf("the reencryption did not finish in 2 minutes:\n%s", stderr.String())
			}
			// On a fast machine what the kills left may be done before
			// the clients start (the restart's check reads the whole
			// volume first); the kill rounds' requests are counted below.
			t.Logf("last run: %d client requests before its reencryption ended, %d of them inside it", during, sh.during.Load()-duringAtStart)
			time.Sleep(50 * time.Millisecond)
			close(stop)
			wg.Wait()
			sh.verifyAll(t, c1, "after the reencryption")
			c1.Close()
			c2.Close()
			cmd.Process.Signal(syscall.SIGTERM)
			if err := <-exited; err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "reencryption of "+img+" finished") {
				t.Fatalf("serve did not report the end of the reencryption:\n%s", stderr.String())
			}
			t.Logf("%d kills mid-reencryption (%d inside a hotzone) in %d rounds; %d client requests in all, %d during the last run", kills, crashed, round+1, sh.ops.Load(), during)
		}
		select {
		case err := <-mismatch:
			t.Fatalf("round %d: %v\nserver: %s", round, err, stderr.String())
		default:
		}
		if final {
			break
		}
	}
	if kills < 3 {
		t.Fatalf("only %d kills landed during a reencryption", kills)
	}
	if started < 3 {
		t.Fatalf("only %d restarts found a reencryption in progress to resume", started)
	}
	if sh.during.Load() == 0 {
		t.Fatal("no client request began and ended while the header showed a reencryption in progress")
	}
	t.Logf("%d client requests began and ended inside a reencryption", sh.during.Load())
	if byCryptsetup {
		if !inReencryption(t, img) {
			t.Fatal("no reencryption left for cryptsetup to resume")
		}
		// blkcrypt read of the killed server's state: it follows the
		// segments, or refuses a crashed hotzone (the recovery writes).
		code, got, e := run(t, nil, "read", img, "--key-file", pass)
		if hotzoneInHeader(t, img) {
			if code != 1 || !strings.Contains(e, "read-write") {
				t.Fatalf("read of a crashed hotzone: exit %d, %q", code, e)
			}
		} else if code != 0 || !sh.readOK([]byte(got), 0) {
			t.Fatalf("read of a volume in reencryption: exit %d %s, equal to the shadow %v", code, e, code == 0)
		}
		if hotzoneInHeader(t, img) {
			if out, err := cryptsetup(t, "repair", "-q", "--key-file", pass, img); err != nil {
				t.Fatalf("cryptsetup repair of a killed server's hotzone: %v\n%s", err, out)
			}
		}
		if out, err := cryptsetup(t, "reencrypt", "--resume-only", "--force-offline-reencrypt", "-q", "--key-file", pass, img); err != nil {
			t.Fatalf("cryptsetup resume of a killed server's reencryption: %v\n%s", err, out)
		}
		v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{KeyFiles: [][]byte{[]byte("online " + res)}, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		sh.verifyAll(t, v, "after cryptsetup finished")
		v.Close()
		t.Logf("%d kills mid-reencryption (%d inside a hotzone), the last finished by cryptsetup; %d client requests", kills, crashed, sh.ops.Load())
	}
	judgeServed(t, img, pass, sh.data)
}

// judgeServed: cryptsetup sees no reencryption and opens the volume; its
// dumped volume key decrypts sampled sectors through OpenSSL to want, and
// blkcrypt's read of the whole volume is want.
func judgeServed(t *testing.T, img, pass string, want []byte) {
	t.Helper()
	d, err := cryptsetup(t, "luksDump", img)
	if err != nil || strings.Contains(d, "online-reencrypt") || strings.Count(d, "\tcipher:") != 1 {
		t.Fatalf("luksDump after the reencryption (%v):\n%s", err, d)
	}
	if out, err := cryptsetup(t, "open", "--test-passphrase", "-q", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup open --test-passphrase: %v\n%s", err, out)
	}
	passData, err := os.ReadFile(pass)
	if err != nil {
		t.Fatal(err)
	}
	key := lukstest.NeedCryptsetup(t).VolumeKey(img, passData)
	if len(key) != 64 {
		t.Fatalf("a %d-byte volume key", len(key))
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	ct := raw[16<<20:]
	o := oracle.New(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 64; i++ {
		sec := rng.IntN(len(want) / 512)
		if i == 0 {
			sec = 0
		}
		pt, err := o.Crypt("aes-256-xts", key, plainIV(uint64(sec)), ct[sec*512:sec*512+512], false)
		if err != nil || !bytes.Equal(pt, want[sec*512:sec*512+512]) {
			t.Fatalf("sector %d: OpenSSL with cryptsetup's volume key does not give what the clients wrote (%v)", sec, err)
		}
	}
	code, got, e := run(t, nil, "read", img, "--key-file", pass)
	if code != 0 || !bytes.Equal([]byte(got), want) {
		t.Fatalf("read: exit %d %s; equal %v", code, e, got == string(want))
	}
}

// TestServeReencryptProgressAndLock: serve --reencrypt holds the device
// lock, so an offline `reencrypt` of the served volume is refused as busy
// (exit 5); --progress-json prints cryptsetup's JSON lines, and without a
// progress flag and a terminal nothing but the status lines is printed.
// The clients' view is the plaintext throughout.
func TestServeReencryptProgressAndLock(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	for _, flags := range [][]string{{"--progress-json"}, nil} {
		t.Run(fmt.Sprint(len(flags)), func(t *testing.T) {
			dir := t.TempDir()
			pass := writeFile(t, dir, "p", []byte("progress"))
			img := filepath.Join(dir, "v.img")
			if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", fmt.Sprint(24 << 20), "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
				t.Fatalf("format: %s", e)
			}
			plain := randBytes(8 << 20)
			if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, "in", plain), "--key-file", pass); code != 0 {
				t.Fatalf("write: %s", e)
			}
			args := append(append([]string{img, "--key-file", pass, "--reencrypt", "--hotzone-size", "128k"}, reencFast...), flags...)
			sock, errb, stop := startGatewayCLI(t, args...)
			if code, _, e := run(t, nil, "reencrypt", img, "--resume-only", "--key-file", pass); code != 5 {
				t.Fatalf("offline reencrypt of a served volume: exit %d (want 5, busy): %s", code, e)
			}
			c, err := nbdclient.Dial(context.Background(), "nbd+unix:///?socket="+sock, nbdclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); inReencryption(t, img) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			got := make([]byte, len(plain))
			if _, err := c.ReadAt(got, 0); err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("read through NBD: %v, equal %v", err, bytes.Equal(got, plain))
			}
			c.Close()
			code, errs := stop(), errb.String()
			if code != 0 || !strings.Contains(errs, "finished") {
				t.Fatalf("serve: exit %d: %s", code, errs)
			}
			var jsonLines int
			for _, l := range strings.Split(strings.TrimSpace(errs), "\n") {
				switch {
				case strings.HasPrefix(l, "{"):
					jsonLines++
					if !strings.Contains(l, `"device_bytes":"`) || !strings.Contains(l, `"device_size":"8388608"`) || !strings.Contains(l, `"eta_ms":"`) {
						t.Fatalf("progress JSON line %q", l)
					}
				case strings.HasPrefix(l, "blkcrypt: "):
				default:
					t.Fatalf("unexpected stderr line %q in:\n%s", l, errs)
				}
			}
			if (jsonLines > 0) != (len(flags) > 0) {
				t.Fatalf("%d JSON progress lines with flags %q:\n%s", jsonLines, flags, errs)
			}
			if d, err := cryptsetup(t, "luksDump", img); err != nil || strings.Contains(d, "online-reencrypt") {
				t.Fatalf("luksDump after serve --reencrypt: %v\n%s", err, d)
			}
		})
	}
}

// TestServeReencryptBadInput: flags that cannot go together exit 1 with
// one line, before anything is written.
func TestServeReencryptBadInput(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("bad"))
	img := filepath.Join(dir, "v.img")
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", fmt.Sprint(20 << 20), "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	plainImg := writeFile(t, dir, "plain.img", make([]byte, 1<<20))
	vk := writeFile(t, dir, "vk", randBytes(64))
	before := fileSum(t, img)
	sock := "unix:" + filepath.Join(dir, "s")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{img, "--reencrypt", "--read-only"}, "read-write"},
		{[]string{plainImg, "--type", "plain", "--reencrypt"}, "LUKS2"},
		{[]string{img, "--resilience", "journal"}, "--reencrypt"},
		{[]string{img, "--hotzone-size", "1m"}, "--reencrypt"},
		{[]string{"--export", "a=" + img + ",key-file=" + pass, "--reencrypt"}, "--export"},
		{[]string{img, "--reencrypt", "--volume-key-file", vk}, "passphrase"},
		{[]string{img, "--reencrypt", "--resilience", "bogus"}, "resilience"},
	} {
		args := append([]string{"serve", "--listen", sock, "--key-file", pass}, tc.args...)
		code, _, e := run(t, nil, args...)
		if code != 1 || !strings.Contains(e, tc.want) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q (want 1 and %q)", tc.args, code, e, tc.want)
		}
	}
	if fileSum(t, img) != before {
		t.Fatal("a refused serve changed the image")
	}
}

// TestServeReencryptNbdcopy: a client we did not write, nbdcopy (several
// connections, requests in parallel), copies a whole new image into the
// export and back out while serve --reencrypt runs; the copy out equals
// what went in, and after the run blkcrypt's read and cryptsetup agree.
func TestServeReencryptNbdcopy(t *testing.T) {
	needTool(t, "nbdcopy", "libnbd-bin")
	needTool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("nbdcopy"))
	img := filepath.Join(dir, "v.img")
	const dataSize = 24 << 20
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", fmt.Sprint(16<<20 + dataSize), "--sector-size", "512", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	sock, errb, stop := startGatewayCLI(t, append([]string{img, "--key-file", pass, "--reencrypt", "--resilience", "journal", "--hotzone-size", "64k"}, reencFast...)...)
	uri := "nbd+unix:///?socket=" + sock
	want := randBytes(dataSize)
	in := writeFile(t, dir, "in", want)
	out := filepath.Join(dir, "out")
	if !inReencryption(t, img) {
		t.Fatal("the reencryption was over before nbdcopy began")
	}
	if b, err := exec.Command("nbdcopy", in, uri).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy in: %v\n%s", err, b)
	}
	if b, err := exec.Command("nbdcopy", uri, out).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy out: %v\n%s", err, b)
	}
	during := inReencryption(t, img)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatal("nbdcopy's copy out differs from what it copied in")
	}
	for deadline := time.Now().Add(time.Minute); inReencryption(t, img) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if code, errs := stop(), errb.String(); code != 0 || !strings.Contains(errs, "finished") {
		t.Fatalf("serve: exit %d: %s", code, errs)
	}
	judgeServed(t, img, pass, want)
	if !during {
		t.Log("the reencryption finished while nbdcopy copied out (it still ran during the copy in)")
	}
}
