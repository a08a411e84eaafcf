package nbdclient

import (
	"errors"
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	good := []struct {
		in                       string
		network, addr, export    string
		tls, noVerify            bool
		certDir, serverName, out string
	}{
		{in: "nbd://example.com", network: "tcp", addr: "example.com:10809", serverName: "example.com", out: "nbd://example.com:10809/"},
		{in: "nbd://example.com:1234/disk", network: "tcp", addr: "example.com:1234", export: "disk", serverName: "example.com"},
		{in: "nbd://[::1]:1234/a%20b", network: "tcp", addr: "[::1]:1234", export: "a b", serverName: "::1"},
		{in: "nbd://[fe80::1]/", network: "tcp", addr: "[fe80::1]:10809", serverName: "fe80::1"},
		{in: "nbds://h/x?tls-certificates=/etc/pki&tls-verify-peer=false", network: "tcp", addr: "h:10809", export: "x", tls: true, certDir: "/etc/pki", noVerify: true, serverName: "h"},
		{in: "nbd+unix:///foo?socket=/tmp/nbd.sock", network: "unix", addr: "/tmp/nbd.sock", export: "foo", serverName: "localhost"},
		{in: "nbds+unix:///?socket=/s&tls-certificates=certs", network: "unix", addr: "/s", tls: true, certDir: "certs", serverName: "localhost"},
		{in: "NBD://H/", network: "tcp", addr: "H:10809", serverName: "H"},
	}
	for _, g := range good {
		tg, err := ParseURI(g.in)
		if err != nil {
			t.Errorf("ParseURI(%q): %v", g.in, err)
			continue
		}
		if tg.Network != g.network || tg.Addr != g.addr || tg.Export != g.export || tg.TLS != g.tls ||
			tg.CertDir != g.certDir || tg.NoVerify != g.noVerify || tg.ServerName != g.serverName {
			t.Errorf("ParseURI(%q) = %+v", g.in, tg)
		}
		if g.out != "" && tg.String() != g.out {
			t.Errorf("String of %q = %q, want %q", g.in, tg.String(), g.out)
		}
		if back, err := ParseURI(tg.String()); err != nil || *back != *tg {
			t.Errorf("%q does not parse back to itself (%v)", tg.String(), err)
		}
	}
	bad := []string{
		"", "nbd:", "nbd:host", "nbd://", "nbd:///x", "nbd://h:0/", "nbd://h:99999/", "nbd://h:/",
		"nbd://h:port/", "http://h/", "nbd+vsock:///", "nbd+unix:///x", "nbd+unix://host/?socket=/s",
		"nbd://h/?socket=/s", "nbd://h/?tls-certificates=/d", "nbds://h/?tls-verify-peer=maybe",
		"nbd://h/?unknown=1", "nbd://h/#frag", "nbd+unix:///?socket=/a&socket=/b", "nbd://[::1/",
	}
	for _, b := range bad {
		if tg, err := ParseURI(b); !errors.Is(err, ErrBadURI) {
			t.Errorf("ParseURI(%q) = %+v, %v; want ErrBadURI", b, tg, err)
		}
	}
	for _, leak := range []string{"nbd://alice:s3cret@h/", "nbd://alice:s3cret@h:x/"} {
		if _, err := ParseURI(leak); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURI(%q): %v; want an error without the password", leak, err)
		}
	}
	if tg, err := ParseURI("nbds://alice@h/"); err != nil || strings.Contains(tg.String(), "alice") {
		t.Errorf("a user part: %v, %v", tg, err)
	}
	if !IsURI("nbds+unix:///?socket=x") || IsURI("/tmp/nbd:/x") || IsURI("image.img") {
		t.Error("IsURI")
	}
}
