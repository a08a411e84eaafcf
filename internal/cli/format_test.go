package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var fmtKDF = []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}

// dataOffset is the data segment offset cryptsetup reports.
func dataOffset(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cryptsetup(t, append([]string{"luksDump"}, args...)...)
	if err != nil {
		t.Fatalf("cryptsetup luksDump: %v\n%s", err, out)
	}
	if m := regexp.MustCompile(`offset: (\d+) \[bytes\]`).FindStringSubmatch(out); m != nil {
		return m[1]
	}
	if m := regexp.MustCompile(`Payload offset:\s*(\d+)`).FindStringSubmatch(out); m != nil {
		return m[1] + " sectors"
	}
	t.Fatalf("no data offset in:\n%s", out)
	return ""
}

// TestFormatOffset: --offset is honoured as cryptsetup's luksFormat takes
// it, in 512-byte sectors (it used to be dropped: data at 16 MiB), for
// LUKS2, LUKS1 and a detached LUKS2 header. cryptsetup formats a twin with
// the same options, and reports the same data offset for both.
func TestFormatOffset(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("pw"))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"luks2", []string{"--offset", "65536"}, "33554432"},
		{"luks2-small", []string{"--offset", "8192"}, "4194304"},
		{"luks1", []string{"--type", "luks1", "--offset", "65536"}, "65536 sectors"},
		{"detached", []string{"--header", "HDR", "--offset", "8192"}, "4194304"},
	} {
		var got [2]string
		for i, tool := range []string{"blkcrypt", "cryptsetup"} {
			img := writeFile(t, dir, c.name+"-"+tool+".img", nil)
			os.Truncate(img, 40<<20)
			hdr := filepath.Join(dir, c.name+"-"+tool+".hdr")
			var args []string
			for _, a := range c.args {
				args = append(args, strings.ReplaceAll(a, "HDR", hdr))
			}
			if tool == "blkcrypt" {
				if code, _, e := run(t, nil, append(append([]string{"format", img, "--key-file", pass, "-q"}, fmtKDF...), args...)...); code != 0 {
					t.Fatalf("%s: %s", c.name, e)
				}
			} else if out, err := cryptsetup(t, append(append([]string{"luksFormat", "-q", "--key-file", pass, img}, fmtKDF...), args...)...); err != nil {
				t.Fatalf("%s: cryptsetup luksFormat: %v\n%s", c.name, err, out)
			}
			if c.name == "detached" {
				got[i] = dataOffset(t, hdr)
			} else {
				got[i] = dataOffset(t, img)
			}
		}
		if got[0] != c.want || got[1] != c.want {
			t.Errorf("%s: data at %s (blkcrypt) and %s (cryptsetup), want %s", c.name, got[0], got[1], c.want)
		}
	}
}

// TestFormatRangeChecks: numeric options outside what cryptsetup accepts,
// and options the chosen type cannot honour, are refused with exit 1 at
// once (no benchmark) and the device is left as it was.
func TestFormatRangeChecks(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("pw"))
	img := writeFile(t, dir, "v.img", randBytes(20<<20))
	before := fileSum(t, img)
	for _, extra := range [][]string{
		{"--pbkdf-force-iterations", "4294967296"},
		{"--pbkdf-force-iterations", "-1"},
		{"--pbkdf-force-iterations", "0"},
		{"--iter-time", "4294967296"},
		{"--pbkdf-memory", "4294967296"},
		{"--pbkdf-parallel", "4294967296"},
		{"--key-size", "4294967296"},
		{"--key-size", "12"},
		{"--sector-size", "1000"},
		{"--sector-size", "4294967296"},
		{"--offset", "-1"},
		{"--align-payload", "4294967296"},
		{"--key-slot", "32"},
		{"--key-slot", "-2"},
		{"--type", "luks1", "--key-slot", "8"},
		{"--type", "luks1", "--label", "x"},
		{"--type", "luks1", "--subsystem", "x"},
		{"--type", "luks1", "--sector-size", "4096"},
		{"--type", "luks1", "--pbkdf", "argon2id"},
		{"--type", "luks1", "--offset", "4294967296"},
		{"--pbkdf", "pbkdf2", "--pbkdf-memory", "1024"},
	} {
		args := append([]string{"format", img, "--key-file", pass, "-q"}, extra...)
		start := time.Now()
		code, _, e := run(t, nil, args...)
		if code != ExitUsage || strings.Count(e, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want 1 and one line", extra, code, e)
		}
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("%v: refused only after %v (a benchmark ran?)", extra, d)
		}
	}
	if fileSum(t, img) != before {
		t.Fatal("a refused format wrote to the device")
	}
}

// TestFormatSizeCleanup: a format with --size that fails removes the image
// it created, and leaves an existing one in place.
func TestFormatSizeCleanup(t *testing.T) {
	dir := t.TempDir()
	pass := writeFile(t, dir, "p", []byte("pw"))
	img := filepath.Join(dir, "new.img")
	// 1 MiB cannot hold a LUKS2 header and data.
	if code, _, _ := run(t, nil, append([]string{"format", img, "--size", "1048576", "--key-file", pass, "-q"}, fmtKDF...)...); code == 0 {
		t.Fatal("format of a 1 MiB image succeeded")
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("the failed format left %s behind (%v)", img, err)
	}
	old := writeFile(t, dir, "old.img", randBytes(4096))
	if code, _, _ := run(t, nil, append([]string{"format", old, "--size", "1048576", "--key-file", pass, "-q"}, fmtKDF...)...); code == 0 {
		t.Fatal("format of a 1 MiB image succeeded")
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("a failed format removed an image it did not create: %v", err)
	}
}
