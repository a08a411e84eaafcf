package blkcrypt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// TestIntegrityVolume: a LUKS2 volume with authenticated sectors made by
// Format, written (whole and partial sectors) and read back through Open;
// a flipped bit in one sector's data fails exactly the requests that
// touch it with *IntegrityError naming it, and the rest still read. The
// kernel's verdict on the same volumes is test/kernel's TestAEAD.
func TestIntegrityVolume(t *testing.T) {
	pass := []byte("integrity volume")
	for _, c := range []struct {
		cipher, integ string
		key, ss       int
	}{
		{"aes-gcm-random", "aead", 32, 4096},
		{"chacha20-random", "poly1305", 32, 512},
		{"aes-xts-plain64", "hmac-sha256", 64 + 32, 4096},
	} {
		p := filepath.Join(t.TempDir(), "v.img")
		err := Format(context.Background(), p, pass, FormatOptions{Cipher: c.cipher, Integrity: c.integ, KeySize: c.key, SectorSize: c.ss,
			Size: 3 << 20, Offset: 2048, PBKDF: PBKDFOptions{Type: "pbkdf2", Iterations: 1000}})
		if err != nil {
			t.Fatalf("%s: format: %v", c.cipher, err)
		}
		v, err := Open(context.Background(), p, OpenOptions{Passphrase: pass})
		if err != nil {
			t.Fatalf("%s: open: %v", c.cipher, err)
		}
		if v.AEAD() == nil || v.Cipher() != nil || v.CipherSpec() == "" {
			t.Errorf("%s: AEAD %v, Cipher %v, CipherSpec %q", c.cipher, v.AEAD(), v.Cipher(), v.CipherSpec())
		}
		want := make([]byte, v.Size())
		for i := range want {
			want[i] = byte(i * 7)
		}
		if _, err := v.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		copy(want[1000:], "partial sector write")
		if _, err := v.WriteAt([]byte("partial sector write"), 1000); err != nil {
			t.Fatal(err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		// Flip a bit in the ciphertext of sector 5.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, err := luks2.Read(luksutil.File{File: f})
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		iv, err := integrity.Open(&integrity.SectionDevice{Dev: f, Offset: h.DataOffset(), Length: fi.Size() - h.DataOffset()}, integrity.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		g := iv.Geometry()
		iv.Close()
		at := h.DataOffset() + int64(g.DataSector(5*uint64(c.ss/512)))<<9 + 9
		b := []byte{0}
		f.ReadAt(b, at)
		b[0] ^= 1
		f.WriteAt(b, at)
		f.Close()

		v, err = Open(context.Background(), p, OpenOptions{Passphrase: pass, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, v.Size())
		_, err = v.ReadAt(got, 0)
		var ie *IntegrityError
		if !errors.As(err, &ie) || !errors.Is(err, ErrIntegrity) || ie.Offset != 5*int64(c.ss) || ie.Sector != 5*uint64(c.ss/512) {
			t.Fatalf("%s: tampered read: %v", c.cipher, err)
		}
		ss := int64(c.ss)
		if _, err := v.ReadAt(got[:5*ss], 0); err != nil || !bytes.Equal(got[:5*ss], want[:5*ss]) {
			t.Errorf("%s: sectors before the bad one: %v", c.cipher, err)
		}
		if _, err := v.ReadAt(got[6*ss:], 6*ss); err != nil || !bytes.Equal(got[6*ss:], want[6*ss:]) {
			t.Errorf("%s: sectors after the bad one: %v", c.cipher, err)
		}
		if _, err := v.ReadAt(got[:10], 5*ss+100); !errors.Is(err, ErrIntegrity) {
			t.Errorf("%s: a partial read of the bad sector: %v", c.cipher, err)
		}
		v.Close()
	}
}

func TestIntegrityFormatRefusals(t *testing.T) {
	p := filepath.Join(t.TempDir(), "v.img")
	for _, o := range []FormatOptions{
		{Cipher: "aes-gcm-random", Integrity: "crc32c", KeySize: 32},
		{Cipher: "aes-gcm-random", Integrity: "aead", KeySize: 33},
		{Cipher: "aes-xts-plain64", Integrity: "aead", KeySize: 64},
		{Type: "luks1", Cipher: "aes-gcm-random", Integrity: "aead", KeySize: 32},
	} {
		o.Size = 3 << 20
		o.Offset = 2048
		o.PBKDF = PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
		if err := Format(context.Background(), p, []byte("x"), o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v", o, err)
		}
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%+v: a refused format left a file", o)
		}
	}
}
