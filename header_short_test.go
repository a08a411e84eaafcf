package blkcrypt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestShortDeviceHeaderErrors is issue #25 bug 2: a device that is empty,
// shorter than a header, or cut off inside one must give ErrNoHeader (no
// LUKS magic where it is looked for) or ErrDeviceTooSmall (a header that
// starts but does not fit), never the io.EOF of the read that ran off its
// end. LUKS2 looks for a secondary header at fixed offsets up to 4 MiB,
// which is why 4 MiB of random bytes and 1 MiB of zeros gave io.EOF.
func TestShortDeviceHeaderErrors(t *testing.T) {
	dir := t.TempDir()
	fast := PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	image := func(typ string) []byte {
		p := filepath.Join(dir, typ+".img")
		if err := Format(context.Background(), p, []byte("pw"), FormatOptions{Type: typ, Size: 32 << 20, PBKDF: fast}); err != nil {
			t.Fatalf("format %s: %v", typ, err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 64<<10) // more than any cut below
		if _, err := io.ReadFull(f, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	luks1Img, luks2Img := image("luks1"), image("luks2")
	rng := rand.New(rand.NewChaCha8([32]byte{25}))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if n >= 4 && string(b[:4]) == "LUKS" {
			t.Fatal("the random bytes start with LUKS; pick another seed")
		}
		return b
	}
	noHeader, tooSmall := ErrNoHeader, ErrDeviceTooSmall
	cases := []struct {
		name string
		dev  []byte
		want error
	}{
		{"empty", nil, noHeader},
		{"511 zeros", make([]byte, 511), noHeader},
		{"511 random", random(511), noHeader},
		{"1MiB zeros", make([]byte, 1<<20), noHeader},
		{"4MiB random", random(4 << 20), noHeader},
		{"luks2 cut to 4096", luks2Img[:4096], tooSmall},
		{"luks2 cut to 511", luks2Img[:511], tooSmall},
		{"luks2 cut to 20000", luks2Img[:20000], tooSmall},
		{"luks1 cut to 511", luks1Img[:511], tooSmall},
		{"luks1 cut to 4096", luks1Img[:4096], tooSmall},
	}
	check := func(t *testing.T, what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v is an end-of-file error", what, err)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadHeader(readerDevice{bytes.NewReader(c.dev), int64(len(c.dev))})
			check(t, "ReadHeader", err, c.want)
			path := filepath.Join(t.TempDir(), "dev")
			if err := os.WriteFile(path, c.dev, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, typ := range []string{"", "luks", "luks1", "luks2"} {
				o := OpenOptions{Type: typ, ReadOnly: true}
				if typ != "" {
					// Without a type and a passphrase nothing but
					// the signatures is tried, as with a LUKS type.
					o.Passphrase = []byte("pw")
				}
				v, err := OpenDevice(context.Background(), bytes.NewReader(c.dev), o)
				if v != nil {
					v.Close()
				}
				check(t, "OpenDevice type "+typ, err, c.want)
				v, err = Open(context.Background(), path, o)
				if v != nil {
					v.Close()
				}
				check(t, "Open type "+typ, err, c.want)
			}
		})
	}
}

// TestShortDeviceOtherFormats: the other formats' readers give the shared
// errors for devices too small or without a header, never io.EOF. TCRYPT
// is asked only where no header sector fits: elsewhere it must run its
// key derivations, and it cannot tell a missing header from a wrong
// passphrase.
func TestShortDeviceOtherFormats(t *testing.T) {
	rng := rand.New(rand.NewChaCha8([32]byte{5}))
	for _, n := range []int{0, 511, 1024, 4096} {
		for _, kind := range []string{"zeros", "random"} {
			dev := make([]byte, n)
			if kind == "random" {
				for i := range dev {
					dev[i] = byte(rng.Uint32())
				}
			}
			types := []string{TypeBITLK, TypeFVAULT2}
			if n < 512 {
				types = append(types, TypeTCRYPT)
			}
			for _, typ := range types {
				want := ErrNoHeader
				if typ == TypeTCRYPT {
					want = ErrDeviceTooSmall
				}
				v, err := OpenDevice(context.Background(), bytes.NewReader(dev), OpenOptions{Type: typ, Passphrase: []byte("pw"), ReadOnly: true})
				if v != nil {
					v.Close()
				}
				if !errors.Is(err, want) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("%d bytes of %s, type %s: %v, want %v", n, kind, typ, err, want)
				}
			}
		}
	}
}
