package blkcrypt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blkcrypt/blkcrypt"
)

// Format a LUKS2 image, open it with only its passphrase, write and read
// through the decrypted view.
func Example() {
	dir, _ := os.MkdirTemp("", "blkcrypt-example-")
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "disk.img")
	ctx := context.Background()

	// A forced, cheap KDF keeps the example fast; leave PBKDF zero for
	// cryptsetup's benchmarked default.
	err := blkcrypt.Format(ctx, img, []byte("secret"), blkcrypt.FormatOptions{
		Size:  32 << 20,
		PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("secret")})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := v.WriteAt([]byte("hello, dm-crypt"), 1000); err != nil {
		fmt.Println(err)
	}
	buf := make([]byte, 15)
	if _, err := v.ReadAt(buf, 1000); err != nil {
		fmt.Println(err)
	}
	fmt.Println(v.Type(), string(buf))
	if err := v.Close(); err != nil {
		fmt.Println(err)
	}

	_, err = blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("guess")})
	fmt.Println(errors.Is(err, blkcrypt.ErrWrongPassphrase))
	// Output:
	// luks2 hello, dm-crypt
	// true
}

// OpenDevice takes any io.ReaderAt: here an image held in memory. Without
// an io.WriterAt the volume is read-only.
func ExampleOpenDevice() {
	dir, _ := os.MkdirTemp("", "blkcrypt-example-")
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "disk.img")
	ctx := context.Background()
	err := blkcrypt.Format(ctx, img, []byte("secret"), blkcrypt.FormatOptions{
		Type:  "luks1",
		Size:  8 << 20,
		PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, err := blkcrypt.OpenDevice(ctx, bytes.NewReader(raw), blkcrypt.OpenOptions{Passphrase: []byte("secret")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	_, err = v.WriteAt([]byte("x"), 0)
	fmt.Println(v.Type(), v.ReadOnly(), errors.Is(err, blkcrypt.ErrReadOnly))
	// Output:
	// luks1 true true
}
