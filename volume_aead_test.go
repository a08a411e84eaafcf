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
	"github.com/blkcrypt/blkcrypt/internal/powercut"
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

// TestIntegrityVolumePowerCut cuts the power at every point of a write
// to an authenticated volume (through dm-integrity's journal) and after
// each: every sector verifies and holds its old or its new content, for
// several choices of which unsynced writes the disk kept.
func TestIntegrityVolumePowerCut(t *testing.T) {
	pass := []byte("power cut")
	p := filepath.Join(t.TempDir(), "v.img")
	if err := Format(context.Background(), p, pass, FormatOptions{Cipher: "aes-gcm-random", Integrity: "aead", KeySize: 32, SectorSize: 512,
		Size: 2 << 20, Offset: 2048, PBKDF: PBKDFOptions{Type: "pbkdf2", Iterations: 1000}}); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	const first, n, ss = 3, 40, 512
	dev := powercut.New(base)
	v, err := OpenDevice(context.Background(), dev, OpenOptions{Passphrase: pass})
	if err != nil {
		t.Fatal(err)
	}
	size := v.Size()
	before := dev.Ops()
	newData := bytes.Repeat([]byte("new!"), n*ss/4)
	if _, err := v.WriteAt(newData, first*ss); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	sawOld, sawNew := 0, 0
	for k := before; k <= dev.Ops(); k++ {
		for i, im := range dev.CutAfter(k).Images(uint64(k), 3) {
			v2, err := OpenDevice(context.Background(), powercut.New(im.Bytes()), OpenOptions{Passphrase: pass})
			if err != nil {
				t.Fatalf("cut after op %d (image %d): open: %v", k, i, err)
			}
			got := make([]byte, size)
			if _, err := v2.ReadAt(got, 0); err != nil {
				t.Fatalf("cut after op %d (image %d): read: %v", k, i, err)
			}
			for s := int64(0); s < size/ss; s++ {
				sec := got[s*ss : (s+1)*ss]
				old := make([]byte, ss)
				var nw []byte
				if s >= first && s < first+n {
					nw = newData[(s-first)*ss : (s-first+1)*ss]
				}
				if !bytes.Equal(sec, old) && (nw == nil || !bytes.Equal(sec, nw)) {
					t.Fatalf("cut after op %d (image %d): sector %d is neither old nor new", k, i, s)
				}
			}
			if bytes.Equal(got[first*ss:(first+n)*ss], newData) {
				sawNew++
			} else {
				sawOld++
			}
			v2.Close()
		}
	}
	if sawOld == 0 || sawNew == 0 {
		t.Fatalf("the sweep saw %d old and %d new states: it cut nothing that matters", sawOld, sawNew)
	}
}
