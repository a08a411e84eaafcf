package blkcrypt_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/imagetest"
	"github.com/blkcrypt/blkcrypt/lvm"
)

// TestOpenStack opens the layers of a debian-installer image (sgdisk's
// GPT, cryptsetup's LUKS2, lvm2's VG; imagetest.Debian) in one call: what
// it reads is lvm2's vg0/root as lvs and pvs place it, a write across
// root's two segments lands where lvs says and nowhere outside partition
// 3, and the zero policy leaves an unencrypted partition as it is (issue
// #26).
func TestOpenStack(t *testing.T) {
	d := imagetest.NewDebian(t, imagetest.DebianOptions{RootMiB: 16, BigFileSize: 64 << 10})
	ctx := context.Background()
	key, err := os.ReadFile(d.Key)
	if err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(t.TempDir(), "disk.img")
	if _, err := imagetest.Sh(nil, "cp", "--sparse=always", d.Disk, disk); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(disk)

	var prepared []string
	o := blkcrypt.StackOptions{
		Partition: "PARTLABEL=cryptroot",
		Open: blkcrypt.OpenOptions{Prepare: func(typ string, o *blkcrypt.OpenOptions) error {
			prepared = append(prepared, typ)
			o.Passphrase = key
			return nil
		}},
		LV: "vg0/root",
	}
	s, err := blkcrypt.OpenStack(ctx, disk, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(prepared) != 1 || prepared[0] != blkcrypt.TypeLUKS2 || s.Volume() == nil || s.Partition() == nil || s.LV() == nil {
		t.Errorf("layers: prepared %v, volume %v, partition %v, lv %v", prepared, s.Volume(), s.Partition(), s.LV())
	}
	if s.Size() != d.RootSize {
		t.Errorf("size %d, lvs says %d", s.Size(), d.RootSize)
	}
	got := make([]byte, s.Size())
	if _, err := s.ReadAt(got, 0); err != nil || !bytes.Equal(got, d.RootBytes()) {
		t.Fatalf("OpenStack's vg0/root is not lvm2's: %v", err)
	}
	// While open, the disk is locked as Open locks it.
	if _, err := blkcrypt.OpenFileLocked(disk, true); !errors.Is(err, blkcrypt.ErrBusy) {
		t.Errorf("a second open of the disk while the stack is open: %v, want ErrBusy", err)
	}
	off := int64(d.RootSegs[1].StartPE)*d.Extent - 3000
	data := bytes.Repeat([]byte("stack write "), 1000)
	if _, err := s.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(data, s.Size()-10); err == nil {
		t.Errorf("a write past the LV's end succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(disk)
	ps, pe := d.PartStart[3], d.PartStart[3]+d.PartSize[3]
	if !bytes.Equal(before[:ps], after[:ps]) || !bytes.Equal(before[pe:], after[pe:]) {
		t.Errorf("bytes outside partition 3 changed")
	}
	// The plaintext of partition 3, through the volume alone.
	pv, err := blkcrypt.OpenStack(ctx, disk, blkcrypt.StackOptions{Partition: "3", Unlock: blkcrypt.UnlockRequired,
		Open: blkcrypt.OpenOptions{Passphrase: key}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, len(d.Plain))
	_, err = pv.ReadAt(plain, 0)
	pv.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(d.Plain)
	for i := range int64(len(data)) {
		want[d.RootPlace(off+i)] = data[i]
	}
	if !bytes.Equal(plain, want) {
		t.Errorf("the plaintext is not lvm2's layout with the write where lvs says")
	}

	// /boot (partition 2) is ext4, not encrypted: the zero policy reads
	// it as it is, UnlockRequired refuses it, an LV on it is no PV.
	boot, err := blkcrypt.OpenStack(ctx, disk, blkcrypt.StackOptions{Partition: "PARTLABEL=boot", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	magic := make([]byte, 2)
	boot.ReadAt(magic, 1024+56)
	if boot.Volume() != nil || boot.Size() != d.PartSize[2] || !bytes.Equal(magic, []byte{0x53, 0xef}) {
		t.Errorf("partition 2: volume %v, size %d (sgdisk: %d), ext4 magic %x", boot.Volume(), boot.Size(), d.PartSize[2], magic)
	}
	if _, err := boot.WriteAt([]byte{0}, 0); !errors.Is(err, blkcrypt.ErrReadOnly) {
		t.Errorf("a write to a read-only stack: %v, want ErrReadOnly", err)
	}
	boot.Close()
	if _, err := blkcrypt.OpenStack(ctx, disk, blkcrypt.StackOptions{Partition: "2", Unlock: blkcrypt.UnlockRequired}); !errors.Is(err, blkcrypt.ErrNoHeader) {
		t.Errorf("UnlockRequired on ext4: %v, want ErrNoHeader", err)
	}
	if _, err := blkcrypt.OpenStack(ctx, disk, blkcrypt.StackOptions{Partition: "2", LV: "vg0/root"}); !errors.Is(err, lvm.ErrNoPV) {
		t.Errorf("an LV on ext4: %v, want lvm.ErrNoPV", err)
	}
	wrong := o
	wrong.Open.Prepare = func(typ string, o *blkcrypt.OpenOptions) error { o.Passphrase = []byte("wrong"); return nil }
	if _, err := blkcrypt.OpenStack(ctx, disk, wrong); !errors.Is(err, blkcrypt.ErrWrongPassphrase) {
		t.Errorf("a wrong passphrase: %v", err)
	}
	// Every failure above closed what it opened: the disk takes a writer.
	f, err := blkcrypt.OpenFileLocked(disk, false)
	if err != nil {
		t.Fatalf("the disk is still locked after the stacks closed: %v", err)
	}
	f.Close()

	// The same stack over the disk in memory (OpenStackDevice).
	mem, err := blkcrypt.OpenStackDevice(ctx, bytes.NewReader(before), blkcrypt.StackOptions{Partition: "3",
		Open: blkcrypt.OpenOptions{Passphrase: key}, LV: "vg0/root"})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if _, err := mem.ReadAt(got, 0); err != nil || !bytes.Equal(got, d.RootBytes()) || !mem.ReadOnly() {
		t.Errorf("OpenStackDevice over a bytes.Reader: %v, read-only %v", err, mem.ReadOnly())
	}
}
