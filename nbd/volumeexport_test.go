package nbd

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func i64(n int64) *int64   { return &n }
func str(s string) *string { return &s }

// TestVolumeExportOptions: export lines as a gateway's list holds them
// become the typed options, with the key rules applied, or one-line
// errors naming the export.
func TestVolumeExportOptions(t *testing.T) {
	for _, c := range []struct {
		line string
		want VolumeExportOptions
		err  string // a part of the error; "" for none
	}{
		{line: "a=/dev/x", want: VolumeExportOptions{TokenOnly: true}},
		{line: "a=img,type=luks2", want: VolumeExportOptions{Type: "luks2", TokenOnly: true}},
		{line: "a=img,key-file=k,keyfile-offset=0x10,keyfile-size=32,key-slot=1,type=luks2,header=h,read-only,allow-discards",
			want: VolumeExportOptions{KeyFile: "k", KeyfileOffset: 16, KeyfileSize: i64(32), KeySlot: i64(1), Type: "luks2", Header: "h", ReadOnly: true, AllowDiscards: true}},
		{line: "a=img,cinder-key-file=k,partition=2,lv=vg/lv",
			want: VolumeExportOptions{CinderKeyFile: "k", Partition: str("2"), LV: "vg/lv"}},
		{line: "a=img,type=plain,cipher=aes-xts-plain64,key-size=512,hash=sha256,offset=8,skip=010,size=100,sector-size=4096,iv-large-sectors,volume-key-file=vk",
			want: VolumeExportOptions{Type: "plain", Cipher: "aes-xts-plain64", KeySize: i64(512), Hash: "sha256", Offset: i64(8), Skip: i64(8),
				Size: i64(100), SectorSize: i64(4096), IVLargeSectors: true, VolumeKeyFile: "vk"}},
		{line: `a=rbd:rbd/img,token-id=3,token-type=systemd-tpm2,tpm2-device="swtpm:host=127.0.0.1,port=2321",tpm2-pin-file=pin`,
			want: VolumeExportOptions{TokenOnly: true, TokenID: i64(3), TokenType: "systemd-tpm2", TPM2Device: "swtpm:host=127.0.0.1,port=2321", TPM2PINFile: "pin"}},
		{line: "a=img,token-only,token-id=31", want: VolumeExportOptions{TokenOnly: true, TokenID: i64(31)}},
		{line: "a=img,token-id=32", err: "export a: token-id=32 is not in 0..31"},
		{line: "a=img,token-id=-1", err: "not in 0..31"},
		{line: "a=img,type=bitlk", err: "export a: a type=bitlk volume has no tokens"},
		{line: "a=img,key-file=k,token-only", err: "token-only cannot be used with"},
		{line: "a=img,cinder-key-file=k,token-only", err: "token-only cannot be used with"},
		{line: "a=img,cinder-key-file=k,key-file=k2", err: "cinder-key-file is the whole key"},
		{line: "a=img,cinder-key-file=k,keyfile-size=8", err: "cinder-key-file is the whole key"},
		{line: "a=img,cinder-key-file=-", err: "a key cannot come from stdin"},
		{line: "a=img,key-file=-", err: "a key cannot come from stdin"},
		{line: "a=img,tpm2-pin-file=-", err: "a key cannot come from stdin"},
		{line: "a=img,key-slot=x,key-file=k", err: "not a whole number"},
		{line: "a=img,read-only=yes", err: "takes no value"},
		{line: "a=img,passphrase=secret", err: `unknown option "passphrase"`},
	} {
		e, err := ParseExport(c.line, VolumeExportSyntax)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: error %v, want one line with %q", c.line, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		o, err := VolumeExportOptionsOf(e)
		if err != nil {
			t.Errorf("%s: VolumeExportOptionsOf after ParseExport: %v", c.line, err)
			continue
		}
		if !reflect.DeepEqual(o, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.line, o, c.want)
		}
	}
	// A spec not parsed with the syntax (a program's own) is checked too.
	if _, err := VolumeExportOptionsOf(ExportSpec{Name: "b", Device: "d", Options: map[string]string{"pass": "x"}}); err == nil || !strings.Contains(err.Error(), "export b") {
		t.Errorf("unknown option in a spec built by hand: %v", err)
	}
}

// TestVolumeExport: the gateway-wide allow-discards adds to the export's,
// and the read-only state is the opened volume's.
func TestVolumeExport(t *testing.T) {
	b := newMem(4096, 512)
	e := VolumeExportOptions{}.VolumeExport("d", b, true, false)
	if e.Description != "d" || e.Backend != Backend(b) || !e.ReadOnly || e.AllowDiscards || !e.MultiConn {
		t.Errorf("%+v", e)
	}
	if !(VolumeExportOptions{}).VolumeExport("d", b, false, true).AllowDiscards ||
		!(VolumeExportOptions{AllowDiscards: true}).VolumeExport("d", b, false, false).AllowDiscards {
		t.Error("allow-discards of the export or the gateway not applied")
	}
}

// TestCinderPassphrase: os-brick's passphrase is binascii.hexlify of the
// raw key (lowercase hex of every byte, "\x00\xab\xff\n" gives
// "00abff0a"); empty and oversized files are refused on one line.
func TestCinderPassphrase(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := CinderPassphrase(write("k", []byte("\x00\xab\xff\n")))
	if err != nil || string(got) != "00abff0a" {
		t.Errorf("passphrase %q, %v; want 00abff0a", got, err)
	}
	max := bytes.Repeat([]byte{0xc3}, MaxCinderKey)
	if got, err := CinderPassphrase(write("max", max)); err != nil || len(got) != 2*MaxCinderKey || string(got[:4]) != "c3c3" {
		t.Errorf("a %d-byte key: %d bytes, %v", MaxCinderKey, len(got), err)
	}
	for name, path := range map[string]string{
		"empty":   write("empty", nil),
		"too big": write("big", make([]byte, MaxCinderKey+1)),
		"missing": filepath.Join(dir, "nope"),
		"dir":     dir,
	} {
		if _, err := CinderPassphrase(path); err == nil || !strings.Contains(err.Error(), "cinder-key-file") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzVolumeExportOptions: any export line either is refused with a
// one-line error, or gives typed options that keep the rules: no key
// source means token-only, token-only never comes with a key, a non-LUKS
// type always has a key, and the options name what the line said.
func FuzzVolumeExportOptions(f *testing.F) {
	for _, s := range []string{
		"a=/dev/x",
		"a=rbd:rbd/img@conf=/etc/ceph.conf,token-only,token-id=3,token-type=clevis,tpm2-device=swtpm:host=127.0.0.1,port=1",
		"a=img,key-file=k,keyfile-offset=0x10,keyfile-size=32,key-slot=1,type=luks2,header=h,read-only,allow-discards",
		"a=img,cinder-key-file=k,partition=2,lv=vg/lv",
		"a=img,type=plain,cipher=aes-xts-plain64,key-size=512,hash=sha256,offset=8,skip=8,size=100,sector-size=4096,iv-large-sectors,key-file=k",
		"a=img,token-id=99",
		"a=img,type=bitlk",
		"a=img,key-file=k,token-only",
		`a=img,tpm2-device="swtpm:host=127.0.0.1,port=2321",token-type=systemd-tpm2`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, err := ParseExport(line, VolumeExportSyntax)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		o, err := VolumeExportOptionsOf(e)
		if err != nil {
			t.Fatalf("ParseExport accepted %q, VolumeExportOptionsOf refused it: %v", line, err)
		}
		key := o.KeyFile != "" || o.VolumeKeyFile != "" || o.CinderKeyFile != ""
		switch {
		case !key && !o.TokenOnly:
			t.Fatalf("%q: no key and not token-only", line)
		case key && o.TokenOnly:
			t.Fatalf("%q: a key and token-only", line)
		case o.Type != "" && !strings.HasPrefix(o.Type, "luks") && !key:
			t.Fatalf("%q: type %s without a key", line, o.Type)
		case o.KeyFile != e.Options["key-file"] || o.LV != e.Options["lv"] || o.ReadOnly != (e.Options["read-only"] == "true"):
			t.Fatalf("%q: options %+v do not say what the line does", line, o)
		}
	})
}
