package keyinput

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// pipeOnly hides a reader's Seek, as a pipe or a terminal has none.
type pipeOnly struct{ r io.Reader }

func (p pipeOnly) Read(b []byte) (int, error) { return p.r.Read(b) }

// TestRequireInput: with RequireInput, a source that gives no byte at all
// is ErrNothingToRead, while "\n" (an empty passphrase line) and one byte
// are secrets; without it, empty input stays an empty secret.
func TestRequireInput(t *testing.T) {
	req := Options{RequireInput: true}
	for _, c := range []struct {
		name    string
		in      string
		o       Options
		keyFile bool
		want    string
		err     error
	}{
		{"empty passphrase stream", "", req, false, "", ErrNothingToRead},
		{"newline only", "\n", req, false, "", nil},
		{"one byte", "x", req, false, "x", nil},
		{"empty key stream", "", req, true, "", ErrNothingToRead},
		{"key stream newline", "\n", req, true, "\n", nil},
		{"offset eats everything", "ab", Options{Offset: 2, RequireInput: true}, true, "", ErrNothingToRead},
		{"offset past a stream's end", "ab", Options{Offset: 3, RequireInput: true}, false, "", ErrNothingToRead},
		{"empty without RequireInput", "", Options{}, true, "", nil},
		{"empty passphrase without RequireInput", "", Options{}, false, "", nil},
	} {
		var got []byte
		var err error
		r := pipeOnly{bytes.NewReader([]byte(c.in))}
		if c.keyFile {
			got, err = ReadKeyFile(r, c.o)
		} else {
			got, err = ReadPassphrase(r, c.o)
		}
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: err %v, want %v", c.name, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// TestOffsetPastEnd: on a regular file an offset past the end is a key-file
// error (cryptsetup: "Cannot seek to requested keyfile offset"), an offset
// exactly at the end an empty key.
func TestOffsetPastEnd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(p, []byte("pass"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off     int64
		want    string
		wantErr bool
	}{{0, "pass", false}, {3, "s", false}, {4, "", false}, {5, "", true}} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadKeyFile(f, Options{Offset: c.off})
		f.Close()
		if c.wantErr {
			if !errors.Is(err, ErrKeyFile) || errors.Is(err, ErrNothingToRead) {
				t.Errorf("offset %d: err %v, want a key-file error", c.off, err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("offset %d: got %q, %v; want %q", c.off, got, err, c.want)
		}
	}
}
