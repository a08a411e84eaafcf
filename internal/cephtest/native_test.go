//go:build ceph && cgo && linux

package cephtest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/cephtest"
	"github.com/blkcrypt/blkcrypt/rbd"
)

// TestRBDNative: the native device (package rbd, librbd through cgo) as a
// blkcrypt DEVICE, rbd:POOL/IMAGE@conf=FILE: blkcrypt formats and writes
// the image, librbd's encryption (qemu's rbd driver) reads exactly that;
// librbd writes, the native device reads it; an image that is not there
// is an error naming it, wrapping ENOENT.
func TestRBDNative(t *testing.T) {
	c := cephtest.Get(t)
	ctx := context.Background()
	pass := []byte("native passphrase")
	passFile := writeFile(t, "pass", pass)
	img := c.NewImage(t, imageSize)
	dev := "rbd:rbd/" + img + "@conf=" + c.Conf
	if !blkcrypt.IsURI(dev) {
		t.Fatalf("%s is not taken as a device", dev)
	}
	if err := blkcrypt.Format(ctx, dev, pass, blkcrypt.FormatOptions{PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatalf("Format %s: %v", dev, err)
	}
	v := open(t, dev, pass, false)
	checkLayout(t, c, img, "luks2", v)
	want := randBytes(t, v.Size())
	writeMixed(t, v, want)
	if err := v.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !bytes.Equal(c.LibrbdRead(t, img, "luks2", passFile), want) {
		t.Fatal("librbd read other bytes than blkcrypt wrote through the native device")
	}
	head := randBytes(t, 2<<20)
	c.LibrbdWrite(t, img, "luks2", passFile, writeFile(t, "head", head))
	copy(want, head)
	v = open(t, dev, pass, true)
	defer v.Close()
	if !bytes.Equal(readAll(t, v), want) {
		t.Fatal("the native device read other bytes than librbd wrote")
	}
	if _, err := v.WriteAt(make([]byte, 4096), 0); err == nil {
		t.Fatal("a read-only open wrote")
	}

	_, err := blkcrypt.Open(ctx, "rbd:rbd/no-such-image@conf="+c.Conf, blkcrypt.OpenOptions{Passphrase: pass})
	if !errors.Is(err, rbd.ErrCeph) || !errors.Is(err, syscall.ENOENT) || !bytes.Contains([]byte(err.Error()), []byte("rbd/no-such-image")) {
		t.Errorf("a missing image: %v", err)
	}
}

// TestRBDNativeTuning: the native device runs with librbd's zero-copy
// writes and without its cache, unless the configuration chose a cache
// policy, which it then keeps. (Through configuration files: librados
// reads CEPH_ARGS once per process.)
func TestRBDNativeTuning(t *testing.T) {
	c := cephtest.Get(t)
	img := c.NewImage(t, imageSize)
	base, err := os.ReadFile(c.Conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		extra string
		want  map[string]string
	}{
		{"", map[string]string{"rbd_cache": "false", "rbd_disable_zero_copy_writes": "false"}},
		{"rbd cache policy = writeback", map[string]string{"rbd_cache": "true", "rbd_cache_policy": "writeback", "rbd_disable_zero_copy_writes": "false"}},
		{"rbd cache = false", map[string]string{"rbd_cache": "false", "rbd_cache_policy": "writearound"}},
	} {
		conf := writeFile(t, "ceph.conf", append(append([]byte{}, base...), "\n[client.admin]\n"+tc.extra+"\n"...))
		im, err := rbd.Open(context.Background(), "rbd:rbd/"+img+"@conf="+conf, false)
		if err != nil {
			t.Fatalf("%q: open: %v", tc.extra, err)
		}
		for k, want := range tc.want {
			if got, err := im.ConfigValue(k); err != nil || got != want {
				t.Errorf("%q: %s = %q, %v; want %q", tc.extra, k, got, err, want)
			}
		}
		if _, err := im.ConfigValue("no_such_option"); !errors.Is(err, rbd.ErrCeph) || !errors.Is(err, syscall.ENOENT) {
			t.Errorf("an unknown option: %v, want ErrCeph and ENOENT", err)
		}
		if err := im.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if _, err := im.ConfigValue("rbd_cache"); !errors.Is(err, rbd.ErrClosed) {
			t.Errorf("after Close: %v, want ErrClosed", err)
		}
	}
}
