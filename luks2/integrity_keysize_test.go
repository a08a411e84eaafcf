package luks2

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"testing"
)

// TestIntegrityKeySize: an HMAC's key is its digest's size (Go's hashes
// say how big), in cryptsetup's and the kernel's spelling; the AEADs add
// no key.
func TestIntegrityKeySize(t *testing.T) {
	for name, want := range map[string]int{
		"hmac-sha1": sha1.Size, "hmac(sha1)": sha1.Size,
		"hmac-sha256": sha256.Size, "hmac(sha256)": sha256.Size,
		"hmac-sha512": sha512.Size, "hmac(sha512)": sha512.Size,
		"aead": 0, "poly1305": 0, "hmac-md5": 0, "": 0,
	} {
		if got := IntegrityKeySize(name); got != want {
			t.Errorf("IntegrityKeySize(%q) = %d, want %d", name, got, want)
		}
	}
}
