package blkcrypt_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/keyslot"
)

// metaFixture is one volume under test: the handle, and the image file
// cryptsetup reads (the memory device is copied there before each look).
type metaFixture struct {
	t    *testing.T
	h    *blkcrypt.LUKS
	img  string
	mem  *memDevice
	typ  string
	ctx  context.Context
	fast blkcrypt.PBKDFOptions
}

// newMetaFixture formats typ with passphrase "pw" in keyslot 0, in a file
// or in memory, and opens the handle on it.
func newMetaFixture(t *testing.T, typ, where string) *metaFixture {
	return newMetaFixtureSector(t, typ, where, 0)
}

// newMetaFixtureSector is newMetaFixture with a data sector size (0: the
// default, 4096 for LUKS2 on these images).
func newMetaFixtureSector(t *testing.T, typ, where string, sectorSize int) *metaFixture {
	t.Helper()
	f := &metaFixture{t: t, typ: typ, ctx: context.Background(), img: filepath.Join(t.TempDir(), "v.img"),
		fast: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}
	var err error
	if where == "file" {
		if err = blkcrypt.Format(f.ctx, f.img, []byte("pw"), blkcrypt.FormatOptions{Type: typ, Size: 20 << 20, PBKDF: f.fast, SectorSize: sectorSize}); err != nil {
			t.Fatal(err)
		}
		f.h, err = blkcrypt.OpenLUKS(f.ctx, f.img, blkcrypt.LUKSOptions{})
	} else {
		f.mem = &memDevice{b: make([]byte, 20<<20)}
		if err = blkcrypt.FormatDevice(f.ctx, f.mem, []byte("pw"), blkcrypt.FormatOptions{Type: typ, PBKDF: f.fast, SectorSize: sectorSize}); err != nil {
			t.Fatal(err)
		}
		f.h, err = blkcrypt.OpenLUKSDevice(f.ctx, f.mem, blkcrypt.LUKSOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.h.Close() })
	f.sync()
	return f
}

// sync puts the memory device's bytes where cryptsetup reads them.
func (f *metaFixture) sync() {
	f.t.Helper()
	if f.mem != nil {
		if err := os.WriteFile(f.img, f.mem.b, 0o600); err != nil {
			f.t.Fatal(err)
		}
	}
}

// bytes is the device's content now.
func (f *metaFixture) bytes() []byte {
	f.t.Helper()
	if f.mem != nil {
		return bytes.Clone(f.mem.b)
	}
	b, err := os.ReadFile(f.img)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// cs runs cryptsetup, fails the test when it fails, and returns stdout.
func cs(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := csErr(t, stdin, args...)
	if err != nil {
		t.Fatalf("cryptsetup %v: %v\n%s", args, err, out)
	}
	return out
}

func csErr(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	bin := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String() + stderr.String(), err
	}
	return out.String(), nil
}

var metaCases = []struct{ typ, where string }{{"luks1", "file"}, {"luks1", "memory"}, {"luks2", "file"}, {"luks2", "memory"}}

// TestLUKSDumpLikeCryptsetup: Dump's text is cryptsetup luksDump's, byte
// for byte, after keyslots, a priority, tokens and a label are added;
// DumpJSONMetadata is --dump-json-metadata's (LUKS2; LUKS1 refuses it);
// VolumeKey and the volume key dump give the key cryptsetup's
// --dump-volume-key prints.
func TestLUKSDumpLikeCryptsetup(t *testing.T) {
	for _, c := range metaCases {
		t.Run(c.typ+"/"+c.where, func(t *testing.T) {
			f := newMetaFixture(t, c.typ, c.where)
			if _, err := f.h.AddKey(f.ctx, []byte("pw"), []byte("one"), blkcrypt.KeyOptions{PBKDF: f.fast, NewKeyslot: blkcrypt.Slot(3)}); err != nil {
				t.Fatal(err)
			}
			if c.typ == "luks2" {
				if err := f.h.SetPriority(f.ctx, 3, keyslot.PriorityPrefer); err != nil {
					t.Fatal(err)
				}
				if err := f.h.SetLabel(f.ctx, "a label", "sub"); err != nil {
					t.Fatal(err)
				}
				if _, err := f.h.AddKeyringToken(f.ctx, "user:k", blkcrypt.TokenOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			f.sync()
			var got bytes.Buffer
			if err := f.h.Dump(f.ctx, &got, blkcrypt.DumpOptions{Device: f.img}); err != nil {
				t.Fatal(err)
			}
			if want := cs(t, "", "luksDump", f.img); got.String() != want {
				t.Errorf("Dump differs from cryptsetup luksDump: %s", firstDiff(got.String(), want))
			}
			got.Reset()
			err := f.h.Dump(f.ctx, &got, blkcrypt.DumpOptions{Format: blkcrypt.DumpJSONMetadata})
			if c.typ == "luks1" {
				if !errors.Is(err, blkcrypt.ErrUnsupported) || got.Len() != 0 {
					t.Errorf("LUKS1 JSON metadata: %v, %d bytes; want ErrUnsupported and nothing", err, got.Len())
				}
			} else if err != nil {
				t.Fatal(err)
			} else if want := cs(t, "", "luksDump", "--dump-json-metadata", f.img); strings.TrimSpace(got.String()) != strings.TrimSpace(want) {
				t.Errorf("JSON metadata differs from cryptsetup's: %s", firstDiff(got.String(), want))
			}
			key, slot, err := f.h.VolumeKey(f.ctx, []byte("one"), blkcrypt.KeyOptions{})
			if err != nil || slot != 3 {
				t.Fatalf("VolumeKey: keyslot %d, %v", slot, err)
			}
			got.Reset()
			if err := f.h.Dump(f.ctx, &got, blkcrypt.DumpOptions{Device: f.img, VolumeKey: key}); err != nil {
				t.Fatal(err)
			}
			out := cs(t, "one", "luksDump", "--dump-volume-key", "--batch-mode", "--key-file", "-", f.img)
			if want, ours := mkDump(t, out), mkDump(t, got.String()); want != ours || want != fmt.Sprintf("%x", key) {
				t.Errorf("volume key: ours %s, in our dump %s, cryptsetup's %s", fmt.Sprintf("%x", key), ours, want)
			}
			if _, _, err := f.h.VolumeKey(f.ctx, []byte("wrong"), blkcrypt.KeyOptions{}); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
				t.Errorf("VolumeKey with a wrong passphrase: %v", err)
			}
			bad := bytes.Clone(key)
			bad[0] ^= 1
			if err := f.h.Dump(f.ctx, &got, blkcrypt.DumpOptions{VolumeKey: bad}); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
				t.Errorf("Dump of a wrong volume key: %v", err)
			}
			if k, s, err := f.h.VolumeKey(f.ctx, nil, blkcrypt.KeyOptions{VolumeKey: key}); err != nil || s != -1 || !bytes.Equal(k, key) {
				t.Errorf("VolumeKey from the volume key: keyslot %d, %v", s, err)
			}
		})
	}
}

// firstDiff names the first line where ours and theirs differ.
func firstDiff(ours, theirs string) string {
	a, b := strings.Split(ours, "\n"), strings.Split(theirs, "\n")
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: ours %q, cryptsetup's %q", i+1, x, y)
		}
	}
	return "same lines"
}

// mkDump is the hex of the "MK dump:" lines of a luksDump
// --dump-volume-key.
func mkDump(t *testing.T, out string) string {
	t.Helper()
	i := strings.Index(out, "MK dump:")
	if i < 0 {
		t.Fatalf("no MK dump in\n%s", out)
	}
	var hex strings.Builder
	for _, line := range strings.Split(out[i+len("MK dump:"):], "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !regexp.MustCompile(`^[0-9a-f]{2}$`).MatchString(f[0]) {
			break
		}
		hex.WriteString(strings.Join(f, ""))
	}
	return hex.String()
}

// TestLUKSMetaSetters: SetUUID, SetLabel and SetPriority as cryptsetup's
// luksUUID and luksDump read them back; the LUKS2-only ones refuse LUKS1
// and a bad UUID, a bad label, an inactive keyslot change nothing; a
// read-only handle writes nothing.
func TestLUKSMetaSetters(t *testing.T) {
	for _, c := range metaCases {
		t.Run(c.typ+"/"+c.where, func(t *testing.T) {
			f := newMetaFixture(t, c.typ, c.where)
			const u = "0123ABCD-4567-89ab-cdef-0123456789AB"
			got, err := f.h.SetUUID(f.ctx, u)
			if err != nil || got != strings.ToLower(u) {
				t.Fatalf("SetUUID: %q, %v", got, err)
			}
			f.sync()
			if out := strings.TrimSpace(cs(t, "", "luksUUID", f.img)); out != strings.ToLower(u) {
				t.Errorf("cryptsetup luksUUID: %q, want %q", out, strings.ToLower(u))
			}
			random, err := f.h.SetUUID(f.ctx, "")
			if err != nil || !blkcrypt.ValidUUID(random) || random == got {
				t.Fatalf("SetUUID(\"\"): %q, %v", random, err)
			}
			f.sync()
			if out := strings.TrimSpace(cs(t, "", "luksUUID", f.img)); out != random {
				t.Errorf("cryptsetup luksUUID: %q, want %q", out, random)
			}
			before := f.bytes()
			if _, err := f.h.SetUUID(f.ctx, "not-a-uuid"); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Errorf("SetUUID of a bad UUID: %v", err)
			}
			labelErr := f.h.SetLabel(f.ctx, "lbl", "subsys")
			prioErr := f.h.SetPriority(f.ctx, 0, keyslot.PriorityIgnore)
			if c.typ == "luks1" {
				if !errors.Is(labelErr, blkcrypt.ErrNotLUKS) || !errors.Is(prioErr, blkcrypt.ErrNotLUKS) {
					t.Errorf("LUKS1 label, priority: %v, %v; want ErrNotLUKS", labelErr, prioErr)
				}
				if !bytes.Equal(before, f.bytes()) {
					t.Error("a refused call changed the header")
				}
				return
			}
			if labelErr != nil || prioErr != nil {
				t.Fatalf("SetLabel %v, SetPriority %v", labelErr, prioErr)
			}
			f.sync()
			dump := cs(t, "", "luksDump", f.img)
			for _, want := range []string{"Label:         \tlbl\n", "Subsystem:     \tsubsys\n", "Priority:   ignored\n"} {
				if !strings.Contains(dump, want) {
					t.Errorf("cryptsetup luksDump lacks %q:\n%s", want, dump)
				}
			}
			// The label alone clears the subsystem, as crypt_set_label does.
			if err := f.h.SetLabel(f.ctx, "only", ""); err != nil {
				t.Fatal(err)
			}
			f.sync()
			if dump := cs(t, "", "luksDump", f.img); !strings.Contains(dump, "Label:         \tonly\n") || !strings.Contains(dump, "Subsystem:     \t(no subsystem)\n") {
				t.Errorf("after SetLabel(only, \"\"):\n%s", dump)
			}
			before = f.bytes()
			if err := f.h.SetLabel(f.ctx, strings.Repeat("x", 48), ""); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Errorf("a 48-byte label: %v", err)
			}
			if err := f.h.SetPriority(f.ctx, 5, keyslot.PriorityPrefer); !errors.Is(err, blkcrypt.ErrSlotInactive) || !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Errorf("priority of an inactive keyslot: %v", err)
			}
			if !bytes.Equal(before, f.bytes()) {
				t.Error("a refused call changed the header")
			}
			ro, err := blkcrypt.OpenLUKS(f.ctx, f.img, blkcrypt.LUKSOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			onDisk, _ := os.ReadFile(f.img)
			if _, err := ro.SetUUID(f.ctx, u); !errors.Is(err, blkcrypt.ErrReadOnly) {
				t.Errorf("SetUUID on a read-only handle: %v", err)
			}
			if err := ro.SetLabel(f.ctx, "x", ""); !errors.Is(err, blkcrypt.ErrReadOnly) {
				t.Errorf("SetLabel on a read-only handle: %v", err)
			}
			if after, _ := os.ReadFile(f.img); !bytes.Equal(onDisk, after) {
				t.Error("a read-only handle wrote")
			}
		})
	}
}

// TestLUKSTokens: a token imported with a keyslot binding, a keyring
// token and their removal, as cryptsetup token export and luksDump see
// them; what cryptsetup refuses is refused without a write.
func TestLUKSTokens(t *testing.T) {
	for _, c := range metaCases {
		t.Run(c.typ+"/"+c.where, func(t *testing.T) {
			f := newMetaFixture(t, c.typ, c.where)
			if c.typ == "luks1" {
				if _, err := f.h.ImportToken(f.ctx, []byte(`{"type":"x","keyslots":[]}`), blkcrypt.TokenOptions{}); !errors.Is(err, blkcrypt.ErrNotLUKS) {
					t.Errorf("LUKS1 token import: %v", err)
				}
				if m, err := f.h.Tokens(f.ctx); err != nil || len(m) != 0 {
					t.Errorf("LUKS1 Tokens: %v, %v", m, err)
				}
				return
			}
			if _, err := f.h.AddKey(f.ctx, []byte("pw"), []byte("one"), blkcrypt.KeyOptions{PBKDF: f.fast}); err != nil {
				t.Fatal(err)
			}
			id, err := f.h.ImportToken(f.ctx, []byte(`{"type":"x-test","keyslots":[],"n":1}`+"\n"), blkcrypt.TokenOptions{ID: blkcrypt.Slot(2), Keyslots: []int{1}})
			if err != nil || id != 2 {
				t.Fatalf("ImportToken: id %d, %v", id, err)
			}
			kid, err := f.h.AddKeyringToken(f.ctx, "user:blk", blkcrypt.TokenOptions{})
			if err != nil || kid != 0 {
				t.Fatalf("AddKeyringToken: id %d, %v", kid, err)
			}
			f.sync()
			for id := range 3 {
				if id == 1 {
					continue
				}
				ours, err := f.h.ExportToken(f.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if theirs := cs(t, "", "token", "export", "--token-id", fmt.Sprint(id), f.img); string(ours) != theirs {
					t.Errorf("token %d: ours %s, cryptsetup's %s", id, ours, theirs)
				}
			}
			if want := `{"type":"x-test","keyslots":["1"],"n":1}`; string(mustExport(t, f, 2)) != want {
				t.Errorf("token 2 is %s, want %s", mustExport(t, f, 2), want)
			}
			if want := `{"type":"luks2-keyring","keyslots":["0","1"],"key_description":"user:blk"}`; string(mustExport(t, f, 0)) != want {
				t.Errorf("token 0 is %s, want %s", mustExport(t, f, 0), want)
			}
			if m, err := f.h.Tokens(f.ctx); err != nil || len(m) != 2 || string(m[2]) != string(mustExport(t, f, 2)) {
				t.Errorf("Tokens: %d tokens, %v", len(m), err)
			}
			before := f.bytes()
			for name, call := range map[string]func() error{
				"import over token 2": func() error {
					_, err := f.h.ImportToken(f.ctx, []byte(`{"type":"y","keyslots":[]}`), blkcrypt.TokenOptions{ID: blkcrypt.Slot(2)})
					return err
				},
				"import bound to an inactive keyslot": func() error {
					_, err := f.h.ImportToken(f.ctx, []byte(`{"type":"y","keyslots":[]}`), blkcrypt.TokenOptions{Keyslots: []int{7}})
					return err
				},
				"import of no JSON object": func() error {
					_, err := f.h.ImportToken(f.ctx, []byte(`[1]`), blkcrypt.TokenOptions{})
					return err
				},
				"remove of a free id": func() error { return f.h.RemoveToken(f.ctx, 5) },
				"export of a free id": func() error { _, err := f.h.ExportToken(f.ctx, 5); return err },
			} {
				if err := call(); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
					t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
				}
			}
			if !bytes.Equal(before, f.bytes()) {
				t.Error("a refused token call changed the header")
			}
			if id, err := f.h.ImportToken(f.ctx, []byte(`{"type":"y","keyslots":[]}`), blkcrypt.TokenOptions{ID: blkcrypt.Slot(2), Replace: true}); err != nil || id != 2 {
				t.Fatalf("replacing token 2: %d, %v", id, err)
			}
			if err := f.h.RemoveToken(f.ctx, 0); err != nil {
				t.Fatal(err)
			}
			f.sync()
			if out, err := csErr(t, "", "token", "export", "--token-id", "0", f.img); err == nil {
				t.Errorf("cryptsetup still exports the removed token: %s", out)
			}
			if out := cs(t, "", "token", "export", "--token-id", "2", f.img); out != `{"type":"y","keyslots":[]}` {
				t.Errorf("replaced token 2: %s", out)
			}
			if dump := cs(t, "", "luksDump", f.img); !strings.Contains(dump, "Tokens:\n  2: y\n") {
				t.Errorf("luksDump after the token changes:\n%s", dump)
			}
		})
	}
}

func mustExport(t *testing.T, f *metaFixture, id int) []byte {
	t.Helper()
	b, err := f.h.ExportToken(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLUKSHeaderBackupRestore: BackupHeader writes cryptsetup's
// luksHeaderBackup bytes (after a keyslot change, so the LUKS1 gap and the
// LUKS2 areas hold something); RestoreHeader refuses without Force and on
// a bad backup, writing nothing, and restores over a changed header, onto
// a blank device, and cryptsetup's own backup.
func TestLUKSHeaderBackupRestore(t *testing.T) {
	for _, c := range metaCases {
		t.Run(c.typ+"/"+c.where, func(t *testing.T) {
			f := newMetaFixture(t, c.typ, c.where)
			if _, err := f.h.AddKey(f.ctx, []byte("pw"), []byte("one"), blkcrypt.KeyOptions{PBKDF: f.fast}); err != nil {
				t.Fatal(err)
			}
			// Stale bytes in the LUKS1 gap after the header: cryptsetup's
			// backup zeroes them, so must ours.
			if c.typ == "luks1" {
				junk := bytes.Repeat([]byte{0xa5}, 100)
				if f.mem != nil {
					copy(f.mem.b[1024:], junk)
				} else {
					fh, err := os.OpenFile(f.img, os.O_WRONLY, 0)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := fh.WriteAt(junk, 1024); err != nil {
						t.Fatal(err)
					}
					fh.Close()
				}
			}
			f.sync()
			dir := t.TempDir()
			theirs := filepath.Join(dir, "theirs")
			cs(t, "", "luksHeaderBackup", f.img, "--header-backup-file", theirs)
			want, err := os.ReadFile(theirs)
			if err != nil {
				t.Fatal(err)
			}
			var ours bytes.Buffer
			if n, err := f.h.BackupHeader(f.ctx, &ours); err != nil || n != int64(ours.Len()) {
				t.Fatalf("BackupHeader: %d, %v", n, err)
			}
			if !bytes.Equal(ours.Bytes(), want) {
				t.Fatalf("BackupHeader differs from cryptsetup's luksHeaderBackup (%d and %d bytes)", ours.Len(), len(want))
			}
			oursFile := filepath.Join(dir, "ours")
			if err := f.h.BackupHeaderFile(f.ctx, oursFile); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(oursFile); !bytes.Equal(b, want) {
				t.Error("BackupHeaderFile differs from cryptsetup's backup")
			}
			if st, err := os.Stat(oursFile); err != nil || st.Mode().Perm() != 0o400 {
				t.Errorf("backup file mode %v, %v; want 0400 as cryptsetup's", st.Mode().Perm(), err)
			}
			if err := f.h.BackupHeaderFile(f.ctx, theirs); !errors.Is(err, fs.ErrExist) {
				t.Errorf("BackupHeaderFile over a file: %v, want ErrExist", err)
			}
			if b, _ := os.ReadFile(theirs); !bytes.Equal(b, want) {
				t.Error("BackupHeaderFile changed an existing file")
			}

			// Change the header: keyslot 1 goes, "two" comes.
			if _, err := f.h.RemoveKey(f.ctx, []byte("one"), blkcrypt.KeyOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.h.AddKey(f.ctx, []byte("pw"), []byte("two"), blkcrypt.KeyOptions{PBKDF: f.fast}); err != nil {
				t.Fatal(err)
			}
			before := f.bytes()
			if err := f.h.RestoreHeader(f.ctx, want, blkcrypt.RestoreOptions{}); !errors.Is(err, blkcrypt.ErrWouldDestroy) {
				t.Fatalf("RestoreHeader over a header without Force: %v", err)
			}
			if err := f.h.RestoreHeader(f.ctx, want[:len(want)-4096], blkcrypt.RestoreOptions{Force: true}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Errorf("RestoreHeader of a short backup: %v", err)
			}
			if err := f.h.RestoreHeader(f.ctx, make([]byte, len(want)), blkcrypt.RestoreOptions{Force: true}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Errorf("RestoreHeader of zeros: %v", err)
			}
			if !bytes.Equal(before, f.bytes()) {
				t.Fatal("a refused restore wrote")
			}
			if err := f.h.RestoreHeader(f.ctx, want, blkcrypt.RestoreOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			f.sync()
			for pass, ok := range map[string]bool{"pw": true, "one": true, "two": false} {
				if got := cryptsetupOpens(t, f.img, pass, -1); got != ok {
					t.Errorf("after the restore cryptsetup opens %q: %v, want %v", pass, got, ok)
				}
			}
			head := f.bytes()[:len(want)]
			if !bytes.Equal(head, want) {
				t.Error("the restored header area is not the backup")
			}

			// Onto a blank device: no header, no Force needed.
			blank := filepath.Join(dir, "blank.img")
			if err := os.WriteFile(blank, make([]byte, 20<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := blkcrypt.RestoreLUKSHeader(f.ctx, blank, want, blkcrypt.RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
			cs(t, "", "isLuks", "--type", c.typ, blank)
			if !cryptsetupOpens(t, blank, "one", 1) {
				t.Error("cryptsetup does not open keyslot 1 of the restored blank device")
			}
			mem := &memDevice{b: make([]byte, 20<<20)}
			if err := blkcrypt.RestoreLUKSHeaderDevice(f.ctx, mem, want, blkcrypt.RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mem.b[:len(want)], want) {
				t.Error("the restored memory device does not hold the backup")
			}
			small := &memDevice{b: make([]byte, len(want)-512)}
			if err := blkcrypt.RestoreLUKSHeaderDevice(f.ctx, small, want, blkcrypt.RestoreOptions{}); !errors.Is(err, blkcrypt.ErrDeviceTooSmall) {
				t.Errorf("restore onto a device smaller than the backup: %v", err)
			}
			if bytes.Count(small.b, []byte{0}) != len(small.b) {
				t.Error("a refused restore wrote to the small device")
			}
			if _, err := blkcrypt.ReadHeaderBackup(f.ctx, want); err != nil {
				t.Errorf("ReadHeaderBackup of cryptsetup's backup: %v", err)
			}
		})
	}
}

// TestLUKSRestoreDataOffset: a backup whose data offset is not the
// device header's is refused (the data would be lost), as cryptsetup
// refuses it, and nothing is written.
func TestLUKSRestoreDataOffset(t *testing.T) {
	ctx := context.Background()
	fast := blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	if err := blkcrypt.Format(ctx, a, []byte("pw"), blkcrypt.FormatOptions{Type: "luks2", Size: 20 << 20, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	if err := blkcrypt.Format(ctx, b, []byte("pw"), blkcrypt.FormatOptions{Type: "luks2", Size: 40 << 20, PBKDF: fast, Offset: 40960}); err != nil {
		t.Fatal(err)
	}
	bak := filepath.Join(dir, "a.bak")
	cs(t, "", "luksHeaderBackup", a, "--header-backup-file", bak)
	backup, err := os.ReadFile(bak)
	if err != nil {
		t.Fatal(err)
	}
	before := fileHash(t, b)
	if err := blkcrypt.RestoreLUKSHeader(ctx, b, backup, blkcrypt.RestoreOptions{Force: true}); !errors.Is(err, blkcrypt.ErrInvalidOptions) || !strings.Contains(err.Error(), "data offset") {
		t.Errorf("restore with another data offset: %v", err)
	}
	if fileHash(t, b) != before {
		t.Error("a refused restore wrote")
	}
	if out, err := csErr(t, "", "luksHeaderRestore", "-q", b, "--header-backup-file", bak); err == nil {
		t.Errorf("cryptsetup restores it (%s): the test's premise is wrong", out)
	}
}

// TestLUKSEraseConvert: Erase refuses without Force and then leaves no
// keyslot, as cryptsetup sees it; Convert goes LUKS1 -> LUKS2 -> LUKS1 with
// the passphrases working under cryptsetup, and refuses the type the
// header has.
func TestLUKSEraseConvert(t *testing.T) {
	// A LUKS2 data sector size of 4096 has no LUKS1 form: both refuse.
	f4k := newMetaFixture(t, "luks2", "file")
	before := f4k.bytes()
	if err := f4k.h.Convert(f4k.ctx, "luks1"); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("Convert of a 4096-byte sector LUKS2 to luks1: %v", err)
	}
	if !bytes.Equal(before, f4k.bytes()) {
		t.Error("a refused Convert wrote")
	}
	if out, err := csErr(t, "", "convert", "-q", "--type", "luks1", f4k.img); err == nil {
		t.Errorf("cryptsetup converts it (%s): the test's premise is wrong", out)
	}
	for _, c := range metaCases {
		t.Run(c.typ+"/"+c.where, func(t *testing.T) {
			f := newMetaFixtureSector(t, c.typ, c.where, 512)
			if _, err := f.h.AddKey(f.ctx, []byte("pw"), []byte("one"), blkcrypt.KeyOptions{PBKDF: f.fast}); err != nil {
				t.Fatal(err)
			}
			before := f.bytes()
			if err := f.h.Convert(f.ctx, c.typ); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Errorf("Convert to %s: %v", c.typ, err)
			}
			if err := f.h.Convert(f.ctx, "luks3"); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
				t.Errorf("Convert to luks3: %v", err)
			}
			if err := f.h.Erase(f.ctx, blkcrypt.EraseOptions{}); !errors.Is(err, blkcrypt.ErrWouldDestroy) {
				t.Errorf("Erase without Force: %v", err)
			}
			if !bytes.Equal(before, f.bytes()) {
				t.Fatal("a refused call wrote")
			}
			other := map[string]string{"luks1": "luks2", "luks2": "luks1"}[c.typ]
			for _, to := range []string{other, c.typ} {
				if err := f.h.Convert(f.ctx, to); err != nil {
					t.Fatalf("Convert to %s: %v", to, err)
				}
				f.sync()
				cs(t, "", "isLuks", "--type", to, f.img)
				for _, pass := range []string{"pw", "one"} {
					if !cryptsetupOpens(t, f.img, pass, -1) {
						t.Errorf("after converting to %s cryptsetup does not open %q", to, pass)
					}
				}
			}
			if err := f.h.Erase(f.ctx, blkcrypt.EraseOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			f.sync()
			cs(t, "", "isLuks", f.img)
			if cryptsetupOpens(t, f.img, "pw", -1) || cryptsetupOpens(t, f.img, "one", -1) {
				t.Error("cryptsetup opens an erased header")
			}
			dump := cs(t, "", "luksDump", f.img)
			if strings.Contains(dump, "ENABLED") || regexp.MustCompile(`(?m)^  \d+: luks2$`).MatchString(dump) {
				t.Errorf("cryptsetup sees keyslots after Erase:\n%s", dump)
			}
			if hd, err := f.h.Header(f.ctx); err != nil || len(hd.ActiveKeyslots()) != 0 {
				t.Errorf("after Erase: %v", err)
			}
		})
	}
}

// TestLUKSRepair: a LUKS2 header whose secondary metadata copy is damaged
// is repaired (Repair reports it wrote); cryptsetup then reads the volume
// from that secondary copy alone, so the copy Repair wrote is valid. A
// whole header needs nothing.
func TestLUKSRepair(t *testing.T) {
	for _, where := range []string{"file", "memory"} {
		t.Run(where, func(t *testing.T) {
			f := newMetaFixture(t, "luks2", where)
			if did, err := f.h.Repair(f.ctx); err != nil || did {
				t.Fatalf("Repair of a whole header: %v, %v", did, err)
			}
			b := f.bytes()
			hdrSize := int64(binary.BigEndian.Uint64(b[8:16]))
			damage := func(off int64) {
				t.Helper()
				if f.mem != nil {
					f.mem.b[off] ^= 0xff
					return
				}
				fh, err := os.OpenFile(f.img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer fh.Close()
				var c [1]byte
				if _, err := fh.ReadAt(c[:], off); err != nil {
					t.Fatal(err)
				}
				c[0] ^= 0xff
				if _, err := fh.WriteAt(c[:], off); err != nil {
					t.Fatal(err)
				}
			}
			damage(hdrSize + 4096 + 2) // the secondary copy's JSON
			if did, err := f.h.Repair(f.ctx); err != nil || !did {
				t.Fatalf("Repair: %v, %v", did, err)
			}
			if did, err := f.h.Repair(f.ctx); err != nil || did {
				t.Fatalf("Repair after Repair: %v, %v", did, err)
			}
			damage(0) // the primary's magic: only the repaired copy is left
			f.sync()
			if !cryptsetupOpens(t, f.img, "pw", 0) {
				t.Error("cryptsetup does not open the volume from the repaired secondary copy")
			}
		})
	}
}

// TestLUKSMetaBusy: while a volume is open on the image, the header
// methods that write are refused with ErrBusy and write nothing; after it
// closes they go through.
func TestLUKSMetaBusy(t *testing.T) {
	f := newMetaFixture(t, "luks2", "file")
	var backup bytes.Buffer
	if _, err := f.h.BackupHeader(f.ctx, &backup); err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.Open(f.ctx, f.img, blkcrypt.OpenOptions{Passphrase: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	before := f.bytes()
	calls := map[string]func() error{
		"SetLabel": func() error { return f.h.SetLabel(f.ctx, "busy", "") },
		"SetUUID":  func() error { _, err := f.h.SetUUID(f.ctx, ""); return err },
		"Erase":    func() error { return f.h.Erase(f.ctx, blkcrypt.EraseOptions{Force: true}) },
		"ImportToken": func() error {
			_, err := f.h.ImportToken(f.ctx, []byte(`{"type":"x","keyslots":[]}`), blkcrypt.TokenOptions{})
			return err
		},
		"RestoreHeader": func() error {
			return blkcrypt.RestoreLUKSHeader(f.ctx, f.img, backup.Bytes(), blkcrypt.RestoreOptions{Force: true})
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, blkcrypt.ErrBusy) {
			t.Errorf("%s while a volume is open: %v, want ErrBusy", name, err)
		}
	}
	if !bytes.Equal(before, f.bytes()) {
		t.Error("a refused call wrote")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.h.SetLabel(f.ctx, "free", ""); err != nil {
		t.Fatalf("SetLabel after the volume closed: %v", err)
	}
	if dump := cs(t, "", "luksDump", f.img); !strings.Contains(dump, "Label:         \tfree\n") {
		t.Errorf("cryptsetup luksDump:\n%s", dump)
	}
}
