//go:build linux

package kernel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/cli"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// blkcryptCLI runs the command in-process and returns its exit code and
// output.
func blkcryptCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), args, &cli.Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func hexSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestIntegrityCLI judges --type integrity (the registry's standalone
// dm-integrity volumes, through the command line where its flags reach
// and the library's Open otherwise) by the kernel, in one boot of small
// devices: volumes blkcrypt formatted and wrote (journal, bitmap and
// direct modes; crc32c, sha256, hmac-sha256 with a journal MAC) are read
// by integritysetup open in the guest exactly; volumes the guest
// formatted and wrote are read by `blkcrypt read --type integrity` (or
// Open) exactly, and `blkcrypt dump --type integrity` prints what
// integritysetup dump prints for them, byte for byte.
func TestIntegrityCLI(t *testing.T) {
	k := need(t)
	isetup := testenv.Need(t, "integritysetup", "cryptsetup-bin")
	ctx := context.Background()
	dir := t.TempDir()
	rnd := rand.New(rand.NewPCG(6, 29))
	pat := make([]byte, 4<<20)
	for i := range pat {
		pat[i] = byte(rnd.Uint32())
	}
	key := bytes.Repeat([]byte("h6k!"), 8)
	jkey := bytes.Repeat([]byte("h6jm"), 8)
	type vol struct {
		name    string
		args    string // integritysetup's algorithm options (guest key files in /kt)
		fmtArgs string // integritysetup format's layout options
		openArg string // integritysetup open's mode
		f       blkcrypt.FormatIntegrityOptions
		o       blkcrypt.IntegrityOptions
		cliRead bool // read through `blkcrypt read` (the default algorithm)
		patOff  int64
	}
	ours := []vol{
		{name: "cb-crc32c", cliRead: true, patOff: 0},
		{name: "cb-sha256-bitmap", args: "--integrity sha256", f: blkcrypt.FormatIntegrityOptions{Algorithm: "sha256", SectorSize: 4096, InterleaveSectors: 128},
			o: blkcrypt.IntegrityOptions{Algorithm: "sha256", Mode: integrity.ModeBitmap}, patOff: 1 << 20},
		{name: "cb-hmac-direct", args: "--integrity hmac-sha256 --integrity-key-file /kt/ikey --integrity-key-size 32 --journal-integrity hmac-sha256 --journal-integrity-key-file /kt/jkey --journal-integrity-key-size 32",
			f: blkcrypt.FormatIntegrityOptions{Algorithm: "hmac-sha256", Key: key, JournalIntegrity: "hmac-sha256", JournalIntegrityKey: jkey, SectorSize: 1024},
			o: blkcrypt.IntegrityOptions{Algorithm: "hmac-sha256", Key: key, JournalIntegrity: "hmac-sha256", JournalIntegrityKey: jkey, Mode: integrity.ModeDirect}, patOff: 2 << 20},
	}
	kernels := []vol{
		{name: "ck-crc32c", cliRead: true, patOff: 3 << 20},
		{name: "ck-sha1-4k", args: "--integrity sha1", fmtArgs: "--sector-size 4096 --interleave-sectors 256", openArg: "--integrity-bitmap-mode",
			o: blkcrypt.IntegrityOptions{Algorithm: "sha1"}, patOff: 1 << 19},
	}
	var disks []Disk
	img := func(name string) string {
		p := filepath.Join(dir, name+".img")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 1<<20); err != nil {
			t.Fatal(err)
		}
		disks = append(disks, Disk{Name: name, Path: p})
		return p
	}
	var script strings.Builder
	script.WriteString("set -u\n")
	want := map[string]string{}
	for _, v := range ours {
		p := img(v.name)
		if err := blkcrypt.FormatIntegrity(ctx, p, v.f); err != nil {
			t.Fatalf("%s: format: %v", v.name, err)
		}
		vo, err := blkcrypt.Open(ctx, p, blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity, Integrity: v.o})
		if err != nil {
			t.Fatalf("%s: open: %v", v.name, err)
		}
		data := pat[v.patOff:][:vo.Size()]
		vo.Close()
		if v.cliRead {
			in := filepath.Join(dir, v.name+".in")
			if err := os.WriteFile(in, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if code, _, e := blkcryptCLI("write", "--type", "integrity", p, "-i", in); code != 0 {
				t.Fatalf("%s: blkcrypt write: exit %d: %s", v.name, code, e)
			}
		} else {
			vo, err := blkcrypt.Open(ctx, p, blkcrypt.OpenOptions{Integrity: v.o})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := vo.WriteAt(data, 0); err != nil {
				t.Fatalf("%s: write: %v", v.name, err)
			}
			if err := vo.Close(); err != nil {
				t.Fatal(err)
			}
		}
		want[v.name] = fmt.Sprintf("%d %s", len(data), hexSHA256(data))
		fmt.Fprintf(&script, `integritysetup open %s /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(cat /tmp/err)"
echo "@@R %s $(blockdev --getsize64 /dev/mapper/%s) $(sha256sum < /dev/mapper/%s | cut -d' ' -f1)"
integritysetup close %s
`, v.args, v.name, v.name, v.name, v.name, v.name, v.name, v.name)
	}
	for _, v := range kernels {
		img(v.name)
		fmt.Fprintf(&script, `integritysetup format -q %s %s /dev/disk/%s >/tmp/err 2>&1 || echo "@@E %s format: $(cat /tmp/err)"
integritysetup open %s %s /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(cat /tmp/err)"
sz=$(blockdev --getsize64 /dev/mapper/%s)
dd if=/kt/pat of=/dev/mapper/%s bs=4096 skip=%d count=$((sz / 4096)) conv=fsync 2>/dev/null || echo "@@E %s dd"
echo "@@R %s $sz $(sha256sum < /dev/mapper/%s | cut -d' ' -f1)"
integritysetup close %s
`, v.args, v.fmtArgs, v.name, v.name, v.args, v.openArg, v.name, v.name, v.name, v.name, v.name, v.patOff/4096, v.name, v.name, v.name, v.name)
	}
	isetupData, err := os.ReadFile(isetup)
	if err != nil || len(isetupData) == 0 {
		t.Fatalf("reading %s: %v", isetup, err)
	}
	r, err := k.Run(ctx, Boot{
		Script:      script.String(),
		Files:       map[string][]byte{"/kt/pat": pat, "/kt/ikey": key, "/kt/jkey": jkey},
		Executables: map[string]string{"/sbin/integritysetup": isetup},
		Disks:       disks,
		Timeout:     4 * time.Minute,
		MemoryMiB:   512,
	})
	if r == nil {
		t.Fatal(err)
	}
	t.Logf("boot: %s, %v", r.Accel, r.Duration.Round(time.Millisecond))
	for _, e := range r.Lines("@@E ") {
		t.Errorf("guest: %s", e)
	}
	got := map[string]string{}
	for _, l := range r.Lines("@@R ") {
		if f := strings.Fields(l); len(f) == 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	if len(got) != len(ours)+len(kernels) {
		t.Fatalf("the guest reported %d volumes of %d (%v):\n%s", len(got), len(ours)+len(kernels), err, tail(r.Console, 4000))
	}
	// blkcrypt's volumes, read by the kernel.
	for _, v := range ours {
		if got[v.name] != want[v.name] {
			t.Errorf("%s: the kernel reads %q, blkcrypt wrote %q", v.name, got[v.name], want[v.name])
		}
	}
	// The kernel's volumes, dumped and read by blkcrypt.
	for _, v := range kernels {
		p := filepath.Join(dir, v.name+".img")
		ref, err := exec.Command(isetup, "dump", p).Output()
		if err != nil {
			t.Fatalf("%s: integritysetup dump: %v", v.name, err)
		}
		if code, out, e := blkcryptCLI("dump", "--type", "integrity", p); code != 0 || out != string(ref) {
			t.Errorf("%s: blkcrypt dump: exit %d %s\n%s--- integritysetup:\n%s", v.name, code, e, out, ref)
		}
		var data []byte
		if v.cliRead {
			code, out, e := blkcryptCLI("read", "--type", "integrity", p)
			if code != 0 {
				t.Errorf("%s: blkcrypt read: exit %d: %s", v.name, code, e)
				continue
			}
			data = []byte(out)
		} else {
			vo, err := blkcrypt.Open(ctx, p, blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity, ReadOnly: true, Integrity: v.o})
			if err != nil {
				t.Errorf("%s: open: %v", v.name, err)
				continue
			}
			data = make([]byte, vo.Size())
			_, err = vo.ReadAt(data, 0)
			vo.Close()
			if err != nil {
				t.Errorf("%s: read: %v", v.name, err)
				continue
			}
		}
		if s := fmt.Sprintf("%d %s", len(data), hexSHA256(data)); s != got[v.name] || int64(len(data)) > int64(len(pat))-v.patOff || !bytes.Equal(data, pat[v.patOff:][:len(data)]) {
			t.Errorf("%s: blkcrypt reads %s, the kernel wrote %s", v.name, s, got[v.name])
		}
	}
}
