//go:build linux

package kernel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// aeadVol is one LUKS2 volume with --integrity of TestAEAD.
type aeadVol struct {
	name      string
	cipher    string // cryptsetup --cipher
	integ     string // cryptsetup --integrity
	keyBits   int    // --key-size, 0: cryptsetup's default
	sector    int
	tamper    bool   // a copy gets flipped bits in data, tag and IV
	needsAlg  string // a /proc/crypto name the guest must have, or ""
	patOff    int64
	metaIVOff int  // where the IV starts in the metadata (0: no IV)
	ours      bool // blkcrypt also formats one ("b-…") for the kernel to read
}

const aeadImg = 4 << 20

// imgSize is the volume's image: 3 MiB where the sectors are 4096 bytes
// (less data for the TCG guest to encrypt and hash); 512-byte sectors with
// 32 or 64-byte tags need 4 MiB for cryptsetup to fit the dm-integrity
// device.
func (v aeadVol) imgSize() int64 {
	if v.sector == 4096 {
		return 3 << 20
	}
	return aeadImg
}

// aeadFill is the guest's shell to fill mapping $1 with /kt/pat from
// 4096-byte block $2 on: whole 4096-byte blocks, then any tail of 512-byte
// sectors, so that no sector keeps the unwritten tags --integrity-no-wipe
// leaves.
const aeadFill = `kt_fill() { sz=$(blockdev --getsize64 /dev/mapper/$1); n=$((sz / 4096)); t=$(((sz % 4096) / 512))
dd if=/kt/pat of=/dev/mapper/$1 bs=4096 skip=$2 count=$n conv=fsync 2>/dev/null || echo "@@E $1 dd"
[ $t -eq 0 ] || dd if=/kt/pat of=/dev/mapper/$1 bs=512 skip=$(($2 * 8 + n * 8)) seek=$((n * 8)) count=$t conv=fsync 2>/dev/null || echo "@@E $1 dd tail"; }
`

// TestAEAD judges LUKS2 volumes with authenticated sectors (cryptsetup
// luksFormat --integrity) by the kernel's dm-crypt over dm-integrity, in
// two boots. The first: the guest formats (--integrity-no-wipe: the fill
// writes every sector) and fills each volume, and blkcrypt must read
// exactly what the kernel wrote. Then blkcrypt writes copies (whole and
// partial sectors), formats volumes of its own offline (one left empty,
// which must read as zeros), and flips bits in the data, tag and IV of
// chosen sectors of others; the second boot: the kernel must read
// exactly what blkcrypt wrote, and refuse exactly the sectors blkcrypt
// refuses (one dd conv=noerror,sync per volume copies what the kernel
// returns to a scratch disk: a refused sector comes back as zeros, every
// other must be the plaintext).
func TestAEAD(t *testing.T) {
	k := need(t)
	csBin := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	pat := integrityPattern()
	// segmentsLike compares blkcrypt's luksDump of a volume with the
	// host cryptsetup's, from "Data segments:" to "Keyslots:" (the
	// integrity line included).
	segmentsLike := func(name string) {
		t.Helper()
		out, err := exec.Command(csBin, "luksDump", img0(dir, name)).CombinedOutput()
		if err != nil {
			t.Errorf("%s: cryptsetup luksDump: %v\n%s", name, err, out)
			return
		}
		h, err := blkcrypt.OpenLUKS(context.Background(), img0(dir, name), blkcrypt.LUKSOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var ours strings.Builder
		err = h.Dump(context.Background(), &ours, blkcrypt.DumpOptions{})
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		theirs, mine := dumpSegments(string(out)), dumpSegments(ours.String())
		if !strings.Contains(theirs, "integrity: ") || theirs != mine {
			t.Errorf("%s: segments dump as\n%s\ncryptsetup's:\n%s", name, mine, theirs)
		}
	}
	vols := []aeadVol{
		{name: "a-gcm-4k", cipher: "aes-gcm-random", integ: "aead", keyBits: 256, sector: 4096, tamper: true, patOff: 0, metaIVOff: 16, ours: true},
		{name: "a-gcm-512", cipher: "aes-gcm-random", integ: "aead", keyBits: 128, sector: 512, patOff: 1 << 16, metaIVOff: 16, ours: true},
		{name: "a-chacha-4k", cipher: "chacha20-random", integ: "poly1305", keyBits: 256, sector: 4096, tamper: true, patOff: 2 << 16, metaIVOff: 16, ours: true},
		{name: "a-chacha-512", cipher: "chacha20-random", integ: "poly1305", keyBits: 256, sector: 512, patOff: 3 << 16, metaIVOff: 16},
		{name: "a-hmac-4k", cipher: "aes-xts-plain64", integ: "hmac-sha256", keyBits: 512, sector: 4096, tamper: true, patOff: 4 << 16, ours: true},
		{name: "a-hmac-512", cipher: "aes-xts-plain64", integ: "hmac-sha256", keyBits: 256, sector: 512, patOff: 5 << 16},
		{name: "a-hmac512-4k", cipher: "aes-xts-plain64", integ: "hmac-sha512", keyBits: 512, sector: 4096, patOff: 6 << 16, ours: true},
		{name: "a-aegis-4k", cipher: "aegis128-random", integ: "aead", keyBits: 128, sector: 4096, tamper: true, needsAlg: "aegis128", patOff: 7 << 16, metaIVOff: 16},
		{name: "a-aegis-512", cipher: "aegis128-random", integ: "aead", keyBits: 128, sector: 512, needsAlg: "aegis128", patOff: 8 << 16, metaIVOff: 16, ours: true},
		// essiv(authenc(hmac(…),cbc(aes)),sha256): the IV is the salted
		// encryption of the sector number, not stored.
		{name: "a-essiv-4k", cipher: "aes-cbc-essiv:sha256", integ: "hmac-sha256", keyBits: 256, sector: 4096, tamper: true, patOff: 9 << 16, ours: true},
		{name: "a-essiv-512", cipher: "aes-cbc-essiv:sha256", integ: "hmac-sha256", keyBits: 128, sector: 512, patOff: 10 << 16, ours: true},
		{name: "a-essiv512-4k", cipher: "aes-cbc-essiv:sha256", integ: "hmac-sha512", keyBits: 256, sector: 4096, patOff: 11 << 16, ours: true},
	}
	img := func(name string) string { return img0(dir, name) }
	files := map[string][]byte{"/kt/pass": passphrase, "/kt/pat": pat}

	// Boot 1: the kernel formats and fills.
	var s1 strings.Builder
	s1.WriteString(`set -u
kt_asum() { h=$(sha256sum < /dev/mapper/$1 | cut -d' ' -f1); echo "@@R $1 $(blockdev --getsize64 /dev/mapper/$1) $h"; }
` + aeadFill)
	var disks1 []Disk
	for _, v := range vols {
		if err := os.WriteFile(img(v.name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img(v.name), v.imgSize()); err != nil {
			t.Fatal(err)
		}
		disks1 = append(disks1, Disk{Name: v.name, Path: img(v.name)})
		guard := "true"
		if v.needsAlg != "" {
			guard = fmt.Sprintf(`grep -q "^name *: %s$" /proc/crypto || modprobe %s 2>/dev/null; grep -q "^name *: %s$" /proc/crypto || { echo "@@N %s"; false; }`, v.needsAlg, v.needsAlg, v.needsAlg, v.name)
		}
		fmt.Fprintf(&s1, `if %s; then
cryptsetup luksFormat -q --type luks2 --cipher %s --integrity %s --integrity-no-wipe --key-size %d --sector-size %d --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --luks2-metadata-size 16k --luks2-keyslots-size 1m /dev/disk/%s /kt/pass >/tmp/err 2>&1 || echo "@@E %s format: $(tr '\n' ' ' </tmp/err)"
cryptsetup open --key-file /kt/pass /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(tr '\n' ' ' </tmp/err)"
kt_fill %s %d
kt_asum %s
cryptsetup close %s
fi
`, guard, v.cipher, v.integ, v.keyBits, v.sector, v.name, v.name, v.name, v.name, v.name, v.name, v.patOff/4096, v.name, v.name)
	}
	packed1, links1, unpack1 := packDisks(t, dir, "p1-", disks1)
	r1 := aeadBoot(t, k, links1+s1.String(), files, packed1)
	unpack1()
	skipped := map[string]bool{}
	for _, l := range guestLines(r1.Console, "@@N ") {
		skipped[l] = true
		t.Logf("%s: the guest kernel has no aegis128; not judged", l)
	}
	got1 := aeadResults(r1.Console)

	// blkcrypt reads the kernel's volumes, writes copies, tampers others.
	open := func(p string, ro bool) *blkcrypt.Volume {
		t.Helper()
		v, err := blkcrypt.Open(context.Background(), p, blkcrypt.OpenOptions{Passphrase: passphrase, ReadOnly: ro, Type: "luks2"})
		if err != nil {
			t.Fatalf("%s: open: %v", filepath.Base(p), err)
		}
		return v
	}
	readAll := func(v *blkcrypt.Volume) []byte {
		t.Helper()
		b := make([]byte, v.Size())
		if _, err := v.ReadAt(b, 0); err != nil {
			t.Fatalf("read: %v", err)
		}
		return b
	}
	var disks2 []Disk
	var s2 strings.Builder
	s2.WriteString("set -u\nkt_asum() { h=$(sha256sum < /dev/mapper/$1 | cut -d' ' -f1); echo \"@@R $1 $(blockdev --getsize64 /dev/mapper/$1) $h\"; }\n")
	wantW := map[string]string{}
	wantBad := map[string][]uint64{}
	var scans []aeadScan
	for _, v := range vols {
		if skipped[v.name] {
			continue
		}
		segmentsLike(v.name)
		vol := open(img(v.name), true)
		if a := vol.AEAD(); a == nil || a.Spec() != v.cipher {
			t.Errorf("%s: opened without its AEAD (%v)", v.name, a)
		}
		data := readAll(vol)
		vol.Close()
		if s := fmt.Sprintf("%d %s", len(data), sha(data)); s != got1[v.name] {
			t.Errorf("%s: blkcrypt reads %s, the kernel wrote %s", v.name, s, got1[v.name])
			continue
		}
		if !bytes.Equal(data, pat[v.patOff:v.patOff+int64(len(data))]) {
			t.Errorf("%s: the data is not the pattern", v.name)
		}
		// A copy blkcrypt rewrites: everything, then a partial write.
		w := v.name + "-w"
		raw, err := os.ReadFile(img(v.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(img(w), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		vw := open(img(w), false)
		want := bytes.Clone(pat[(1<<20)+v.patOff:][:len(data)])
		if _, err := vw.WriteAt(want, 0); err != nil {
			t.Fatalf("%s: write: %v", w, err)
		}
		part := pat[3<<20:][:1000]
		if _, err := vw.WriteAt(part, 777); err != nil {
			t.Fatalf("%s: partial write: %v", w, err)
		}
		copy(want[777:], part)
		if err := vw.Close(); err != nil {
			t.Fatalf("%s: close: %v", w, err)
		}
		wantW[w] = fmt.Sprintf("%d %s", len(want), sha(want))
		disks2 = append(disks2, Disk{Name: w, Path: img(w)})
		fmt.Fprintf(&s2, `cryptsetup open --key-file /kt/pass /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(tr '\n' ' ' </tmp/err)"
kt_asum %s
cryptsetup close %s
`, w, w, w, w, w)
		if !v.tamper {
			continue
		}
		tm := v.name + "-t"
		if err := os.WriteFile(img(tm), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		wantBad[tm] = aeadTamper(t, img(tm), v)
		vt := open(img(tm), true)
		var bad []uint64
		buf := make([]byte, v.sector)
		for i := int64(0); i < vt.Size()/int64(v.sector); i++ {
			_, err := vt.ReadAt(buf, i*int64(v.sector))
			var ie *blkcrypt.IntegrityError
			switch {
			case errors.As(err, &ie) && errors.Is(err, blkcrypt.ErrIntegrity):
				if ie.Offset != i*int64(v.sector) {
					t.Errorf("%s: sector %d fails naming offset %d", tm, i, ie.Offset)
				}
				bad = append(bad, uint64(i))
			case err != nil && err != io.EOF:
				t.Errorf("%s: sector %d: %v", tm, i, err)
			}
		}
		vt.Close()
		if !slices.Equal(bad, wantBad[tm]) {
			t.Errorf("%s: blkcrypt refuses sectors %v, the bits were flipped in %v", tm, bad, wantBad[tm])
		}
		disks2 = append(disks2, Disk{Name: tm, Path: img(tm), ReadOnly: true})
		scan := "s" + tm[1:]
		if err := os.WriteFile(img(scan), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img(scan), v.imgSize()); err != nil {
			t.Fatal(err)
		}
		disks2 = append(disks2, Disk{Name: scan, Path: img(scan)})
		scans = append(scans, aeadScan{name: tm, scan: scan, sector: v.sector, sectors: vt.Size() / int64(v.sector), plain: data})
		fmt.Fprintf(&s2, `cryptsetup open --readonly --key-file /kt/pass /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(tr '\n' ' ' </tmp/err)"
blockdev --setra 0 /dev/mapper/%s
dd if=/dev/mapper/%s of=/dev/disk/%s bs=%d iflag=direct conv=noerror,sync,fsync 2>/dev/null
cryptsetup close %s
`, tm, tm, tm, tm, tm, scan, v.sector, tm)
	}
	// Volumes blkcrypt formats offline: one left as Format leaves it
	// (every sector must read as zeros), the others filled.
	for i, v := range vols {
		if skipped[v.name] || !v.ours {
			continue
		}
		b := "b" + v.name[1:]
		keyBytes := v.keyBits / 8
		if strings.HasPrefix(v.integ, "hmac") {
			keyBytes += map[string]int{"hmac-sha256": 32, "hmac-sha512": 64}[v.integ]
		}
		if err := blkcrypt.Format(context.Background(), img(b), passphrase, blkcrypt.FormatOptions{Type: "luks2", Cipher: v.cipher,
			Integrity: v.integ, KeySize: keyBytes, SectorSize: v.sector, Size: v.imgSize(), Offset: 2048,
			PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
			t.Fatalf("%s: format: %v", b, err)
		}
		segmentsLike(b)
		vb := open(img(b), false)
		want := make([]byte, vb.Size())
		if got := readAll(vb); !bytes.Equal(got, want) {
			t.Errorf("%s: a fresh volume does not read as zeros", b)
		}
		if i != 0 {
			copy(want, pat[(2<<20)+v.patOff:])
			if _, err := vb.WriteAt(want, 0); err != nil {
				t.Fatalf("%s: write: %v", b, err)
			}
		}
		if err := vb.Close(); err != nil {
			t.Fatal(err)
		}
		wantW[b] = fmt.Sprintf("%d %s", len(want), sha(want))
		disks2 = append(disks2, Disk{Name: b, Path: img(b)})
		fmt.Fprintf(&s2, `cryptsetup open --readonly --key-file /kt/pass /dev/disk/%s %s 2>/tmp/err || echo "@@E %s open: $(tr '\n' ' ' </tmp/err)"
kt_asum %s
cryptsetup close %s
`, b, b, b, b, b)
	}
	if len(disks2) == 0 {
		t.Fatal("nothing for the second boot")
	}

	// Boot 2: the kernel reads what blkcrypt wrote and the tampered copies.
	packed2, links2, unpack2 := packDisks(t, dir, "p2-", disks2)
	r2 := aeadBoot(t, k, links2+s2.String(), map[string][]byte{"/kt/pass": passphrase}, packed2)
	unpack2()
	got2 := aeadResults(r2.Console)
	for name, want := range wantW {
		if got2[name] != want {
			t.Errorf("%s: the kernel reads %q, blkcrypt wrote %q", name, got2[name], want)
		}
	}
	for _, sc := range scans {
		out, err := os.ReadFile(img(sc.scan))
		if err != nil {
			t.Fatal(err)
		}
		var kbad []uint64
		zero := make([]byte, sc.sector)
		for i := int64(0); i < sc.sectors; i++ {
			got := out[i*int64(sc.sector):][:sc.sector]
			switch {
			case bytes.Equal(got, zero):
				kbad = append(kbad, uint64(i))
			case !bytes.Equal(got, sc.plain[i*int64(sc.sector):][:sc.sector]):
				t.Errorf("%s: the kernel returns other plaintext for sector %d", sc.name, i)
			}
		}
		if !slices.Equal(kbad, wantBad[sc.name]) {
			t.Errorf("%s: the kernel refuses sectors %v, blkcrypt %v", sc.name, kbad, wantBad[sc.name])
		}
	}
}

// aeadScan is a tampered volume the guest reads whole into a scratch
// disk, and the plaintext its sectors hold.
type aeadScan struct {
	name, scan string
	sector     int
	sectors    int64
	plain      []byte
}

// aeadBoot runs one guest boot and fails the test on the guest's errors.
func aeadBoot(t *testing.T, k *Kernel, script string, files map[string][]byte, disks []Disk) *Result {
	t.Helper()
	r, err := k.Run(context.Background(), Boot{Script: script + "echo @@I done\n", Files: files, Disks: disks, Timeout: 8 * time.Minute, MemoryMiB: 512})
	if r == nil {
		t.Fatal(err)
	}
	t.Logf("boot: %s, %v, guest script %s", r.Accel, r.Duration.Round(time.Millisecond), guestScriptTime(r.Console))
	if len(guestLines(r.Console, "@@I done")) != 1 {
		t.Fatalf("the guest did not finish (%v):\n%s", err, tail(r.Console, 6000))
	}
	for _, e := range guestLines(r.Console, "@@E ") {
		t.Errorf("guest: %s", e)
	}
	return r
}

// guestScriptTime is how long the test's script ran by the guest's clock
// (init.sh's @@KT-TIME marks, or a script's "@@I power-off UPTIME" before
// it cuts the power): the part of a boot a test controls, for keeping
// CI's kernel tests within their budget.
func guestScriptTime(console string) string {
	var from, to float64
	okFrom, okTo := false, false
	for _, l := range guestLines(console, "@@KT-TIME ") {
		var what string
		var at float64
		if _, err := fmt.Sscanf(l, "%s %g", &what, &at); err != nil {
			continue
		}
		switch what {
		case "disks":
			from, okFrom = at, true
		case "script":
			to, okTo = at, true
		}
	}
	for _, l := range guestLines(console, "@@I power-off ") { // TestIntegrity's cut
		if _, err := fmt.Sscanf(l, "%g", &to); err == nil {
			okTo = true
		}
	}
	if !okFrom || !okTo {
		return "unknown"
	}
	return fmt.Sprintf("%.1fs", to-from)
}

func aeadResults(console string) map[string]string {
	m := map[string]string{}
	for _, l := range guestLines(console, "@@R ") {
		if f := strings.Fields(l); len(f) == 3 {
			m[f[0]] = f[1] + " " + f[2]
		}
	}
	return m
}

// aeadTamper flips one bit in the data of sector 3, the tag of sector
// 10, the IV of sector 20 (random modes; else the tag's last byte) and
// the last byte of the last sector's data, through the dm-integrity
// geometry under the LUKS2 data segment; it returns those sectors.
func aeadTamper(t *testing.T, path string, v aeadVol) []uint64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := luks2.Read(luksutil.File{File: f})
	if err != nil {
		t.Fatal(err)
	}
	off := h.DataOffset()
	fi, _ := f.Stat()
	iv, err := integrity.Open(&integrity.SectionDevice{Dev: f, Offset: off, Length: fi.Size() - off}, integrity.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	g := iv.Geometry()
	spb := uint64(g.SectorsPerBlock)
	last := iv.Blocks() - 1
	iv.Close()
	flip := func(at int64, bit byte) {
		b := []byte{0}
		if _, err := f.ReadAt(b, off+at); err != nil {
			t.Fatal(err)
		}
		b[0] ^= bit
		if _, err := f.WriteAt(b, off+at); err != nil {
			t.Fatal(err)
		}
	}
	flip(int64(g.DataSector(3*spb))<<9+100, 0x04)
	flip(g.TagOffset(10*spb)+1, 0x80)
	ivAt := int64(g.TagSize - 1)
	if v.metaIVOff != 0 {
		ivAt = int64(v.metaIVOff + 2)
	}
	flip(g.TagOffset(20*spb)+ivAt, 0x10)
	flip(int64(g.DataSector(last*spb))<<9+int64(v.sector)-1, 0x01)
	return []uint64{3, 10, 20, last}
}

func img0(dir, name string) string { return filepath.Join(dir, name+".img") }

// packDisks puts disk images four to a guest disk, one per primary
// partition of an MBR (each at a 1 MiB boundary), since every virtio disk
// costs a TCG guest seconds of boot. Read-only images share read-only
// disks. It returns the disks to boot with, a script preamble that links
// /dev/disk/NAME to each image's partition, and a function that copies
// the partitions back into the image files after the boot.
func packDisks(t *testing.T, dir, prefix string, disks []Disk) ([]Disk, string, func()) {
	t.Helper()
	type place struct {
		path      string
		at, size  int64
		pack, idx int
	}
	var out []Disk
	var places []place
	var script strings.Builder
	script.WriteString("kt_link() { d=$(readlink /dev/disk/$1); i=0; while [ ! -e $d$2 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done; ln -s $d$2 /dev/disk/$3; }\n")
	for _, ro := range []bool{false, true} {
		var group []Disk
		for _, d := range disks {
			if d.ReadOnly == ro {
				group = append(group, d)
			}
		}
		for len(group) > 0 {
			n := min(4, len(group))
			name := fmt.Sprintf("%s%d", prefix, len(out))
			p := filepath.Join(dir, name+".pack")
			mbr := make([]byte, 512)
			at := int64(1 << 20)
			var ps []place
			for i, d := range group[:n] {
				fi, err := os.Stat(d.Path)
				if err != nil {
					t.Fatal(err)
				}
				size := (fi.Size() + 1<<20 - 1) &^ (1<<20 - 1)
				e := mbr[446+16*i:]
				copy(e, []byte{0, 0xfe, 0xff, 0xff, 0x83, 0xfe, 0xff, 0xff})
				binary.LittleEndian.PutUint32(e[8:], uint32(at>>9))
				binary.LittleEndian.PutUint32(e[12:], uint32(size>>9))
				ps = append(ps, place{path: d.Path, at: at, size: fi.Size(), pack: len(out), idx: i + 1})
				fmt.Fprintf(&script, "kt_link %s %d %s\n", name, i+1, d.Name)
				at += size
			}
			mbr[510], mbr[511] = 0x55, 0xaa
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(at); err == nil {
				_, err = f.WriteAt(mbr, 0)
			}
			for _, pl := range ps {
				b, rerr := os.ReadFile(pl.path)
				if rerr != nil {
					t.Fatal(rerr)
				}
				if _, werr := f.WriteAt(b, pl.at); werr != nil {
					t.Fatal(werr)
				}
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			places = append(places, ps...)
			out = append(out, Disk{Name: name, Path: p, ReadOnly: ro})
			group = group[n:]
		}
	}
	unpack := func() {
		t.Helper()
		for _, pl := range places {
			if out[pl.pack].ReadOnly {
				continue
			}
			f, err := os.Open(out[pl.pack].Path)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, pl.size)
			_, err = f.ReadAt(b, pl.at)
			f.Close()
			if err == nil {
				err = os.WriteFile(pl.path, b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return out, script.String(), unpack
}

// dumpSegments is a luksDump's "Data segments:" section.
func dumpSegments(d string) string {
	_, rest, _ := strings.Cut(d, "Data segments:")
	seg, _, _ := strings.Cut(rest, "Keyslots:")
	return strings.TrimSpace(seg)
}
