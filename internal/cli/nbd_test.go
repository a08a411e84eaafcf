package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

var nbdKDF = []string{"-q", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}

// judgeLUKS has cryptsetup and OpenSSL judge a LUKS image blkcrypt wrote
// (img, a copy of the bytes behind an export): cryptsetup accepts the
// passphrase in pass, and the first len(data) bytes of the payload decrypt,
// under the volume key cryptsetup reports, to data.
func judgeLUKS(t *testing.T, img, pass string, data []byte) {
	t.Helper()
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup open --test-passphrase on %s: %v %s", img, err, out)
	}
	dump, err := cryptsetup(t, "luksDump", "--dump-volume-key", "-q", "--key-file", pass, img)
	if err != nil {
		t.Fatalf("cryptsetup luksDump: %v %s", err, dump)
	}
	vk, _ := hex.DecodeString(volumeKeyOf(dump))
	info, err := cryptsetup(t, "luksDump", img)
	if err != nil {
		t.Fatal(info)
	}
	off, ss := 0, 512
	if m := regexp.MustCompile(`(?m)^\s+offset:\s+(\d+) \[bytes\]`).FindStringSubmatch(info); m != nil {
		off, _ = strconv.Atoi(m[1])
	} else if m := regexp.MustCompile(`Payload offset:\s+(\d+)`).FindStringSubmatch(info); m != nil {
		off, _ = strconv.Atoi(m[1])
		off *= 512
	}
	if m := regexp.MustCompile(`(?m)^\s+sector:\s+(\d+) \[bytes\]`).FindStringSubmatch(info); m != nil {
		ss, _ = strconv.Atoi(m[1])
	}
	if len(vk) != 64 || off == 0 {
		t.Fatalf("volume key of %d bytes, data offset %d, from cryptsetup's dump", len(vk), off)
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	o := oracle.New(t)
	for i := 0; i < len(data)/ss; i++ {
		pt, err := o.Crypt("aes-256-xts", vk, plainIV(uint64(i*ss/512)), raw[off+i*ss:off+(i+1)*ss], false)
		if err != nil || !bytes.Equal(pt, data[i*ss:(i+1)*ss]) {
			t.Fatalf("%s: sector %d does not decrypt (OpenSSL, cryptsetup's key) to what was written (%v)", img, i, err)
		}
	}
}

// copyOut copies an export to a file with nbdcopy (libnbd: a client we did
// not write).
func copyOut(t *testing.T, uri, dst string) {
	t.Helper()
	needTool(t, "nbdcopy", "libnbd-bin")
	if out, err := exec.Command("nbdcopy", uri, dst).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy %s: %v %s", uri, err, out)
	}
}

func withQuery(uri, kv string) string {
	if strings.Contains(uri, "?") {
		return uri + "&" + kv
	}
	return uri + "?" + kv
}

// TestNBDFormatWriteRead: format, write, read, dump and add-key with an NBD
// URI as DEVICE, against nbdkit memory (Unix socket), nbdkit file (TCP),
// nbdkit memory with TLS required, and qemu-nbd over a qcow2 file; then
// cryptsetup and OpenSSL judge a copy of the bytes.
func TestNBDFormatWriteRead(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", []byte("nbd-pass"))
	pass2 := writeFile(t, dir, "pass2", []byte("second key"))
	certs := nbdtest.MakeCerts(t)
	fileImg := filepath.Join(dir, "file.img")
	if err := os.WriteFile(fileImg, make([]byte, 24<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	qcow := filepath.Join(dir, "disk.qcow2")
	needTool(t, "qemu-img", "qemu-utils")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", qcow, "24M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v %s", err, out)
	}
	servers := []struct {
		name  string
		start func() (uri, copyURI string)
		// backing is the file behind the export, read directly; "" to copy
		// the export out with nbdcopy.
		backing string
	}{
		{"nbdkit memory unix", func() (string, string) {
			s := nbdtest.Nbdkit(t, false, "memory", "24M")
			return s.URI, s.URI
		}, ""},
		{"nbdkit file tcp", func() (string, string) {
			s := nbdtest.Nbdkit(t, true, "file", fileImg)
			return s.URI, s.URI
		}, fileImg},
		{"nbdkit memory tls", func() (string, string) {
			s := nbdtest.Nbdkit(t, false, "--tls=require", "--tls-certificates="+certs.ServerDir, "memory", "24M")
			u := withQuery(strings.Replace(s.URI, "nbd+unix", "nbds+unix", 1), "tls-certificates="+certs.ClientDir)
			return u, u
		}, ""},
		{"qemu-nbd qcow2", func() (string, string) {
			s := nbdtest.QemuNBD(t, qcow, "qcow2", "vol")
			return s.URI, s.URI
		}, ""},
	}
	for _, sv := range servers {
		t.Run(strings.ReplaceAll(sv.name, " ", "_"), func(t *testing.T) {
			uri, copyURI := sv.start()
			args := append([]string{"format", uri, "--type", "luks2", "--key-file", pass}, nbdKDF...)
			if code, _, e := run(t, nil, args...); code != 0 {
				t.Fatalf("format %s: %d %s", uri, code, e)
			}
			data := randBytes(1 << 20)
			in := writeFile(t, t.TempDir(), "in", data)
			if code, _, e := run(t, nil, "write", uri, "-i", in, "--key-file", pass); code != 0 {
				t.Fatalf("write: %d %s", code, e)
			}
			code, out, e := run(t, nil, "read", uri, "--key-file", pass, "--length", strconv.Itoa(len(data)))
			if code != 0 || out != string(data) {
				t.Fatalf("read back: %d %s (%d bytes)", code, e, len(out))
			}
			if code, out, e := run(t, nil, "dump", uri); code != 0 || !strings.Contains(out, "LUKS header information") {
				t.Fatalf("dump: %d %s %s", code, out, e)
			}
			if code, _, e := run(t, nil, "add-key", uri, pass2, "--key-file", pass, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"); code != 0 {
				t.Fatalf("add-key: %d %s", code, e)
			}
			img := sv.backing
			if img == "" {
				img = filepath.Join(t.TempDir(), "copy.img")
				copyOut(t, copyURI, img)
			}
			judgeLUKS(t, img, pass, data)
			judgeLUKS(t, img, pass2, data)
		})
	}
}

// TestNBDStacked: blkcrypt on blkcrypt. `blkcrypt serve` exports an outer
// LUKS volume; a second LUKS volume is formatted, written and read through
// nbd+unix:// of that export, and served again with the URI as DEVICE for
// nbdcopy to read. cryptsetup then judges the outer image, and the inner
// image that `blkcrypt read` of the outer volume gives.
func TestNBDStacked(t *testing.T) {
	dir := t.TempDir()
	outerPass := writeFile(t, dir, "outer", []byte("outer pass"))
	innerPass := writeFile(t, dir, "inner", []byte("inner pass"))
	img := filepath.Join(dir, "outer.img")
	if code, _, e := run(t, nil, append([]string{"format", img, "--size", strconv.Itoa(40 << 20), "--key-file", outerPass}, nbdKDF...)...); code != 0 {
		t.Fatalf("format outer: %d %s", code, e)
	}
	sock, stop := serveInBackground(t, img, "--key-file", outerPass)
	uri := "nbd+unix:///?socket=" + sock
	if code, _, e := run(t, nil, append([]string{"format", uri, "--type", "luks2", "--key-file", innerPass}, nbdKDF...)...); code != 0 {
		t.Fatalf("format inner over %s: %d %s", uri, code, e)
	}
	data := randBytes(2 << 20)
	in := writeFile(t, dir, "in", data)
	if code, _, e := run(t, nil, "write", uri, "-i", in, "--key-file", innerPass); code != 0 {
		t.Fatalf("write inner: %d %s", code, e)
	}
	if code, out, e := run(t, nil, "read", uri, "--key-file", innerPass, "--length", strconv.Itoa(len(data))); code != 0 || out != string(data) {
		t.Fatalf("read inner: %d %s", code, e)
	}
	// serve with the URI as DEVICE: the inner volume exported again, and
	// nbdcopy (libnbd) reads its plaintext through both layers.
	sock2, stop2 := serveInBackground(t, uri, "--key-file", innerPass, "--read-only")
	back := filepath.Join(dir, "back")
	copyOut(t, "nbd+unix:///?socket="+sock2, back)
	if got := mustRead(t, back); len(got) < len(data) || !bytes.Equal(got[:len(data)], data) {
		t.Fatal("nbdcopy through serve over the URI does not read what was written")
	}
	if code := stop2(); code != 0 {
		t.Fatalf("serve over the URI exited %d", code)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	inner := filepath.Join(dir, "inner.img")
	if code, _, e := run(t, nil, "read", img, "--key-file", outerPass, "-o", inner); code != 0 {
		t.Fatalf("read outer: %d %s", code, e)
	}
	if out, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", outerPass, img); err != nil {
		t.Fatalf("cryptsetup on the outer image: %v %s", err, out)
	}
	judgeLUKS(t, inner, innerPass, data)
}

// TestNBDServerKilled: nbdkit dies while `blkcrypt write` has requests in
// flight: the write fails with a clear one-line error and exit 4, and the
// image still decrypts (cryptsetup) with what was there before.
func TestNBDServerKilled(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", []byte("killed"))
	img := filepath.Join(dir, "img")
	if code, _, e := run(t, nil, append([]string{"format", img, "--size", strconv.Itoa(24 << 20), "--key-file", pass}, nbdKDF...)...); code != 0 {
		t.Fatalf("format: %d %s", code, e)
	}
	first := randBytes(1 << 20)
	if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, "first", first), "--key-file", pass); code != 0 {
		t.Fatalf("write: %d %s", code, e)
	}
	s := nbdtest.Nbdkit(t, false, "--filter=delay", "file", img, "wdelay=3")
	go func() {
		time.Sleep(1500 * time.Millisecond)
		s.Kill()
	}()
	code, _, e := run(t, nil, "write", s.URI, "-i", writeFile(t, dir, "second", randBytes(4<<20)), "--key-file", pass, "--offset-bytes", strconv.Itoa(2<<20))
	if code != ExitDevice || !strings.Contains(e, "connection lost") || strings.Count(strings.TrimSpace(e), "\n") != 0 {
		t.Fatalf("write through a killed server: exit %d, %q; want exit 4 and one line saying the connection was lost", code, e)
	}
	judgeLUKS(t, img, pass, first)
}

// TestNBDBadInput: a malformed URI, a server that is not there, an unknown
// export and a server that lies about its size: each a clear one-line
// error, the right exit code, and nothing written.
func TestNBDBadInput(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", []byte("bad input"))
	raw := filepath.Join(dir, "raw.img")
	if err := os.WriteFile(raw, randBytes(1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(mustRead(t, raw))
	q := nbdtest.QemuNBD(t, raw, "raw", "vol")
	// The lying server: 32 MiB claimed, 1 MiB behind it (reads past it are
	// short, which nbdkit turns into EIO).
	lying := nbdtest.Nbdkit(t, false, "eval",
		"get_size=echo 33554432",
		"pread=dd if="+raw+" iflag=skip_bytes,count_bytes skip=$4 count=$3 status=none",
		"pwrite=dd of="+raw+" oflag=seek_bytes conv=notrunc seek=$4 status=none")
	fmtArgs := func(uri string) []string {
		return append([]string{"format", uri, "--key-file", pass}, nbdKDF...)
	}
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no host", []string{"read", "nbd://", "--key-file", pass}, ExitUsage, "bad NBD URI"},
		{"bad port", fmtArgs("nbd://127.0.0.1:99999/"), ExitUsage, "bad port"},
		{"unix without socket", fmtArgs("nbd+unix:///vol"), ExitUsage, "socket=PATH is required"},
		{"nothing listening", fmtArgs("nbd+unix:///?socket=" + filepath.Join(dir, "none.sock")), ExitDevice, "cannot connect"},
		{"unknown export", fmtArgs("nbd+unix:///nope?socket=" + q.Sock), ExitDevice, `unknown export: "nope"`},
		{"unknown export read", []string{"read", "nbd+unix:///nope?socket=" + q.Sock, "--key-file", pass}, ExitDevice, "unknown export"},
		{"lying size", fmtArgs(lying.URI), ExitDevice, "last byte"},
		{"tls refused", fmtArgs("nbds+unix:///vol?socket=" + q.Sock), ExitDevice, "tls"},
	}
	for _, c := range cases {
		code, _, e := run(t, nil, c.args...)
		if code != c.code || !strings.Contains(e, c.msg) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
			t.Errorf("%s: exit %d, %q; want exit %d and one line with %q", c.name, code, e, c.code, c.msg)
		}
		if strings.Contains(e, "bad input") {
			t.Errorf("%s: the passphrase reached the error", c.name)
		}
	}
	if sha256.Sum256(mustRead(t, raw)) != sum {
		t.Fatal("a refused command wrote to the image")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNBDShortReply: a server that cuts a read reply short, in either
// reply form, fails read, write (whose unaligned start needs a read), the
// header read of open, luksDump and luksAddKey with exit 4 and one line
// naming the fault (never "not a LUKS device"); no verb writes through
// it, and the bytes behind it are unchanged.
func TestNBDShortReply(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", []byte("short reply"))
	img := filepath.Join(dir, "v.img")
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", strconv.Itoa(20 << 20), "--key-file", pass}, nbdKDF...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, "in", randBytes(1<<20)), "--key-file", pass); code != 0 {
		t.Fatalf("write: %s", e)
	}
	image := mustRead(t, img)
	const dataOff = 16 << 20 // LUKS2's default data offset
	cuts := []struct {
		name       string
		structured bool
		cut        func(c *nbdtest.FakeConn, h, off uint64, data []byte) error
		says       string
	}{
		{"structured data covering half", true, func(c *nbdtest.FakeConn, h, off uint64, data []byte) error {
			nbdtest.Chunk(c, 0, nbdtest.ReplyTypeOffsetData, h, nbdtest.DataChunk(off, data[:len(data)/2]))
			return nbdtest.Chunk(c, nbdtest.ReplyFlagDone, nbdtest.ReplyTypeNone, h, nil)
		}, "short reply"},
		{"simple reply cut, then a hang-up", false, func(c *nbdtest.FakeConn, h, off uint64, data []byte) error {
			b := make([]byte, 16)
			binary.BigEndian.PutUint32(b, nbdtest.SimpleMagic)
			binary.BigEndian.PutUint64(b[8:], h)
			c.Write(append(b, data[:len(data)/2]...))
			return errors.New("hang up")
		}, "connection lost"},
	}
	for _, cut := range cuts {
		for _, at := range []struct {
			name string
			off  uint64 // reads reaching past it are cut (not the client's probe of the last byte)
			args []string
		}{
			{"read of the data", dataOff, []string{"read", "--key-file", pass}},
			{"write's read of a partial sector", dataOff, []string{"write", "-i", writeFile(t, dir, "small", []byte("abc")), "--offset-bytes", "100", "--key-file", pass}},
			{"open's header read", 0, []string{"write", "-i", writeFile(t, dir, "small", []byte("abc")), "--key-file", pass}},
			{"dump's header read", 0, []string{"luksDump"}},
			{"luksAddKey's header read", 0, []string{"luksAddKey", "--key-file", pass, writeFile(t, dir, "new", []byte("new"))}},
		} {
			t.Run(cut.name+"/"+at.name, func(t *testing.T) {
				disk := nbdtest.NewDisk(image)
				f := &nbdtest.Fake{Size: uint64(len(image)), Structured: cut.structured}
				f.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
					if cmd == nbdtest.CmdRead && off+uint64(n) > at.off && n > 1 {
						return cut.cut(c, h, off, image[off:off+uint64(n)])
					}
					return disk.Reply(c, cmd, h, off, n, d)
				}
				uri := f.Serve(t)
				args := append([]string{at.args[0], uri}, at.args[1:]...)
				code, _, e := run(t, nil, args...)
				if code != ExitDevice || !strings.Contains(e, cut.says) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
					t.Fatalf("%q: exit %d, %q; want exit 4 and one line with %q", at.args[0], code, e, cut.says)
				}
				if disk.Writes.Load() != 0 || !bytes.Equal(disk.Bytes(), image) {
					t.Fatalf("%d writes reached a server whose replies were short", disk.Writes.Load())
				}
			})
		}
	}
}
