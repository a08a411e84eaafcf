package token

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-tpm/tpm2"
)

// The tpm2 pin (clevis's src/pins/tpm2, as clevis 19 runs tpm2-tools 5):
// the JWE's content key, as a JWK, is sealed in a keyed-hash object under
// a primary key the owner hierarchy derives from tpm2_createprimary's
// default template ("key": ecc or rsa; "hash": the name algorithm), with
// a PolicyPCR policy over "pcr_bank":"pcr_ids" when PCRs are given (else
// plain authorisation with an empty password). The object's TPM2B_PUBLIC
// and TPM2B_PRIVATE, as tpm2_create writes them, are "jwk_pub" and
// "jwk_priv" in the header.

type tpm2PinHeader struct {
	Hash    string `json:"hash"`
	Key     string `json:"key"`
	PCRBank string `json:"pcr_bank"`
	PCRIDs  string `json:"pcr_ids"`
	JWKPub  string `json:"jwk_pub"`
	JWKPriv string `json:"jwk_priv"`
	// PCRDigest is kept for clevis luks list; unsealing ignores it (the
	// TPM checks the PCRs' values against the policy).
	PCRDigest string `json:"pcr_digest"`
}

func hashByName(name string) (tpm2.TPMIAlgHash, bool) {
	switch name {
	case "sha1":
		return tpm2.TPMAlgSHA1, true
	case "sha256":
		return tpm2.TPMAlgSHA256, true
	case "sha384":
		return tpm2.TPMAlgSHA384, true
	case "sha512":
		return tpm2.TPMAlgSHA512, true
	}
	return 0, false
}

// parsePCRIDs reads clevis's "0,7" (the header's form); with cfg it also
// takes the configuration's [0, 7] or ["0", "7"].
func parsePCRIDs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 23 {
			return nil, fmt.Errorf("PCR %q is not 0..23", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// clevisPrimary creates tpm2_createprimary's default primary key of the
// given type with name algorithm hash.
func clevisPrimary(t *tpmConn, key string, hash tpm2.TPMIAlgHash) (*primary, error) {
	tpl := primaryTemplate(key)
	tpl.NameAlg = hash
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		InPublic:      tpm2.New2B(tpl),
	}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("creating the %s primary key: %w", key, err)
	}
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		flush(t, rsp.ObjectHandle)
		return nil, fmt.Errorf("creating the %s primary key: %w", key, err)
	}
	return &primary{handle: rsp.ObjectHandle, name: rsp.Name, pub: *pub}, nil
}

// tpm2B splits one TPM2B (a 16-bit big-endian size, then the bytes) that
// must fill b exactly.
func tpm2B(b []byte) ([]byte, bool) {
	if len(b) < 2 || int(binary.BigEndian.Uint16(b)) != len(b)-2 || len(b) == 2 {
		return nil, false
	}
	return b[2:], true
}

// tpm2Prep is a tpm2 JWE's header, checked offline.
type tpm2Prep struct {
	hash  tpm2.TPMIAlgHash
	key   string
	bank  string
	pcrs  []int
	pub   tpm2.TPM2BPublic
	privB []byte
}

func prepareTPM2(h *clevisHeader) (*tpm2Prep, error) {
	th := h.Clevis.TPM2
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: tpm2 pin: "+format, append([]any{ErrBadToken}, a...)...)
	}
	if th == nil {
		return nil, bad("header clevis.tpm2 missing")
	}
	if h.Alg != string(jose.DIRECT) {
		return nil, fmt.Errorf("%w: tpm2 pin: key algorithm %q (clevis writes dir)", ErrUnsupported, h.Alg)
	}
	hash, ok := hashByName(th.Hash)
	if !ok {
		return nil, fmt.Errorf("%w: tpm2 pin: hash %q (sha1, sha256, sha384 and sha512 are)", ErrUnsupported, th.Hash)
	}
	if th.Key != "ecc" && th.Key != "rsa" {
		return nil, fmt.Errorf("%w: tpm2 pin: key %q (ecc and rsa are)", ErrUnsupported, th.Key)
	}
	p := &tpm2Prep{hash: hash, key: th.Key, bank: th.PCRBank}
	if th.PCRIDs != "" {
		var err error
		if p.pcrs, err = parsePCRIDs(th.PCRIDs); err != nil {
			return nil, bad("pcr_ids: %v", err)
		}
		if th.PCRBank != "sha1" && th.PCRBank != "sha256" {
			return nil, fmt.Errorf("%w: tpm2 pin: PCR bank %q (sha1 and sha256 are)", ErrUnsupported, th.PCRBank)
		}
	}
	pubRaw, err1 := base64.RawURLEncoding.DecodeString(th.JWKPub)
	privRaw, err2 := base64.RawURLEncoding.DecodeString(th.JWKPriv)
	if err1 != nil || err2 != nil {
		return nil, bad("jwk_pub or jwk_priv is not base64url")
	}
	pubB, ok1 := tpm2B(pubRaw)
	privB, ok2 := tpm2B(privRaw)
	if !ok1 || !ok2 {
		return nil, bad("jwk_pub or jwk_priv is not one TPM2B")
	}
	p.privB = privB
	p.pub = tpm2.BytesAs2B[tpm2.TPMTPublic](slices.Clone(pubB))
	pc, err := p.pub.Contents()
	if err != nil || !bytes.Equal(tpm2.Marshal(pc), pubB) {
		return nil, bad("jwk_pub is not one well-formed TPMT_PUBLIC")
	}
	if pc.Type != tpm2.TPMAlgKeyedHash {
		return nil, bad("the sealed object's type is %#x, not a keyed hash", uint16(pc.Type))
	}
	return p, nil
}

func (o ClevisOptions) decryptTPM2(ctx context.Context, jwe string, h *clevisHeader) ([]byte, error) {
	pp, err := prepareTPM2(h)
	if err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: tpm2 pin: "+format, append([]any{ErrBadToken}, a...)...)
	}
	hash, pcrs, th := pp.hash, pp.pcrs, struct{ Key, PCRBank string }{pp.key, pp.bank}
	pub, privB := pp.pub, pp.privB

	t, err := openTPM(ctx, o.TPM2Device)
	if err != nil {
		return nil, fmt.Errorf("tpm2 pin: %w", err)
	}
	defer t.Close()
	t.bind(ctx)
	p, err := clevisPrimary(t, th.Key, hash)
	if err != nil {
		return nil, fmt.Errorf("tpm2 pin: %w", tpmErr(ctx, err))
	}
	defer flush(t, p.handle)
	ld, err := tpm2.Load{
		ParentHandle: tpm2.AuthHandle{Handle: p.handle, Name: p.name, Auth: tpm2.PasswordAuth(nil)},
		InPrivate:    tpm2.TPM2BPrivate{Buffer: slices.Clone(privB)},
		InPublic:     pub,
	}.Execute(t)
	if err != nil {
		if errors.Is(err, tpm2.TPMRCLockout) || ctx.Err() != nil {
			return nil, fmt.Errorf("tpm2 pin: %w", tpmErr(ctx, err))
		}
		return nil, fmt.Errorf("tpm2 pin: %w: the TPM refuses to load the sealed key (another TPM, or another primary key): %w", ErrBadToken, tpmErr(ctx, err))
	}
	defer flush(t, ld.ObjectHandle)
	// The unsealed key travels encrypted: the session is salted with the
	// primary key and encrypts the response.
	opts := []tpm2.AuthOption{tpm2.Salted(p.handle, p.pub), tpm2.AESEncryption(128, tpm2.EncryptOut)}
	var auth tpm2.Session
	if len(pcrs) > 0 {
		s, closeS, err := tpm2.PolicySession(t, hash, 16, opts...)
		if err != nil {
			return nil, fmt.Errorf("tpm2 pin: starting a policy session: %w", tpmErr(ctx, err))
		}
		defer func() { _ = closeS() }()
		if _, err := (tpm2.PolicyPCR{PolicySession: s.Handle(), Pcrs: pcrSelection(th.PCRBank, pcrs)}).Execute(t); err != nil {
			return nil, fmt.Errorf("tpm2 pin: PolicyPCR: %w", tpmErr(ctx, err))
		}
		auth = s
	} else {
		auth = tpm2.HMAC(hash, 16, opts...)
	}
	rsp, err := tpm2.Unseal{ItemHandle: tpm2.AuthHandle{Handle: ld.ObjectHandle, Name: ld.Name, Auth: auth}}.Execute(t)
	if err != nil {
		if errors.Is(err, tpm2.TPMRCPolicyFail) {
			return nil, fmt.Errorf("tpm2 pin: %w: PCRs %s in bank %s", ErrPCRMismatch, pcrList(pcrs), th.PCRBank)
		}
		return nil, fmt.Errorf("tpm2 pin: unsealing: %w", tpmErr(ctx, err))
	}
	sealed := rsp.OutData.Buffer
	defer wipe(sealed)
	// k is kept as raw bytes (a string could not be wiped).
	var jwk struct {
		Kty string          `json:"kty"`
		K   json.RawMessage `json:"k"`
	}
	err = json.Unmarshal(bytes.TrimSpace(sealed), &jwk)
	defer wipe(jwk.K)
	if err != nil || jwk.Kty != "oct" || len(jwk.K) < 2 || jwk.K[0] != '"' || jwk.K[len(jwk.K)-1] != '"' {
		return nil, bad("the unsealed data is not a symmetric JWK")
	}
	k64 := jwk.K[1 : len(jwk.K)-1]
	key := make([]byte, base64.RawURLEncoding.DecodedLen(len(k64)))
	defer wipe(key)
	n, err := base64.RawURLEncoding.Decode(key, k64)
	if err != nil {
		return nil, bad("the unsealed JWK's k is not base64url")
	}
	key = key[:n]
	return openJWE(jwe, jose.DIRECT, key)
}

// tpm2PinConfig is clevis encrypt tpm2's configuration.
type tpm2PinConfig struct {
	Hash      string          `json:"hash"`
	Key       string          `json:"key"`
	PCRBank   string          `json:"pcr_bank"`
	PCRIDs    json.RawMessage `json:"pcr_ids"`
	PCRDigest string          `json:"pcr_digest"`
}

// encryptTPM2 is clevis encrypt tpm2: a fresh A256GCM key, sealed as its
// JWK under the PCR policy, encrypts the plaintext. Defaults as clevis:
// hash sha256, key ecc; the PCR bank defaults to sha256 (clevis 19 took
// sha1, later versions the TPM's first bank).
func (o ClevisOptions) encryptTPM2(ctx context.Context, raw map[string]json.RawMessage, plaintext []byte) (string, error) {
	inval := func(format string, a ...any) error {
		return fmt.Errorf("%w: tpm2: "+format, append([]any{blkcrypt.ErrInvalidOptions}, a...)...)
	}
	js, _ := json.Marshal(raw)
	var c tpm2PinConfig
	if err := json.Unmarshal(js, &c); err != nil {
		return "", inval("configuration: %v", oneLine(err))
	}
	if c.Hash == "" {
		c.Hash = "sha256"
	}
	if c.Key == "" {
		c.Key = "ecc"
	}
	if c.PCRBank == "" {
		c.PCRBank = "sha256"
	}
	hash, ok := hashByName(c.Hash)
	if !ok {
		return "", inval("hash %q (sha1, sha256, sha384 and sha512 are)", c.Hash)
	}
	if c.Key != "ecc" && c.Key != "rsa" {
		return "", inval("key %q (ecc and rsa are)", c.Key)
	}
	if c.PCRBank != "sha1" && c.PCRBank != "sha256" {
		return "", inval("pcr_bank %q (sha1 and sha256 are)", c.PCRBank)
	}
	var pcrs []int
	if len(c.PCRIDs) > 0 && !emptyValue(c.PCRIDs) {
		var s string
		var list []json.RawMessage
		var ids []string
		switch {
		case json.Unmarshal(c.PCRIDs, &s) == nil:
			ids = []string{s}
		case json.Unmarshal(c.PCRIDs, &list) == nil:
			for _, e := range list {
				var n json.Number
				if json.Unmarshal(e, &n) == nil {
					ids = append(ids, n.String())
				} else if json.Unmarshal(e, &s) == nil {
					ids = append(ids, s)
				} else {
					return "", inval("pcr_ids: %s", e)
				}
			}
		default:
			return "", inval("pcr_ids is neither a string nor an array")
		}
		var err error
		if pcrs, err = parsePCRIDs(strings.Join(ids, ",")); err != nil {
			return "", inval("pcr_ids: %v", err)
		}
	}
	var pcrDigest []byte
	if c.PCRDigest != "" {
		var err error
		if pcrDigest, err = base64.RawURLEncoding.DecodeString(strings.TrimRight(c.PCRDigest, "=")); err != nil {
			return "", inval("pcr_digest is not base64url")
		}
		if len(pcrs) == 0 {
			return "", inval("pcr_digest without pcr_ids")
		}
	}

	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return "", err
	}
	defer wipe(key[:])
	// The sealed JWK as jose jwk gen -i '{"alg":"A256GCM"}' writes it.
	sealed := []byte(`{"alg":"A256GCM","k":"` + base64.RawURLEncoding.EncodeToString(key[:]) + `","key_ops":["encrypt","decrypt"],"kty":"oct"}`)
	defer wipe(sealed)

	t, err := openTPM(ctx, o.TPM2Device)
	if err != nil {
		return "", fmt.Errorf("tpm2 pin: %w", err)
	}
	defer t.Close()
	t.bind(ctx)
	p, err := clevisPrimary(t, c.Key, hash)
	if err != nil {
		return "", fmt.Errorf("tpm2 pin: %w", tpmErr(ctx, err))
	}
	defer flush(t, p.handle)
	attrs := tpm2.TPMAObject{FixedTPM: true, FixedParent: true, NoDA: true, AdminWithPolicy: true}
	var policy []byte
	if len(pcrs) > 0 {
		s, closeS, err := tpm2.PolicySession(t, hash, 16, tpm2.Trial())
		if err != nil {
			return "", fmt.Errorf("tpm2 pin: a trial policy session: %w", tpmErr(ctx, err))
		}
		_, err = tpm2.PolicyPCR{PolicySession: s.Handle(), PcrDigest: tpm2.TPM2BDigest{Buffer: pcrDigest}, Pcrs: pcrSelection(c.PCRBank, pcrs)}.Execute(t)
		if err == nil {
			var d *tpm2.PolicyGetDigestResponse
			if d, err = (tpm2.PolicyGetDigest{PolicySession: s.Handle()}).Execute(t); err == nil {
				policy = d.PolicyDigest.Buffer
			}
		}
		_ = closeS()
		if err != nil {
			return "", fmt.Errorf("tpm2 pin: the PCR policy: %w", tpmErr(ctx, err))
		}
	} else {
		attrs.UserWithAuth = true
	}
	pub := tpm2.TPMTPublic{
		Type:             tpm2.TPMAlgKeyedHash,
		NameAlg:          hash,
		ObjectAttributes: attrs,
		AuthPolicy:       tpm2.TPM2BDigest{Buffer: policy},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgKeyedHash, &tpm2.TPMSKeyedHashParms{
			Scheme: tpm2.TPMTKeyedHashScheme{Scheme: tpm2.TPMAlgNull},
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgKeyedHash, &tpm2.TPM2BDigest{}),
	}
	sess := tpm2.HMAC(hash, 16, tpm2.Salted(p.handle, p.pub), tpm2.AESEncryption(128, tpm2.EncryptIn))
	rsp, err := tpm2.Create{
		ParentHandle: tpm2.AuthHandle{Handle: p.handle, Name: p.name, Auth: sess},
		InSensitive:  tpm2.TPM2BSensitiveCreate{Sensitive: &tpm2.TPMSSensitiveCreate{Data: tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: sealed})}},
		InPublic:     tpm2.New2B(pub),
	}.Execute(t)
	if err != nil {
		return "", fmt.Errorf("tpm2 pin: sealing: %w", tpmErr(ctx, err))
	}
	hdr := map[string]string{
		"hash": c.Hash, "key": c.Key,
		"jwk_pub":  base64.RawURLEncoding.EncodeToString(tpm2.Marshal(rsp.OutPublic)),
		"jwk_priv": base64.RawURLEncoding.EncodeToString(tpm2.Marshal(rsp.OutPrivate)),
	}
	if len(pcrs) > 0 {
		hdr["pcr_bank"] = c.PCRBank
		ids := make([]string, len(pcrs))
		for i, n := range pcrs {
			ids[i] = strconv.Itoa(n)
		}
		hdr["pcr_ids"] = strings.Join(ids, ",")
	}
	return sealJWE(key[:], plaintext, map[string]any{"pin": "tpm2", "tpm2": hdr})
}
