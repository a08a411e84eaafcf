package blkcrypt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt"
)

// BenchmarkIntegrityVolume: sequential 1 MiB reads and writes of a LUKS2
// volume with authenticated sectors (--integrity: dm-integrity in its
// default journal mode under the AEAD) against a plain LUKS2 volume of
// the same size, both 4096-byte sectors in a file (on tmpfs when TMPDIR
// points there), for issue #29's target: integrity ≥ 0.5× plain. Run on
// an idle machine (bench/aead.sh).
func BenchmarkIntegrityVolume(b *testing.B) {
	const size = 64 << 20
	for _, c := range []struct{ name, cipher, integ string }{
		{"plain-xts", "aes-xts-plain64", ""},
		{"gcm-random", "aes-gcm-random", "aead"},
		{"xts-hmac-sha256", "aes-xts-plain64", "hmac-sha256"},
	} {
		p := filepath.Join(b.TempDir(), "v")
		keySize := 64
		switch c.integ {
		case "aead":
			keySize = 32
		case "hmac-sha256":
			keySize = 64 + 32
		}
		pass := []byte("bench")
		if err := blkcrypt.Format(context.Background(), p, pass, blkcrypt.FormatOptions{Type: "luks2", Cipher: c.cipher,
			Integrity: c.integ, KeySize: keySize, SectorSize: 4096, Size: size,
			PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
			b.Fatalf("%s: format: %v", c.name, err)
		}
		v, err := blkcrypt.Open(context.Background(), p, blkcrypt.OpenOptions{Passphrase: pass, Type: "luks2"})
		if err != nil {
			b.Fatalf("%s: open: %v", c.name, err)
		}
		buf := make([]byte, 1<<20)
		n := v.Size() / int64(len(buf))
		for _, op := range []string{"read", "write"} {
			b.Run(fmt.Sprintf("%s/%s", c.name, op), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for i := 0; b.Loop(); i++ {
					off := int64(i) % n * int64(len(buf))
					var err error
					if op == "read" {
						_, err = v.ReadAt(buf, off)
					} else {
						_, err = v.WriteAt(buf, off)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		if err := v.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
