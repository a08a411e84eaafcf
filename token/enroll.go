package token

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/blkcrypt/blkcrypt"
	"github.com/google/go-tpm/tpm2"
)

// TPM2EnrollOptions choose what EnrollTPM2 seals to.
type TPM2EnrollOptions struct {
	EnrollOptions
	// TPM2Device is the TPM in systemd's spelling ("" is /dev/tpmrm0).
	TPM2Device string
	// PCRs are the PCRs the secret is sealed to, at their current
	// values; nil is systemd-cryptenroll 252's default, PCR 7.
	PCRs []int
	// Bank is "sha256" (the default) or "sha1".
	Bank string
	// PrimaryAlg is "ecc" (the default) or "rsa".
	PrimaryAlg string
	// PIN, when set, is also needed to unseal (--tpm2-with-pin). It is
	// hashed unsalted, as systemd 252 does, so systemd 252 reads it too.
	PIN []byte
}

// EnrollTPM2 seals a fresh 32-byte secret with the TPM under systemd's
// PCR (and PIN) policy, adds a keyslot whose passphrase is the base64 of
// the secret, and stores the token exactly as systemd-cryptenroll 252
// writes it. It returns the keyslot and the token id. The keyslot and the
// token are one header update (see addWithToken).
func EnrollTPM2(ctx context.Context, h *blkcrypt.LUKS, o TPM2EnrollOptions) (slot, tokenID int, err error) {
	pcrs := o.PCRs
	if pcrs == nil {
		pcrs = []int{7}
	}
	pcrs = slices.Clone(pcrs)
	slices.Sort(pcrs)
	pcrs = slices.Compact(pcrs)
	for _, p := range pcrs {
		if p < 0 || p > 23 {
			return -1, -1, fmt.Errorf("%w: PCR %d out of range 0..23", blkcrypt.ErrInvalidOptions, p)
		}
	}
	bank, alg := o.Bank, o.PrimaryAlg
	if bank == "" {
		bank = "sha256"
	}
	if alg == "" {
		alg = "ecc"
	}
	if bank != "sha1" && bank != "sha256" {
		return -1, -1, fmt.Errorf("%w: PCR bank %q (sha1 and sha256 are)", blkcrypt.ErrInvalidOptions, bank)
	}
	if alg != "ecc" && alg != "rsa" {
		return -1, -1, fmt.Errorf("%w: primary algorithm %q (ecc and rsa are)", blkcrypt.ErrInvalidOptions, alg)
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return -1, -1, err
	}
	defer wipe(secret[:])
	var auth []byte
	if o.PIN != nil {
		auth = PINAuth(o.PIN, nil)
		defer wipe(auth)
	}
	blob, policy, err := seal(ctx, o.TPM2Device, secret[:], pcrs, bank, alg, o.PIN != nil, auth)
	if err != nil {
		return -1, -1, err
	}
	pass := make([]byte, base64.StdEncoding.EncodedLen(len(secret)))
	base64.StdEncoding.Encode(pass, secret[:])
	defer wipe(pass)
	// The fields and their order are systemd-cryptenroll 252's; the
	// keyslot is appended to "keyslots" by the update that creates it.
	tok, err := json.Marshal(struct {
		Type       string   `json:"type"`
		Keyslots   []string `json:"keyslots"`
		Blob       string   `json:"tpm2-blob"`
		PCRs       []int    `json:"tpm2-pcrs"`
		Bank       string   `json:"tpm2-pcr-bank"`
		PrimaryAlg string   `json:"tpm2-primary-alg"`
		PolicyHash string   `json:"tpm2-policy-hash"`
		PIN        bool     `json:"tpm2-pin"`
	}{TypeTPM2, []string{}, base64.StdEncoding.EncodeToString(blob), pcrs, bank, alg, hex.EncodeToString(policy), o.PIN != nil})
	if err != nil {
		return -1, -1, err
	}
	return addWithToken(ctx, h, pass, o.EnrollOptions, tok)
}

// seal creates the sealed object under systemd's primary key and returns
// the blob (TPM2B_PRIVATE then TPM2B_PUBLIC) and its policy digest. With
// usePIN, auth is the PIN's authValue (PINAuth).
func seal(ctx context.Context, device string, secret []byte, pcrs []int, bank, alg string, usePIN bool, auth []byte) (blob, policy []byte, err error) {
	t, err := openTPM(ctx, device)
	if err != nil {
		return nil, nil, err
	}
	defer t.Close()
	t.bind(ctx)
	p, err := createPrimary(t, alg)
	if err != nil {
		return nil, nil, tpmErr(ctx, err)
	}
	defer flush(t, p.handle)
	if usePIN && auth == nil {
		auth = []byte{} // an all-zero digest trimmed: still a PIN policy
	}
	if !usePIN {
		auth = nil
	}
	// A trial session computes the policy over the PCRs' current values.
	_, done, digest, err := policySession(t, p, bank, pcrs, auth, true)
	if err != nil {
		return nil, nil, tpmErr(ctx, err)
	}
	done()
	pub := tpm2.TPMTPublic{
		Type:    tpm2.TPMAlgKeyedHash,
		NameAlg: tpm2.TPMAlgSHA256,
		// No UserWithAuth: only the policy unseals; no NoDA: a wrong PIN
		// counts towards the TPM's lockout, as systemd's objects do.
		ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true},
		AuthPolicy:       tpm2.TPM2BDigest{Buffer: digest},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgKeyedHash, &tpm2.TPMSKeyedHashParms{
			Scheme: tpm2.TPMTKeyedHashScheme{Scheme: tpm2.TPMAlgNull},
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgKeyedHash, &tpm2.TPM2BDigest{Buffer: make([]byte, 32)}),
	}
	sens := &tpm2.TPMSSensitiveCreate{
		UserAuth: tpm2.TPM2BAuth{Buffer: auth},
		Data:     tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: secret}),
	}
	// The secret travels to the TPM encrypted under a session salted
	// with the primary key.
	sess := tpm2.HMAC(tpm2.TPMAlgSHA256, 16, tpm2.Salted(p.handle, p.pub), tpm2.AESEncryption(128, tpm2.EncryptIn))
	rsp, err := tpm2.Create{
		ParentHandle: tpm2.AuthHandle{Handle: p.handle, Name: p.name, Auth: sess},
		InSensitive:  tpm2.TPM2BSensitiveCreate{Sensitive: sens},
		InPublic:     tpm2.New2B(pub),
	}.Execute(t)
	if err != nil {
		return nil, nil, fmt.Errorf("sealing: %w", tpmErr(ctx, err))
	}
	blob = append(tpm2.Marshal(rsp.OutPrivate), tpm2.Marshal(rsp.OutPublic)...)
	return blob, digest, nil
}
