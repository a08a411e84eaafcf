package luks2

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

// TestSetDataSizeFixedSegment: a fixed-size data segment gets the new
// length, which cryptsetup luksDump shows and with which it still opens
// the volume; a dynamic one is left alone; a size that is not a whole
// number of sectors is refused without a write.
func TestSetDataSizeFixedSegment(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	img := lukstest.NewImage(t, dir, "f.img", 24<<20)
	pass := []byte("resize")
	cs.MustRun("luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--sector-size", "4096", "--key-file", cs.KeyFile(pass), img)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dev := luksutil.File{File: f}
	h, err := Read(dev)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := h.SetDataSize(dev, 4<<20); err != nil || changed {
		t.Fatalf("dynamic segment: changed %v, %v; want untouched", changed, err)
	}
	// Make the segment fixed (as cryptsetup reencrypt leaves some), 8 MiB.
	root := h.md.root.clone()
	root.get("segments").get("0").set("size", ju64s(8<<20))
	if err := h.commit(dev, root); err != nil {
		t.Fatal(err)
	}
	for _, size := range []uint64{4 << 20, 6 << 20} {
		if h, err = Read(dev); err != nil {
			t.Fatal(err)
		}
		if changed, err := h.SetDataSize(dev, size); err != nil || !changed {
			t.Fatalf("SetDataSize(%d): changed %v, %v", size, changed, err)
		}
		out := cs.MustRun("luksDump", img)
		if !strings.Contains(out, "\tlength: "+strconv.FormatUint(size, 10)+" [bytes]\n") {
			t.Fatalf("cryptsetup luksDump after SetDataSize(%d):\n%s", size, out)
		}
		if !cs.TestPassphrase(img, pass, -1) {
			t.Fatalf("cryptsetup does not open the volume after SetDataSize(%d)", size)
		}
	}
	before := lukstest.ReadImage(t, img)
	if _, err := h.SetDataSize(dev, 4<<20+512); err == nil {
		t.Fatal("a size of 512-byte units on 4096-byte sectors is accepted")
	}
	if after := lukstest.ReadImage(t, img); string(after) != string(before) {
		t.Fatal("a refused SetDataSize wrote")
	}
}

// TestCheckDataSize: CheckDataSize refuses what SetDataSize refuses (a
// header with an unknown mandatory requirement, a size that is not a whole
// number of sectors), accepts what it accepts, and writes nothing, so the
// resize verb can ask before it grows the file.
func TestCheckDataSize(t *testing.T) {
	img := filepath.Join(lukstest.Extract(t, "luks2_header_requirements.tar.xz"), "luks2_header_requirements")
	before := lukstest.ReadImage(t, img)
	dev := lukstest.Open(t, img)
	h, err := Read(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CheckDataSize(1 << 20); !errors.Is(err, ErrReadOnly) {
		t.Errorf("CheckDataSize with unknown requirements: %v, want ErrReadOnly", err)
	}
	if _, err := h.SetDataSize(dev, 1<<20); !errors.Is(err, ErrReadOnly) {
		t.Errorf("SetDataSize with unknown requirements: %v, want ErrReadOnly", err)
	}
	if after := lukstest.ReadImage(t, img); string(after) != string(before) {
		t.Fatal("a refused resize wrote")
	}

	free := lukstest.NewImage(t, t.TempDir(), "free.img", 24<<20)
	fdev := lukstest.Open(t, free)
	fh, err := Format(fdev, make([]byte, 64), []byte("pw"), FormatOptions{SectorSize: 4096, Keyslot: KeyslotOptions{PBKDF: PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	before = lukstest.ReadImage(t, free)
	for _, c := range []struct {
		size uint64
		want error
	}{
		{0, ErrInvalidOptions},
		{4<<20 + 512, ErrInvalidOptions},
		{4 << 20, nil},
	} {
		if err := fh.CheckDataSize(c.size); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CheckDataSize(%d): %v, want %v", c.size, err, c.want)
		}
	}
	if after := lukstest.ReadImage(t, free); string(after) != string(before) {
		t.Fatal("CheckDataSize wrote")
	}
}
