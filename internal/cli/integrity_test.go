package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient"
)

func int64p(v int64) *int64 { return &v }

// integrityFormatArgs are format --type integrity's flags: --integrity,
// --sector-size and the group.
type integrityFormatArgs struct {
	alg string
	ss  *int64
	f   integrityFormatFlags
}

// newIntegrityImage makes a zero file of size bytes and formats it as
// format --type integrity does (formatIntegrity, with -q).
func newIntegrityImage(t *testing.T, p string, size int64, o integrityFormatArgs) {
	t.Helper()
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	env := &Env{Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := formatIntegrity(context.Background(), env, o.alg, o.ss, &o.f, batchFlag{Batch: true}, []string{p}); err != nil {
		t.Fatalf("format --type integrity: %v", err)
	}
}

// TestIntegrityCLIDump: `dump --type integrity` (and dump with the type
// detected) prints what integritysetup dump prints, byte for byte, for
// volumes of several algorithms, sector sizes, tag sizes, interleaves and
// journal options made by format --type integrity; a device without a
// superblock is refused on one line.
func TestIntegrityCLIDump(t *testing.T) {
	isetup := testenv.Need(t, "integritysetup", "cryptsetup-bin")
	dir := t.TempDir()
	jkey := writeFile(t, dir, "jkey", bytes.Repeat([]byte("jmac"), 8))
	ikey := writeFile(t, dir, "ikey", bytes.Repeat([]byte("k3y!"), 8))
	ckey := writeFile(t, dir, "ckey", bytes.Repeat([]byte("ctr!"), 8))
	js := byteSize(96 << 10)
	cases := map[string]integrityFormatArgs{
		"default": {},
		"sha256-4k": {alg: "sha256", ss: int64p(4096),
			f: integrityFormatFlags{InterleaveSectors: int64p(128), JournalSize: &js}},
		"crc32-t8": {alg: "crc32", ss: int64p(1024), f: integrityFormatFlags{integrityKeyFlags: integrityKeyFlags{TagSize: int64p(8)}}},
		"hmac-jmac": {alg: "hmac-sha256", f: integrityFormatFlags{integrityKeyFlags: integrityKeyFlags{IntegrityKeyFile: ikey, IntegrityKeySize: int64p(32),
			JournalIntegrity: "hmac-sha256", JournalIntegrityKeyFile: jkey}}},
		"jcrypt-nowipe": {f: integrityFormatFlags{integrityKeyFlags: integrityKeyFlags{JournalCrypt: "ctr-aes", JournalCryptKeyFile: ckey}, NoWipe: true}},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			img := filepath.Join(dir, name+".img")
			newIntegrityImage(t, img, 2<<20, o)
			ref, err := exec.Command(isetup, "dump", img).Output()
			if err != nil {
				t.Fatalf("integritysetup dump: %v", err)
			}
			for _, args := range [][]string{{"dump", "--type", "integrity", img}, {"dump", img}} {
				code, out, e := run(t, nil, args...)
				if code != 0 || out != string(ref) {
					t.Errorf("%v: exit %d %s\n%s--- integritysetup:\n%s", args, code, e, out, ref)
				}
			}
		})
	}
	zeros := writeFile(t, dir, "zeros.img", make([]byte, 1<<20))
	code, _, e := run(t, nil, "dump", "--type", "integrity", zeros)
	if code != ExitDevice || strings.Count(strings.TrimSpace(e), "\n") != 0 {
		t.Errorf("dump of zeros: exit %d, %q", code, e)
	}
}

// integrityDataOffset is the byte offset of 512-byte sector s of the
// volume on its device.
func integrityDataOffset(t *testing.T, img string, s uint64) int64 {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sb, err := integrity.ReadSuperblock(f)
	if err != nil {
		t.Fatal(err)
	}
	g, err := sb.Geometry()
	if err != nil {
		t.Fatal(err)
	}
	return int64(g.DataSector(s)) << 9
}

// TestIntegrityCLITamper: data written with `write --type integrity`
// reads back with `read`; after one data byte of a 4 KiB sector is
// flipped on the device, `read` exits 4 with one line naming that sector,
// a read of the other sectors still works, and `serve` answers a read of
// that sector with NBD EIO while the sectors around it read.
func TestIntegrityCLITamper(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	newIntegrityImage(t, img, 1<<20, integrityFormatArgs{ss: int64p(4096), f: integrityFormatFlags{InterleaveSectors: int64p(64)}})
	code, out, e := run(t, nil, "read", "--type", "integrity", img)
	if code != 0 || len(out) == 0 || out != string(make([]byte, len(out))) {
		t.Fatalf("read of a new volume: exit %d, %d bytes: %s", code, len(out), e)
	}
	size := len(out)
	data := randBytes(size)
	in := writeFile(t, dir, "in", data)
	if code, _, e := run(t, nil, "write", "--type", "integrity", img, "-i", in); code != 0 {
		t.Fatalf("write: exit %d: %s", code, e)
	}
	if code, out, e := run(t, nil, "read", img); code != 0 || out != string(data) { // detected
		t.Fatalf("read back: exit %d, equal %v: %s", code, out == string(data), e)
	}

	const bad = 5 // 4 KiB sector 5: 512-byte sector 40
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := integrityDataOffset(t, img, bad*8) + 1234
	b := []byte{0}
	f.ReadAt(b, off)
	b[0] ^= 1
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, _, e = run(t, nil, "read", "--type", "integrity", img)
	t.Logf("read of the tampered volume: exit %d: %s", code, strings.TrimSpace(e))
	lines := strings.Split(strings.TrimSpace(e), "\n")
	if code != ExitDevice || len(lines) != 1 || !regexp.MustCompile(`\bsector 40\b`).MatchString(lines[0]) {
		t.Errorf("read of the tampered volume: exit %d, stderr %q; want exit %d and one line naming sector 40", code, e, ExitDevice)
	}
	if code, out, e := run(t, nil, "read", img, "--offset-bytes", fmt.Sprint((bad+1)*4096)); code != 0 || out != string(data[(bad+1)*4096:]) {
		t.Errorf("read past the tampered sector: exit %d: %s", code, e)
	}

	sock, stop := serveInBackground(t, "--type", "integrity", img)
	c, err := nbdclient.Dial(context.Background(), "nbd+unix:///?socket="+sock, nbdclient.Options{Conns: 1, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := c.ReadAt(buf, bad*4096); !errors.Is(err, syscall.EIO) {
		t.Errorf("NBD read of the tampered sector: %v, want EIO", err)
	}
	for _, s := range []int64{0, bad - 1, bad + 1, int64(size)/4096 - 1} {
		if _, err := c.ReadAt(buf, s*4096); err != nil || !bytes.Equal(buf, data[s*4096:][:4096]) {
			t.Errorf("NBD read of sector %d: %v", s, err)
		}
	}
	// A write over the bad sector makes it whole again, through the
	// journal, and the kernel's rule holds: it then reads.
	if _, err := c.WriteAt(data[bad*4096:][:4096], bad*4096); err != nil {
		t.Errorf("NBD write of the tampered sector: %v", err)
	}
	if _, err := c.ReadAt(buf, bad*4096); err != nil || !bytes.Equal(buf, data[bad*4096:][:4096]) {
		t.Errorf("NBD read of the rewritten sector: %v", err)
	}
	c.Close()
	if code := stop(); code != 0 {
		t.Errorf("serve: exit %d", code)
	}
	if code, out, e := run(t, nil, "read", "--type", "integrity", img); code != 0 || out != string(data) {
		t.Errorf("read after the rewrite: exit %d: %s", code, e)
	}
}

// TestIntegrityCLIRefusals: format's and open's integritysetup options
// misused give one-line usage errors and leave the device as it was.
func TestIntegrityCLIRefusals(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	newIntegrityImage(t, img, 1<<20, integrityFormatArgs{})
	before, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	key := func(k integrityKeyFlags) integrityFormatFlags { return integrityFormatFlags{integrityKeyFlags: k} }
	for name, o := range map[string]integrityFormatArgs{
		"sector size":      {ss: int64p(8192)},
		"interleave":       {f: integrityFormatFlags{InterleaveSectors: int64p(1000)}},
		"journal size":     {f: integrityFormatFlags{JournalSize: new(byteSize)}},
		"tag size":         {f: key(integrityKeyFlags{TagSize: int64p(4096)})},
		"journal key":      {f: key(integrityKeyFlags{JournalCrypt: "ctr-aes"})},
		"key without alg":  {f: key(integrityKeyFlags{JournalIntegrityKeyFile: img})},
		"key size":         {alg: "hmac-sha256", f: key(integrityKeyFlags{IntegrityKeyFile: img, IntegrityKeySize: int64p(0)})},
		"algorithm":        {alg: "md5"},
		"hmac without key": {alg: "hmac-sha256"},
		"missing device":   {},
	} {
		dev := img
		if name == "missing device" {
			dev = filepath.Join(dir, "nope")
		}
		err := formatIntegrity(context.Background(), env, o.alg, o.ss, &o.f, batchFlag{Batch: true}, []string{dev})
		if err == nil || strings.Contains(strings.TrimSpace(err.Error()), "\n") {
			t.Errorf("%s: %v", name, err)
		}
		if code := exitCode(err); code == ExitOK {
			t.Errorf("%s: exit code 0", name)
		}
	}
	// Open's modes exclude each other.
	g := integrityFlags{IntegrityBitmapMode: true, IntegrityNoJournal: true}
	if _, err := g.options(env, nil, func(...[]byte) {}); err == nil {
		t.Error("--integrity-bitmap-mode with --integrity-no-journal accepted")
	}
	after, _ := os.ReadFile(img)
	if !bytes.Equal(before, after) {
		t.Error("a refused format changed the device")
	}
}
