package token

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/cbor"
	"github.com/blkcrypt/blkcrypt/internal/fido2test"
)

// systemdFIDO2Keys are the fields systemd-cryptenroll 252 writes, in its
// order (src/cryptenroll/cryptenroll-fido2.c).
var systemdFIDO2Keys = []string{"type", "keyslots", "fido2-credential", "fido2-salt", "fido2-rp",
	"fido2-clientPin-required", "fido2-up-required", "fido2-uv-required"}

// TestFIDO2EnrollUnlock: EnrollFIDO2 with a software key writes the
// token systemd writes (fields, order, listed as fido2 by
// systemd-cryptenroll); the keyslot's passphrase, which cryptsetup
// accepts, is the base64 of the key's HMAC-SHA-256 of the salt under the
// credential's CredRandom, computed by the key itself (not decrypted by
// our client); Unlock gets it back through a second key with the same
// seed and not through a key with another seed.
func TestFIDO2EnrollUnlock(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pin       string
		up        bool
		protocols []int
	}{
		{"no PIN, touch", "", true, []int{1}},
		{"PIN, no touch", "4321", false, []int{1}},
		{"PIN protocol 2", "4321", true, []int{2}},
		{"no PIN, protocol 2", "", true, []int{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newImage(t)
			h := f.open(t)
			ctx := ctxT(t)
			seed := []byte("fido2 " + tc.name)
			key := fido2test.New(seed, tc.pin)
			key.Protocols = tc.protocols
			var pin []byte
			if tc.pin != "" {
				pin = []byte(tc.pin)
			}
			slot, id, err := EnrollFIDO2(ctx, h, FIDO2EnrollOptions{EnrollOptions: EnrollOptions{Existing: f.pass},
				Transport: &fido2test.Pipe{A: key}, PIN: pin, UP: tc.up, VolumeName: f.img})
			if err != nil {
				t.Fatalf("EnrollFIDO2: %v", err)
			}
			js, err := h.ExportToken(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got := keysInOrder(t, js); !slices.Equal(got, systemdFIDO2Keys) {
				t.Errorf("token fields %v, systemd writes %v", got, systemdFIDO2Keys)
			}
			tok, err := ParseFIDO2Token(js)
			if err != nil {
				t.Fatalf("our token does not parse: %v", err)
			}
			if !slices.Equal(tok.Keyslots, []int{slot}) || tok.RP != FIDO2RP || tok.ClientPIN != (pin != nil) || tok.UP != tc.up || tok.UV {
				t.Errorf("token %s", js)
			}
			if got := slotTypes(t, f)[slot]; got != "fido2" {
				t.Errorf("systemd-cryptenroll lists keyslot %d as %q, want fido2", slot, got)
			}
			want := []byte(base64.StdEncoding.EncodeToString(key.HMACSecret(tok.Credential, tok.Salt, pin != nil)))
			if !f.cryptsetupAccepts(t, want) {
				t.Fatal("cryptsetup refuses base64(hmac-secret) for the keyslot")
			}
			if tc.pin != "" {
				if _, _, err := Unlock(ctx, h, Options{FIDO2Transport: &fido2test.Pipe{A: key}}); !errors.Is(err, ErrNeedPIN) {
					t.Errorf("Unlock without the PIN: %v, want ErrNeedPIN", err)
				}
				_, _, err := Unlock(ctx, h, Options{FIDO2Transport: &fido2test.Pipe{A: key}, PIN: []byte("0000")})
				if !errors.Is(err, ErrWrongPIN) || !strings.Contains(err.Error(), "7 tries left") {
					t.Errorf("Unlock with a wrong PIN: %v, want ErrWrongPIN with 7 tries left", err)
				}
			}
			// A key of the same seed speaking the other protocol gives
			// the same secret: the protocol only wraps it.
			same := fido2test.New(seed, tc.pin)
			if tc.protocols[0] == 1 {
				same.Protocols = []int{2}
			}
			pass, gotID, err := Unlock(ctx, h, Options{FIDO2Transport: &fido2test.Pipe{A: same}, PIN: pin})
			if err != nil || gotID != id || !bytes.Equal(pass, want) {
				t.Fatalf("Unlock: token %d, %v; passphrase matches %v", gotID, err, bytes.Equal(pass, want))
			}
			// Not tried unless a device is named or the type asked for.
			if _, _, err := Unlock(ctx, h, Options{PIN: pin}); !errors.Is(err, ErrNoToken) {
				t.Errorf("Unlock with no FIDO2 device named: %v, want ErrNoToken", err)
			}
			other := fido2test.New([]byte("another key"), tc.pin)
			if _, _, err := Unlock(ctx, h, Options{FIDO2Transport: &fido2test.Pipe{A: other}, PIN: pin}); !errors.Is(err, ErrFIDO2NoCredential) {
				t.Errorf("Unlock with another key: %v, want ErrFIDO2NoCredential", err)
			}
		})
	}
}

// TestFIDO2ParseSystemdToken reads a token as systemd-cryptenroll 252
// writes it, and one of systemd 248's (no *-required fields).
func TestFIDO2ParseSystemdToken(t *testing.T) {
	cred := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 64))
	salt := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	js := `{"type":"systemd-fido2","keyslots":["1"],"fido2-credential":"` + cred + `","fido2-salt":"` + salt +
		`","fido2-rp":"io.systemd.cryptsetup","fido2-clientPin-required":true,"fido2-up-required":true,"fido2-uv-required":false}`
	tok, err := ParseFIDO2Token([]byte(js))
	if err != nil || !tok.ClientPIN || !tok.UP || tok.UV || tok.PINIfNeeded || len(tok.Credential) != 64 || tok.Keyslots[0] != 1 {
		t.Fatalf("%+v, %v", tok, err)
	}
	old := `{"type":"systemd-fido2","keyslots":["2"],"fido2-credential":"` + cred + `","fido2-salt":"` + salt + `"}`
	tok, err = ParseFIDO2Token([]byte(old))
	if err != nil || !tok.PINIfNeeded || !tok.UPIfNeeded || !tok.UVOmit || tok.RP != FIDO2RP {
		t.Fatalf("systemd 248 token: %+v, %v", tok, err)
	}
	for _, bad := range []string{
		`{"type":"systemd-fido2","keyslots":[],"fido2-credential":"` + cred + `","fido2-salt":"` + salt + `"}`,
		`{"type":"systemd-fido2","keyslots":["x"],"fido2-credential":"` + cred + `","fido2-salt":"` + salt + `"}`,
		`{"type":"systemd-fido2","keyslots":["1"],"fido2-salt":"` + salt + `"}`,
		`{"type":"systemd-fido2","keyslots":["1"],"fido2-credential":"` + cred + `","fido2-salt":"AAAA"}`,
		`{"type":"systemd-fido2","keyslots":["1"],"fido2-credential":"!!","fido2-salt":"` + salt + `"}`,
		`{"type":"systemd-fido2","keyslots":["1"],"fido2-credential":"` + cred + `","fido2-salt":"` + salt + `","fido2-rp":5}`,
		`{"type":"systemd-fido2","keyslots":["1"],"fido2-credential":"` + cred + `","fido2-salt":"` + salt + `","fido2-up-required":"yes"}`,
		`{"type":"systemd-tpm2","keyslots":["1"]}`,
		`[`,
	} {
		if _, err := ParseFIDO2Token([]byte(bad)); !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseFIDO2Token(%s): %v, want ErrBadToken", bad, err)
		}
	}
	uv := `{"type":"systemd-fido2","keyslots":["1"],"fido2-credential":"` + cred + `","fido2-salt":"` + salt + `","fido2-uv-required":true}`
	if _, err := ParseFIDO2Token([]byte(uv)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("uv-required token: %v, want ErrUnsupported", err)
	}
}

func FuzzParseFIDO2Token(f *testing.F) {
	cred := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 64))
	salt := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	f.Add([]byte(`{"type":"systemd-fido2","keyslots":["1"],"fido2-credential":"` + cred + `","fido2-salt":"` + salt +
		`","fido2-rp":"io.systemd.cryptsetup","fido2-clientPin-required":true,"fido2-up-required":true,"fido2-uv-required":false}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		tok, err := ParseFIDO2Token(js)
		if err != nil {
			return
		}
		if len(tok.Salt) != fido2SaltSize || len(tok.Credential) == 0 || len(tok.Keyslots) == 0 || tok.RP == "" {
			t.Fatalf("accepted an unusable token: %+v", tok)
		}
	})
}

// FIDO's report descriptor, as security keys and internal/fido2test's
// uhid front end present it.
var fidoDescriptor, _ = hex.DecodeString("06d0f1090" + "1a1010920150026ff007508954081020921150026ff00750895409102c0")

func TestHIDDescriptor(t *testing.T) {
	if ok, err := hidDescriptorIsFIDO(fidoDescriptor); !ok || err != nil {
		t.Fatalf("FIDO descriptor: %v, %v", ok, err)
	}
	// A keyboard (HID 1.11 appendix E.6's start) is not FIDO.
	kbd, _ := hex.DecodeString("05010906a101050719e029e71500250175019508810295017508810195057501050819012905910295017503910195067508150025650507190029658100c0")
	if ok, err := hidDescriptorIsFIDO(kbd); ok || err != nil {
		t.Fatalf("keyboard descriptor: %v, %v", ok, err)
	}
	if _, err := hidDescriptorIsFIDO(fidoDescriptor[:2]); err == nil {
		t.Fatal("truncated descriptor accepted")
	}
}

func FuzzHIDDescriptor(f *testing.F) {
	f.Add(fidoDescriptor)
	f.Fuzz(func(t *testing.T, rd []byte) { _, _ = hidDescriptorIsFIDO(rd) })
}

// hostile is a device that answers CTAPHID_INIT properly and every CTAP2
// command with answer (framed by frameFn when set), so that the client's
// parsing of what comes after the channel's opening meets hostile data.
type hostile struct {
	answer  []byte
	raw     func(cid uint32) [][]byte // replaces the CBOR answer's reports
	cid     uint32
	pending [][]byte
}

func (h *hostile) Write(p []byte) (int, error) {
	cid := binary.BigEndian.Uint32(p)
	switch p[4] {
	case 0x86:
		h.cid = 0x01020304
		resp := make([]byte, 64)
		binary.BigEndian.PutUint32(resp, cid)
		resp[4], resp[6] = 0x86, 17
		copy(resp[7:15], p[7:15])
		binary.BigEndian.PutUint32(resp[15:19], h.cid)
		resp[19], resp[23] = 2, 0x04|0x08
		h.pending = append(h.pending, resp)
	case 0x90:
		if h.raw != nil {
			h.pending = append(h.pending, h.raw(h.cid)...)
			break
		}
		resp := make([]byte, 64)
		binary.BigEndian.PutUint32(resp, h.cid)
		resp[4] = 0x90
		binary.BigEndian.PutUint16(resp[5:7], uint16(len(h.answer)))
		n := copy(resp[7:], h.answer)
		h.pending = append(h.pending, resp)
		for seq := byte(0); n < len(h.answer); seq++ {
			c := make([]byte, 64)
			binary.BigEndian.PutUint32(c, h.cid)
			c[4] = seq
			n += copy(c[5:], h.answer[n:])
			h.pending = append(h.pending, c)
		}
	}
	return len(p), nil
}

func (h *hostile) Read(p []byte) (int, error) {
	if len(h.pending) == 0 {
		return 0, fido2test.ErrNothingPending
	}
	n := copy(p, h.pending[0])
	h.pending = h.pending[1:]
	return n, nil
}

func hostileToken() *FIDO2Token {
	return &FIDO2Token{Keyslots: []int{0}, Credential: make([]byte, 32), Salt: make([]byte, 32), RP: FIDO2RP}
}

// TestFIDO2HostileDevice: answers a security key should not give are
// errors naming the device, never a panic or a hang.
func TestFIDO2HostileDevice(t *testing.T) {
	info, _ := cbor.Marshal(cbor.Map{{1, []any{"FIDO_2_0"}}, {2, []any{"hmac-secret"}}, {4, cbor.Map{{"clientPin", false}}}})
	keepalive := func(cid uint32) [][]byte {
		var out [][]byte
		for range 70000 {
			r := make([]byte, 64)
			binary.BigEndian.PutUint32(r, cid)
			r[4] = 0xbb
			out = append(out, r)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		answer []byte
		raw    func(uint32) [][]byte
	}{
		{"empty", nil, nil},
		{"error status", []byte{0x31}, nil},
		{"bad CBOR", []byte{0, 0xff}, nil},
		{"not a map", []byte{0, 0x01}, nil},
		{"info without versions", []byte{0, 0xa0}, nil},
		{"huge length", nil, func(cid uint32) [][]byte {
			r := make([]byte, 64)
			binary.BigEndian.PutUint32(r, cid)
			r[4], r[5], r[6] = 0x90, 0xff, 0xff
			return [][]byte{r}
		}},
		{"short report", nil, func(cid uint32) [][]byte { return [][]byte{{1, 2, 3}} }},
		{"keepalive flood", nil, keepalive},
		{"continuation first", nil, func(cid uint32) [][]byte {
			r := make([]byte, 64)
			binary.BigEndian.PutUint32(r, cid)
			return [][]byte{r}
		}},
		{"CTAPHID error", nil, func(cid uint32) [][]byte {
			r := make([]byte, 64)
			binary.BigEndian.PutUint32(r, cid)
			r[4], r[6], r[7] = 0xbf, 1, 0x06
			return [][]byte{r}
		}},
		// getInfo passes; every later command gets the same getInfo map,
		// which is no key agreement.
		{"info answering everything", append([]byte{0}, info...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FIDO2Secret(context.Background(), &hostile{answer: tc.answer, raw: tc.raw}, hostileToken(), nil)
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of several lines: %q", err)
			}
		})
	}
}

// FuzzFIDO2Answers: whatever a device answers to CTAP2 commands, the
// client returns a passphrase or an error.
func FuzzFIDO2Answers(f *testing.F) {
	info, _ := cbor.Marshal(cbor.Map{{1, []any{"FIDO_2_0"}}, {2, []any{"hmac-secret"}}})
	f.Add(append([]byte{0}, info...))
	f.Add([]byte{0x2e})
	f.Fuzz(func(t *testing.T, answer []byte) {
		if len(answer) > 4096 {
			return
		}
		_, _ = FIDO2Secret(context.Background(), &hostile{answer: answer}, hostileToken(), []byte("1234"))
	})
}

func FuzzAuthData(f *testing.F) {
	f.Add(make([]byte, 37))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseAuthData(b)
		if err == nil && a.flags&authFlagAT != 0 && len(a.credID) == 0 {
			t.Fatal("attested data without a credential id accepted")
		}
	})
}

// TestFIDO2Transport checks the CTAPHID framing of a long message (a
// credential id long enough for continuation packets) both ways.
func TestFIDO2Transport(t *testing.T) {
	key := fido2test.New([]byte("transport"), "")
	c, err := newHIDConn(context.Background(), &fido2test.Pipe{A: key})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 57, 58, 57 + 59, 57 + 59 + 1, 1000, hidMaxMessage} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(i * 7)
		}
		got, err := c.transact(context.Background(), hidPing, msg, nil)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("ping of %d bytes: %d back, %v", n, len(got), err)
		}
	}
	if _, err := c.transact(context.Background(), hidPing, make([]byte, hidMaxMessage+1), nil); err == nil {
		t.Fatal("message beyond CTAPHID's maximum sent")
	}
}

// TestEnrollFIDO2Defaults: Enroll with a FIDO2 security key keeps
// systemd-cryptenroll's defaults (the key's PIN and a touch required),
// asks for the PIN once with systemd's prompt when none is given, and
// without a way to ask is ErrNeedPIN with nothing written;
// FIDO2NoClientPIN and FIDO2NoUserPresence turn each off. cryptsetup
// accepts the secret the key itself computes for the new keyslot, and
// UnlockWithPIN asks for the PIN with the same prompt.
func TestEnrollFIDO2Defaults(t *testing.T) {
	const pin = "2468"
	f := newImage(t)
	h := f.open(t)
	ctx := ctxT(t)
	key := fido2test.New([]byte("enroll defaults"), pin)

	if _, err := Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, FIDO2Transport: &fido2test.Pipe{A: key}}); !errors.Is(err, ErrNeedPIN) {
		t.Fatalf("Enroll with a PIN needed and no AskPIN: %v, want ErrNeedPIN", err)
	}
	if toks, err := h.Tokens(ctx); err != nil || len(toks) != 0 {
		t.Fatalf("a refused Enroll left tokens %v (%v)", toks, err)
	}
	var prompts []string
	ask := func(p string) ([]byte, error) { prompts = append(prompts, p); return []byte(pin), nil }
	r, err := Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, FIDO2Transport: &fido2test.Pipe{A: key}, AskPIN: ask})
	if err != nil || r.Type != TypeFIDO2 || r.Keyslot < 0 {
		t.Fatalf("Enroll: %+v, %v", r, err)
	}
	if !slices.Equal(prompts, []string{PromptFIDO2PIN}) {
		t.Errorf("asked %q, want systemd's PIN prompt once", prompts)
	}
	js, err := h.ExportToken(ctx, r.TokenID)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseFIDO2Token(js)
	if err != nil || !tok.ClientPIN || !tok.UP || tok.UV {
		t.Fatalf("token %s (%v): want the PIN and a touch required, as systemd's defaults", js, err)
	}
	if !f.cryptsetupAccepts(t, []byte(base64.StdEncoding.EncodeToString(key.HMACSecret(tok.Credential, tok.Salt, true)))) {
		t.Fatal("cryptsetup refuses the key's hmac-secret for the new keyslot")
	}
	prompts = nil
	pass, id, err := UnlockWithPIN(ctx, h, Options{FIDO2Transport: &fido2test.Pipe{A: key}}, ask)
	wipe(pass)
	if err != nil || id != r.TokenID || !slices.Equal(prompts, []string{PromptFIDO2PIN}) {
		t.Errorf("UnlockWithPIN: token %d, %v, asked %q", id, err, prompts)
	}

	// The key has a PIN, which it wants to make a credential: asked for
	// once, though the token will not need it.
	prompts = nil
	r, err = Enroll(ctx, h, Enrollment{EnrollOptions: EnrollOptions{Existing: f.pass}, FIDO2Transport: &fido2test.Pipe{A: key},
		FIDO2NoClientPIN: true, FIDO2NoUserPresence: true, AskPIN: ask})
	if err != nil || !slices.Equal(prompts, []string{PromptFIDO2PIN}) {
		t.Fatalf("Enroll with no PIN and no touch: %+v, %v, asked %q", r, err, prompts)
	}
	js, _ = h.ExportToken(ctx, r.TokenID)
	if tok, err := ParseFIDO2Token(js); err != nil || tok.ClientPIN || tok.UP {
		t.Fatalf("token %s (%v): want neither PIN nor touch required", js, err)
	} else if !f.cryptsetupAccepts(t, []byte(base64.StdEncoding.EncodeToString(key.HMACSecret(tok.Credential, tok.Salt, false)))) {
		t.Fatal("cryptsetup refuses the key's hmac-secret (no PIN) for the second keyslot")
	}
	prompts = nil
	if pass, id, err := UnlockWithPIN(ctx, h, Options{FIDO2Transport: &fido2test.Pipe{A: key}, TokenID: &r.TokenID}, ask); err != nil || id != r.TokenID || len(prompts) != 0 {
		t.Errorf("UnlockWithPIN of the PIN-less token: token %d, %v, asked %q", id, err, prompts)
	} else {
		wipe(pass)
	}
	if err := (&Enrollment{FIDO2Device: "auto", RecoveryKey: true}).Check(); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Errorf("Check of a FIDO2 token and a recovery key at once: %v", err)
	}
}
