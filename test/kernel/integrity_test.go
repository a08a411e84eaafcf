//go:build linux

package kernel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// integrityVol is one standalone dm-integrity volume of the interop test.
type integrityVol struct {
	name       string
	alg        string // integritysetup's spelling
	key        bool   // hmac: the key file /kt/ikey (32 bytes)
	jmac       bool   // journal MAC hmac-sha256 with /kt/jkey
	sector     int
	interleave int    // 0: default
	bitmap     bool   // written in bitmap mode
	tagSize    int    // 0: the digest size
	jcrypt     string // journal cipher (integritysetup's spelling), key /kt/ckey
	patOff     int64
}

var (
	integrityKey  = bytes.Repeat([]byte("k3y!"), 8)
	integrityJKey = bytes.Repeat([]byte("jmac"), 8)
	integrityCKey = bytes.Repeat([]byte("ctr!"), 8)
)

const integrityImg = 2 << 20

// integrityPattern is the data the volumes hold: volume v writes
// pattern[v.patOff:] (the guest reads the same file).
func integrityPattern() []byte {
	r := rand.New(rand.NewPCG(29, 29))
	b := make([]byte, 8<<20)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func (v integrityVol) guestArgs() string {
	a := []string{"--integrity", v.alg}
	if v.key {
		a = append(a, "--integrity-key-file", "/kt/ikey", "--integrity-key-size", "32")
	}
	if v.jmac {
		a = append(a, "--journal-integrity", "hmac-sha256", "--journal-integrity-key-file", "/kt/jkey", "--journal-integrity-key-size", "32")
	}
	if v.jcrypt != "" {
		a = append(a, "--journal-crypt", v.jcrypt, "--journal-crypt-key-file", "/kt/ckey", "--journal-crypt-key-size", "32")
	}
	return strings.Join(a, " ")
}

func (v integrityVol) opts() integrity.Options {
	o := integrity.Options{Algorithm: v.alg, TagSize: v.tagSize}
	if v.key {
		o.Key = integrityKey
	}
	if v.jmac {
		o.JournalMAC, o.JournalMACKey = "hmac-sha256", integrityJKey
	}
	if v.jcrypt != "" {
		o.JournalCrypt, o.JournalCryptKey = v.jcrypt, integrityCKey
	}
	return o
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// guestLines returns the console lines that start with prefix (the
// script may be cut short by a power-off, so the whole console is read).
func guestLines(console, prefix string) []string {
	var out []string
	for _, l := range strings.Split(console, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), prefix); ok {
			out = append(out, strings.TrimSpace(rest))
		}
	}
	return out
}

// TestIntegrity judges package integrity by the kernel's dm-integrity and
// integritysetup, in one boot: the kernel formats (--no-wipe: the fill
// writes every sector) and fills volumes that blkcrypt must read exactly; blkcrypt formats and fills volumes that the
// kernel must read exactly (one with a journal committed but not yet
// written in place, which the kernel must replay); a volume with flipped
// bits is refused by both for the same blocks; and last the guest is
// powered off after flushed writes that still sit in the journal, which
// blkcrypt must replay. The tampered volume is read whole by one dd
// conv=noerror,sync into a scratch disk: a refused block comes back as
// zeros, every other must be the data.
func TestIntegrity(t *testing.T) {
	k := need(t)
	isetup := testenv.Need(t, "integritysetup", "cryptsetup-bin")
	dir := t.TempDir()
	pat := integrityPattern()
	kernelVols := []integrityVol{
		{name: "ik-crc32c-512", alg: "crc32c", sector: 512, patOff: 0},
		{name: "ik-sha256-4k", alg: "sha256", sector: 4096, interleave: 256, patOff: 1 << 16},
		{name: "ik-hmac-4k", alg: "hmac-sha256", key: true, jmac: true, sector: 4096, patOff: 2 << 16},
		{name: "ik-crc32-512", alg: "crc32", sector: 512, interleave: 64, patOff: 3 << 16},
		{name: "ik-bitmap", alg: "crc32c", sector: 4096, interleave: 128, bitmap: true, patOff: 11 << 16},
		{name: "ik-sha256-t12", alg: "sha256", sector: 1024, tagSize: 12, patOff: 14 << 16}, // digest cut
	}
	ourVols := []integrityVol{
		{name: "ib-crc32c-512", alg: "crc32c", sector: 512, patOff: 4 << 16},
		{name: "ib-sha256-4k", alg: "sha256", sector: 4096, interleave: 128, patOff: 5 << 16},
		{name: "ib-hmac-4k", alg: "hmac-sha256", key: true, jmac: true, sector: 4096, patOff: 6 << 16},
		{name: "ib-crc32-512", alg: "crc32", sector: 512, interleave: 64, patOff: 7 << 16},
		{name: "ib-bitmap", alg: "sha256", sector: 512, interleave: 256, bitmap: true, patOff: 12 << 16},
		{name: "ib-crc32c-t8", alg: "crc32c", sector: 2048, tagSize: 8, patOff: 15 << 16}, // digest zero-padded
	}
	jrnl := integrityVol{name: "ib-journal", alg: "hmac-sha256", key: true, jmac: true, sector: 512, interleave: 256, patOff: 8 << 16}
	jcrypt := integrityVol{name: "ib-jcrypt", alg: "crc32c", jcrypt: "ctr-aes", sector: 4096, interleave: 256, patOff: 16 << 16}
	jchacha := integrityVol{name: "ib-jchacha", alg: "sha1", jcrypt: "chacha20", sector: 1024, interleave: 256, patOff: 18 << 16}
	ccut := integrityVol{name: "ik-ccut", alg: "sha256", jcrypt: "cbc-aes", sector: 512, patOff: 17 << 16}
	tamper := integrityVol{name: "ib-tamper", alg: "crc32c", sector: 4096, interleave: 64, patOff: 9 << 16}
	const tamperScan = "ib-tamper-scan"
	cut := integrityVol{name: "ik-cut", alg: "crc32c", sector: 512, patOff: 10 << 16}
	bcut := integrityVol{name: "ik-bcut", alg: "crc32c", sector: 512, interleave: 512, patOff: 13 << 16}

	var disks []Disk
	newImg := func(name string, size int64) string {
		p := filepath.Join(dir, name+".img")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		disks = append(disks, Disk{Name: name, Path: p})
		return p
	}
	var script strings.Builder
	script.WriteString(`set -u
kt_sum() { h=$(sha256sum < /dev/mapper/$1 | cut -d' ' -f1); echo "@@R $1 $(blockdev --getsize64 /dev/mapper/$1) $h"; }
` + aeadFill)
	// The kernel makes and fills these.
	for _, v := range append(kernelVols, cut, bcut, ccut) {
		newImg(v.name, integrityImg)
		extra := ""
		if v.interleave != 0 {
			extra = fmt.Sprintf(" --interleave-sectors %d", v.interleave)
		}
		if v.name == cut.name || v.name == ccut.name {
			extra += " --journal-size 360448"
		}
		if v.tagSize != 0 {
			extra += fmt.Sprintf(" --tag-size %d", v.tagSize) // format only: open reads it
		}
		openExtra := ""
		if v.bitmap {
			openExtra = " --integrity-bitmap-mode"
		}
		fmt.Fprintf(&script, `integritysetup format -q --no-wipe %s --sector-size %d%s /dev/disk/%s >/tmp/err 2>&1 || echo "@@E %s format: $(cat /tmp/err)"
integritysetup open %s%s /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(cat /tmp/err)"
kt_fill %s %d
kt_sum %s
integritysetup close %s
integritysetup dump /dev/disk/%s | sed 's/^/@@D %s /'
`, v.guestArgs(), v.sector, extra, v.name, v.name, v.guestArgs(), openExtra, v.name, v.name, v.name, v.name, v.patOff/4096, v.name, v.name, v.name, v.name)
	}
	// blkcrypt makes and fills these; the kernel reads them.
	want := map[string]string{}
	for _, v := range append(ourVols, jrnl, jcrypt, jchacha, tamper) {
		size := int64(integrityImg)
		if v.name == tamper.name {
			size = 1 << 20 // fewer blocks for the guest to read one by one
		}
		p := newImg(v.name, size)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		o := v.opts()
		var js uint64
		if v.name == jrnl.name || v.name == jcrypt.name || v.name == jchacha.name {
			js = 2048 // many sections
		}
		if _, err := integrity.Format(f, integrity.FormatOptions{Algorithm: v.alg, Key: o.Key, SectorSize: v.sector, TagSize: v.tagSize,
			InterleaveSectors: uint64(v.interleave), JournalMAC: o.JournalMAC, JournalMACKey: o.JournalMACKey,
			JournalCrypt: o.JournalCrypt, JournalCryptKey: o.JournalCryptKey, JournalSectors: js}); err != nil {
			t.Fatalf("%s: format: %v", v.name, err)
		}
		if v.bitmap {
			o.Mode = integrity.ModeBitmap
		}
		vol, err := integrity.Open(f, o)
		if err != nil {
			t.Fatalf("%s: open: %v", v.name, err)
		}
		data := pat[v.patOff : v.patOff+vol.Size()]
		if _, err := vol.WriteAt(data, 0); err != nil {
			t.Fatalf("%s: write: %v", v.name, err)
		}
		if err := vol.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		want[v.name] = fmt.Sprintf("%d %s", len(data), sha(data))
	}
	// ib-journal: two more writes, the second wrapping around the end of
	// the journal ring, cut after its journal commit was synced and before
	// anything of it reached its place: only the journal has it.
	for _, jrnl := range []integrityVol{jrnl, jcrypt, jchacha} {
		p := filepath.Join(dir, jrnl.name+".img")
		img, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dev := powercut.New(img)
		vol, err := integrity.Open(dev, jrnl.opts())
		if err != nil {
			t.Fatal(err)
		}
		g := vol.Geometry()
		bs := vol.SectorSize()
		full := append([]byte(nil), pat[jrnl.patOff:jrnl.patOff+vol.Size()]...)
		n1 := (g.JournalSections-1)*g.SectionEntries - 10 // leaves the ring at its last section
		d1 := pat[1<<20:][:n1*bs]
		if err := vol.WriteSectors(d1, nil, 0); err != nil {
			t.Fatal(err)
		}
		copy(full, d1)
		before := len(dev.Trace())
		first, n := uint64(37), 3*g.SectionEntries // three sections: wraps to sections 0 and 1
		data := pat[(3 << 20):][:n*bs]
		if err := vol.WriteSectors(data, nil, first); err != nil {
			t.Fatal(err)
		}
		copy(full[int(first)*bs:], data)
		ops := dev.Trace()
		synced := -1
		for i := before; i < len(ops); i++ {
			if ops[i].Sync {
				synced = i
				break
			}
		}
		if synced < 0 {
			t.Fatal("journal write without a sync")
		}
		cutImg := dev.CutAfter(synced + 1).Durable()
		if err := os.WriteFile(p, cutImg, 0o600); err != nil {
			t.Fatal(err)
		}
		want[jrnl.name] = fmt.Sprintf("%d %s", len(full), sha(full))
		// The cut image holds the old data in place: only a replay reads
		// the new.
		if bytes.Equal(cutImg[int64(g.DataSector(first))<<9:][:bs], data[:bs]) {
			t.Fatal("the cut image already holds the new data in place")
		}
		// blkcrypt's own reading of it, read-only and after its replay.
		for _, ro := range []bool{true, false} {
			o := jrnl.opts()
			o.ReadOnly = ro
			v2, err := integrity.Open(powercut.New(cutImg), o)
			if err != nil {
				t.Fatalf("%s: open (read-only %v): %v", jrnl.name, ro, err)
			}
			got := make([]byte, v2.Size())
			if _, err := v2.ReadAt(got, 0); err != nil || !bytes.Equal(got, full) {
				t.Fatalf("%s: blkcrypt does not read its own journal (read-only %v): %v", jrnl.name, ro, err)
			}
		}
	}
	// ib-tamper: bits flipped in data and tags of a few blocks.
	var tamperBlocks []uint64
	var tamperGeom integrity.Geometry
	{
		p := filepath.Join(dir, tamper.name+".img")
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		vol, err := integrity.Open(f, integrity.Options{Algorithm: tamper.alg, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		g := vol.Geometry()
		tamperGeom = g
		spb := uint64(g.SectorsPerBlock)
		last := vol.Blocks() - 1
		flip := func(off int64, bit byte) {
			b := []byte{0}
			f.ReadAt(b, off)
			b[0] ^= bit
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		flip(int64(g.DataSector(3*spb))<<9+100, 0x04)   // data
		flip(g.TagOffset(10*spb), 0x80)                 // tag
		flip(int64(g.DataSector(70*spb))<<9+4095, 0x01) // data, last byte, another area
		flip(g.TagOffset(last*spb)+3, 0x10)             // the last block's tag
		tamperBlocks = []uint64{3, 10, 70, last}
		f.Close()
		newImg(tamperScan, 1<<20)
		fmt.Fprintf(&script, `integritysetup open %s /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(cat /tmp/err)"
blockdev --setra 0 /dev/mapper/%s
dd if=/dev/mapper/%s of=/dev/disk/%s bs=4096 iflag=direct conv=noerror,sync,fsync 2>/dev/null
integritysetup close %s
`, tamper.guestArgs(), tamper.name, tamper.name, tamper.name, tamper.name, tamper.name, tamperScan, tamper.name)
	}
	for _, v := range append(ourVols, jrnl, jcrypt, jchacha) {
		fmt.Fprintf(&script, `integritysetup open %s /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(cat /tmp/err)"
kt_sum %s
integritysetup close %s
integritysetup dump /dev/disk/%s | sed 's/^/@@D %s /'
`, v.guestArgs(), v.name, v.name, v.name, v.name, v.name, v.name, v.name)
	}
	// Last: flushed writes left in the journal, and the power cut.
	fmt.Fprintf(&script, `integritysetup open %s --journal-watermark 90 --journal-commit-time 600000 /dev/disk/%s cut2 2>/tmp/err || echo "@@E cut2 open: $(cat /tmp/err)"
dd if=/kt/pat of=/dev/mapper/cut2 bs=4096 skip=%d seek=10 count=5 conv=fsync 2>/dev/null || echo "@@E cut2 dd1"
dd if=/kt/pat of=/dev/mapper/cut2 bs=4096 skip=%d seek=300 count=3 conv=fsync 2>/dev/null || echo "@@E cut2 dd2"
integritysetup open %s --integrity-bitmap-mode --bitmap-flush-time 600000 /dev/disk/%s bcut2 2>/tmp/err || echo "@@E bcut2 open: $(cat /tmp/err)"
dd if=/kt/pat of=/dev/mapper/bcut2 bs=4096 skip=%d seek=7 count=9 conv=fsync 2>/dev/null || echo "@@E bcut2 dd"
integritysetup open %s --journal-watermark 90 --journal-commit-time 600000 /dev/disk/%s ccut2 2>/tmp/err || echo "@@E ccut2 open: $(cat /tmp/err)"
dd if=/kt/pat of=/dev/mapper/ccut2 bs=4096 skip=%d seek=50 count=6 conv=fsync 2>/dev/null || echo "@@E ccut2 dd"
echo "@@I power-off $(cut -d' ' -f1 /proc/uptime)"
echo o > /proc/sysrq-trigger
sleep 10
`, cut.guestArgs(), cut.name, (2<<20)/4096, (3<<20)/4096, bcut.guestArgs(), bcut.name, (4<<20)/4096, ccut.guestArgs(), ccut.name, (5<<20)/4096)

	isetupData, err := os.ReadFile(isetup)
	if err != nil || len(isetupData) == 0 {
		t.Fatalf("reading %s: %v", isetup, err)
	}
	packed, links, unpack := packDisks(t, dir, "p-", disks)
	r, err := k.Run(context.Background(), Boot{
		Script:      links + script.String(),
		Files:       map[string][]byte{"/kt/pat": pat, "/kt/ikey": integrityKey, "/kt/jkey": integrityJKey, "/kt/ckey": integrityCKey},
		Executables: map[string]string{"/sbin/integritysetup": isetup},
		Disks:       packed,
		Timeout:     6 * time.Minute,
		MemoryMiB:   512,
	})
	unpack()
	if r == nil {
		t.Fatal(err)
	}
	t.Logf("boot: %s, %v, guest script %s", r.Accel, r.Duration.Round(time.Millisecond), guestScriptTime(r.Console))
	if len(guestLines(r.Console, "@@I power-off")) != 1 {
		t.Fatalf("the guest did not reach the power cut (%v):\n%s", err, tail(r.Console, 6000))
	}
	for _, e := range guestLines(r.Console, "@@E ") {
		t.Errorf("guest: %s", e)
	}
	got := map[string]string{}
	for _, l := range guestLines(r.Console, "@@R ") {
		f := strings.Fields(l)
		if len(f) == 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	dumps := map[string]string{}
	for _, l := range guestLines(r.Console, "@@D ") {
		name, rest, _ := strings.Cut(l, " ")
		dumps[name] += rest + "\n"
	}
	checkDump := func(name, path string) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sb, err := integrity.ReadSuperblock(f)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		var b strings.Builder
		integrity.Dump(&b, sb, "/dev/disk/"+name)
		if norm(b.String()) != norm(dumps[name]) {
			t.Errorf("%s: dump differs:\n-- integritysetup\n%s-- blkcrypt\n%s", name, dumps[name], b.String())
		}
	}

	// The kernel's volumes, read by blkcrypt (read-only, then writable).
	for _, v := range kernelVols {
		p := filepath.Join(dir, v.name+".img")
		checkDump(v.name, p)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{true, false} {
			o := v.opts()
			o.ReadOnly = ro
			vol, err := integrity.Open(f, o)
			if err != nil {
				t.Errorf("%s: open (read-only %v): %v", v.name, ro, err)
				continue
			}
			data := make([]byte, vol.Size())
			if _, err := vol.ReadAt(data, 0); err != nil {
				t.Errorf("%s: read: %v", v.name, err)
			} else if s := fmt.Sprintf("%d %s", len(data), sha(data)); s != got[v.name] {
				t.Errorf("%s: blkcrypt reads %s, the kernel wrote %s", v.name, s, got[v.name])
			} else if !bytes.Equal(data, pat[v.patOff:v.patOff+int64(len(data))]) {
				t.Errorf("%s: the data is not the pattern", v.name)
			}
			vol.Close()
		}
		f.Close()
	}
	// blkcrypt's volumes, read by the kernel.
	for _, v := range append(ourVols, jrnl, jcrypt, jchacha) {
		if got[v.name] != want[v.name] {
			t.Errorf("%s: the kernel reads %q, blkcrypt wrote %q", v.name, got[v.name], want[v.name])
		}
		checkDump(v.name, filepath.Join(dir, v.name+".img"))
	}
	// Tampering: the same blocks refused by both.
	{
		scan, err := os.ReadFile(filepath.Join(dir, tamperScan+".img"))
		if err != nil {
			t.Fatal(err)
		}
		var kernelBad []string
		f, err := os.Open(filepath.Join(dir, tamper.name+".img"))
		if err != nil {
			t.Fatal(err)
		}
		vol, err := integrity.Open(f, integrity.Options{Algorithm: tamper.alg, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var ours []string
		bs := tamperGeom.BlockSize()
		zero := make([]byte, bs)
		for b := uint64(0); b < vol.Blocks(); b++ {
			switch got := scan[int(b)*bs:][:bs]; {
			case bytes.Equal(got, zero):
				kernelBad = append(kernelBad, strconv.FormatUint(b, 10))
			case !bytes.Equal(got, pat[tamper.patOff+int64(b)*int64(bs):][:bs]):
				t.Errorf("%s: the kernel returns other data for block %d", tamper.name, b)
			}
		}
		buf := make([]byte, bs)
		for b := uint64(0); b < vol.Blocks(); b++ {
			err := vol.ReadSectors(buf, nil, b)
			var se *integrity.SectorError
			switch {
			case err == nil:
			case errors.As(err, &se) && errors.Is(err, integrity.ErrIntegrity) && se.Block == b:
				ours = append(ours, strconv.FormatUint(b, 10))
			default:
				t.Errorf("block %d: %v", b, err)
			}
		}
		f.Close()
		var planted []string
		for _, b := range tamperBlocks {
			planted = append(planted, strconv.FormatUint(b, 10))
		}
		if strings.Join(kernelBad, ",") != strings.Join(ours, ",") || strings.Join(ours, ",") != strings.Join(planted, ",") {
			t.Errorf("refused blocks: kernel %v, blkcrypt %v, planted %v", kernelBad, ours, planted)
		}
	}
	// The power cut: blkcrypt replays what the guest had flushed.
	for _, cut := range []integrityVol{cut, ccut} {
		p := filepath.Join(dir, cut.name+".img")
		img, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		full := append([]byte(nil), pat[cut.patOff:]...)
		firstNew := 10 * 4096
		if cut.name == ccut.name {
			copy(full[50*4096:], pat[5<<20:][:6*4096])
			firstNew = 50 * 4096
		} else {
			copy(full[10*4096:], pat[2<<20:][:5*4096])
			copy(full[300*4096:], pat[3<<20:][:3*4096])
		}
		for _, ro := range []bool{true, false} {
			o := cut.opts()
			o.ReadOnly = ro
			vol, err := integrity.Open(powercut.New(img), o)
			if err != nil {
				t.Errorf("%s: open (read-only %v): %v", cut.name, ro, err)
				continue
			}
			data := make([]byte, vol.Size())
			if _, err := vol.ReadAt(data, 0); err != nil {
				t.Errorf("%s: read (read-only %v): %v", cut.name, ro, err)
			} else if !bytes.Equal(data, full[:len(data)]) {
				t.Errorf("%s: after the power cut blkcrypt does not read what the guest flushed (read-only %v)", cut.name, ro)
			}
			g := vol.Geometry()
			if ro && bytes.Equal(img[int64(g.DataSector(uint64(firstNew/512)))<<9:][:4096], full[firstNew:][:4096]) {
				t.Errorf("%s: the guest had written the data in place: the test did not exercise a replay", cut.name)
			}
		}
	}
	// The power cut in bitmap mode: the superblock says dirty; blkcrypt
	// reads the flushed data (unchecked where dirty, read-only) and
	// recomputes the dirty regions' tags (writable).
	{
		img, err := os.ReadFile(filepath.Join(dir, bcut.name+".img"))
		if err != nil {
			t.Fatal(err)
		}
		sb, err := integrity.ParseSuperblock(img)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Flags&integrity.FlagDirtyBitmap == 0 {
			t.Errorf("%s: the superblock is not marked dirty (flags %#x): the test did not exercise a dirty bitmap", bcut.name, sb.Flags)
		}
		full := append([]byte(nil), pat[bcut.patOff:]...)
		copy(full[7*4096:], pat[4<<20:][:9*4096])
		for _, ro := range []bool{true, false} {
			o := bcut.opts()
			o.ReadOnly = ro
			vol, err := integrity.Open(powercut.New(img), o)
			if err != nil {
				t.Errorf("%s: open (read-only %v): %v", bcut.name, ro, err)
				continue
			}
			data := make([]byte, vol.Size())
			if _, err := vol.ReadAt(data, 0); err != nil {
				t.Errorf("%s: read (read-only %v): %v", bcut.name, ro, err)
			} else if !bytes.Equal(data, full[:len(data)]) {
				t.Errorf("%s: after the power cut blkcrypt does not read what the guest flushed (read-only %v)", bcut.name, ro)
			}
			vol.Close()
		}
	}
}

func norm(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, " \n", "\n")) }
