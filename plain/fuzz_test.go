package plain

import (
	"bytes"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/keyinput"
)

// FuzzPlainOptions: hash specs, passphrases, key sizes and key-file limits
// never panic; a derived key always has the requested size.
func FuzzPlainOptions(f *testing.F) {
	for _, h := range []string{"sha256", "ripemd160:20", "plain", "plain:9", "sha256:", "whirlpool", "nosuch", "sha512:64"} {
		f.Add(h, []byte("passphrase\nrest"), uint8(32), int16(0), int16(0))
	}
	f.Fuzz(func(t *testing.T, hash string, input []byte, ks uint8, off, size int16) {
		o := keyinput.Options{Offset: int64(off), Size: int64(size)}
		p, err := keyinput.ReadPassphrase(bytes.NewReader(input), o)
		if err != nil {
			return
		}
		key, err := Key(hash, p, int(ks))
		if err == nil && len(key) != int(ks) {
			t.Fatalf("Key(%q, %d) gave %d bytes", hash, ks, len(key))
		}
		k2, err := keyinput.ReadKeyFile(bytes.NewReader(input), o)
		if err == nil && o.Size > 0 && int64(len(k2)) > o.Size {
			t.Fatalf("key file read %d bytes past --keyfile-size %d", len(k2), o.Size)
		}
	})
}
