package token

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// newLUKS1Image is a LUKS1 image whose first MiB of data cryptsetup
// wrote: cryptsetup encrypts a plaintext file in place as LUKS2 (offline
// reencrypt --encrypt) and converts it to LUKS1. It returns the fixture
// and the plaintext.
func newLUKS1Image(t *testing.T) (*fixture, []byte) {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	f := &fixture{img: filepath.Join(dir, "img"), keyFile: filepath.Join(dir, "key"), pass: []byte("first passphrase")}
	if err := os.WriteFile(f.keyFile, f.pass, 0o600); err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, 1<<20)
	rand.Read(plain)
	if err := os.WriteFile(f.img, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f.img, 5<<20); err != nil {
		t.Fatal(err)
	}
	run(t, nil, nil, cs, "reencrypt", "--encrypt", "--type", "luks2", "--reduce-device-size", "4M", "-q",
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", f.keyFile, f.img)
	run(t, nil, nil, cs, "convert", "--type", "luks1", "-q", f.img)
	return f, plain
}

// luks1Bind runs clevis luks bind on a LUKS1 image (clevis initialises
// luksmeta there) and returns the keyslot it added, as cryptsetup shows
// it.
func (f *fixture) luks1Bind(t *testing.T, pin, cfg string) int {
	t.Helper()
	tool := testenv.Need(t, "clevis", "clevis")
	testenv.Need(t, "clevis-luks-bind", "clevis-luks")
	testenv.Need(t, "luksmeta", "luksmeta")
	before := f.luks1Slots(t)
	run(t, nil, nil, tool, "luks", "bind", "-y", "-k", f.keyFile, "-d", f.img, pin, cfg)
	for _, s := range f.luks1Slots(t) {
		if !slices.Contains(before, s) {
			return s
		}
	}
	t.Fatalf("clevis luks bind added no keyslot (before %v)", before)
	return -1
}

// luks1Slots lists the enabled keyslots cryptsetup luksDump shows.
func (f *fixture) luks1Slots(t *testing.T) []int {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	var s []int
	for _, l := range strings.Split(run(t, nil, nil, cs, "luksDump", f.img), "\n") {
		var n int
		var state string
		if c, _ := fmt.Sscanf(l, "Key Slot %d: %s", &n, &state); c == 2 && state == "ENABLED" {
			s = append(s, n)
		}
	}
	return s
}

// luksmetaShow is luksmeta show's "SLOT STATE UUID" lines, as ours would
// print them.
func luksmetaShow(t *testing.T, img string) string {
	t.Helper()
	tool := testenv.Need(t, "luksmeta", "luksmeta")
	return run(t, nil, nil, tool, "show", "-d", img)
}

// TestLUKSMetaClevisTang: a LUKS1 binding Debian's clevis luks bind makes
// with tang (stored with luksmeta) reads as luksmeta reads it, lists as
// clevis luks list lists it (unbinding it is refused), and unlocks through Unlock, alone, to the passphrase clevis luks pass
// prints; the volume then reads the plaintext cryptsetup wrote. With tang
// stopped, and with the luksmeta header or slot data corrupted, Unlock
// fails with one line naming the luksmeta slot, and luksmeta agrees the
// corrupt copies are bad.
func TestLUKSMetaClevisTang(t *testing.T) {
	tg := startTang(t)
	f, plain := newLUKS1Image(t)
	slot := f.luks1Bind(t, "tang", tangCfg(tg.url))
	ctx := ctxT(t)

	// Our reader against luksmeta's: the slots and their data.
	h := f.open(t)
	gap, err := h.LUKS1Gap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slots, err := ReadLUKSMeta(gap, gap.Size())
	if err != nil {
		t.Fatal(err)
	}
	var show []string
	for i := range luksmetaSlots {
		state := "inactive"
		for _, s := range f.luks1Slots(t) {
			if s == i {
				state = "active"
			}
		}
		uuid := "empty"
		for _, s := range slots {
			if s.Slot == i {
				uuid = s.UUID
				if s.Err != nil {
					t.Fatalf("slot %d: %v", i, s.Err)
				}
				lm := testenv.Need(t, "luksmeta", "luksmeta")
				if theirs := run(t, nil, nil, lm, "load", "-d", f.img, "-s", strconv.Itoa(i)); theirs != string(s.Data) {
					t.Fatalf("luksmeta slot %d: we read %q, luksmeta load %q", i, s.Data, theirs)
				}
			}
		}
		show = append(show, strconv.Itoa(i)+" "+strings.Repeat(" ", 8-len(state))+state+" "+uuid)
	}
	theirs := luksmetaShow(t, f.img)
	if got := strings.Join(show, "\n") + "\n"; got != theirs {
		t.Fatalf("our luksmeta slots:\n%sluksmeta show:\n%s", got, theirs)
	}

	// clevis luks list's lines; unbinding a luksmeta binding is refused,
	// writing nothing.
	f.sameListing(t, nil, h)
	before, err := os.ReadFile(f.img)
	if err != nil {
		t.Fatal(err)
	}
	if err := UnbindClevis(ctx, h, slot, false); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("UnbindClevis of a luksmeta binding: %v", err)
	}
	if after, err := os.ReadFile(f.img); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("a refused UnbindClevis changed the image (%v)", err)
	}

	pass, id, err := Unlock(ctx, h, Options{TangTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if id != slot {
		t.Errorf("Unlock used luksmeta slot %d, clevis bound keyslot %d", id, slot)
	}
	if want := f.clevisPass(t, nil, slot); !bytes.Equal(pass, want) {
		t.Fatalf("Unlock's passphrase differs from clevis luks pass's")
	}
	if !f.cryptsetupAcceptsSlot(t, pass, slot) {
		t.Fatalf("cryptsetup refuses keyslot %d with the passphrase", slot)
	}
	v, err := blkcrypt.Open(ctx, f.img, blkcrypt.OpenOptions{Passphrase: pass, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(plain))
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("the volume does not read the plaintext cryptsetup wrote (%v)", err)
	}
	v.Close()
	// Only a clevis token may be asked for; luksmeta slot 0 holds none.
	zero := 0
	if _, _, err := Unlock(ctx, h, Options{TokenID: &zero}); !errors.Is(err, ErrNoToken) {
		t.Errorf("Unlock with --token-id 0: %v, want ErrNoToken", err)
	}
	if _, _, err := Unlock(ctx, h, Options{TokenType: TypeTPM2}); !errors.Is(err, ErrNoToken) {
		t.Errorf("Unlock with --token-type systemd-tpm2: %v, want ErrNoToken", err)
	}

	// Corrupt copies: the luksmeta header, then the slot's data.
	raw, err := os.ReadFile(f.img)
	if err != nil {
		t.Fatal(err)
	}
	gapOff := int64(0)
	{
		// The gap starts where LUKS1Gap's reader does.
		var one [8]byte
		for off := int64(0); off < int64(len(raw)); off += 4096 {
			copy(one[:], raw[off:])
			if string(one[:]) == luksmetaMagic {
				gapOff = off
				break
			}
		}
	}
	if gapOff == 0 {
		t.Fatal("no LUKSMETA magic in the image")
	}
	lm := testenv.Need(t, "luksmeta", "luksmeta")
	for _, c := range []struct {
		name string
		at   int64
		want string
	}{
		{"header checksum", gapOff + 20, "header checksum"},
		{"slot offset", gapOff + 16 + int64(slot)*luksmetaSlotSize + 16, "outside"},
		{"slot data", gapOff + 4096 + 10, "data checksum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			bad := bytes.Clone(raw)
			bad[c.at] ^= 0x40
			if c.name == "slot offset" {
				// A well-formed header (checksum fixed) whose slot
				// points past the gap.
				binary.BigEndian.PutUint32(bad[c.at:], 0xfffff000)
				binary.BigEndian.PutUint32(bad[gapOff+12:], 0)
				binary.BigEndian.PutUint32(bad[gapOff+12:], crc32.Checksum(bad[gapOff:gapOff+luksmetaHeaderSize], castagnoli))
			}
			if err := os.WriteFile(img, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := runErr(nil, nil, lm, "load", "-d", img, "-s", strconv.Itoa(slot)); err == nil {
				t.Fatalf("luksmeta load accepts the corrupt copy: %q", out)
			}
			h, err := blkcrypt.OpenLUKS(ctx, img, blkcrypt.LUKSOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			_, _, err = Unlock(ctx, h, Options{TangTimeout: 10 * time.Second})
			if err == nil || !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "luksmeta") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Unlock on a corrupt %s: %v", c.name, err)
			}
			t.Logf("%s: %v", c.name, err)
		})
	}

	// cryptsetup refuses to convert a LUKS1 header with luksmeta to
	// LUKS2, and so does Convert, changing nothing.
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	t.Run("convert to luks2", func(t *testing.T) {
		dir := t.TempDir()
		theirs, ours := filepath.Join(dir, "theirs"), filepath.Join(dir, "ours")
		for _, p := range []string{theirs, ours} {
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, cerr := runErr(nil, nil, cs, "convert", "--type", "luks2", "-q", theirs)
		h, err := blkcrypt.OpenLUKS(ctx, ours, blkcrypt.LUKSOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = h.Convert(ctx, "luks2")
		h.Close()
		if cerr == nil || err == nil || !strings.Contains(out, "LUKSMETA") || !strings.Contains(err.Error(), "LUKSMETA") {
			t.Fatalf("convert to luks2 with luksmeta: ours %v; cryptsetup %v: %s", err, cerr, out)
		}
		for _, p := range []string{theirs, ours} {
			if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, raw) {
				t.Fatalf("%s changed by a refused convert (%v)", filepath.Base(p), err)
			}
		}
	})

	// Header backups: ours is luksHeaderBackup's, byte for byte (the
	// luksmeta gap is in neither); each restored by the other tool over
	// a copy whose clevis keyslot was killed gives the image back, and
	// the binding unlocks again.
	t.Run("header backup and restore", func(t *testing.T) {
		dir := t.TempDir()
		theirBackup := filepath.Join(dir, "theirs.hdr")
		run(t, nil, nil, cs, "luksHeaderBackup", f.img, "--header-backup-file", theirBackup)
		tb, err := os.ReadFile(theirBackup)
		if err != nil {
			t.Fatal(err)
		}
		var ob bytes.Buffer
		if _, err := h.BackupHeader(ctx, &ob); err != nil || !bytes.Equal(ob.Bytes(), tb) {
			t.Fatalf("our header backup differs from luksHeaderBackup's (%v)", err)
		}
		ourBackup := filepath.Join(dir, "ours.hdr")
		if err := os.WriteFile(ourBackup, ob.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		x1, x2 := filepath.Join(dir, "x1"), filepath.Join(dir, "x2")
		for _, p := range []string{x1, x2} {
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			run(t, nil, nil, cs, "luksKillSlot", "-q", p, strconv.Itoa(slot))
		}
		run(t, nil, nil, cs, "luksHeaderRestore", "-q", x1, "--header-backup-file", ourBackup)
		if err := blkcrypt.RestoreLUKSHeader(ctx, x2, tb, blkcrypt.RestoreOptions{Force: true}); err != nil {
			t.Fatalf("RestoreLUKSHeader: %v", err)
		}
		for _, p := range []string{x1, x2} {
			if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, raw) {
				var diffs []int
				for i := range b {
					if b[i] != raw[i] {
						diffs = append(diffs, i)
					}
				}
				if len(diffs) > 0 {
					t.Logf("%d bytes differ, from %d to %d; the backup is %d bytes", len(diffs), diffs[0], diffs[len(diffs)-1], len(tb))
				}
				t.Fatalf("%s after the restore is not the image backed up (%v)", filepath.Base(p), err)
			}
		}
		h2, err := blkcrypt.OpenLUKS(ctx, x2, blkcrypt.LUKSOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer h2.Close()
		if p2, id, err := Unlock(ctx, h2, Options{TangTimeout: 10 * time.Second}); err != nil || id != slot || !bytes.Equal(p2, pass) {
			t.Fatalf("Unlock after the restore: luksmeta slot %d, %v", id, err)
		}
	})

	// Tang stopped: one line naming the luksmeta slot, within the timeout.
	tg.stop()
	start := time.Now()
	_, _, err = Unlock(ctx, h, Options{TangTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "luksmeta slot "+strconv.Itoa(slot)+" (clevis, pin tang)") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Unlock with tang stopped: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("Unlock with tang stopped took %v", d)
	}
	t.Logf("tang stopped: %v", err)
}

// TestReadLUKSMetaBounds: hand-made luksmeta headers that luksmeta's
// rules refuse are refused here, one line each.
func TestReadLUKSMetaBounds(t *testing.T) {
	mk := func(version uint32, off, n uint32, data []byte, size int) []byte {
		b := make([]byte, size)
		copy(b, luksmetaMagic)
		binary.BigEndian.PutUint32(b[8:], version)
		s := b[16+1*luksmetaSlotSize:]
		copy(s, []byte("0123456789abcdef"))
		binary.BigEndian.PutUint32(s[16:], off)
		binary.BigEndian.PutUint32(s[20:], n)
		binary.BigEndian.PutUint32(s[24:], crc32.Checksum(data, castagnoli))
		if int(off)+len(data) <= size {
			copy(b[off:], data)
		}
		binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:luksmetaHeaderSize], castagnoli))
		return b
	}
	data := []byte("hello")
	good := mk(1, 4096, 5, data, 8192)
	slots, err := ReadLUKSMeta(bytes.NewReader(good), int64(len(good)))
	if err != nil || len(slots) != 1 || slots[0].Slot != 1 || string(slots[0].Data) != "hello" || slots[0].UUID != "30313233-3435-3637-3839-616263646566" {
		t.Fatalf("good header: %+v, %v", slots, err)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:100], ErrNoLUKSMeta},
		{"no magic", append([]byte("X"), good[1:]...), ErrNoLUKSMeta},
		{"version 2", mk(2, 4096, 5, data, 8192), ErrUnsupported},
		{"offset in header", mk(1, 200, 5, data, 8192), ErrBadToken},
		{"past the gap", mk(1, 8190, 5, data, 8192), ErrBadToken},
		{"longer than the gap less 4096", mk(1, 300, 4097, data, 8192), ErrBadToken},
		{"gap under 4096", mk(1, 300, 5, data, 2048), ErrBadToken},
	} {
		_, err := ReadLUKSMeta(bytes.NewReader(c.b), int64(len(c.b)))
		if !errors.Is(err, c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzLuksmeta: ReadLUKSMeta on any gap returns slots whose data matches
// its checksum, or a one-line error; it never panics or reads past the
// gap.
func FuzzLuksmeta(f *testing.F) {
	f.Add([]byte(luksmetaMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		slots, err := ReadLUKSMeta(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		for _, s := range slots {
			if s.Err == nil {
				if s.Slot < 0 || s.Slot >= luksmetaSlots || s.Data == nil {
					t.Fatalf("slot %d: no data and no error", s.Slot)
				}
				if _, err := parseCompactClevis(string(s.Data)); err != nil && strings.Contains(err.Error(), "\n") {
					t.Fatalf("multi-line error %q", err)
				}
			}
		}
	})
}
