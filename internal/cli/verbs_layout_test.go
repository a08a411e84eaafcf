package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/luks2"
)

func copyImage(t *testing.T, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, filepath.Dir(src), dst, b)
}

// csVolumeKey is the volume key cryptsetup reads with passphrase file kf.
func csVolumeKey(t *testing.T, img, kf string) string {
	t.Helper()
	k := volumeKeyOf(mustCS(t, "luksDump", "--dump-volume-key", "-q", "--key-file", kf, img))
	if k == "" {
		t.Fatalf("no volume key from cryptsetup for %s", img)
	}
	return k
}

// TestVerbsConvertBothWays: a LUKS1 volume with data, converted to LUKS2
// and back by us, gets the metadata cryptsetup's own conversion writes
// (equal JSON; the LUKS1 header, keyslot material and data byte for byte),
// keeps its volume key, both passphrases and its plaintext, under both
// verb names.
func TestVerbsConvertBothWays(t *testing.T) {
	dir := t.TempDir()
	img := csFormat(t, dir, "v.img", "luks1", 8<<20, "first")
	k0 := filepath.Join(dir, "v.img.pass0")
	k3 := writeFile(t, dir, "k3", []byte("third"))
	mustCS(t, "luksAddKey", "-q", "--key-file", k0, "--key-slot", "3", "--pbkdf-force-iterations", "1000", img, k3)
	msg := randBytes(1 << 20)
	in := writeFile(t, dir, "msg", msg)
	mustRun(t, nil, "write", img, "--key-file", k0, "-i", in)
	vk := csVolumeKey(t, img, k0)
	ref := copyImage(t, img, "ref.img")

	// A piece of each keyslot's material: after the conversion it must be
	// in the image once, at its new place (no stale copy left behind).
	raw, _ := os.ReadFile(img)
	ph, err := luks1.ParsePhdr(raw[:luks1.PhdrSize])
	if err != nil {
		t.Fatal(err)
	}
	var pieces [][]byte
	for _, s := range []int{0, 3} {
		off := int(ph.Keyslots[s].KeyMaterialOffset)*512 + 64<<10
		pieces = append(pieces, append([]byte(nil), raw[off:off+4096]...))
	}
	mustRun(t, nil, "luksConvert", "-q", "--type", "luks2", img)
	raw, _ = os.ReadFile(img)
	for i, piece := range pieces {
		if n := bytes.Count(raw, piece); n != 1 {
			t.Errorf("keyslot material piece %d is in the converted image %d times, want 1", i, n)
		}
	}
	mustCS(t, "convert", "-q", "--type", "luks2", ref)
	if got, want := mustRun(t, nil, "dump", "--dump-json-metadata", img), mustCS(t, "luksDump", "--dump-json-metadata", ref); got != want {
		t.Fatalf("LUKS2 metadata after our convert:\n%s\ncryptsetup's convert:\n%s", got, want)
	}
	if out := mustCS(t, "isLuks", "--type", "luks2", img); out != "" {
		t.Logf("%s", out)
	}
	check := func(stage string) {
		t.Helper()
		for _, kf := range []string{k0, k3} {
			if got := csVolumeKey(t, img, kf); got != vk {
				t.Fatalf("%s: cryptsetup reads volume key %s, was %s", stage, got, vk)
			}
		}
		if got := mustRun(t, nil, "read", img, "--key-file", k3, "--length", "1048576"); got != string(msg) {
			t.Fatalf("%s: plaintext changed", stage)
		}
	}
	check("to LUKS2")

	mustRun(t, nil, "convert", "-q", "--type", "luks1", img)
	mustCS(t, "convert", "-q", "--type", "luks1", ref)
	sameLUKS1(t, img, ref)
	if !strings.Contains(mustCS(t, "luksDump", img), "Version:       \t1") {
		t.Errorf("cryptsetup does not see LUKS1 after convert --type luks1")
	}
	check("back to LUKS1")
}

// TestVerbsConvertLUKS2Native: a LUKS2 volume cryptsetup formatted with
// 512-byte sectors and PBKDF2 converts to the LUKS1 header, keyslot
// material and data cryptsetup's conversion writes, byte for byte, with
// 16 KiB and 64 KiB metadata.
func TestVerbsConvertLUKS2Native(t *testing.T) {
	dir := t.TempDir()
	kf := writeFile(t, dir, "k", []byte("pw"))
	for _, mds := range []string{"16k", "64k"} { // 64k: cryptsetup converts it too
		img := filepath.Join(dir, mds+".img")
		os.WriteFile(img, nil, 0o600)
		os.Truncate(img, 20<<20)
		fast := []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}
		mustCS(t, append([]string{"luksFormat", "-q", "--type", "luks2", "--sector-size", "512", "--luks2-metadata-size", mds, "--key-file", kf, img}, fast...)...)
		mustCS(t, append([]string{"luksAddKey", "-q", "--key-file", kf, img, kf}, fast...)...)
		vk := csVolumeKey(t, img, kf)
		ref := copyImage(t, img, "ref.img")
		pieces := luks2Pieces(t, img)
		mustRun(t, nil, "convert", "--type", "luks1", img)
		mustCS(t, "convert", "-q", "--type", "luks1", ref)
		sameLUKS1(t, img, ref)
		raw, _ := os.ReadFile(img)
		for i, piece := range pieces {
			if n := bytes.Count(raw, piece); n != 1 {
				t.Errorf("%s metadata: keyslot material piece %d is in the LUKS1 image %d times, want 1", mds, i, n)
			}
		}
		for _, slot := range []string{"0", "1"} {
			if code := csCode(t, "open", "--test-passphrase", "--key-file", kf, "--key-slot", slot, img); code != 0 {
				t.Errorf("%s metadata: keyslot %s does not open after convert (exit %d)", mds, slot, code)
			}
		}
		if got := csVolumeKey(t, img, kf); got != vk {
			t.Errorf("%s metadata: volume key changed", mds)
		}
	}
}

// TestVerbsConvertRefusals: what cryptsetup refuses to convert we refuse
// with its exit code, and the image stays byte for byte as it was.
func TestVerbsConvertRefusals(t *testing.T) {
	dir := t.TempDir()
	kf := writeFile(t, dir, "k", []byte("pw"))
	mk := func(name string, args ...string) string {
		img := filepath.Join(dir, name)
		os.WriteFile(img, nil, 0o600)
		os.Truncate(img, 20<<20)
		mustCS(t, append([]string{"luksFormat", "-q", "--type", "luks2", "--key-file", kf, img}, args...)...)
		return img
	}
	pb := []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}
	argon := mk("argon.img", "--sector-size", "512", "--pbkdf", "argon2id", "--pbkdf-force-iterations", "4", "--pbkdf-memory", "32")
	sec4k := mk("4k.img", append([]string{"--sector-size", "4096"}, pb...)...)
	tok := mk("tok.img", append([]string{"--sector-size", "512"}, pb...)...)
	mustCS(t, "token", "add", "--key-description", "x", tok)
	ok2 := mk("ok.img", append([]string{"--sector-size", "512"}, pb...)...)
	// A 1 MiB keyslots area leaves no room for the eight LUKS1 areas.
	small := mk("small.img", append([]string{"--sector-size", "512", "--luks2-keyslots-size", "1048576"}, pb...)...)
	l1 := csFormat(t, dir, "l1.img", "luks1", 4<<20, "pw")
	rnd := writeFile(t, dir, "rnd.img", randBytes(1<<20))
	for _, c := range []struct {
		typ, img string
	}{
		{"luks1", argon}, {"luks1", sec4k}, {"luks1", tok}, {"luks1", small},
		{"luks2", ok2}, {"luks1", l1}, {"luks3", ok2}, {"luks1", rnd},
		{"luks1", filepath.Join(dir, "missing")},
	} {
		before, _ := os.ReadFile(c.img)
		code, _, e := run(t, nil, "convert", "-q", "--type", c.typ, c.img)
		after, _ := os.ReadFile(c.img)
		if !bytes.Equal(before, after) {
			t.Errorf("convert --type %s %s: refused (%s) but changed the image", c.typ, filepath.Base(c.img), e)
		}
		want := csCode(t, "convert", "-q", "--type", c.typ, copyOrSame(t, c.img))
		if code != want || code == 0 {
			t.Errorf("convert --type %s %s: exit %d (%s), cryptsetup %d", c.typ, filepath.Base(c.img), code, strings.TrimSpace(e), want)
		}
	}
}

// copyOrSame gives cryptsetup its own copy, so its attempt cannot change
// what the next case reads; a missing path stays missing.
func copyOrSame(t *testing.T, img string) string {
	if _, err := os.Stat(img); err != nil {
		return img
	}
	return copyImage(t, img, filepath.Base(img)+".cs")
}

// TestVerbsResize: resize grows and shrinks an image's data area (--size in
// sectors, --device-size with a unit), cryptsetup still opens it with the
// same key, the data before the cut is kept, and bad sizes are refused.
func TestVerbsResize(t *testing.T) {
	dir := t.TempDir()
	for _, typ := range []string{"luks1", "luks2"} {
		img := csFormat(t, dir, typ+".img", typ, 20<<20, "pw")
		kf := filepath.Join(dir, typ+".img.pass0")
		vk := csVolumeKey(t, img, kf)
		msg := randBytes(64 << 10)
		mustRun(t, nil, "write", img, "--key-file", kf, "-i", writeFile(t, dir, "m", msg))
		code, out, _ := run(t, nil, "dump", img)
		if code != 0 {
			t.Fatal(out)
		}
		off := int64(16 << 20)
		if typ == "luks1" {
			off = 2 << 20
		}
		for _, c := range []struct {
			args []string
			want int64
		}{
			{[]string{"--size", "65536"}, 32 << 20},
			{[]string{"--device-size", "8MiB"}, 8 << 20},
			{[]string{"--device-size", "1M"}, 1 << 20},
		} {
			mustRun(t, nil, append([]string{"resize", img}, c.args...)...)
			st, _ := os.Stat(img)
			if st.Size() != off+c.want {
				t.Errorf("%s resize %v: file is %d bytes, want %d", typ, c.args, st.Size(), off+c.want)
			}
			if got := csVolumeKey(t, img, kf); got != vk {
				t.Errorf("%s resize %v: volume key changed", typ, c.args)
			}
			if got := mustRun(t, nil, "read", img, "--key-file", kf, "--length", "65536"); got != string(msg) {
				t.Errorf("%s resize %v: data changed", typ, c.args)
			}
		}
		for _, args := range [][]string{
			{"--size", "8", "--device-size", "4096"},
			{"--device-size", "1000"},
			{"--device-size", "12X"},
		} {
			if code, _, _ := run(t, nil, append([]string{"resize", img}, args...)...); code != 1 {
				t.Errorf("%s resize %v: exit %d, want 1", typ, args, code)
			}
		}
	}
	// 4096-byte sectors: a size that is not a whole number of them.
	img := filepath.Join(dir, "4k.img")
	os.WriteFile(img, nil, 0o600)
	os.Truncate(img, 20<<20)
	kf := writeFile(t, dir, "k", []byte("pw"))
	mustCS(t, "luksFormat", "-q", "--type", "luks2", "--sector-size", "4096", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", kf, img)
	if code, _, _ := run(t, nil, "resize", img, "--size", "9"); code != 1 {
		t.Errorf("resize of 4096-byte sectors to 9 sectors: exit %d, want 1", code)
	}
}

// sameLUKS1 compares two LUKS1 images where it matters: the header sector
// block, each active keyslot's material and everything from the payload
// on. Unused keyslot space may differ: cryptsetup's move leaves shifted
// stale bytes there where our hops leave random data.
func sameLUKS1(t *testing.T, ours, theirs string) {
	t.Helper()
	a, _ := os.ReadFile(ours)
	b, _ := os.ReadFile(theirs)
	if len(a) != len(b) || len(a) < 4096 || !bytes.Equal(a[:4096], b[:4096]) {
		t.Fatalf("LUKS1 header differs from cryptsetup's conversion (%d and %d bytes)", len(a), len(b))
	}
	p, err := luks1.ParsePhdr(a[:luks1.PhdrSize])
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range p.Keyslots {
		off := int(k.KeyMaterialOffset) * 512
		end := off + int(p.AreaSectors())*512
		if k.Enabled() && (end > len(a) || !bytes.Equal(a[off:end], b[off:end])) {
			t.Errorf("keyslot %d material differs from cryptsetup's conversion", i)
		}
	}
	if po := int(p.PayloadOffset) * 512; po > 0 && !bytes.Equal(a[po:], b[po:]) {
		t.Errorf("data differs")
	}
}

// luks2Pieces returns 4 KiB from the middle of each LUKS2 keyslot area.
func luks2Pieces(t *testing.T, img string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	h, err := luks2.Read(luksutil.NewMemDevice(0, raw))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, k := range h.Keyslots() {
		off := int(k.AreaOffset) + 64<<10
		out = append(out, append([]byte(nil), raw[off:off+4096]...))
	}
	return out
}

// TestVerbsResizeRefusedChangesNothing (issue #25 bug 5): a resize that is
// refused leaves the image as it was: the refusal of a header with an
// unknown mandatory requirement (read-only) comes before the file grows,
// and a data file in use (locked by an open volume) is refused before it
// is touched, not grown under the volume.
func TestVerbsResizeRefusedChangesNothing(t *testing.T) {
	dir := unpack(t, "luks2_header_requirements.tar.xz")
	req := filepath.Join(dir, "luks2_header_requirements")
	st0, err := os.Stat(req)
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func(t *testing.T, what, img string, size int64, sum [32]byte) {
		t.Helper()
		st, err := os.Stat(img)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != size {
			t.Errorf("%s: the file is %d bytes, was %d", what, st.Size(), size)
		}
		if fileSum(t, img) != sum {
			t.Errorf("%s: the file's contents changed", what)
		}
	}
	before := fileSum(t, req)
	for _, args := range [][]string{
		{"--device-size", "1M"}, // the file is 4 MiB, all header: 5 MiB
		{"--size", "4096"},
		{"--device-size", "2M", "--header", req},
	} {
		code, _, e := run(t, nil, append([]string{"resize", req}, args...)...)
		if code != ExitUsage || !strings.Contains(e, "read-only") {
			t.Errorf("resize %v of a header with unknown requirements: exit %d, %q; want 1, read-only", args, code, e)
		}
		unchanged(t, "refused resize "+strings.Join(args, " "), req, st0.Size(), before)
	}

	// A detached header: the data file is what grows, and it is locked.
	ddir := t.TempDir()
	pass := writeFile(t, ddir, "pass", []byte("pw"))
	data, hdr := filepath.Join(ddir, "data.img"), filepath.Join(ddir, "hdr.img")
	if err := os.WriteFile(data, randBytes(1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, nil, "format", data, "--header", hdr, "--key-file", pass, "-q", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000")
	dsum, hsum := fileSum(t, data), fileSum(t, hdr)
	held, err := blkcrypt.OpenFileLocked(data, false)
	if err != nil {
		t.Fatal(err)
	}
	code, _, e := run(t, nil, "resize", data, "--header", hdr, "--device-size", "2M")
	held.Close()
	if code != ExitBusy || !strings.Contains(e, "locked") {
		t.Errorf("resize of a data file in use: exit %d, %q; want %d, locked", code, e, ExitBusy)
	}
	unchanged(t, "resize of a data file in use", data, 1<<20, dsum)
	if fileSum(t, hdr) != hsum {
		t.Error("resize of a data file in use: the header changed")
	}
	// Once free, the same resize grows the data file.
	mustRun(t, nil, "resize", data, "--header", hdr, "--device-size", "2M")
	if st, err := os.Stat(data); err != nil || st.Size() != 2<<20 {
		t.Errorf("resize after the volume closed: %v, %v; want 2 MiB", st, err)
	}
}
