package nbd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Fuzz targets: arbitrary client bytes must never panic the server or make
// it hang. FuzzRequest feeds the bytes as the transmission-phase stream
// after a valid handshake; FuzzOption feeds them right after the greeting
// (client flags, then option haggling, possibly followed by requests).

func reqBytes(typ, flags uint16, cookie, off uint64, length uint32, payload []byte) []byte {
	p := make([]byte, requestHeaderLen, requestHeaderLen+len(payload))
	be.PutUint32(p[0:], requestMagic)
	be.PutUint16(p[4:], flags)
	be.PutUint16(p[6:], typ)
	be.PutUint64(p[8:], cookie)
	be.PutUint64(p[16:], off)
	be.PutUint32(p[24:], length)
	return append(p, payload...)
}

func optBytes(opt uint32, data []byte) []byte {
	p := make([]byte, 16, 16+len(data))
	be.PutUint64(p, optMagic)
	be.PutUint32(p[8:], opt)
	be.PutUint32(p[12:], uint32(len(data)))
	return append(p, data...)
}

func cat(parts ...[]byte) []byte {
	var p []byte
	for _, q := range parts {
		p = append(p, q...)
	}
	return p
}

type requestSeed struct {
	name       string
	structured bool
	stream     []byte
}

func requestSeeds() []requestSeed {
	w := make([]byte, 1024)
	return []requestSeed{
		{"read-write", false, cat(reqBytes(cmdWrite, 0, 1, 512, 1024, w), reqBytes(cmdRead, 0, 2, 0, 4096, nil), reqBytes(cmdFlush, 0, 3, 0, 0, nil), reqBytes(cmdDisc, 0, 4, 0, 0, nil))},
		{"structured-errors", true, cat(reqBytes(cmdRead, 0, 1, 1<<40, 512, nil), reqBytes(cmdRead, 0, 2, 0, 1<<20, nil), reqBytes(cmdBlockStatus, 0, 3, 0, 512, nil), reqBytes(99, 0, 4, 0, 0, nil))},
		{"zeroes-trim", true, cat(reqBytes(cmdWriteZeroes, cmdFlagNoHole|cmdFlagFUA, 1, 0, 65536, nil), reqBytes(cmdTrim, 0, 2, 4096, 4096, nil), reqBytes(cmdCache, 0, 3, 0, 512, nil))},
		{"oversized-write", false, cat(reqBytes(cmdWrite, 0, 1, 0, 1<<17, make([]byte, 1<<17)), reqBytes(cmdRead, 0, 2, 0, 512, nil))},
		{"huge-write", false, reqBytes(cmdWrite, 0, 1, 0, 0xffffffff, w)},
		{"truncated", false, reqBytes(cmdWrite, 0, 1, 0, 4096, w)[:100]},
		{"bad-magic", true, cat(reqBytes(cmdRead, 0, 1, 0, 512, nil), []byte("garbage garbage garbage garbage"))},
		{"zero-length", true, cat(reqBytes(cmdRead, 0, 1, 0, 0, nil), reqBytes(cmdWrite, cmdFlagFUA, 2, 0, 0, nil))},
	}
}

type optionSeed struct {
	name   string
	tls    bool
	stream []byte
}

func flagsBytes(f uint32) []byte { return binary.BigEndian.AppendUint32(nil, f) }

func optionSeeds() []optionSeed {
	fixed := flagsBytes(flagCFixedNewstyle | flagCNoZeroes)
	return []optionSeed{
		{"go-then-read", false, cat(fixed, optBytes(optStructuredReply, nil), optBytes(optGo, goData("", infoBlockSize, infoName)), reqBytes(cmdRead, 0, 1, 0, 512, nil))},
		{"list-info-abort", false, cat(fixed, optBytes(optList, nil), optBytes(optInfo, goData("x")), optBytes(42, []byte("junk")), optBytes(optAbort, nil))},
		{"export-name", false, cat(flagsBytes(0), optBytes(optExportName, nil), reqBytes(cmdRead, 0, 1, 0, 512, nil))},
		{"bad-lengths", false, cat(fixed, optBytes(optGo, []byte{0xff, 0xff, 0xff, 0xff, 0, 1}), optBytes(optInfo, []byte{0, 0, 0, 0, 0xff, 0xff}))},
		{"truncated", false, cat(fixed, optBytes(optGo, goData("vol"))[:20])},
		{"huge-option", false, cat(fixed, optBytes(77, nil)[:12], []byte{0xff, 0xff, 0xff, 0xff})},
		{"tls-required", true, cat(fixed, optBytes(optList, nil), optBytes(optGo, goData("")), optBytes(optStartTLS, nil), []byte("\x16\x03\x01\x00\x05hello"))},
		{"tls-export-name", true, cat(fixed, optBytes(optExportName, nil))},
	}
}

var (
	fuzzTLSOnce sync.Once
	fuzzTLS     *tls.Config
)

// fuzzTLSConfig makes a self-signed certificate in memory.
func fuzzTLSConfig(t testing.TB) *tls.Config {
	fuzzTLSOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fuzz"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		fuzzTLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	})
	return fuzzTLS
}

// feed runs ServeConn on one end of a pipe, optionally performs a
// handshake, writes stream, closes, and checks that the server finishes.
func feed(t *testing.T, o Options, handshake func(c net.Conn), stream []byte) {
	m := newMem(64<<10, 512)
	o.MaxRequest = 64 << 10
	o.AllowDiscards = true
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 2 * time.Second
	}
	s := NewServer(&discardMem{memBackend: m}, o)
	cs, ss := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.ServeConn(context.Background(), ss) }()
	if handshake != nil {
		handshake(cs)
	}
	go io.Copy(io.Discard, cs) // drain replies
	cs.SetWriteDeadline(time.Now().Add(5 * time.Second))
	cs.Write(stream)
	cs.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("server did not finish within 10s")
	}
}

func FuzzRequest(f *testing.F) {
	for _, s := range requestSeeds() {
		f.Add(s.structured, s.stream)
	}
	f.Fuzz(func(t *testing.T, structured bool, stream []byte) {
		feed(t, Options{}, func(c net.Conn) {
			o := newOptClient(t, c, flagCFixedNewstyle|flagCNoZeroes)
			if structured {
				o.expect(t, optStructuredReply, nil, repAck)
			}
			o.expect(t, optGo, goData("", infoBlockSize), repAck)
			c.SetDeadline(time.Time{})
		}, stream)
	})
}

func FuzzOption(f *testing.F) {
	for _, s := range optionSeeds() {
		f.Add(s.tls, s.stream)
	}
	f.Fuzz(func(t *testing.T, useTLS bool, stream []byte) {
		o := Options{ExportName: "vol", Description: "fuzz"}
		if useTLS {
			o.TLSConfig = fuzzTLSConfig(t)
		}
		feed(t, o, func(c net.Conn) {
			var g [18]byte
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, g[:]); err != nil {
				t.Fatalf("greeting: %v", err)
			}
			c.SetReadDeadline(time.Time{})
		}, stream)
	})
}

// TestWriteFuzzSeeds regenerates the committed seed corpus under
// testdata/fuzz when NBD_WRITE_FUZZ_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("NBD_WRITE_FUZZ_SEEDS") != "1" {
		return
	}
	write := func(target, name string, b bool, p []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("go test fuzz v1\nbool(%v)\n[]byte(%q)\n", b, p)
		if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range requestSeeds() {
		write("FuzzRequest", s.name, s.structured, s.stream)
	}
	for _, s := range optionSeeds() {
		write("FuzzOption", s.name, s.tls, s.stream)
	}
}
