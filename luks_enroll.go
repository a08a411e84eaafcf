package blkcrypt

import (
	"context"
	"fmt"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// AddKeyWithToken adds a keyslot for newPassphrase, authorised as AddKey
// is (existing, o.Keyslot, o.VolumeKey), and stores token naming it, in
// one metadata update: what an enrollment (systemd-cryptenroll, clevis
// luks bind) needs, without the state in between where a keyslot exists
// that no token names. The new keyslot's number is appended to the
// token's "keyslots" array, which must be present (usually empty). t.ID
// picks the token id (nil: the first free one) and t.Replace allows
// replacing the token there in the same update; t.Keyslots must be empty.
//
// LUKS2 only (LUKS1 has no tokens: ErrNotLUKS). A malformed token is
// ErrInvalidOptions and is refused before the key derivation. Exclusive
// lock; after a power cut at any point the header holds either neither
// the keyslot nor the token, or both. It returns the keyslot and the
// token id.
func (h *LUKS) AddKeyWithToken(ctx context.Context, existing, newPassphrase, token []byte, o KeyOptions, t TokenOptions) (slot, tokenID int, err error) {
	if len(newPassphrase) == 0 {
		return -1, -1, fmt.Errorf("%w: an empty new passphrase", ErrInvalidOptions)
	}
	if len(t.Keyslots) > 0 {
		return -1, -1, fmt.Errorf("%w: the token names the new keyslot only", ErrInvalidOptions)
	}
	slot, tokenID = -1, -1
	err = h.do(ctx, true, func(hd luksutil.Header) error {
		h2, err := asLUKS2(hd)
		if err != nil {
			return err
		}
		if err := checkNewSlot(hd, o.NewKeyslot); err != nil {
			return err
		}
		var key []byte
		if o.VolumeKey != nil {
			if !hd.VolumeKeyDigestOK(o.VolumeKey) {
				return luksutil.ErrWrongKey
			}
			key = append([]byte(nil), o.VolumeKey...)
		} else if key, _, err = hd.UnlockContext(ctx, h.dev, existing, keyslotArg(o.Keyslot)); err != nil {
			return err
		}
		defer clear(key)
		slot, tokenID, err = h2.AddKeyWithToken(ctx, h.dev, key, newPassphrase, o.keyslot(), tokenArg(t.ID), token, t.Replace)
		return err
	})
	return slot, tokenID, err
}
