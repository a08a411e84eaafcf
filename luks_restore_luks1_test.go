package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

// TestRestoreLUKS1WritesWhatCryptsetupWrites: a LUKS1 header whose data
// starts right after its keyslot areas, off a page boundary (as
// cryptsetup 1 made them with --align-payload 1), has a backup padded with zeros over the first
// bytes of the data. cryptsetup's luksHeaderRestore writes the header and
// keyslot areas only; RestoreHeader must too, or it zeroes data (or
// luksmeta's clevis bindings). A backup of another key size is refused
// over a LUKS1 header, as cryptsetup refuses it.
func TestRestoreLUKS1WritesWhatCryptsetupWrites(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	ctx := context.Background()
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	junk := make([]byte, 3<<20)
	rand.Read(junk)
	if err := os.WriteFile(img, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	pass := []byte("restore")
	cs.MustRun("luksFormat", "--type", "luks1", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-size", "256",
		"--key-file", cs.KeyFile(pass), img)
	// cryptsetup 2 formats data on a page boundary only; older versions
	// (--align-payload 1) put it right after the keyslot areas: sector
	// 2050 for a 256-bit key. Set the header's payloadOffset so.
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte{0, 0, 2050 >> 8, 2050 & 0xff}, 104)
	if err == nil {
		// Data there (luksFormat zeroed up to its own data offset).
		_, err = f.WriteAt(junk[:1<<20], 2050*512)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "hdr")
	cs.MustRun("luksHeaderBackup", img, "--header-backup-file", backup)
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	h, err := blkcrypt.ReadHeaderBackup(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if h.DataOffset()%4096 == 0 || int64(len(b)) <= h.DataOffset() {
		t.Fatalf("data offset %d, backup %d bytes: the backup's padding does not reach the data", h.DataOffset(), len(b))
	}
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	theirs, ours := filepath.Join(dir, "theirs"), filepath.Join(dir, "ours")
	for _, p := range []string{theirs, ours} {
		if err := os.WriteFile(p, orig, 0o600); err != nil {
			t.Fatal(err)
		}
		cs.MustRun("luksKillSlot", "--batch-mode", p, "0")
	}
	cs.MustRun("luksHeaderRestore", "--batch-mode", theirs, "--header-backup-file", backup)
	if err := blkcrypt.RestoreLUKSHeader(ctx, ours, b, blkcrypt.RestoreOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{theirs, ours} {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, orig) {
			t.Fatalf("%s after the restore is not the image backed up (%v)", filepath.Base(p), err)
		}
	}

	// Another key size, same data offset: both refuse, nothing written.
	var hdrs [2][]byte
	var imgs [2]string
	for i, bits := range []string{"256", "512"} {
		imgs[i] = filepath.Join(dir, "k"+bits)
		if err := os.WriteFile(imgs[i], junk, 0o600); err != nil {
			t.Fatal(err)
		}
		cs.MustRun("luksFormat", "--type", "luks1", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-size", bits,
			"--align-payload", "4096", "--key-file", cs.KeyFile(pass), imgs[i])
		cs.MustRun("luksHeaderBackup", imgs[i], "--header-backup-file", imgs[i]+".hdr")
		if hdrs[i], err = os.ReadFile(imgs[i] + ".hdr"); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.ReadFile(imgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cs.Run("luksHeaderRestore", "--batch-mode", imgs[0], "--header-backup-file", imgs[1]+".hdr"); err == nil {
		t.Fatalf("cryptsetup restores a backup of another key size: %s", out)
	}
	if err := blkcrypt.RestoreLUKSHeader(ctx, imgs[0], hdrs[1], blkcrypt.RestoreOptions{Force: true}); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Fatalf("RestoreLUKSHeader of another key size: %v", err)
	}
	if after, err := os.ReadFile(imgs[0]); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("a refused restore changed the image (%v)", err)
	}
}
