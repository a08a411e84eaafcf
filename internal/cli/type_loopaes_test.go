package cli

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// loop-AES through the command line, against aespipe (Debian package
// aespipe) run at test time; a missing aespipe fails the test.

func loopAESKeys(n int) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%x\n", randBytes(15))
	}
	return b.Bytes()
}

func aespipeRun(t *testing.T, keys, in []byte, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("aespipe")
	if err != nil {
		t.Fatal("aespipe not found: install the Debian package aespipe (loop-AES's userspace tool)")
	}
	kf := writeFile(t, t.TempDir(), "k", keys)
	cmd := exec.Command(bin, append(args, "-P", kf)...)
	cmd.Stdin = bytes.NewReader(in)
	var out, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("aespipe %v: %v %s", args, err, e.String())
	}
	return out.Bytes()
}

func TestLoopAESCommands(t *testing.T) {
	plain := make([]byte, 80*512)
	rand.Read(plain)
	dir := t.TempDir()
	for _, c := range []struct {
		keys         int
		mode         string
		bits         string
		offset, skip string
		extra        []string
	}{
		{1, "aes128", "", "0", "", nil},
		{64, "aes128", "128", "8", "", nil},
		{65, "aes256", "256", "16", "3", nil},
		{64, "aes192", "192", "0", "100", []string{"--hash", "sha512"}},
	} {
		name := fmt.Sprintf("%d keys %s", c.keys, c.mode)
		keys := loopAESKeys(c.keys)
		iv := c.skip
		if iv == "" {
			iv = c.offset
		}
		args := []string{"-e", c.mode, "-O", iv}
		if len(c.extra) > 0 {
			args = append(args, "-H", c.extra[1])
		}
		ct := aespipeRun(t, keys, plain, args...)
		var off int
		fmt.Sscan(c.offset, &off)
		img := writeFile(t, dir, "img", append(randBytes(off*512), ct...))
		kf := writeFile(t, dir, "keys", keys)
		cli := []string{"--type", "loopaes", "--key-file", kf, "--offset", c.offset}
		if c.bits != "" {
			cli = append(cli, "--key-size", c.bits)
		}
		if c.skip != "" {
			cli = append(cli, "--skip", c.skip)
		}
		cli = append(cli, c.extra...)
		code, out, e := run(t, nil, append([]string{"read", img}, cli...)...)
		if code != 0 || out != string(plain) {
			t.Errorf("%s: read: exit %d %s, %d bytes, match %v", name, code, e, len(out), out == string(plain))
		}
		// The key file from stdin.
		stdinArgs := append([]string{"read", img}, cli...)
		stdinArgs[5] = "-"
		if code, out, e := run(t, keys, stdinArgs...); code != 0 || out != string(plain) {
			t.Errorf("%s: read with --key-file -: exit %d %s", name, code, e)
		}
		// Write, and aespipe reads it back.
		patch := randBytes(3000)
		in := writeFile(t, dir, "in", patch)
		if code, _, e := run(t, nil, append([]string{"write", img, "-i", in, "--offset-bytes", "1000"}, cli...)...); code != 0 {
			t.Fatalf("%s: write: %s", name, e)
		}
		b, _ := os.ReadFile(img)
		want := bytes.Clone(plain)
		copy(want[1000:], patch)
		if got := aespipeRun(t, keys, b[off*512:], append(args, "-d")...); !bytes.Equal(got, want) {
			t.Errorf("%s: aespipe does not read back what blkcrypt wrote", name)
		}
		// Dump.
		code, out, e = run(t, nil, append([]string{"dump", img, "--dump-volume-key"}, cli...)...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("%d keys", c.keys)) || !strings.Contains(out, "MK dump:") {
			t.Errorf("%s: dump: exit %d %s\n%s", name, code, e, out)
		}
	}
	// Refusals: no key file, a gpg-encrypted one, a malformed one.
	img := writeFile(t, dir, "img2", make([]byte, 64*512))
	gpg := writeFile(t, dir, "gpg", []byte("-----BEGIN PGP MESSAGE-----\n\nhQIMA0xyz\n-----END PGP MESSAGE-----\n"))
	bad := writeFile(t, dir, "bad", []byte("one\ntwo\n"))
	for _, args := range [][]string{
		{"read", img, "--type", "loopaes"},
		{"read", img, "--type", "loopaes", "--key-file", gpg},
		{"read", img, "--type", "loopaes", "--key-file", bad},
		{"read", img, "--type", "loopaes", "--key-file", bad, "--cipher", "aes-cbc-plain"},
		{"dump", img, "--type", "loopaes", "--key-file", bad},
	} {
		code, _, e := run(t, nil, args...)
		if code != 1 || strings.Count(e, "\n") != 1 {
			t.Errorf("%v: exit %d %q, want 1 and one line", args[3:], code, e)
		}
		if strings.Contains(args[len(args)-1], "gpg") && !strings.Contains(e, "gpg --decrypt") {
			t.Errorf("gpg key file: %q", e)
		}
	}
}
