package token

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-tpm/tpm2"
	"golang.org/x/crypto/pbkdf2"
)

// TypeTPM2 and TypeRecovery are the token types systemd-cryptenroll writes.
const (
	TypeTPM2     = "systemd-tpm2"
	TypeRecovery = "systemd-recovery"
)

// TPM2Token is a parsed systemd-tpm2 token: what systemd 252 writes, and
// the PIN salt of later versions.
type TPM2Token struct {
	Keyslots   []int
	Private    tpm2.TPM2BPrivate
	Public     tpm2.TPM2BPublic
	PCRs       []int  // sorted, each in 0..23
	Bank       string // "sha1" or "sha256"
	PrimaryAlg string // "ecc" or "rsa"
	PolicyHash []byte // 32 bytes (the session's hash is SHA-256)
	PIN        bool
	Salt       []byte // tpm2_salt (systemd 253 and later); nil without
}

// refused are the fields of later systemd versions that change how the
// secret is reached and that this package does not implement: a token
// carrying one is refused by name rather than unsealed wrongly.
var refused = map[string]string{
	"tpm2_srk":            "a persistent SRK handle",
	"tpm2_pubkey":         "a signed PCR policy",
	"tpm2_pubkey_pcrs":    "a signed PCR policy",
	"tpm2_pcrlock":        "a pcrlock policy",
	"tpm2_pcrlock_nv":     "a pcrlock policy",
	"tpm2_policy_hash":    "several policy hashes",
	"tpm2_argon2id":       "an Argon2id PIN",
	"tpm2_parent_pcrs":    "a parent PCR policy",
	"tpm2_parent_pcrbank": "a parent PCR policy",
}

// ParseTPM2Token parses a systemd-tpm2 token's JSON (as Tokens returns
// it) and its blob. Every failure is ErrBadToken or ErrUnsupported with a
// one-line reason naming the field.
func ParseTPM2Token(js []byte) (*TPM2Token, error) {
	var m map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(js))
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: token JSON: %v", ErrBadToken, oneLine(err))
	}
	if m == nil {
		return nil, fmt.Errorf("%w: token JSON is not an object", ErrBadToken)
	}
	var typ string
	if err := field(m, "type", &typ, true); err != nil {
		return nil, err
	}
	if typ != TypeTPM2 {
		return nil, fmt.Errorf("%w: token type %q is not %s", ErrBadToken, typ, TypeTPM2)
	}
	for k := range m {
		if why, ok := refused[k]; ok && !emptyValue(m[k]) {
			return nil, fmt.Errorf("%w: field %q (%s) is not implemented", ErrUnsupported, k, why)
		}
	}
	// Fields this package does not know and that could change how the
	// secret is reached (tpm2 prefixed, as systemd names them all) are
	// refused by name; others (a user's own notes) are ignored, as
	// systemd ignores them.
	for k := range m {
		if (strings.HasPrefix(k, "tpm2-") || strings.HasPrefix(k, "tpm2_")) && !knownTPM2Field[k] {
			if _, ok := refused[k]; !ok {
				return nil, fmt.Errorf("%w: unknown field %q", ErrUnsupported, k)
			}
		}
	}
	t := &TPM2Token{}
	var err error
	if t.Keyslots, err = keyslots(m); err != nil {
		return nil, err
	}
	raw, ok := m["tpm2-blob"]
	if !ok {
		return nil, fmt.Errorf("%w: field \"tpm2-blob\" missing", ErrBadToken)
	}
	if len(bytes.TrimSpace(raw)) > 0 && bytes.TrimSpace(raw)[0] == '[' {
		return nil, fmt.Errorf("%w: field \"tpm2-blob\" is an array (a sharded blob) and is not implemented", ErrUnsupported)
	}
	var b64 string
	if err := field(m, "tpm2-blob", &b64, true); err != nil {
		return nil, err
	}
	blob, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%w: field \"tpm2-blob\": not base64", ErrBadToken)
	}
	if t.Private, t.Public, err = ParseBlob(blob); err != nil {
		return nil, err
	}
	var pcrs []int
	if err := field(m, "tpm2-pcrs", &pcrs, true); err != nil {
		return nil, err
	}
	for _, p := range pcrs {
		if p < 0 || p > 23 {
			return nil, fmt.Errorf("%w: field \"tpm2-pcrs\": PCR %d out of range 0..23", ErrBadToken, p)
		}
		if !slices.Contains(t.PCRs, p) {
			t.PCRs = append(t.PCRs, p)
		}
	}
	slices.Sort(t.PCRs)
	// systemd before 250 wrote neither: SHA-256 and ECC were all it used.
	t.Bank, t.PrimaryAlg = "sha256", "ecc"
	if err := field(m, "tpm2-pcr-bank", &t.Bank, false); err != nil {
		return nil, err
	}
	if t.Bank != "sha1" && t.Bank != "sha256" {
		return nil, fmt.Errorf("%w: field \"tpm2-pcr-bank\": bank %q (sha1 and sha256 are)", ErrUnsupported, t.Bank)
	}
	if err := field(m, "tpm2-primary-alg", &t.PrimaryAlg, false); err != nil {
		return nil, err
	}
	if t.PrimaryAlg != "ecc" && t.PrimaryAlg != "rsa" {
		return nil, fmt.Errorf("%w: field \"tpm2-primary-alg\": %q (ecc and rsa are)", ErrUnsupported, t.PrimaryAlg)
	}
	var ph string
	if err := field(m, "tpm2-policy-hash", &ph, true); err != nil {
		return nil, err
	}
	if t.PolicyHash, err = hex.DecodeString(ph); err != nil || len(t.PolicyHash) != sha256.Size {
		return nil, fmt.Errorf("%w: field \"tpm2-policy-hash\": want %d hex bytes", ErrBadToken, sha256.Size)
	}
	if err := field(m, "tpm2-pin", &t.PIN, false); err != nil {
		return nil, err
	}
	var salt string
	if err := field(m, "tpm2_salt", &salt, false); err != nil {
		return nil, err
	}
	if salt != "" {
		if t.Salt, err = base64.StdEncoding.DecodeString(salt); err != nil {
			return nil, fmt.Errorf("%w: field \"tpm2_salt\": not base64", ErrBadToken)
		}
	}
	return t, nil
}

var knownTPM2Field = map[string]bool{
	"tpm2-blob": true, "tpm2-pcrs": true, "tpm2-pcr-bank": true, "tpm2-primary-alg": true,
	"tpm2-policy-hash": true, "tpm2-pin": true, "tpm2_salt": true,
}

// emptyValue reports a JSON value that asks for nothing: null, false, "",
// [] (systemd writes tpm2_pubkey_pcrs as [] on some versions).
func emptyValue(v json.RawMessage) bool {
	switch strings.Join(strings.Fields(string(v)), "") {
	case "null", "false", `""`, "[]":
		return true
	}
	return false
}

func field(m map[string]json.RawMessage, name string, v any, required bool) error {
	raw, ok := m[name]
	if !ok {
		if required {
			return fmt.Errorf("%w: field %q missing", ErrBadToken, name)
		}
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: field %q: %v", ErrBadToken, name, oneLine(err))
	}
	return nil
}

func keyslots(m map[string]json.RawMessage) ([]int, error) {
	var ks []string
	if err := field(m, "keyslots", &ks, true); err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ks))
	for _, s := range ks {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 31 {
			return nil, fmt.Errorf("%w: field \"keyslots\": %q is not a keyslot number", ErrBadToken, s)
		}
		out = append(out, n)
	}
	return out, nil
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// ParseBlob splits a tpm2-blob: a TPM2B_PRIVATE followed by a
// TPM2B_PUBLIC (a keyed-hash sealed object), nothing after.
func ParseBlob(blob []byte) (tpm2.TPM2BPrivate, tpm2.TPM2BPublic, error) {
	var priv tpm2.TPM2BPrivate
	var pub tpm2.TPM2BPublic
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: field \"tpm2-blob\": "+format, append([]any{ErrBadToken}, a...)...)
	}
	if len(blob) < 2 {
		return priv, pub, bad("%d bytes, truncated", len(blob))
	}
	n := int(binary.BigEndian.Uint16(blob))
	if n == 0 || 2+n+2 > len(blob) {
		return priv, pub, bad("TPM2B_PRIVATE of %d bytes in a %d-byte blob", n, len(blob))
	}
	priv.Buffer = slices.Clone(blob[2 : 2+n])
	rest := blob[2+n:]
	m := int(binary.BigEndian.Uint16(rest))
	if m == 0 || 2+m != len(rest) {
		return priv, pub, bad("TPM2B_PUBLIC of %d bytes where %d remain", m, len(rest)-2)
	}
	pub = tpm2.BytesAs2B[tpm2.TPMTPublic](slices.Clone(rest[2:]))
	p, err := pub.Contents()
	if err != nil {
		return priv, pub, bad("TPM2B_PUBLIC: %v", oneLine(err))
	}
	// Contents ignores trailing bytes: a structure shorter than its size
	// field is malformed.
	if again := tpm2.Marshal(p); !bytes.Equal(again, rest[2:]) {
		return priv, pub, bad("TPM2B_PUBLIC is not one well-formed TPMT_PUBLIC")
	}
	if p.Type != tpm2.TPMAlgKeyedHash {
		return priv, pub, bad("the sealed object's type is %#x, not a keyed hash", uint16(p.Type))
	}
	return priv, pub, nil
}

// PINAuth is the authValue systemd derives from a PIN: SHA-256 of the PIN,
// or with a salt SHA-256 of the base64 of PBKDF2-HMAC-SHA256(pin, salt,
// 10000, 32) (systemd 253 and later), trailing zero bytes trimmed as the
// TPM trims them when it stores an authValue.
func PINAuth(pin, salt []byte) []byte {
	in := pin
	if len(salt) > 0 {
		k := pbkdf2.Key(pin, salt, 10000, 32, sha256.New)
		in = []byte(base64.StdEncoding.EncodeToString(k))
		wipe(k)
		defer wipe(in)
	}
	sum := sha256.Sum256(in)
	out := bytes.TrimRight(sum[:], "\x00")
	res := slices.Clone(out)
	wipe(sum[:])
	return res
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}

// primaryTemplate is systemd's primary key: a restricted decryption key
// in the owner hierarchy, AES-128-CFB for its children, ECC P-256 or RSA
// 2048, no unique data, and no noDA (the template must be bit for bit the
// same, or the TPM derives another key and the blob does not load).
func primaryTemplate(alg string) tpm2.TPMTPublic {
	attrs := tpm2.TPMAObject{
		FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true,
		UserWithAuth: true, Restricted: true, Decrypt: true,
	}
	sym := tpm2.TPMTSymDefObject{
		Algorithm: tpm2.TPMAlgAES,
		KeyBits:   tpm2.NewTPMUSymKeyBits(tpm2.TPMAlgAES, tpm2.TPMKeyBits(128)),
		Mode:      tpm2.NewTPMUSymMode(tpm2.TPMAlgAES, tpm2.TPMAlgCFB),
	}
	if alg == "rsa" {
		return tpm2.TPMTPublic{
			Type: tpm2.TPMAlgRSA, NameAlg: tpm2.TPMAlgSHA256, ObjectAttributes: attrs,
			Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
				Symmetric: sym,
				Scheme:    tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgNull},
				KeyBits:   2048,
			}),
			Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{}),
		}
	}
	return tpm2.TPMTPublic{
		Type: tpm2.TPMAlgECC, NameAlg: tpm2.TPMAlgSHA256, ObjectAttributes: attrs,
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
			Symmetric: sym,
			Scheme:    tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgNull},
			CurveID:   tpm2.TPMECCNistP256,
			KDF:       tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{}),
	}
}

func bankAlg(bank string) tpm2.TPMIAlgHash {
	if bank == "sha1" {
		return tpm2.TPMAlgSHA1
	}
	return tpm2.TPMAlgSHA256
}

func pcrSelection(bank string, pcrs []int) tpm2.TPMLPCRSelection {
	sel := make([]byte, 3)
	for _, p := range pcrs {
		sel[p/8] |= 1 << (p % 8)
	}
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: bankAlg(bank), PCRSelect: sel}}}
}

// primary is a transient primary key, flushed by close.
type primary struct {
	handle tpm2.TPMHandle
	name   tpm2.TPM2BName
	pub    tpm2.TPMTPublic
}

func createPrimary(t *tpmConn, alg string) (*primary, error) {
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		InPublic:      tpm2.New2B(primaryTemplate(alg)),
	}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("creating the %s primary key: %w", alg, err)
	}
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		flush(t, rsp.ObjectHandle)
		return nil, fmt.Errorf("creating the %s primary key: %w", alg, err)
	}
	return &primary{handle: rsp.ObjectHandle, name: rsp.Name, pub: *pub}, nil
}

func flush(t *tpmConn, h tpm2.TPMHandle) {
	_, _ = tpm2.FlushContext{FlushHandle: h}.Execute(t)
}

// policySession starts a policy session salted with the primary key, so
// that the unsealed secret travels encrypted (AES-128-CFB) from the TPM,
// and runs systemd's policy: PolicyPCR over the token's PCRs (their
// current values), then PolicyAuthValue when a PIN is used. It returns the
// session and the digest the TPM computed.
func policySession(t *tpmConn, p *primary, bank string, pcrs []int, auth []byte, trial bool) (tpm2.Session, func(), []byte, error) {
	opts := []tpm2.AuthOption{tpm2.Salted(p.handle, p.pub), tpm2.AESEncryption(128, tpm2.EncryptOut)}
	if trial {
		opts = []tpm2.AuthOption{tpm2.Trial()}
	}
	if auth != nil {
		opts = append(opts, tpm2.Auth(auth))
	}
	s, closeS, err := tpm2.PolicySession(t, tpm2.TPMAlgSHA256, 16, opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("starting a policy session: %w", err)
	}
	done := func() { _ = closeS() }
	if _, err := (tpm2.PolicyPCR{PolicySession: s.Handle(), Pcrs: pcrSelection(bank, pcrs)}).Execute(t); err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("PolicyPCR: %w", err)
	}
	if auth != nil {
		if _, err := (tpm2.PolicyAuthValue{PolicySession: s.Handle()}).Execute(t); err != nil {
			done()
			return nil, nil, nil, fmt.Errorf("PolicyAuthValue: %w", err)
		}
	}
	d, err := tpm2.PolicyGetDigest{PolicySession: s.Handle()}.Execute(t)
	if err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("PolicyGetDigest: %w", err)
	}
	return s, done, d.PolicyDigest.Buffer, nil
}

// unsealTPM2 unseals the token's secret and returns the LUKS passphrase
// systemd derives from it: the padded standard base64 of the secret.
func unsealTPM2(ctx context.Context, id int, tok *TPM2Token, device string, pin []byte) ([]byte, error) {
	fail := func(err error) error { return fmt.Errorf("token %d (%s): %w", id, TypeTPM2, err) }
	if tok.PIN && pin == nil {
		return nil, fail(ErrNeedPIN)
	}
	t, err := openTPM(ctx, device)
	if err != nil {
		return nil, fail(err)
	}
	defer t.Close()
	t.bind(ctx)
	p, err := createPrimary(t, tok.PrimaryAlg)
	if err != nil {
		return nil, fail(tpmErr(ctx, err))
	}
	defer flush(t, p.handle)
	ld, err := tpm2.Load{
		ParentHandle: tpm2.AuthHandle{Handle: p.handle, Name: p.name, Auth: tpm2.PasswordAuth(nil)},
		InPrivate:    tok.Private,
		InPublic:     tok.Public,
	}.Execute(t)
	if err != nil && (errors.Is(err, tpm2.TPMRCLockout) || ctx.Err() != nil) {
		return nil, fail(tpmErr(ctx, err))
	}
	if err != nil {
		return nil, fail(fmt.Errorf("%w: the TPM refuses to load the blob (another TPM, or another primary key): %w", ErrBadToken, tpmErr(ctx, err)))
	}
	defer flush(t, ld.ObjectHandle)
	var auth []byte
	if tok.PIN {
		auth = PINAuth(pin, tok.Salt)
		defer wipe(auth)
		if auth == nil {
			auth = []byte{} // an all-zero digest: still a PIN session
		}
	}
	s, done, digest, err := policySession(t, p, tok.Bank, tok.PCRs, auth, false)
	if err != nil {
		return nil, fail(tpmErr(ctx, err))
	}
	defer done()
	if !bytes.Equal(digest, tok.PolicyHash) {
		return nil, fail(fmt.Errorf("%w: PCRs %s in bank %s", ErrPCRMismatch, pcrList(tok.PCRs), tok.Bank))
	}
	rsp, err := tpm2.Unseal{ItemHandle: tpm2.AuthHandle{Handle: ld.ObjectHandle, Name: ld.Name, Auth: s}}.Execute(t)
	if err != nil {
		switch {
		case errors.Is(err, tpm2.TPMRCAuthFail) || errors.Is(err, tpm2.TPMRCBadAuth):
			return nil, fail(fmt.Errorf("%w%s", ErrWrongPIN, triesLeft(t)))
		case errors.Is(err, tpm2.TPMRCPolicyFail):
			return nil, fail(fmt.Errorf("%w: PCRs %s in bank %s", ErrPCRMismatch, pcrList(tok.PCRs), tok.Bank))
		}
		return nil, fail(fmt.Errorf("unsealing: %w", tpmErr(ctx, err)))
	}
	secret := rsp.OutData.Buffer
	defer wipe(secret)
	if len(secret) == 0 {
		return nil, fail(fmt.Errorf("%w: the sealed secret is empty", ErrBadToken))
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(len(secret)))
	base64.StdEncoding.Encode(out, secret)
	return out, nil
}

// tpmErr names a TPM in lockout and the context's end; other errors pass.
func tpmErr(ctx context.Context, err error) error {
	if errors.Is(err, tpm2.TPMRCLockout) {
		return ErrLockout
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// triesLeft reads the TPM's dictionary-attack counters after a failed PIN:
// how many more failures it allows before it locks out.
func triesLeft(t *tpmConn) string {
	rsp, err := tpm2.GetCapability{
		Capability:    tpm2.TPMCapTPMProperties,
		Property:      uint32(tpm2.TPMPTLockoutCounter),
		PropertyCount: 2,
	}.Execute(t)
	if err != nil {
		return ""
	}
	props, err := rsp.CapabilityData.Data.TPMProperties()
	if err != nil {
		return ""
	}
	var counter, max uint32
	var haveC, haveM bool
	for _, p := range props.TPMProperty {
		switch p.Property {
		case tpm2.TPMPTLockoutCounter:
			counter, haveC = p.Value, true
		case tpm2.TPMPTMaxAuthFail:
			max, haveM = p.Value, true
		}
	}
	if !haveC || !haveM {
		return ""
	}
	if counter >= max {
		return " (the TPM is now in lockout)"
	}
	if max-counter == 1 {
		return " (1 more failure before the TPM locks out)"
	}
	return fmt.Sprintf(" (%d more failures before the TPM locks out)", max-counter)
}

func pcrList(p []int) string {
	s := make([]string, len(p))
	for i, n := range p {
		s[i] = strconv.Itoa(n)
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, "+")
}
