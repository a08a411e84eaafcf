package fido2test

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// initChannel opens a CTAPHID channel the way a client does.
func initChannel(t *testing.T, a *Authenticator) uint32 {
	t.Helper()
	req := make([]byte, reportLen)
	binary.BigEndian.PutUint32(req, broadcast)
	req[4], req[6] = 0x86, 8
	copy(req[7:], "01234567")
	out := a.HandleReport(req)
	if len(out) != 1 || out[0][4] != 0x86 || !bytes.Equal(out[0][7:15], []byte("01234567")) {
		t.Fatalf("INIT answer %x", out)
	}
	return binary.BigEndian.Uint32(out[0][15:19])
}

func cborCmd(cid uint32, body []byte) []byte {
	req := make([]byte, reportLen)
	binary.BigEndian.PutUint32(req, cid)
	req[4] = 0x90
	binary.BigEndian.PutUint16(req[5:7], uint16(len(body)))
	copy(req[7:], body)
	return req
}

// TestMalformedRequests: what a client sends wrong gets CTAP's error
// statuses, as a security key answers.
func TestMalformedRequests(t *testing.T) {
	a := New([]byte("seed"), "")
	cid := initChannel(t, a)
	for _, tc := range []struct {
		body []byte
		want byte
	}{
		{[]byte{0x04}, StatusOK},
		{[]byte{0x42}, StatusInvalidCommand},
		{[]byte{0x02, 0xff}, StatusInvalidCBOR},
		{[]byte{0x02, 0x01}, StatusInvalidCBOR},              // not a map
		{[]byte{0x02, 0xa0}, StatusMissingParam},             // getAssertion without rpId
		{[]byte{0x06, 0xa1, 0x01, 0x02}, StatusInvalidParam}, // PIN protocol 2
		{[]byte{0x06, 0xa2, 0x01, 0x01, 0x02, 0x05}, StatusPINNotSet},
	} {
		out := a.HandleReport(cborCmd(cid, tc.body))
		if len(out) == 0 || out[0][4] != 0x90 || out[0][7] != tc.want {
			t.Errorf("request %x: answer %x, want status %#x", tc.body, out, tc.want)
		}
	}
	// A command on the broadcast channel other than INIT is refused.
	if out := a.HandleReport(cborCmd(broadcast, []byte{4})); len(out) != 1 || out[0][4] != 0xbf || out[0][7] != 0x0b {
		t.Errorf("CBOR on the broadcast channel: %x", out)
	}
}

func FuzzHandleReport(f *testing.F) {
	f.Add(cborCmd(0x01000001, []byte{0x04}))
	f.Add(cborCmd(0x01000001, []byte{0x02, 0xa1, 0x01, 0x60}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a := New([]byte("fuzz"), "1234")
		req := make([]byte, reportLen)
		binary.BigEndian.PutUint32(req, broadcast)
		req[4], req[6] = 0x86, 8
		a.HandleReport(req)
		for len(b) > 0 {
			r := make([]byte, reportLen)
			n := copy(r, b)
			b = b[n:]
			a.HandleReport(r)
		}
	})
}
