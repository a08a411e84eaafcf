package blkcrypt_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestIntegrityOptionsCheck: the options integritysetup refuses are
// ErrInvalidOptions on one line, from Check and from FormatIntegrity and
// Open before anything is written; the ones it takes pass.
func TestIntegrityOptionsCheck(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	for name, c := range map[string]struct {
		o  blkcrypt.IntegrityOptions
		ok bool
	}{
		"zero":                 {ok: true},
		"all set":              {o: blkcrypt.IntegrityOptions{Algorithm: "hmac-sha256", Key: key, JournalIntegrity: "hmac-sha256", JournalIntegrityKey: key, JournalCrypt: "ctr-aes", JournalCryptKey: key[:16], Mode: integrity.ModeBitmap, TagSize: integrity.MaxTagSize, SectorSize: 4096}, ok: true},
		"mode":                 {o: blkcrypt.IntegrityOptions{Mode: integrity.Mode(99)}},
		"tag size":             {o: blkcrypt.IntegrityOptions{TagSize: integrity.MaxTagSize + 1}},
		"negative tag size":    {o: blkcrypt.IntegrityOptions{TagSize: -1}},
		"sector size":          {o: blkcrypt.IntegrityOptions{SectorSize: 8192}},
		"odd sector size":      {o: blkcrypt.IntegrityOptions{SectorSize: 768}},
		"journal MAC key only": {o: blkcrypt.IntegrityOptions{JournalIntegrityKey: key}},
		"journal MAC no key":   {o: blkcrypt.IntegrityOptions{JournalIntegrity: "hmac-sha256"}},
		"crypt key only":       {o: blkcrypt.IntegrityOptions{JournalCryptKey: key}},
		"crypt no key":         {o: blkcrypt.IntegrityOptions{JournalCrypt: "ctr-aes"}},
	} {
		err := c.o.Check()
		if c.ok != (err == nil) {
			t.Errorf("%s: Check: %v", name, err)
			continue
		}
		if c.ok {
			continue
		}
		if !errors.Is(err, blkcrypt.ErrInvalidOptions) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line of ErrInvalidOptions", name, err)
		}
		if c.o.Mode != integrity.ModeJournal {
			continue // not a format option
		}
		// FormatIntegrity refuses it before opening the device: a path
		// that does not exist gives the options' error, not ENOENT.
		if err := blkcrypt.FormatIntegrity(context.Background(), filepath.Join(t.TempDir(), "none"), c.o.FormatOptions()); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
			t.Errorf("%s: FormatIntegrity: %v, want ErrInvalidOptions", name, err)
		}
	}
	for name, f := range map[string]blkcrypt.FormatIntegrityOptions{
		"negative journal":    {JournalSize: -1},
		"small journal":       {JournalSize: 4095},
		"interleave 4":        {InterleaveSectors: 4},
		"interleave not pow2": {InterleaveSectors: 1000},
		"interleave 2^32":     {InterleaveSectors: 1 << 32},
	} {
		if err := f.Check(); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
			t.Errorf("%s: Check: %v", name, err)
		}
	}
	for name, f := range map[string]blkcrypt.FormatIntegrityOptions{
		"defaults": {}, "journal 4096": {JournalSize: 4096}, "interleave 8": {InterleaveSectors: 8}, "interleave 2^31": {InterleaveSectors: 1 << 31},
	} {
		if err := f.Check(); err != nil {
			t.Errorf("%s: Check: %v", name, err)
		}
	}
}

// TestIntegrityFormatOptions: a volume formatted with the FormatOptions of
// open options has the layout integritysetup dump reads back (tag and
// sector size, the journal's MAC), and opens with those options.
func TestIntegrityFormatOptions(t *testing.T) {
	isetup := testenv.Need(t, "integritysetup", "cryptsetup-bin")
	ctx := context.Background()
	key := bytes.Repeat([]byte{7}, 32)
	o := blkcrypt.IntegrityOptions{Algorithm: "sha256", TagSize: 16, SectorSize: 1024, JournalIntegrity: "hmac-sha256", JournalIntegrityKey: key}
	p := filepath.Join(t.TempDir(), "v.img")
	newImage(t, p, 1<<20)
	f := o.FormatOptions()
	f.InterleaveSectors = 64
	if err := blkcrypt.FormatIntegrity(ctx, p, f); err != nil {
		t.Fatal(err)
	}
	dump, err := exec.Command(isetup, "dump", p).Output()
	if err != nil {
		t.Fatalf("integritysetup dump: %v", err)
	}
	for _, want := range []string{"integrity_tag_size 16\n", "sector_size 1024\n", "have_journal_mac"} {
		if !bytes.Contains(dump, []byte(want)) {
			t.Errorf("integritysetup dump has no %q:\n%s", want, dump)
		}
	}
	v, err := blkcrypt.Open(ctx, p, blkcrypt.OpenOptions{Integrity: o})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := v.WriteAt(bytes.Repeat([]byte{1}, 1024), 0); err != nil {
		t.Fatal(err)
	}
	if sb, ok := v.IntegrityVolume(); !ok || sb.TagSize != 16 {
		t.Errorf("superblock %+v", sb)
	}
}
