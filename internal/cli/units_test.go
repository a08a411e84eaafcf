package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

func TestParseSize(t *testing.T) {
	good := map[string]uint64{
		"0": 0, "512": 512, "512k": 512 << 10, "512K": 512 << 10, "64M": 64 << 20, "64m": 64 << 20,
		"1G": 1 << 30, "1g": 1 << 30, "1MiB": 1 << 20, "1miB": 1 << 20, "2GiB": 2 << 30, "1T": 1 << 40,
		"1P": 1 << 50, "7E": 7 << 60, "1MB": 1000000, "1kB": 1000, "3GB": 3e9, "1EB": 1e18,
		"2048S": 1 << 20, "8s": 4096, "8SiB": 4096, "8SB": 4096,
	}
	for s, want := range good {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "M", "-1", "+1", " 1", "1 ", "1.5M", "1Mi", "1MIB", "1Mib", "1Mb", "1B", "1iB",
		"1MiBB", "1Z", "S", "8Sx", "8Si", "0x10", "1kk", "8E", "16E", "99999999999999999999", "9223372036854775808"} {
		if got, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", s, got)
		}
	}
}

// TestSizeOption: format --size takes units (a plain number is still
// bytes, as before); the sector counts do not, as in cryptsetup.
func TestSizeOption(t *testing.T) {
	p, err := parseArgs("format", []string{"x", "--size", "64M"})
	if err != nil || p.set["size"] != "67108864" {
		t.Fatalf("format --size 64M: %v, %v", p, err)
	}
	if p, err = parseArgs("format", []string{"x", "--size=17825792"}); err != nil || p.set["size"] != "17825792" {
		t.Fatalf("format --size=17825792: %v, %v", p, err)
	}
	for _, args := range [][]string{
		{"read", "x", "--size", "64M"}, {"write", "x", "--offset", "1M"}, {"read", "x", "--skip", "8k"},
		{"format", "x", "--align-payload", "1M"}, {"format", "x", "--size", "64Q"},
	} {
		if _, err := parseArgs(args[0], args[1:]); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	if p, err := parseArgs("read", []string{"x", "--size", "2048"}); err != nil || p.set["size"] != "2048" {
		t.Errorf("read --size 2048 (sectors): %v %v", p, err)
	}
	// End to end: a 20 MiB image from "--size 20M".
	dir := t.TempDir()
	img := filepath.Join(dir, "u.img")
	pass := writeFile(t, dir, "pass", []byte("units"))
	if code, _, e := run(t, nil, append([]string{"format", img, "--size", "20M", "--key-file", pass, "-q"}, fastKDF...)...); code != 0 {
		t.Fatalf("format --size 20M: %s", e)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 20<<20 {
		t.Fatalf("image is %v bytes (%v), want %d", st.Size(), err, 20<<20)
	}
}

// TestParseSizeAgainstCryptsetup: cryptsetup reads the same spellings as
// the same number of bytes, or refuses the same ones. The judge is
// luksFormat --luks2-keyslots-size, which cryptsetup parses with its size
// parser and luksDump reports back ("Keyslots area: N [bytes]"); every
// spelling here is a valid keyslots size when it parses at all.
func TestParseSizeAgainstCryptsetup(t *testing.T) {
	testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", []byte("units"))
	area := regexp.MustCompile(`Keyslots area:\s*(\d+) \[bytes\]`)
	for _, s := range []string{"1M", "1m", "1MiB", "1024k", "1024K", "1024KiB", "4096KB", "16384kB", "2M",
		"1mib", "1MIB", "1Mb", "4096B", "2048S", "2048s", "2048SiB", "2048SB", "2048Sx", "1.5M", "M", "1Z", "0x1000", "-1M"} {
		img := filepath.Join(dir, "c.img")
		os.Remove(img)
		if err := os.WriteFile(img, make([]byte, 20<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := cryptsetup(t, "luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
			"--key-file", pass, "--luks2-keyslots-size", s, img)
		var csVal uint64
		csOK := err == nil
		if csOK {
			out, err := cryptsetup(t, "luksDump", img)
			m := area.FindStringSubmatch(out)
			if err != nil || m == nil {
				t.Fatalf("%s: cryptsetup luksDump: %v\n%s", s, err, out)
			}
			csVal, _ = strconv.ParseUint(m[1], 10, 64)
		}
		got, perr := parseSize(s)
		switch {
		case csOK != (perr == nil):
			t.Errorf("%q: cryptsetup accepts: %v (%d), blkcrypt parses: %v (%d, %v)", s, csOK, csVal, perr == nil, got, perr)
		case csOK && got != csVal:
			t.Errorf("%q: cryptsetup reads %d bytes, blkcrypt %d", s, csVal, got)
		}
	}
}
