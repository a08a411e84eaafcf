package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteLength: write --length N writes exactly N bytes of the input
// (from a file or a stream) and leaves the rest of the volume as it was;
// --length longer than a regular input, or past the volume's end, is
// refused before anything is written; a stream that ends early has its
// bytes written and the message says how many.
func TestWriteLength(t *testing.T) {
	dir := t.TempDir()
	const volSize = 64 << 10
	img := writeFile(t, dir, "disk.img", randBytes(volSize))
	vkf := writeFile(t, dir, "vk", randBytes(64))
	vol := []string{img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512"}
	readVol := func() []byte {
		t.Helper()
		code, out, e := run(t, nil, append([]string{"read"}, vol...)...)
		if code != 0 || len(out) != volSize {
			t.Fatalf("read: exit %d, %d bytes: %s", code, len(out), e)
		}
		return []byte(out)
	}
	input := randBytes(8192)
	in := writeFile(t, dir, "in", input)

	for _, c := range []struct {
		name      string
		stdin     []byte
		args      []string
		code      int
		says      string
		at, n     int // the input's first n bytes must land at at
		unchanged bool
	}{
		{"file, --length 5", nil, []string{"-i", in, "--length", "5", "--offset-bytes", "1000"}, 0, "", 1000, 5, false},
		{"stream, --length 5", input, []string{"--length", "5", "--offset-bytes", "7"}, 0, "", 7, 5, false},
		{"--length 0", input, []string{"--length", "0"}, 0, "", 0, 0, true},
		{"--length whole file", nil, []string{"-i", in, "--length", "8192"}, 0, "", 0, 8192, false},
		{"--length longer than the file", nil, []string{"-i", in, "--length", "8193"}, 1, "more than the 8192-byte input; nothing was written", 0, 0, true},
		{"--length past the end, file", nil, []string{"-i", in, "--length", "4096", "--offset-bytes", "62000"}, 1, "does not fit the 65536-byte volume; nothing was written", 0, 0, true},
		{"--length past the end, stream", input, []string{"--length", "4096", "--offset-bytes", "62000"}, 1, "does not fit the 65536-byte volume; nothing was written", 0, 0, true},
		{"file past the end", nil, []string{"-i", in, "--offset-bytes", "60000"}, 1, "does not fit the 65536-byte volume; nothing was written", 0, 0, true},
		{"offset past the end", nil, []string{"-i", in, "--offset-bytes", "65537"}, 1, "past the end", 0, 0, true},
		{"negative --length", nil, []string{"-i", in, "--length", "-1"}, 1, "negative", 0, 0, true},
		{"stream shorter than --length", input[:100], []string{"--length", "200", "--offset-bytes", "3"}, 1,
			"input ended after 100 of the 200 bytes of --length; 100 bytes were written at offset 3 (up to 103)", 3, 100, false},
	} {
		before := readVol()
		raw := fileBytes(t, img)
		code, _, stderr := run(t, c.stdin, append(append([]string{"write"}, vol...), c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.says) || (code != 0 && strings.Count(stderr, "\n") != 1) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", c.name, code, stderr, c.code, c.says)
			continue
		}
		if c.unchanged {
			if !bytes.Equal(fileBytes(t, img), raw) {
				t.Errorf("%s: the image changed", c.name)
			}
			continue
		}
		want := append([]byte(nil), before...)
		copy(want[c.at:], input[:c.n])
		if got := readVol(); !bytes.Equal(got, want) {
			t.Errorf("%s: the volume does not hold exactly the input's first %d bytes at %d", c.name, c.n, c.at)
		}
	}
}

// TestWriteStreamTooLarge: a stream larger than the room left is written
// up to the volume's end, and the message says exactly how much was
// written (not just "does not fit", which suggests nothing was).
func TestWriteStreamTooLarge(t *testing.T) {
	dir := t.TempDir()
	const volSize = 64 << 10
	img := writeFile(t, dir, "disk.img", randBytes(volSize))
	vkf := writeFile(t, dir, "vk", randBytes(64))
	vol := []string{img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512"}
	input := randBytes(volSize + 5000)
	code, _, stderr := run(t, input, append([]string{"write", "--offset-bytes", "1000"}, vol...)...)
	want := "input does not fit: the volume ends at 65536 bytes; 64536 bytes were written at offset 1000 (up to 65536), the rest of the input was not"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	code, out, e := run(t, nil, append([]string{"read", "--offset-bytes", "1000"}, vol...)...)
	if code != 0 || out != string(input[:volSize-1000]) {
		t.Fatalf("read back: exit %d (%s): the volume does not hold the bytes the message says were written", code, e)
	}
}
