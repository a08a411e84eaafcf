package capi

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteProc: the listing has /proc/crypto's fields for the driver
// asked for, and an unknown name writes nothing.
func TestWriteProc(t *testing.T) {
	var b bytes.Buffer
	if err := WriteProc(&b, []string{"sha256"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"name         : sha256\n", "digestsize   : 32\n", "selftest     : passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteProc lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteProc(&b, []string{"cbc(nosuch)"}); err == nil || b.Len() != 0 {
		t.Errorf("unknown name: %v, wrote %d bytes", err, b.Len())
	}
}
