package luks2

import (
	"fmt"

	"github.com/blkcrypt/blkcrypt/sector"
)

// IntegrityType maps cryptsetup's --integrity spelling ("aead",
// "poly1305", "hmac-sha256", …) to the segment's integrity "type" as
// cryptsetup stores it ("aead", "poly1305", "hmac(sha256)"), and refuses
// what blkcrypt cannot open.
func IntegrityType(name string) (string, error) {
	switch name {
	case "aead", "poly1305":
		return name, nil
	case "hmac-sha1", "hmac-sha256", "hmac-sha512":
		return "hmac(" + name[len("hmac-"):] + ")", nil
	case "hmac(sha1)", "hmac(sha256)", "hmac(sha512)":
		return name, nil
	}
	return "", fmt.Errorf("%w: integrity %q (aead, poly1305, hmac-sha1, hmac-sha256, hmac-sha512)", ErrUnsupported, name)
}

// IntegrityKeySize is how many bytes an --integrity adds to the volume
// key after the cipher's key, as cryptsetup sizes it: an HMAC's key is its
// digest size (hmac-sha1 20, hmac-sha256 32, hmac-sha512 64, in either
// spelling); aead and poly1305 add none, and so does a name it does not
// know (IntegrityType refuses that).
func IntegrityKeySize(name string) int {
	t, err := IntegrityType(name)
	if err != nil {
		return 0
	}
	return map[string]int{"hmac(sha1)": 20, "hmac(sha256)": 32, "hmac(sha512)": 64}[t]
}

// checkIntegrityCipher checks that cipher with integrity type integ and
// a keyLen-byte volume key (the cipher's key, then for hmac the MAC key)
// make an authenticated sector cipher.
func checkIntegrityCipher(cipher, integ string, keyLen int) error {
	a, err := sector.NewAEAD(cipher, integ, make([]byte, keyLen), 512, 0)
	if err != nil {
		return err
	}
	a.Wipe()
	return nil
}
