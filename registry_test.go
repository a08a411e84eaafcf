package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// registryCase is one format of the registry, on an image made by a tool
// we did not write: cryptsetup's fixtures, aespipe, OpenSSL.
type registryCase struct {
	path string
	o    blkcrypt.OpenOptions // the secret and the type's options, Type unset
	// check judges the opened volume; csDump is cryptsetup's dump command
	// (nil: cryptsetup has none), keyDump its --dump-volume-key form.
	check          func(t *testing.T, v *blkcrypt.Volume)
	csDump         []string
	keyDump        []string
	stdin          string
	fixDump        func(mine string) string // what cryptsetup 2.6.1 prints differently
	wantDumpFields []string                 // for the formats cryptsetup does not dump
	// noKernelCrypto judges the dumps where cryptsetup cannot: its
	// tcryptDump decrypts the header through the kernel's AF_ALG
	// skcipher interface, which a test machine may lack.
	noKernelCrypto func(t *testing.T, mine, mineKey string)
}

// fatSerial judges a TrueCrypt fixture: the FAT filesystem in it carries
// the serial DEAD-BABE (tcrypt-compat-test's check).
func fatSerial(t *testing.T, v *blkcrypt.Volume) {
	t.Helper()
	boot := make([]byte, 512)
	if _, err := v.ReadAt(boot, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(boot[:0x60], []byte{0xbe, 0xba, 0xad, 0xde}) || boot[510] != 0x55 || boot[511] != 0xaa {
		t.Errorf("no FAT boot sector with serial DEAD-BABE: % x", boot[:0x60])
	}
}

func registryCases(t *testing.T) map[string]*registryCase {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	pwFile := func(pw string) string {
		p := filepath.Join(dir, "pw-"+pw)
		if err := os.WriteFile(p, []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	luks1 := filepath.Join(lukstest.Extract(t, "compatimage.img.xz"), "compatimage.img")
	luks2 := filepath.Join(lukstest.Extract(t, "compatimage2.img.xz"), "compatimage2.img")
	bitlk := filepath.Join(lukstest.Extract(t, "bitlk-images.tar.xz"), "bitlk-images", "bitlk-aes-xts-128.img")
	tc := filepath.Join(lukstest.Extract(t, "tcrypt-images.tar.xz"), "tcrypt-images", "tc_5-ripemd160-xts-aes")
	fv := filepath.Join(lukstest.Extract(t, "fvault2-images.tar.xz"), "fvault2-images", "small")
	pass := func(p string) blkcrypt.OpenOptions { return blkcrypt.OpenOptions{Passphrase: []byte(p)} }
	readsAll := func(t *testing.T, v *blkcrypt.Volume) {
		if _, err := io.Copy(io.Discard, io.NewSectionReader(v, 0, v.Size())); err != nil {
			t.Error(err)
		}
	}
	c := map[string]*registryCase{
		"luks1": {path: luks1, o: pass("compatkey"), check: readsAll,
			csDump: []string{cs, "luksDump", luks1}, keyDump: []string{cs, "luksDump", "--dump-volume-key", "-q", "--key-file", pwFile("compatkey"), luks1}},
		"luks2": {path: luks2, o: pass("compatkey"), check: readsAll,
			csDump: []string{cs, "luksDump", luks2}, keyDump: []string{cs, "luksDump", "--dump-volume-key", "-q", "--key-file", pwFile("compatkey"), luks2}},
		"bitlk": {path: bitlk, o: pass("anaconda"),
			check: func(t *testing.T, v *blkcrypt.Volume) {
				// SHA-256 of the decrypted volume, from images.conf.
				if got := sum(t, v); got != "674e3a976927fd62f3fc26df2c695cac75b8d364e3b45393717efa971f16db0f" {
					t.Errorf("decrypted SHA-256 %s", got)
				}
			},
			csDump: []string{cs, "bitlkDump", bitlk}, keyDump: []string{cs, "bitlkDump", "--dump-volume-key", "-q", "--key-file", pwFile("anaconda"), bitlk},
			// cryptsetup 2.6.1 prints "128 bits" where we (and newer
			// versions) print "128 [bits]".
			fixDump: func(s string) string { return strings.Replace(s, " [bits]\n", " bits\n", 1) }},
		"fvault2": {path: fv, o: pass("heslo123"), check: readsAll,
			csDump: []string{cs, "fvault2Dump", fv}, keyDump: []string{cs, "fvault2Dump", "--dump-volume-key", "-q", "--key-file", pwFile("heslo123"), fv}},
		"tcrypt": {path: tc, o: blkcrypt.OpenOptions{Passphrase: []byte("aaaaaaaaaaaa"), TCRYPT: blkcrypt.TCRYPTOptions{Hash: "ripemd160", Cipher: "aes", NoVeraCrypt: true}},
			check:  fatSerial,
			csDump: []string{cs, "tcryptDump", "--disable-veracrypt", "-h", "ripemd160", tc}, keyDump: []string{cs, "tcryptDump", "--disable-veracrypt", "-h", "ripemd160", "--dump-volume-key", "-q", tc},
			stdin: "aaaaaaaaaaaa\n", noKernelCrypto: tcryptDumpJudge(tc),
			// We print tcryptDump as cryptsetup 2.7 does; 2.6.1 has no
			// Flags, sizes or PBKDF line and no units.
			fixDump: func(s string) string {
				for _, l := range []string{"Flags:       \t0x0\n", "Volume size:\t36864 [bytes]\n", "PBKDF:\t\tPBKDF2\n"} {
					s = strings.Replace(s, l, "", 1)
				}
				return strings.ReplaceAll(s, " [bytes]\n", "\n")
			}},
	}
	c["plain"] = plainCase(t, dir)
	c["loopaes"] = loopAESCase(t, dir)
	c["integrity"] = integrityCase(t, dir) // registry_integrity_test.go
	return c
}

// tcryptDumpJudge judges tcryptDump's output for the fixture
// tc_5-ripemd160-xts-aes without cryptsetup: the fields its name and
// tcrypt-compat-test state, and the volume key and payload offset of the
// key dump, which as a plain aes-xts-plain64 mapping (IV offset = payload
// offset, as TCRYPT_get_iv_offset) must show the fixture's filesystem.
func tcryptDumpJudge(img string) func(t *testing.T, mine, mineKey string) {
	return func(t *testing.T, mine, mineKey string) {
		for _, f := range []string{"TCRYPT header information for " + img + "\n", "PBKDF2 hash:\tripemd160\n",
			"Cipher chain:\taes\n", "Cipher mode:\txts-plain64\n", "MK bits:       \t512\n"} {
			if !strings.Contains(mine, f) {
				t.Errorf("tcryptDump lacks %q:\n%s", f, mine)
			}
		}
		var off uint64
		var key []byte
		for _, l := range strings.Split(mineKey, "\n") {
			if v, ok := strings.CutPrefix(l, "Payload offset:\t"); ok {
				fmt.Sscan(v, &off)
			}
			if v, ok := strings.CutPrefix(l, "MK dump:\t"); ok {
				l = v
			} else if !strings.HasPrefix(l, "\t\t") {
				continue
			}
			b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(l), " ", ""))
			if err != nil {
				t.Fatalf("MK dump line %q: %v", l, err)
			}
			key = append(key, b...)
		}
		if len(key) != 64 || off == 0 {
			t.Fatalf("key dump: %d key bytes, payload offset %d:\n%s", len(key), off, mineKey)
		}
		v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Type: "plain", VolumeKey: key, ReadOnly: true,
			Plain: blkcrypt.PlainOptions{Cipher: "aes-xts-plain64", KeySize: 64, Offset: off, Skip: off}})
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		fatSerial(t, v)
	}
}

// plainCase: random ciphertext that OpenSSL decrypts sector by sector as
// dm-crypt's aes-cbc-plain does (IV = the sector number, 32-bit little
// endian); the plain volume must read the same.
func plainCase(t *testing.T, dir string) *registryCase {
	openssl := testenv.Need(t, "openssl", "openssl")
	const sectors = 8
	ct := make([]byte, sectors*512)
	key := make([]byte, 16)
	rand.Read(ct)
	rand.Read(key)
	img := filepath.Join(dir, "plain.img")
	if err := os.WriteFile(img, ct, 0o600); err != nil {
		t.Fatal(err)
	}
	var want []byte
	for s := 0; s < sectors; s++ {
		iv := make([]byte, 16)
		binary.LittleEndian.PutUint32(iv, uint32(s))
		cmd := exec.Command(openssl, "enc", "-d", "-aes-128-cbc", "-nopad", "-K", hex.EncodeToString(key), "-iv", hex.EncodeToString(iv))
		cmd.Stdin = bytes.NewReader(ct[s*512 : (s+1)*512])
		out, err := cmd.Output()
		if err != nil || len(out) != 512 {
			t.Fatalf("openssl: %v (%d bytes)", err, len(out))
		}
		want = append(want, out...)
	}
	return &registryCase{path: img,
		o: blkcrypt.OpenOptions{VolumeKey: key, Plain: blkcrypt.PlainOptions{Cipher: "aes-cbc-plain", KeySize: 16}},
		check: func(t *testing.T, v *blkcrypt.Volume) {
			got := make([]byte, len(want))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
				t.Errorf("plain volume does not read what OpenSSL decrypts (%v)", err)
			}
		}}
}

// loopAESCase: data aespipe (loop-AES's own tool) encrypted in multi-key-v3
// mode with 65 key lines, 8 sectors into the image; the loop-AES volume
// must read it back.
func loopAESCase(t *testing.T, dir string) *registryCase {
	aespipe := testenv.Need(t, "aespipe", "aespipe")
	var keys bytes.Buffer
	for i := 0; i < 65; i++ {
		b := make([]byte, 15)
		rand.Read(b)
		fmt.Fprintf(&keys, "%x\n", b)
	}
	kf := filepath.Join(dir, "loopaes.keys")
	if err := os.WriteFile(kf, keys.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 32*512)
	rand.Read(data)
	cmd := exec.Command(aespipe, "-e", "aes128", "-O", "8", "-P", kf)
	cmd.Stdin = bytes.NewReader(data)
	ct, err := cmd.Output()
	if err != nil || len(ct) != len(data) {
		t.Fatalf("aespipe: %v (%d bytes)", err, len(ct))
	}
	img := filepath.Join(dir, "loopaes.img")
	if err := os.WriteFile(img, append(make([]byte, 8*512), ct...), 0o600); err != nil {
		t.Fatal(err)
	}
	return &registryCase{path: img,
		o: blkcrypt.OpenOptions{KeyFiles: [][]byte{keys.Bytes()}, LoopAES: blkcrypt.LoopAESOptions{Offset: 8}},
		check: func(t *testing.T, v *blkcrypt.Volume) {
			got := make([]byte, len(data))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) || v.Size() != int64(len(data)) {
				t.Errorf("loop-AES volume (%d bytes) does not read what aespipe encrypted (%v)", v.Size(), err)
			}
		},
		wantDumpFields: []string{"Key file:      \t65 keys (multi-key-v3)\n", "Cipher:        \taes:64-cbc-lmk\n",
			"Key hash:      \tsha256\n", "MK bits:       \t8320\n", "Offset:        \t8 [512-byte sectors]\n", "Skip:          \t8 [512-byte sectors]\n",
			"Size:          \t32 [512-byte sectors]\n"}}
}

// TestRegistry: every format of the registry is listed once with its
// policy, detected (by signature only: plain, loop-AES and TCRYPT are
// ErrNoHeader) and opened through Open with the type detected or named,
// judged by a tool we did not write; its dump is cryptsetup 2.6.1's
// (luksDump, bitlkDump, fvault2Dump, tcryptDump, with and without
// --dump-volume-key) byte for byte.
func TestRegistry(t *testing.T) {
	ctx := context.Background()
	want := map[string][2]bool{ // signature, read-only by default
		"luks1": {true, false}, "luks2": {true, false}, "plain": {false, false}, "loopaes": {false, false},
		"tcrypt": {false, true}, "bitlk": {true, true}, "fvault2": {true, true}, "integrity": {true, false},
	}
	types := blkcrypt.VolumeTypes()
	if len(types) != len(want) {
		t.Errorf("%d types listed, want %d: %v", len(types), len(want), types)
	}
	cases := registryCases(t)
	for _, vt := range types {
		w, ok := want[vt.Name]
		if !ok || vt.Signature != w[0] || vt.ReadOnlyByDefault != w[1] || vt.Description == "" {
			t.Errorf("%+v: want signature %v, read-only %v", vt, w[0], w[1])
		}
		if got, ok := blkcrypt.LookupVolumeType(vt.Name); !ok || got != vt {
			t.Errorf("LookupVolumeType(%q) = %+v, %v", vt.Name, got, ok)
		}
		c := cases[vt.Name]
		if c == nil {
			t.Errorf("%s: no test case", vt.Name)
			continue
		}
		t.Run(vt.Name, func(t *testing.T) {
			f, err := os.Open(c.path)
			if err != nil {
				t.Fatal(err)
			}
			typ, derr := blkcrypt.DetectType(ctx, f)
			f.Close()
			if vt.Signature && (derr != nil || typ != vt.Name) {
				t.Fatalf("DetectType = %q, %v", typ, derr)
			}
			if !vt.Signature && (!errors.Is(derr, blkcrypt.ErrNoHeader) || typ != "") {
				t.Fatalf("DetectType = %q, %v; want ErrNoHeader", typ, derr)
			}
			o := c.o
			o.ReadOnly = true
			if !vt.Signature {
				o.Type = vt.Name
			}
			v, err := blkcrypt.Open(ctx, c.path, o)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if v.Type() != vt.Name || !v.ReadOnly() {
				t.Errorf("opened as %q, read-only %v", v.Type(), v.ReadOnly())
			}
			c.check(t, v)
			v.Close()

			// A writable open without ReadWrite is read-only for the
			// formats whose policy says so.
			if vt.ReadOnlyByDefault {
				o.ReadOnly = false
				if v, err := blkcrypt.Open(ctx, c.path, o); err != nil || !v.ReadOnly() {
					t.Errorf("zero ReadOnly: %v, read-only %v", err, err == nil && v.ReadOnly())
				} else {
					v.Close()
				}
			}

			dump := func(withKey bool) string {
				var b bytes.Buffer
				err := blkcrypt.DumpVolume(ctx, c.path, &b, blkcrypt.DumpVolumeOptions{Open: o, VolumeKey: withKey})
				if !vt.Dump {
					if !errors.Is(err, blkcrypt.ErrUnsupported) {
						t.Errorf("dump of %s: %v, want ErrUnsupported", vt.Name, err)
					}
					return ""
				}
				if err != nil {
					t.Fatalf("DumpVolume (volume key %v): %v", withKey, err)
				}
				return b.String()
			}
			mine, mineKey := dump(false), dump(true)
			if c.csDump == nil {
				for _, f := range c.wantDumpFields {
					if !strings.Contains(mine, f) {
						t.Errorf("dump lacks %q:\n%s", f, mine)
					}
				}
				if len(c.wantDumpFields) > 0 && !strings.Contains(mineKey, "MK dump:\t") {
					t.Errorf("dump with the volume key lacks it:\n%s", mineKey)
				}
				return
			}
			for _, d := range []struct {
				mine string
				cmd  []string
			}{{mine, c.csDump}, {mineKey, c.keyDump}} {
				cmd := exec.Command(d.cmd[0], d.cmd[1:]...)
				cmd.Stdin = strings.NewReader(c.stdin)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				ref, err := cmd.Output()
				if err != nil && c.noKernelCrypto != nil && strings.Contains(stderr.String(), "kernel crypto interface not available") {
					t.Logf("cryptsetup %s cannot run here (%s): judging the dump by the fixture instead", d.cmd[1], strings.TrimSpace(stderr.String()))
					c.noKernelCrypto(t, mine, mineKey)
					return
				}
				if err != nil {
					t.Fatalf("%v: %v %s", d.cmd[1:], err, stderr.String())
				}
				got := d.mine
				if c.fixDump != nil {
					got = c.fixDump(got)
				}
				if got != string(ref) {
					t.Errorf("dump differs from cryptsetup %v:\n%s--- cryptsetup:\n%s", d.cmd[1:], got, ref)
				}
			}
		})
	}
}

// TestDetectPolicy: the one detection policy. A device without a
// signature is ErrNoHeader whatever secret comes with it, at once: no
// TrueCrypt search runs (with a passphrase a search would take seconds and
// end in ErrWrongPassphrase); "luks" opens either version; Prepare is
// called once with the type, before any key is derived, and its secrets
// are the ones used.
func TestDetectPolicy(t *testing.T) {
	ctx := context.Background()
	zeros := bytes.NewReader(make([]byte, 4<<20))
	if typ, err := blkcrypt.DetectType(ctx, zeros); typ != "" || !errors.Is(err, blkcrypt.ErrNoHeader) {
		t.Errorf("zeros: %q, %v", typ, err)
	}
	calls := 0
	_, err := blkcrypt.OpenDevice(ctx, zeros, blkcrypt.OpenOptions{Passphrase: []byte("aaaaaaaaaaaa"),
		Prepare: func(string, *blkcrypt.OpenOptions) error { calls++; return nil }})
	if !errors.Is(err, blkcrypt.ErrNoHeader) || errors.Is(err, blkcrypt.ErrWrongPassphrase) || calls != 0 {
		t.Errorf("zeros with a passphrase: %v (Prepare called %d times), want ErrNoHeader from detection", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := blkcrypt.DetectType(cctx, zeros); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}

	img := fastFormat(t, "luks2")
	for _, typ := range []string{"", "luks", "luks2"} {
		var got []string
		v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Type: typ, Prepare: func(typ string, o *blkcrypt.OpenOptions) error {
			got = append(got, typ)
			o.Passphrase = []byte("pw")
			o.Type = "plain" // ignored: the type is settled
			return nil
		}})
		if err != nil {
			t.Fatalf("Type %q: %v", typ, err)
		}
		want := typ
		if want == "" {
			want = "luks2"
		}
		if len(got) != 1 || got[0] != want || v.Type() != "luks2" {
			t.Errorf("Type %q: Prepare saw %v, volume is %q", typ, got, v.Type())
		}
		v.Close()
	}
	stop := errors.New("no secret today")
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Prepare: func(string, *blkcrypt.OpenOptions) error { return stop }}); !errors.Is(err, stop) {
		t.Errorf("Prepare's error: %v", err)
	}
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Type: "luks1", Passphrase: []byte("pw")}); !errors.Is(err, blkcrypt.ErrNotLUKS) {
		t.Errorf("luks1 named on a LUKS2 device: %v", err)
	}
	if _, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Type: "truecrypt", Passphrase: []byte("pw")}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("unknown type: %v", err)
	}
	if _, ok := blkcrypt.LookupVolumeType("luks"); ok {
		t.Error(`"luks" has an entry of its own`)
	}
}

// FuzzDetectType: any head detects without a panic, as a registered type
// with a signature or as ErrNoHeader.
func FuzzDetectType(f *testing.F) {
	f.Add([]byte("LUKS\xba\xbe\x00\x01"))
	f.Add([]byte("LUKS\xba\xbe\x00\x02"))
	f.Add(append(make([]byte, 3), []byte("-FVE-FS-")...))
	f.Add(make([]byte, 512))
	f.Fuzz(func(t *testing.T, head []byte) {
		typ, err := blkcrypt.DetectType(context.Background(), bytes.NewReader(head))
		if err != nil {
			if typ != "" || !(errors.Is(err, blkcrypt.ErrNoHeader) || errors.Is(err, blkcrypt.ErrInvalidOptions)) {
				t.Fatalf("%q, %v", typ, err)
			}
			return
		}
		vt, ok := blkcrypt.LookupVolumeType(typ)
		if !ok || !vt.Signature {
			t.Fatalf("detected %q, not a type with a signature", typ)
		}
	})
}

// TestDumpVolumeDevice: the dump of a device in memory is the dump of the
// file, and cryptsetup's luksDump of it.
func TestDumpVolumeDevice(t *testing.T) {
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	ctx := context.Background()
	img := fastFormat(t, "luks2")
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	var mem, file bytes.Buffer
	if err := blkcrypt.DumpVolumeDevice(ctx, bytes.NewReader(raw), &mem, blkcrypt.DumpVolumeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := blkcrypt.DumpVolume(ctx, img, &file, blkcrypt.DumpVolumeOptions{}); err != nil {
		t.Fatal(err)
	}
	ref, err := exec.Command(cs, "luksDump", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	if mem.String() != file.String() || file.String() != string(ref) {
		t.Errorf("memory:\n%s--- file:\n%s--- cryptsetup:\n%s", mem.String(), file.String(), ref)
	}
	if err := blkcrypt.DumpVolumeDevice(ctx, bytes.NewReader(make([]byte, 1<<20)), io.Discard, blkcrypt.DumpVolumeOptions{}); !errors.Is(err, blkcrypt.ErrNoHeader) {
		t.Errorf("zeros: %v, want ErrNoHeader", err)
	}
}

func ExampleVolumeTypes() {
	for _, t := range blkcrypt.VolumeTypes() {
		fmt.Printf("%-8s %-20s detected: %-5v read-only: %v\n", t.Name, t.Description, t.Signature, t.ReadOnlyByDefault)
	}
	// Output:
	// luks1    LUKS1                detected: true  read-only: false
	// luks2    LUKS2                detected: true  read-only: false
	// plain    plain dm-crypt       detected: false read-only: false
	// loopaes  loop-AES             detected: false read-only: false
	// tcrypt   TrueCrypt/VeraCrypt  detected: false read-only: true
	// bitlk    BitLocker            detected: true  read-only: true
	// fvault2  FileVault 2          detected: true  read-only: true
	// integrity dm-integrity         detected: true  read-only: false
}
