package luks2

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// AddKeyWithToken stores the volume key in a new keyslot under passphrase
// and a token naming that keyslot, in one metadata update: the enrollment
// systemd-cryptenroll and clevis do in two steps (a keyslot, then a token
// import). The new keyslot's number is appended to the token's
// "keyslots" array, which must exist (empty, or naming other active
// keyslots). The token goes to id, or the first free id for AnyToken; an
// id in use needs replace, and the token it replaces goes in the same
// update.
//
// The key material is written to a free part of the keyslots area and
// synced before the metadata that references it, as AddKey does, so a
// power cut leaves either the old header (no new keyslot, no new token) or
// the new one (both). It returns the keyslot and the token id. A token the
// metadata rules refuse is ErrInvalidOptions, and nothing is written.
func (h *Header) AddKeyWithToken(ctx context.Context, dev Device, volumeKey, passphrase []byte, opts KeyslotOptions, id int, token []byte, replace bool) (slot, tokenID int, err error) {
	if err := h.Writable(); err != nil {
		return -1, -1, err
	}
	d := h.segmentDigest()
	if d == nil || !h.VolumeKeyDigestOK(volumeKey) {
		return -1, -1, ErrWrongKey
	}
	// Every check on the token comes before the key derivation, so a bad
	// token costs no KDF run.
	ids := h.TokenIDs()
	if id == AnyToken {
		for id = 0; slices.Contains(ids, id); id++ {
		}
	}
	if id < 0 || id >= MaxKeyslots {
		return -1, -1, fmt.Errorf("%w: token id %d", ErrInvalidOptions, id)
	}
	if slices.Contains(ids, id) && !replace {
		return -1, -1, fmt.Errorf("%w: token %d in use", ErrSlotInUse, id)
	}
	v, n, err := parseJSONArea(token)
	if err != nil || v.kind != jObj {
		return -1, -1, fmt.Errorf("%w: token is not a JSON object", ErrInvalidOptions)
	}
	if end := trimmed(token[n:]); len(end) > 0 {
		return -1, -1, fmt.Errorf("%w: text after the token's JSON object", ErrInvalidOptions)
	}
	if t := v.get("type"); t == nil || t.kind != jStr || t.s == "" {
		return -1, -1, fmt.Errorf("%w: token has no type", ErrInvalidOptions)
	}
	arr := v.get("keyslots")
	if arr == nil || arr.kind != jArr {
		return -1, -1, fmt.Errorf("%w: token has no keyslots array", ErrInvalidOptions)
	}
	nk, err := h.prepareKeyslot(ctx, volumeKey, passphrase, opts, nil)
	if err != nil {
		return -1, -1, err
	}
	defer clear(nk.material)
	sid := strconv.Itoa(nk.id)
	if slices.ContainsFunc(arr.arr, func(e *jval) bool { return e.kind == jStr && e.s == sid }) {
		return -1, -1, fmt.Errorf("%w: the token already names keyslot %s", ErrInvalidOptions, sid)
	}
	arr.arr = append(arr.arr, jstr(sid))
	v.raw = nil

	root := h.md.root.clone()
	insertSorted(root.get("keyslots"), sid, nk.obj)
	dg := root.get("digests").get(strconv.Itoa(d.ID))
	dg.get("keyslots").arr = append(dg.get("keyslots").arr, jstr(sid))
	dg.raw = nil
	tid := strconv.Itoa(id)
	if root.get("tokens").get(tid) != nil {
		root.get("tokens").del(tid)
	}
	insertSorted(root.get("tokens"), tid, v)
	// A token the metadata rules refuse (a keyslot it names that does not
	// exist, a bad keyslots entry) is bad input, not a bad header.
	p, err := h.prepare(root, h.bin)
	if err != nil {
		return -1, -1, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if err := luksutil.WriteSync(dev, nk.material, int64(nk.offset)); err != nil {
		return -1, -1, fmt.Errorf("writing keyslot %d material: %w", nk.id, err)
	}
	if err := h.write(dev, p); err != nil {
		return -1, -1, err
	}
	return nk.id, id, nil
}
