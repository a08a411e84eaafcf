package nbdclient_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

// TestLibraryOverURI: with this package imported, the library's path-taking
// calls take a URI: Format, Open (read-write, then read-only), AddKey, and a
// Volume's Discard reaching the server as TRIM.
func TestLibraryOverURI(t *testing.T) {
	s := nbdtest.Nbdkit(t, false, "memory", "20M")
	ctx := context.Background()
	pbkdf := blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
	if err := blkcrypt.Format(ctx, s.URI, []byte("pw"), blkcrypt.FormatOptions{PBKDF: pbkdf}); err != nil {
		t.Fatalf("Format over %s: %v", s.URI, err)
	}
	if _, err := blkcrypt.AddKey(ctx, s.URI, []byte("pw"), []byte("second"), pbkdf); err != nil {
		t.Fatalf("AddKey: %v", err)
	}
	v, err := blkcrypt.Open(ctx, s.URI, blkcrypt.OpenOptions{Passphrase: []byte("second")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	data := make([]byte, 1<<20)
	rand.Read(data)
	if _, err := v.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := v.Discard(512<<10, 512<<10); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	// The discarded half reads as zeros on the server (nbdkit memory frees
	// trimmed blocks); the rest is still ciphertext, not the plaintext.
	c, err := nbdclient.Dial(ctx, s.URI, nbdclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw := make([]byte, 1<<20)
	if _, err := c.ReadAt(raw, 16<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw[512<<10:], make([]byte, 512<<10)) {
		t.Fatal("the discard did not reach the server as TRIM")
	}
	if bytes.Equal(raw[:4096], data[:4096]) {
		t.Fatal("plaintext on the server")
	}
	v, err = blkcrypt.Open(ctx, s.URI, blkcrypt.OpenOptions{Passphrase: []byte("pw"), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, 512<<10)
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, data[:512<<10]) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := v.WriteAt(got, 0); err == nil {
		t.Fatal("a read-only open wrote")
	}
}
