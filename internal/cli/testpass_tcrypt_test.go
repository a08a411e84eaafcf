package cli

import (
	"path/filepath"
	"testing"
)

// TestTestPassphraseTCRYPT: `open --test-passphrase --type tcrypt` accepts
// the right password and exits 2 on a wrong one, as cryptsetup does.
func TestTestPassphraseTCRYPT(t *testing.T) {
	img := filepath.Join(unpack(t, "tcrypt-images.tar.xz"), "tcrypt-images", "tc_5-ripemd160-xts-aes")
	before := fileSum(t, img)
	if code, _, e := run(t, []byte("aaaaaaaaaaaa\n"), "open", "--test-passphrase", "--type", "tcrypt", "--disable-veracrypt", img); code != 0 {
		t.Fatalf("right password: exit %d %s", code, e)
	}
	if code, _, _ := run(t, []byte("wrong\n"), "test-passphrase", "--type", "tcrypt", "--disable-veracrypt", img); code != 2 {
		t.Fatalf("wrong password: exit %d, want 2", code)
	}
	if fileSum(t, img) != before {
		t.Fatal("test-passphrase changed the image")
	}
}
