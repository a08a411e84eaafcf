package probe

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/imagetest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// Every image is made by the real tool at test time and judged by
// util-linux's blkid -p (low-level probing, no cache).

// blkid returns blkid -p -o export's TYPE, UUID, LABEL and VERSION of
// img, its backslash escapes undone.
func blkid(t *testing.T, img string) Info {
	t.Helper()
	cmd := exec.Command(testenv.Need(t, "blkid", "util-linux"), "-p", "-o", "export", img)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("blkid -p %s: %v (%s)", img, err, out)
	}
	var i Info
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		var sb strings.Builder
		for j := 0; j < len(v); j++ {
			if v[j] == '\\' && j+1 < len(v) {
				j++
			}
			sb.WriteByte(v[j])
		}
		v = sb.String()
		switch k {
		case "TYPE":
			i.Type = v
		case "UUID":
			i.UUID = v
		case "LABEL":
			i.Label = v
		case "VERSION":
			i.Version = v
		case "USAGE":
			i.Usage = v
		}
	}
	return i
}

func image(t *testing.T, mib int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, int64(mib)<<20); err != nil {
		t.Fatal(err)
	}
	return p
}

func sh(t *testing.T, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func identifyFile(t *testing.T, img string) Info {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Identify(f, st.Size())
	if err != nil {
		t.Fatalf("Identify: %v", err)
	}
	return got
}

// TestAgainstBlkid makes one image per type with its mkfs (or
// cryptsetup) and requires Identify to say what blkid -p says: TYPE,
// UUID, LABEL, VERSION and USAGE.
func TestAgainstBlkid(t *testing.T) {
	cases := []struct {
		name     string
		mib      int
		tool     string // the program, and its Debian package
		pkg      string
		make     func(t *testing.T, tool, img string)
		wantType string
	}{
		{"vfat12", 8, "mkfs.vfat", "dosfstools", func(t *testing.T, tool, img string) { sh(t, "", tool, "-F", "12", "-n", "MY LABEL", img) }, "vfat"},
		{"vfat16-nolabel", 32, "mkfs.vfat", "dosfstools", func(t *testing.T, tool, img string) { sh(t, "", tool, "-F", "16", img) }, "vfat"},
		{"vfat32", 64, "mkfs.vfat", "dosfstools", func(t *testing.T, tool, img string) { sh(t, "", tool, "-F", "32", "-n", "V32", img) }, "vfat"},
		{"ext2", 16, "mkfs.ext2", "e2fsprogs", func(t *testing.T, tool, img string) { sh(t, "", tool, "-q", "-F", "-L", "e2", img) }, "ext2"},
		{"ext3", 16, "mkfs.ext3", "e2fsprogs", func(t *testing.T, tool, img string) { sh(t, "", tool, "-q", "-F", "-L", "e3", img) }, "ext3"},
		{"ext4", 16, "mkfs.ext4", "e2fsprogs", func(t *testing.T, tool, img string) { sh(t, "", tool, "-q", "-F", "-L", "e4", img) }, "ext4"},
		{"ext4-nojournal", 16, "mkfs.ext4", "e2fsprogs", func(t *testing.T, tool, img string) { sh(t, "", tool, "-q", "-F", "-O", "^has_journal", img) }, "ext4"},
		{"ext2-with-journal-only", 16, "mkfs.ext2", "e2fsprogs", func(t *testing.T, tool, img string) { sh(t, "", tool, "-q", "-F", "-j", img) }, "ext3"},
		{"ntfs", 16, "mkntfs", "ntfs-3g", func(t *testing.T, tool, img string) { sh(t, "", tool, "-F", "-Q", "-q", "-L", "Data Volume", img) }, "ntfs"},
		{"ntfs-nolabel", 16, "mkntfs", "ntfs-3g", func(t *testing.T, tool, img string) { sh(t, "", tool, "-F", "-Q", "-q", img) }, "ntfs"},
		{"swap", 8, "mkswap", "util-linux", func(t *testing.T, tool, img string) { sh(t, "", tool, "-L", "swp", img) }, "swap"},
		{"luks1", 8, "cryptsetup", "cryptsetup-bin", func(t *testing.T, tool, img string) {
			sh(t, "pw", tool, "luksFormat", "-q", "--type", "luks1", "--pbkdf-force-iterations", "1000", "--key-file", "-", img)
		}, "crypto_LUKS"},
		{"luks2", 32, "cryptsetup", "cryptsetup-bin", func(t *testing.T, tool, img string) {
			sh(t, "pw", tool, "luksFormat", "-q", "--type", "luks2", "--label", "secret stuff", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-", img)
		}, "crypto_LUKS"},
		{"xfs", 320, "mkfs.xfs", "xfsprogs", func(t *testing.T, tool, img string) { sh(t, "", tool, "-q", "-L", "xlab", img) }, "xfs"},
		{"btrfs", 128, "mkfs.btrfs", "btrfs-progs", func(t *testing.T, tool, img string) { sh(t, "", tool, "-q", "-L", "blab", img) }, "btrfs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tool := testenv.Need(t, c.tool, c.pkg)
			img := image(t, c.mib)
			c.make(t, tool, img)
			want := blkid(t, img)
			if want.Type != c.wantType {
				t.Fatalf("blkid says %q, the test expects %q", want.Type, c.wantType)
			}
			if got := identifyFile(t, img); got != want {
				t.Fatalf("Identify: %+v\n    blkid: %+v", got, want)
			}
		})
	}
}

// TestBitLocker probes cryptsetup's BitLocker test images (Windows 7+
// and To Go) against blkid.
func TestBitLocker(t *testing.T) {
	src := testenv.Fixture(t, "bitlk-images.tar.xz")
	testenv.Need(t, "xz", "xz-utils")
	dst := t.TempDir()
	if out, err := exec.Command("tar", "-xJf", src, "-C", dst).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v %s", err, out)
	}
	imgs, err := filepath.Glob(filepath.Join(dst, "bitlk-images", "*.img"))
	if err != nil || len(imgs) == 0 {
		t.Fatalf("no images: %v", err)
	}
	for _, img := range imgs {
		want := blkid(t, img)
		if got := identifyFile(t, img); got != want {
			t.Errorf("%s: Identify %+v, blkid %+v", filepath.Base(img), got, want)
		}
	}
}

// TestLVM2 makes a PV with pvcreate on a loop device (lvm2 needs a block
// device) under a private LVM configuration that sees only it.
func TestLVM2(t *testing.T) {
	img := image(t, 16)
	e := imagetest.AttachLVM(t, img)
	e.Run("pvcreate", "-y", e.Loops[0])
	e.Detach()
	want := blkid(t, img)
	if want.Type != "LVM2_member" {
		t.Fatalf("blkid says %q", want.Type)
	}
	if got := identifyFile(t, img); got != want {
		t.Fatalf("Identify: %+v\n    blkid: %+v", got, want)
	}
}

// TestUnknown: zeros and a short device are nothing, without error.
func TestUnknown(t *testing.T) {
	for _, n := range []int{0, 100, 1 << 20} {
		_, err := Identify(strings.NewReader(strings.Repeat("\x00", n)), int64(n))
		if !errors.Is(err, ErrUnknown) {
			t.Fatalf("%d zero bytes: %v, want ErrUnknown", n, err)
		}
	}
}
