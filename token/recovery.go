package token

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"

	"github.com/blkcrypt/blkcrypt"
)

// modhex is YubiKey's alphabet, which systemd uses for recovery keys: it
// types the same on most keyboard layouts.
const modhex = "cbdefghijklnrtuv"

// RecoveryKeyLen is the length of a recovery key: 64 modhex characters
// (256 bits) in 8 groups of 8 joined by dashes.
const RecoveryKeyLen = 64 + 7

// tokenType returns a token's "type", or "" when the JSON has none.
func tokenType(js []byte) string {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(js, &t)
	return t.Type
}

// IsRecoveryKey reports whether s has the form of a systemd recovery key.
// systemd-cryptsetup takes a recovery key as a passphrase, verbatim (it is
// what the keyslot holds), so the form matters only to tell the user.
func IsRecoveryKey(s []byte) bool {
	if len(s) != RecoveryKeyLen {
		return false
	}
	for i, c := range s {
		if i%9 == 8 {
			if c != '-' {
				return false
			}
		} else if !strings.ContainsRune(modhex, rune(c)) {
			return false
		}
	}
	return true
}

// NewRecoveryKey returns a fresh recovery key: 256 bits from crypto/rand
// in modhex, as systemd-cryptenroll --recovery-key makes one.
func NewRecoveryKey() ([]byte, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	defer wipe(b[:])
	out := make([]byte, 0, RecoveryKeyLen)
	for i, x := range b {
		if i > 0 && i%4 == 0 {
			out = append(out, '-')
		}
		out = append(out, modhex[x>>4], modhex[x&15])
	}
	return out, nil
}

// EnrollOptions choose how an enrollment authorises itself and the
// keyslot it adds.
type EnrollOptions struct {
	// Existing is a passphrase of the volume (systemd-cryptenroll's
	// --unlock-key-file); it authorises the new keyslot.
	Existing []byte
	// Keyslot restricts Existing to one keyslot; nil tries every one.
	Keyslot *int
	// PBKDF is the new keyslot's KDF; the zero value is what
	// systemd-cryptenroll sets for its high-entropy secrets: PBKDF2 with
	// SHA-512 at cryptsetup's minimum of 1000 iterations.
	PBKDF blkcrypt.PBKDFOptions
}

func (o EnrollOptions) keyOptions() blkcrypt.KeyOptions {
	k := blkcrypt.KeyOptions{Keyslot: o.Keyslot, PBKDF: o.PBKDF}
	if k.PBKDF.Type == "" && k.PBKDF.Hash == "" && k.PBKDF.Iterations == 0 && k.PBKDF.IterTime == 0 {
		k.PBKDF = blkcrypt.PBKDFOptions{Type: "pbkdf2", Hash: "sha512", Iterations: 1000}
	}
	return k
}

// addWithToken adds a keyslot holding passphrase and the token naming it
// (token's "keyslots" is empty; the new keyslot is appended) in one
// header update, so a crash leaves neither or both (systemd-cryptenroll
// writes them in two steps).
func addWithToken(ctx context.Context, h *blkcrypt.LUKS, passphrase []byte, o EnrollOptions, token []byte) (slot, id int, err error) {
	return h.AddKeyWithToken(ctx, o.Existing, passphrase, token, o.keyOptions(), blkcrypt.TokenOptions{})
}

// EnrollRecovery adds a systemd recovery key: a new keyslot whose
// passphrase is a fresh recovery key, and the token
// {"type":"systemd-recovery","keyslots":["N"]} systemd-cryptenroll writes.
// It returns the key (to show the user once, then wipe), the keyslot and
// the token id.
func EnrollRecovery(ctx context.Context, h *blkcrypt.LUKS, o EnrollOptions) (key []byte, slot, tokenID int, err error) {
	key, err = NewRecoveryKey()
	if err != nil {
		return nil, -1, -1, err
	}
	tok, err := json.Marshal(struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
	}{TypeRecovery, []string{}})
	if err == nil {
		slot, tokenID, err = addWithToken(ctx, h, key, o, tok)
	}
	if err != nil {
		wipe(key)
		return nil, -1, -1, err
	}
	return key, slot, tokenID, nil
}
