package blkcrypt

import (
	"context"
	"errors"
	"testing"
)

// TestURISchemeWithColon: a scheme registered with its colon takes
// "scheme:REST" (the rbd:POOL/IMAGE form), and only that scheme does; the
// rbd: form is no device at all in the default build, where package rbd
// registers nothing, so a file of that name stays a file.
func TestURISchemeWithColon(t *testing.T) {
	if IsURI("rbd:rbd/vol") {
		t.Skip("a build with the rbd: device registered (-tags ceph)")
	}
	var got string
	RegisterURIScheme("testcolon:", func(_ context.Context, uri string, _ bool) (URIDevice, error) {
		got = uri
		return nil, errors.New("test opener")
	})
	for in, want := range map[string]bool{
		"testcolon:pool/img":      true,
		"TESTCOLON:pool/img":      true,
		"testcolon://host/x":      true,
		"testcolonx:pool/img":     false,
		"/tmp/testcolon:pool/img": false,
		"rbd:rbd/vol":             false,
		// Registered by importing nbd/nbdclient, which the root does
		// not (TestLayering).
		"nbd://127.0.0.1/x": false,
	} {
		if IsURI(in) != want {
			t.Errorf("IsURI(%q) = %v, want %v", in, !want, want)
		}
	}
	if _, err := OpenURI(context.Background(), "testcolon:pool/img", true); err == nil || got != "testcolon:pool/img" {
		t.Errorf("OpenURI reached the opener with %q (%v)", got, err)
	}
}
