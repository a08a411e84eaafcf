package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/luks1"
)

// TestDetectionAgrees: the library (DetectType, Open with the type
// detected) and the command line (`read` without --type) decide alike on
// the same devices, because both go through the registry's one detection
// policy: cryptsetup's fixtures of every format with a signature open in
// both; a TrueCrypt image, zeros and a device too short for any header,
// each with a passphrase, are "no header" in both at once (the library
// used to search them for a TrueCrypt header, where the command line
// refused); a LUKS1 header marked by a reencryption is refused by both,
// naming its log.
func TestDetectionAgrees(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	luks1Img := filepath.Join(unpack(t, "compatimage.img.xz"), "compatimage.img")
	marked, err := os.ReadFile(luks1Img)
	if err != nil {
		t.Fatal(err)
	}
	copy(marked, luks1.NoMagic[:])
	cases := []struct {
		name, path, pass string
		typ              string // what both detect; "" for none
		want             error  // the library's error, nil when it opens
		code             int    // the command line's exit code
		msg              string // in its error
	}{
		{"luks1", luks1Img, "compatkey", "luks1", nil, 0, ""},
		{"luks2", filepath.Join(unpack(t, "compatimage2.img.xz"), "compatimage2.img"), "compatkey", "luks2", nil, 0, ""},
		{"bitlk", filepath.Join(unpack(t, "bitlk-images.tar.xz"), "bitlk-images", "bitlk-aes-xts-128.img"), "anaconda", "bitlk", nil, 0, ""},
		{"fvault2", filepath.Join(unpack(t, "fvault2-images.tar.xz"), "fvault2-images", "small"), "heslo123", "fvault2", nil, 0, ""},
		{"truecrypt, its passphrase", filepath.Join(tcryptDir(t), "tc_5-ripemd160-xts-aes"), tcPass, "", blkcrypt.ErrNoHeader, 4, "not a valid LUKS device"},
		{"zeros, a passphrase", writeFile(t, dir, "zeros", make([]byte, 4<<20)), "aaaaaaaaaaaa", "", blkcrypt.ErrNoHeader, 4, "not a valid LUKS device"},
		{"100 bytes, a passphrase", writeFile(t, dir, "short", make([]byte, 100)), "x", "", blkcrypt.ErrNoHeader, 4, "not a valid LUKS device"},
		{"LUKS1 being reencrypted", writeFile(t, dir, "marked", marked), "compatkey", "", luks1.ErrReencryptInProgress, 1, ".log"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := os.Open(c.path)
			if err != nil {
				t.Fatal(err)
			}
			typ, derr := blkcrypt.DetectType(ctx, f)
			f.Close()
			if typ != c.typ || (c.typ == "") != (derr != nil) {
				t.Errorf("DetectType = %q, %v; want %q", typ, derr, c.typ)
			}
			if cli := detectTypeContext(context.Background(), c.path); cli != c.typ {
				t.Errorf("the command line detects %q, want %q", cli, c.typ)
			}
			start := time.Now()
			v, err := blkcrypt.Open(ctx, c.path, blkcrypt.OpenOptions{Passphrase: []byte(c.pass), ReadOnly: true})
			took := time.Since(start)
			if err == nil {
				if v.Type() != c.typ {
					t.Errorf("Open: type %q, want %q", v.Type(), c.typ)
				}
				v.Close()
			}
			if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("Open: %v, want %v", err, c.want)
			}
			if c.want != nil && (errors.Is(err, blkcrypt.ErrWrongPassphrase) || took > 2*time.Second) {
				t.Errorf("Open: %v after %v: a header search ran", err, took)
			}
			start = time.Now()
			code, _, stderr := run(t, []byte(c.pass+"\n"), "read", c.path, "--length", "512", "-o", filepath.Join(t.TempDir(), "out"))
			took = time.Since(start)
			if code != c.code || !strings.Contains(stderr, c.msg) {
				t.Errorf("read: exit %d %q, want %d mentioning %q", code, stderr, c.code, c.msg)
			}
			if c.want != nil && took > 2*time.Second {
				t.Errorf("read: exit %d after %v: a header search ran", code, took)
			}
		})
	}
}

// TestTypeBindingsCoverRegistry: every format of the library's registry
// has its flag binding on the command line (and "luks", either version),
// and every format the registry dumps, LUKS aside (runDump's own path
// through the LUKS handle), has its dumper; nothing else does.
func TestTypeBindingsCoverRegistry(t *testing.T) {
	want := map[string]bool{"luks": true}
	for _, vt := range blkcrypt.VolumeTypes() {
		want[vt.Name] = true
		if _, ok := typeBindings[vt.Name]; !ok {
			t.Errorf("--type %s has no flag binding", vt.Name)
		}
		_, dumps := typeDumpers[vt.Name]
		if isLUKS := strings.HasPrefix(vt.Name, "luks"); dumps != (vt.Dump && !isLUKS) {
			t.Errorf("%s: dumper %v, registry dump %v", vt.Name, dumps, vt.Dump)
		}
	}
	for name := range typeBindings {
		if !want[name] {
			t.Errorf("binding for %q, which the registry does not know", name)
		}
	}
	if err := checkType("truecrypt"); err == nil {
		t.Error("--type truecrypt accepted")
	}
}
