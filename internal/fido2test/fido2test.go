// Package fido2test is a software FIDO2 security key for tests: CTAP 2.0
// over CTAPHID reports, ES256 non-resident credentials, the hmac-secret
// extension and clientPIN with PIN protocol 1. Everything derives from a
// seed, credentials included (a credential id carries a MAC, the key and
// its CredRandom are derived from it), so two Authenticators with the
// same seed are the same key: one can sit behind /dev/uhid in a qemu
// guest, where systemd-cryptenroll enrolls with it, and the other answer
// blkcrypt on the host over an in-memory transport (Pipe).
//
// It is a test double, not a security key: its secrets are in memory and
// user presence is always given.
package fido2test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/cbor"
)

// CTAP2 status codes it answers with.
const (
	StatusOK              = 0x00
	StatusInvalidCommand  = 0x01
	StatusInvalidParam    = 0x02
	StatusInvalidCBOR     = 0x12
	StatusMissingParam    = 0x14
	StatusUnsupportedAlg  = 0x26
	StatusUnsupportedOpt  = 0x2b
	StatusInvalidOption   = 0x2c
	StatusNoCredentials   = 0x2e
	StatusPINInvalid      = 0x31
	StatusPINBlocked      = 0x32
	StatusPINAuthInvalid  = 0x33
	StatusPINNotSet       = 0x35
	StatusPINRequired     = 0x36
	StatusPINPolicyFailed = 0x37
)

const (
	reportLen  = 64
	maxMessage = 57 + 128*59
	broadcast  = 0xffffffff
	maxRetries = 8
)

// Authenticator is one software security key. Its methods are safe for
// concurrent use.
type Authenticator struct {
	mu       sync.Mutex
	seed     [32]byte
	pin      []byte // nil: no PIN set
	retries  int
	ka       *ecdh.PrivateKey
	pinToken [32]byte
	nextCID  uint32
	credSeq  uint64
	signs    uint32

	// CTAPHID reassembly of the message being received.
	rxCID   uint32
	rxCmd   byte
	rxTotal int
	rxSeq   byte
	rxData  []byte
	rxBusy  bool

	// Calls counts CTAP2 commands by command byte (tests check that a
	// client did what it should).
	Calls map[byte]int
	// Protocols are the PIN/UV auth protocols getInfo lists and the key
	// accepts, in its order of preference: New sets {1}; {2}, {2, 1}
	// and {1, 2} are the others.
	Protocols []int
}

// New returns a key derived from seed; pin, when not empty, is its PIN
// (clientPin set), else it has PIN support and no PIN.
func New(seed []byte, pin string) *Authenticator {
	a := &Authenticator{seed: sha256.Sum256(seed), retries: maxRetries, nextCID: 0x0100_0001, Calls: map[byte]int{}, Protocols: []int{1}}
	if pin != "" {
		a.pin = []byte(pin)
	}
	a.ka = a.derivedKey([]byte("key agreement"))
	copy(a.pinToken[:], a.prf("pin token"))
	return a
}

// prf is HMAC-SHA-256 keyed by the seed over a label and data.
func (a *Authenticator) prf(label string, data ...[]byte) []byte {
	h := hmac.New(sha256.New, a.seed[:])
	h.Write([]byte(label))
	h.Write([]byte{0})
	for _, d := range data {
		h.Write(d)
	}
	return h.Sum(nil)
}

// derivedKey is a P-256 key derived from the seed and a label.
func (a *Authenticator) derivedKey(label []byte) *ecdh.PrivateKey {
	for i := byte(0); ; i++ {
		k, err := ecdh.P256().NewPrivateKey(a.prf("p256", label, []byte{i}))
		if err == nil {
			return k
		}
	}
}

// credential ids are nonce(16) || LEFT(prf(rpIdHash || nonce), 16).
func (a *Authenticator) newCredID(rpHash []byte) []byte {
	a.credSeq++
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], a.credSeq)
	nonce := a.prf("nonce", n[:])[:16]
	return append(nonce, a.prf("cred", rpHash, nonce)[:16]...)
}

func (a *Authenticator) ownsCred(rpHash, id []byte) bool {
	return len(id) == 32 && hmac.Equal(id[16:], a.prf("cred", rpHash, id[:16])[:16])
}

func (a *Authenticator) credKey(id []byte) *ecdsa.PrivateKey {
	k := a.derivedKey(append([]byte("credential "), id...))
	e, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), k.Bytes())
	if err != nil {
		panic(err) // a valid ecdh scalar is a valid ecdsa one
	}
	return e
}

// CredRandom returns the credential's hmac-secret key (CTAP 2.0 §10.5):
// one for assertions with user verification (a PIN), one without.
func (a *Authenticator) CredRandom(id []byte, uv bool) []byte {
	if uv {
		return a.prf("credrandom uv", id)
	}
	return a.prf("credrandom", id)
}

// HMACSecret is the output getAssertion's hmac-secret gives for a
// credential and salt: what a client decrypts.
func (a *Authenticator) HMACSecret(id, salt []byte, uv bool) []byte {
	h := hmac.New(sha256.New, a.CredRandom(id, uv))
	h.Write(salt)
	return h.Sum(nil)
}

// HandleReport takes one 64-byte output report and returns the input
// reports it answers with (none while a message is incomplete).
func (a *Authenticator) HandleReport(rep []byte) [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(rep) != reportLen {
		return nil
	}
	cid := binary.BigEndian.Uint32(rep[0:4])
	if rep[4]&0x80 != 0 {
		cmd := rep[4]
		total := int(binary.BigEndian.Uint16(rep[5:7]))
		if cid == 0 || (cid == broadcast && cmd != 0x86) {
			return frame(cid, 0xbf, []byte{0x0b}) // invalid channel
		}
		if a.rxBusy && cid != a.rxCID && cmd != 0x86 {
			return frame(cid, 0xbf, []byte{0x06}) // channel busy
		}
		if total > maxMessage {
			return frame(cid, 0xbf, []byte{0x03}) // invalid length
		}
		a.rxCID, a.rxCmd, a.rxTotal, a.rxSeq, a.rxBusy = cid, cmd, total, 0, true
		a.rxData = append(a.rxData[:0], rep[7:7+min(total, 57)]...)
	} else {
		if !a.rxBusy || cid != a.rxCID {
			return nil // a stray continuation
		}
		if rep[4] != a.rxSeq {
			a.rxBusy = false
			return frame(cid, 0xbf, []byte{0x04}) // invalid sequence
		}
		a.rxSeq++
		a.rxData = append(a.rxData, rep[5:5+min(a.rxTotal-len(a.rxData), 59)]...)
	}
	if len(a.rxData) < a.rxTotal {
		return nil
	}
	a.rxBusy = false
	data := bytes.Clone(a.rxData)
	switch a.rxCmd {
	case 0x86: // INIT
		if len(data) != 8 {
			return frame(cid, 0xbf, []byte{0x03})
		}
		newCID := cid
		if cid == broadcast {
			newCID = a.nextCID
			a.nextCID++
		}
		resp := append(data, 0, 0, 0, 0, 2, 1, 0, 0, 0x01|0x04|0x08) // WINK | CBOR | NMSG
		binary.BigEndian.PutUint32(resp[8:12], newCID)
		return frame(cid, 0x86, resp)
	case 0x81: // PING
		return frame(cid, 0x81, data)
	case 0x88: // WINK
		return frame(cid, 0x88, nil)
	case 0x91: // CANCEL: nothing is pending
		return nil
	case 0x90: // CBOR
		if len(data) == 0 {
			return frame(cid, 0xbf, []byte{0x03})
		}
		return frame(cid, 0x90, a.ctap(data[0], data[1:]))
	}
	return frame(cid, 0xbf, []byte{0x01}) // invalid command
}

// frame cuts a message into 64-byte reports.
func frame(cid uint32, cmd byte, data []byte) [][]byte {
	var out [][]byte
	pkt := make([]byte, reportLen)
	binary.BigEndian.PutUint32(pkt, cid)
	pkt[4] = cmd
	binary.BigEndian.PutUint16(pkt[5:7], uint16(len(data)))
	n := copy(pkt[7:], data)
	out = append(out, pkt)
	for seq := byte(0); n < len(data); seq++ {
		pkt = make([]byte, reportLen)
		binary.BigEndian.PutUint32(pkt, cid)
		pkt[4] = seq
		n += copy(pkt[5:], data[n:])
		out = append(out, pkt)
	}
	return out
}

// ctap runs one CTAP2 command and returns status || CBOR.
func (a *Authenticator) ctap(cmd byte, body []byte) []byte {
	a.Calls[cmd]++
	var req cbor.Map
	if len(body) > 0 {
		v, err := cbor.Unmarshal(body)
		if err != nil {
			return []byte{StatusInvalidCBOR}
		}
		m, ok := v.(cbor.Map)
		if !ok {
			return []byte{StatusInvalidCBOR}
		}
		req = m
	}
	var resp cbor.Map
	var status byte
	switch cmd {
	case 0x04:
		resp, status = a.getInfo()
	case 0x06:
		resp, status = a.clientPIN(req)
	case 0x01:
		resp, status = a.makeCredential(req)
	case 0x02:
		resp, status = a.getAssertion(req)
	default:
		status = StatusInvalidCommand
	}
	if status != StatusOK {
		return []byte{status}
	}
	b, err := cbor.Marshal(resp)
	if err != nil {
		return []byte{StatusInvalidParam}
	}
	return append([]byte{StatusOK}, b...)
}

// AAGUID is the key's model id.
var AAGUID = []byte("blkcrypt-fido2te")

func (a *Authenticator) getInfo() (cbor.Map, byte) {
	var protos []any
	for _, p := range a.Protocols {
		protos = append(protos, p)
	}
	return cbor.Map{
		{1, []any{"FIDO_2_0"}},
		{2, []any{"hmac-secret"}},
		{3, AAGUID},
		{4, cbor.Map{{"rk", false}, {"up", true}, {"plat", false}, {"clientPin", a.pin != nil}}},
		{5, 1200},
		{6, protos},
	}, StatusOK
}

func coseKey(pub []byte, alg int) cbor.Map {
	return cbor.Map{{1, 2}, {3, alg}, {-1, 1}, {-2, pub[1:33]}, {-3, pub[33:65]}}
}

// proto is one PIN/UV auth protocol's keys with a platform (CTAP 2.1
// §6.5.6, §6.5.7).
type proto struct {
	version         int64
	hmacKey, aesKey []byte
}

func (a *Authenticator) supports(v int64) bool {
	return slices.Contains(a.Protocols, int(v))
}

// shared runs ECDH with the platform's COSE key and derives protocol
// version's keys.
func (a *Authenticator) shared(v any, version int64) (*proto, bool) {
	m, ok := v.(cbor.Map)
	if !ok {
		return nil, false
	}
	x, err1 := m.Bytes(-2)
	y, err2 := m.Bytes(-3)
	if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
		return nil, false
	}
	pub, err := ecdh.P256().NewPublicKey(append(append([]byte{4}, x...), y...))
	if err != nil {
		return nil, false
	}
	z, err := a.ka.ECDH(pub)
	if err != nil {
		return nil, false
	}
	if version == 1 {
		k := sha256.Sum256(z)
		return &proto{1, k[:], k[:]}, true
	}
	salt := make([]byte, 32)
	hk, _ := hkdf.Key(sha256.New, z, salt, "CTAP2 HMAC key", 32)
	ak, _ := hkdf.Key(sha256.New, z, salt, "CTAP2 AES key", 32)
	return &proto{2, hk, ak}, true
}

func (p *proto) encrypt(in []byte) []byte {
	if p.version == 1 {
		return cbc(p.aesKey, make([]byte, aes.BlockSize), in, true)
	}
	iv := make([]byte, aes.BlockSize)
	_, _ = rand.Read(iv)
	return append(iv, cbc(p.aesKey, iv, in, true)...)
}

// decrypt returns nil for a ciphertext of the wrong shape.
func (p *proto) decrypt(in []byte) []byte {
	iv := make([]byte, aes.BlockSize)
	if p.version == 2 {
		if len(in) < aes.BlockSize {
			return nil
		}
		iv, in = in[:aes.BlockSize], in[aes.BlockSize:]
	}
	if len(in) == 0 || len(in)%aes.BlockSize != 0 {
		return nil
	}
	return cbc(p.aesKey, iv, in, false)
}

func (p *proto) authenticate(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	if p.version == 1 {
		return h.Sum(nil)[:16]
	}
	return h.Sum(nil)
}

func cbc(key, iv, in []byte, enc bool) []byte {
	b, _ := aes.NewCipher(key)
	out := make([]byte, len(in))
	if enc {
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(out, in)
	} else {
		cipher.NewCBCDecrypter(b, iv).CryptBlocks(out, in)
	}
	return out
}

func (a *Authenticator) clientPIN(req cbor.Map) (cbor.Map, byte) {
	proto, err := req.Int(1)
	if err != nil {
		return nil, StatusMissingParam
	}
	if !a.supports(proto) {
		return nil, StatusInvalidParam
	}
	sub, err := req.Int(2)
	if err != nil {
		return nil, StatusMissingParam
	}
	switch sub {
	case 1:
		return cbor.Map{{3, a.retries}}, StatusOK
	case 2:
		return cbor.Map{{1, coseKey(a.ka.PublicKey().Bytes(), -25)}}, StatusOK
	case 5:
		if a.pin == nil {
			return nil, StatusPINNotSet
		}
		if a.retries == 0 {
			return nil, StatusPINBlocked
		}
		ka, ok1 := req.Get(3)
		enc, err := req.Bytes(6)
		if !ok1 || err != nil {
			return nil, StatusMissingParam
		}
		shared, ok := a.shared(ka, proto)
		if !ok {
			return nil, StatusInvalidParam
		}
		pinHash := shared.decrypt(enc)
		if len(pinHash) != 16 {
			return nil, StatusInvalidParam
		}
		want := sha256.Sum256(a.pin)
		if subtle.ConstantTimeCompare(pinHash, want[:16]) != 1 {
			a.retries--
			// CTAP 2.0 §5.5.5: a wrong PIN renews the key agreement key.
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(a.retries))
			a.ka = a.derivedKey(append([]byte("key agreement "), n[:]...))
			if a.retries == 0 {
				return nil, StatusPINBlocked
			}
			return nil, StatusPINInvalid
		}
		a.retries = maxRetries
		return cbor.Map{{2, shared.encrypt(a.pinToken[:])}}, StatusOK
	}
	return nil, StatusInvalidParam
}

// checkPIN verifies a request's pinAuth over the client data hash: uv
// when it is right; the status when it is wrong.
func (a *Authenticator) checkPIN(req cbor.Map, pinKey, protoKey int, cdh []byte) (uv bool, status byte) {
	pa, has := req.Get(pinKey)
	if !has {
		return false, StatusOK
	}
	b, ok := pa.([]byte)
	if !ok {
		return false, StatusInvalidParam
	}
	v, err := req.Int(protoKey)
	if err != nil || !a.supports(v) {
		return false, StatusInvalidParam
	}
	if a.pin == nil {
		return false, StatusPINNotSet
	}
	if !hmac.Equal(b, (&proto{version: v}).authenticate(a.pinToken[:], cdh)) {
		return false, StatusPINAuthInvalid
	}
	return true, StatusOK
}

func optionsOf(req cbor.Map, key int) (map[string]bool, byte) {
	v, ok := req.Get(key)
	if !ok {
		return map[string]bool{}, StatusOK
	}
	m, ok := v.(cbor.Map)
	if !ok {
		return nil, StatusInvalidCBOR
	}
	out := map[string]bool{}
	for _, p := range m {
		k, ok1 := p[0].(string)
		b, ok2 := p[1].(bool)
		if !ok1 || !ok2 {
			return nil, StatusInvalidCBOR
		}
		out[k] = b
	}
	return out, StatusOK
}

func (a *Authenticator) makeCredential(req cbor.Map) (cbor.Map, byte) {
	cdh, err1 := req.Bytes(1)
	rp, err2 := req.Sub(2)
	_, err3 := req.Sub(3)
	params, ok := req.Get(4)
	if err1 != nil || err2 != nil || err3 != nil || !ok {
		return nil, StatusMissingParam
	}
	rpID, err := rp.Text("id")
	if err != nil {
		return nil, StatusMissingParam
	}
	es256 := false
	pa, _ := params.([]any)
	for _, p := range pa {
		if m, ok := p.(cbor.Map); ok {
			if alg, err := m.Int("alg"); err == nil && alg == -7 {
				es256 = true
			}
		}
	}
	if !es256 {
		return nil, StatusUnsupportedAlg
	}
	opts, st := optionsOf(req, 7)
	if st != StatusOK {
		return nil, st
	}
	if opts["rk"] || opts["uv"] {
		return nil, StatusUnsupportedOpt
	}
	uv, st := a.checkPIN(req, 8, 9, cdh)
	if st != StatusOK {
		return nil, st
	}
	if a.pin != nil && !uv {
		return nil, StatusPINRequired
	}
	hmacSecret := false
	if ext, err := req.Sub(6); err == nil {
		if v, ok := ext.Get("hmac-secret"); ok && v == true {
			hmacSecret = true
		}
	}
	rpHash := sha256.Sum256([]byte(rpID))
	id := a.newCredID(rpHash[:])
	key := a.credKey(id)
	pub, _ := key.PublicKey.Bytes()
	flags := byte(0x01 | 0x40) // UP, AT
	if uv {
		flags |= 0x04
	}
	var ext []byte
	if hmacSecret {
		flags |= 0x80
		ext, _ = cbor.Marshal(cbor.Map{{"hmac-secret", true}})
	}
	coseBytes, _ := cbor.Marshal(coseKey(pub, -7))
	a.signs++
	ad := append([]byte{}, rpHash[:]...)
	ad = append(ad, flags)
	ad = binary.BigEndian.AppendUint32(ad, a.signs)
	ad = append(ad, AAGUID...)
	ad = binary.BigEndian.AppendUint16(ad, uint16(len(id)))
	ad = append(ad, id...)
	ad = append(ad, coseBytes...)
	ad = append(ad, ext...)
	// Packed self attestation: signed by the credential's own key.
	sig, err := signES256(key, append(bytes.Clone(ad), cdh...))
	if err != nil {
		return nil, StatusInvalidParam
	}
	return cbor.Map{{1, "packed"}, {2, ad}, {3, cbor.Map{{"alg", -7}, {"sig", sig}}}}, StatusOK
}

func signES256(key *ecdsa.PrivateKey, msg []byte) ([]byte, error) {
	h := sha256.Sum256(msg)
	return ecdsa.SignASN1(rand.Reader, key, h[:])
}

func (a *Authenticator) getAssertion(req cbor.Map) (cbor.Map, byte) {
	rpID, err1 := req.Text(1)
	cdh, err2 := req.Bytes(2)
	if err1 != nil || err2 != nil {
		return nil, StatusMissingParam
	}
	rpHash := sha256.Sum256([]byte(rpID))
	var id []byte
	if al, ok := req.Get(3); ok {
		list, _ := al.([]any)
		for _, e := range list {
			if m, ok := e.(cbor.Map); ok {
				if cid, err := m.Bytes("id"); err == nil && a.ownsCred(rpHash[:], cid) {
					id = cid
					break
				}
			}
		}
	}
	if id == nil {
		return nil, StatusNoCredentials
	}
	opts, st := optionsOf(req, 5)
	if st != StatusOK {
		return nil, st
	}
	if opts["uv"] {
		return nil, StatusUnsupportedOpt
	}
	up := true
	if v, ok := opts["up"]; ok {
		up = v
	}
	uv, st := a.checkPIN(req, 6, 7, cdh)
	if st != StatusOK {
		return nil, st
	}
	flags := byte(0)
	if up {
		flags |= 0x01
	}
	if uv {
		flags |= 0x04
	}
	var ext []byte
	if exts, err := req.Sub(4); err == nil {
		if hv, ok := exts.Get("hmac-secret"); ok {
			hm, ok := hv.(cbor.Map)
			if !ok {
				return nil, StatusInvalidParam
			}
			ka, ok := hm.Get(1)
			saltEnc, err1 := hm.Bytes(2)
			saltAuth, err2 := hm.Bytes(3)
			if !ok || err1 != nil || err2 != nil {
				return nil, StatusMissingParam
			}
			v := int64(1)
			if pv, ok := hm.Get(4); ok {
				if v, ok = pv.(int64); !ok {
					return nil, StatusInvalidParam
				}
			}
			if !a.supports(v) {
				return nil, StatusInvalidParam
			}
			shared, ok := a.shared(ka, v)
			if !ok {
				return nil, StatusInvalidParam
			}
			if !hmac.Equal(saltAuth, shared.authenticate(shared.hmacKey, saltEnc)) {
				return nil, StatusInvalidParam
			}
			salts := shared.decrypt(saltEnc)
			if len(salts) != 32 && len(salts) != 64 {
				return nil, StatusInvalidParam
			}
			var out []byte
			for i := 0; i < len(salts); i += 32 {
				out = append(out, a.HMACSecret(id, salts[i:i+32], uv)...)
			}
			flags |= 0x80
			ext, _ = cbor.Marshal(cbor.Map{{"hmac-secret", shared.encrypt(out)}})
		}
	}
	key := a.credKey(id)
	a.signs++
	ad := append([]byte{}, rpHash[:]...)
	ad = append(ad, flags)
	ad = binary.BigEndian.AppendUint32(ad, a.signs)
	ad = append(ad, ext...)
	sig, err := signES256(key, append(bytes.Clone(ad), cdh...))
	if err != nil {
		return nil, StatusInvalidParam
	}
	return cbor.Map{{1, cbor.Map{{"id", id}, {"type", "public-key"}}}, {2, ad}, {3, sig}}, StatusOK
}

// Pipe is an in-memory transport to an Authenticator: each Write is one
// output report, each Read returns the next input report. A Read with
// nothing pending is an error (the key has nothing to say), never a wait.
type Pipe struct {
	A       *Authenticator
	pending [][]byte
}

// ErrNothingPending is Pipe.Read's error when no report is pending.
var ErrNothingPending = errors.New("fido2test: no input report pending")

func (p *Pipe) Write(b []byte) (int, error) {
	if len(b) != reportLen {
		return 0, errors.New("fido2test: output report is not 64 bytes")
	}
	p.pending = append(p.pending, p.A.HandleReport(b)...)
	return len(b), nil
}

func (p *Pipe) Read(b []byte) (int, error) {
	if len(p.pending) == 0 {
		return 0, ErrNothingPending
	}
	n := copy(b, p.pending[0])
	p.pending = p.pending[1:]
	return n, nil
}

var _ io.ReadWriter = (*Pipe)(nil)
