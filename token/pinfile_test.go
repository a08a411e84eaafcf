package token

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReadPINFile: the whole file with one trailing newline dropped, as
// systemd-cryptsetup reads --tpm2-pin-file's file and p11-kit a
// pin-source; a file longer than 1024 bytes (a wrong path, not a PIN) and
// a missing one are errors.
func TestReadPINFile(t *testing.T) {
	dir := t.TempDir()
	long := bytes.Repeat([]byte("7"), maxPINLen)
	for _, c := range []struct {
		content, want []byte
		ok            bool
	}{
		{[]byte("1234\n"), []byte("1234"), true},
		{[]byte("1234"), []byte("1234"), true},
		{[]byte("12\n\n"), []byte("12\n"), true},
		{[]byte(""), []byte{}, true},
		{append(long, '\n'), long, true},
		{append(long, '7'), nil, false},
	} {
		p := filepath.Join(dir, "pin")
		if err := os.WriteFile(p, c.content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPINFile(p)
		if (err == nil) != c.ok || c.ok && !bytes.Equal(got, c.want) {
			t.Errorf("ReadPINFile(%d bytes) = %q, %v", len(c.content), got, err)
		}
	}
	if _, err := ReadPINFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file read")
	}
}
