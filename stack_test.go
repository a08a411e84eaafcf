package blkcrypt_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/partition"
)

// TestStackPartition: a LUKS2 volume formatted, keyed and written inside
// partition 2 of an sgdisk-made GPT disk through OpenPartition and
// OpenLUKSPartition; cryptsetup judges the partition cut out where
// sgdisk says it is, and the bytes outside it do not change.
func TestStackPartition(t *testing.T) {
	sgdisk := testenv.Need(t, "sgdisk", "gdisk")
	cryptsetup := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	ctx := context.Background()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 40<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sgdisk, "-n", "1:2048:+4M", "-c", "1:first", "-n", "2:0:+30M", "-t", "2:8309", "-c", "2:cryptdata", disk).CombinedOutput(); err != nil {
		t.Fatalf("sgdisk: %v: %s", err, out)
	}
	info, err := exec.Command(sgdisk, "-i", "2", disk).Output()
	if err != nil {
		t.Fatal(err)
	}
	var first, last int64
	for _, l := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(l, "First sector: "); ok {
			first, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "Last sector: "); ok {
			last, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	start, end := first*512, (last+1)*512
	before, _ := os.ReadFile(disk)

	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pbkdf := blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	part, err := blkcrypt.OpenPartition(f, 40<<20, "PARTLABEL=cryptdata")
	if err != nil {
		t.Fatal(err)
	}
	if err := blkcrypt.FormatDevice(ctx, part, []byte("first"), blkcrypt.FormatOptions{PBKDF: pbkdf}); err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.OpenDevice(ctx, part, blkcrypt.OpenOptions{Passphrase: []byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("partition two "), 1000)
	if _, err := v.WriteAt(data, v.Size()-int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt([]byte{1}, v.Size()); err == nil {
		t.Error("a write past the volume's end succeeded")
	}
	if err := v.Close(); err != nil { // closes part, not f
		t.Fatal(err)
	}
	h, err := blkcrypt.OpenLUKSPartition(ctx, disk, "2", blkcrypt.LUKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddKey(ctx, []byte("first"), []byte("second"), blkcrypt.KeyOptions{PBKDF: pbkdf}); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}

	after, _ := os.ReadFile(disk)
	if sha256.Sum256(before[:start]) != sha256.Sum256(after[:start]) || sha256.Sum256(before[end:]) != sha256.Sum256(after[end:]) {
		t.Error("bytes outside partition 2 changed")
	}
	cut := filepath.Join(dir, "p2")
	if err := os.WriteFile(cut, after[start:end], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"first", "second"} {
		cmd := exec.Command(cryptsetup, "open", "--test-passphrase", "--key-file", "-", cut)
		cmd.Stdin = strings.NewReader(pw)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("cryptsetup does not open partition 2 with %q: %v: %s", pw, err, out)
		}
	}

	// Selection errors are the partition package's, wrapped.
	for sel, want := range map[string]error{"7": partition.ErrNotFound, "PARTLABEL=nope": partition.ErrNotFound} {
		if _, err := blkcrypt.OpenPartition(f, 40<<20, sel); !errors.Is(err, want) {
			t.Errorf("OpenPartition %q: %v, want %v", sel, err, want)
		}
	}
	if _, err := blkcrypt.OpenLUKSPartition(ctx, disk, "1", blkcrypt.LUKSOptions{}); !errors.Is(err, blkcrypt.ErrNotLUKS) {
		t.Errorf("OpenLUKSPartition on a partition without LUKS: %v", err)
	}
	if _, err := blkcrypt.OpenPartition(bytes.NewReader(make([]byte, 1<<20)), 1<<20, "1"); !errors.Is(err, partition.ErrNoTable) {
		t.Errorf("OpenPartition without a table: %v", err)
	}
}

func TestStackOpenLVNames(t *testing.T) {
	for _, name := range []string{"", "vg", "vg/", "/lv", "vg/lv/x"} {
		if _, err := blkcrypt.OpenLV(bytes.NewReader(make([]byte, 4096)), 4096, name); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
			t.Errorf("OpenLV %q: %v", name, err)
		}
	}
	if _, err := blkcrypt.OpenLV(bytes.NewReader(make([]byte, 4096)), 4096, "vg/lv"); err == nil || !strings.Contains(err.Error(), "no LVM2 physical volume") {
		t.Errorf("OpenLV on zeros: %v", err)
	}
}
