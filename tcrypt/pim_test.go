package tcrypt

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
)

// TestParsePIM: cryptsetup 2.6.1's answers to --veracrypt-query-pim
// (tools/cryptsetup.c, tcrypt_load: strtoull, then "Invalid PIM value:
// parse error", ": 0" and ": outside of range").
func TestParsePIM(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint32
		err  error
	}{
		{"1", 1, nil}, {" 485\n", 485, nil}, {"4294967295", 1<<32 - 1, nil},
		{"4294967296", 0, ErrPIMRange}, {"99999999999999999999999", 0, ErrPIMRange},
		{"0", 0, ErrPIMZero}, {"", 0, ErrPIMSyntax}, {"\n", 0, ErrPIMSyntax},
		{"12a", 0, ErrPIMSyntax}, {"-1", 0, ErrPIMSyntax}, {"0x10", 0, ErrPIMSyntax},
	} {
		got, err := ParsePIM([]byte(c.in))
		if got != c.want || err != c.err {
			t.Errorf("ParsePIM(%q) = %d, %v; want %d, %v", c.in, got, err, c.want, c.err)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !errors.Is(err, volspec.ErrInvalidOptions)) {
			t.Errorf("ParsePIM(%q): %v is not ErrInvalid and ErrInvalidOptions", c.in, err)
		}
	}
}

// TestReadKeyfiles: the key files in order, each its first MiB; a missing
// one fails the whole list.
func TestReadKeyfiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("first"), 0o600)
	os.WriteFile(b, make([]byte, MaxKeyfileBytes+10), 0o600)
	got, err := ReadKeyfiles([]string{a, b})
	if err != nil || len(got) != 2 || string(got[0]) != "first" || len(got[1]) != MaxKeyfileBytes {
		t.Fatalf("ReadKeyfiles = %d files, %v", len(got), err)
	}
	if got, err := ReadKeyfiles([]string{a, filepath.Join(dir, "missing")}); err == nil || got != nil {
		t.Fatalf("with a missing file: %v, %v", got, err)
	}
}
