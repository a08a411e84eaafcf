//go:build ceph && cgo && linux

package cephtest_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/cephtest"
	"github.com/blkcrypt/blkcrypt/internal/tangtest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestRBDNativeGatewayTang: the gateway serves a Ceph RBD volume unlocked
// through tang, with no key file. cryptsetup formats the image's header
// (on a local copy: clevis binds files, not RBD images), clevis luks bind
// binds it to Debian's tang, and the copy becomes the RBD image; librbd's
// own encryption (qemu's rbd driver, keyed by the passphrase) writes the
// plaintext. `blkcrypt serve --exports FILE` with an rbd: export naming
// no key serves it: nbdcopy reads what librbd wrote, and what nbdcopy
// writes through the gateway librbd reads back.
func TestRBDNativeGatewayTang(t *testing.T) {
	c := cephtest.Get(t)
	testenv.Need(t, "nbdcopy", "libnbd-bin")
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	tang := tangtest.Start(t)
	dir := t.TempDir()
	passFile := writeFile(t, "pass", []byte("rbd passphrase kept off the gateway"))

	local := filepath.Join(dir, "local.img")
	if err := os.WriteFile(local, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(local, imageSize); err != nil {
		t.Fatal(err)
	}
	// 4096-byte sectors, as librbd formats LUKS2; a cheap KDF.
	if out, err := exec.Command(cs, "luksFormat", "-q", "--type", "luks2", "--sector-size", "4096",
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", passFile, local).CombinedOutput(); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v %s", err, out)
	}
	tang.Bind(t, local, passFile)
	img := c.NewImage(t, imageSize)
	c.Run(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", local, c.RawSpec(img))

	size := c.LibrbdSize(t, img, "luks2", passFile)
	want := randBytes(t, size)
	c.LibrbdWrite(t, img, "luks2", passFile, writeFile(t, "plain", want))

	sock := filepath.Join(dir, "gw.sock")
	exports := writeFile(t, "exports", []byte("vol=rbd:rbd/"+img+"@conf="+c.Conf+"\n"))
	stderr, stop := startServe(t, sock, []string{"serve", "--listen", "unix:" + sock, "--exports", exports})
	uri := "nbd+unix:///vol?socket=" + sock
	back := filepath.Join(dir, "back")
	if out, err := exec.Command("nbdcopy", uri, back).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy from the gateway: %v %s\n%s", err, out, stderr.String())
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, want) {
		t.Fatalf("the gateway serves %d bytes other than the %d librbd wrote", len(got), len(want))
	}
	head := randBytes(t, 2<<20)
	if out, err := exec.Command("nbdcopy", "--flush", writeFile(t, "head", head), uri).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy to the gateway: %v %s", err, out)
	}
	copy(want, head)
	if code := stop(); code != 0 {
		t.Fatalf("gateway exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "export vol: serving rbd:rbd/"+img) {
		t.Errorf("gateway log: %s", stderr.String())
	}
	if !bytes.Equal(c.LibrbdRead(t, img, "luks2", passFile), want) {
		t.Error("librbd reads other bytes than were written through the gateway")
	}
}
