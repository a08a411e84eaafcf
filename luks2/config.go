package luks2

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// SetUUID changes the volume UUID (luksUUID --uuid). uuid must be in the
// canonical text form; it is stored lowercase, as cryptsetup stores it.
// Both metadata copies are rewritten as any metadata update is.
func (h *Header) SetUUID(dev Device, uuid string) error {
	if err := h.Writable(); err != nil {
		return err
	}
	u, err := luksutil.CheckUUID(uuid)
	if err != nil {
		return err
	}
	p, err := h.prepare(h.md.root.clone(), h.bin)
	if err != nil {
		return err
	}
	p.bin.UUID = u
	return h.write(dev, p)
}

// Erase removes every keyslot (luksErase): one metadata update drops the
// keyslots and the digests' and tokens' references to them (the digest
// stays, with no keyslot, as cryptsetup leaves it); only then are the keyslot areas
// overwritten with random data. A cut before the update leaves the volume
// as it was; after it, no keyslot can open whatever survives of the areas.
func (h *Header) Erase(dev Device) error {
	if err := h.Writable(); err != nil {
		return err
	}
	var areas []luksutil.Range
	root := h.md.root.clone()
	for _, id := range h.keyslotIDs() {
		k := h.md.keyslots[id]
		if k.AreaSize > 0 && k.AreaSize <= MaxKeyslotsSize {
			areas = append(areas, luksutil.Range{Off: int64(k.AreaOffset), Len: int64(k.AreaSize)})
		}
		sid := strconv.Itoa(id)
		root.get("keyslots").del(sid)
		dropKeyslotRefs(root, sid)
	}
	if err := h.commit(dev, root); err != nil {
		return err
	}
	for _, a := range areas {
		if err := luksutil.WipeArea(dev, a.Off, int(a.Len)); err != nil {
			return fmt.Errorf("wiping a keyslot area: %w", err)
		}
	}
	return nil
}

// AnyToken asks ImportToken for the first free token id.
const AnyToken = -1

// ImportToken stores a token (as SetToken) under id, or the first free id
// for AnyToken, and assigns it to the given keyslots in the same metadata
// update, so a cut never leaves a token half assigned. It returns the id.
// An id already in use is refused with ErrSlotInUse unless replace is set.
func (h *Header) ImportToken(dev Device, id int, token []byte, keyslots []int, replace bool) (int, error) {
	if err := h.Writable(); err != nil {
		return -1, err
	}
	ids := h.TokenIDs()
	if id == AnyToken {
		for id = 0; slices.Contains(ids, id); id++ {
		}
	}
	if id < 0 || id >= MaxKeyslots {
		return -1, fmt.Errorf("%w: token id %d", ErrInvalidOptions, id)
	}
	if slices.Contains(ids, id) && !replace {
		return -1, fmt.Errorf("%w: token %d in use", ErrSlotInUse, id)
	}
	// As json-c's parser (cryptsetup's token import): the first JSON value
	// counts, whatever follows it.
	v, n, err := parseJSONArea(token)
	if err != nil || v.kind != jObj {
		return -1, fmt.Errorf("%w: token is not a JSON object", ErrInvalidOptions)
	}
	token = token[:n]
	// cryptsetup checks its built-in keyring token before storing it.
	if t := v.get("type"); t != nil && t.kind == jStr && t.s == "luks2-keyring" {
		if d := v.get("key_description"); d == nil || d.kind != jStr {
			return -1, fmt.Errorf("%w: luks2-keyring token without a key_description", ErrInvalidOptions)
		}
	}
	if len(keyslots) > 0 {
		arr := v.get("keyslots")
		if arr == nil || arr.kind != jArr {
			return -1, fmt.Errorf("%w: token has no keyslots array", ErrInvalidOptions)
		}
		for _, k := range keyslots {
			if _, err := h.keyslot(k); err != nil {
				return -1, err
			}
			s := strconv.Itoa(k)
			if !slices.ContainsFunc(arr.arr, func(e *jval) bool { return e.kind == jStr && e.s == s }) {
				arr.arr = append(arr.arr, jstr(s))
			}
		}
	} else {
		v.raw = trimmed(token)
	}
	root := h.md.root.clone()
	insertSorted(root.get("tokens"), strconv.Itoa(id), v)
	// A token the metadata rules refuse is bad input, not a bad header.
	p, err := h.prepare(root, h.bin)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if err := h.write(dev, p); err != nil {
		return -1, err
	}
	return id, nil
}

func trimmed(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	for j > i && (b[j-1] == ' ' || b[j-1] == '\n' || b[j-1] == '\t' || b[j-1] == '\r') {
		j--
	}
	return append([]byte(nil), b[i:j]...)
}

// TokenJSON is a token as cryptsetup's token export prints it: json-c's
// compact form of the parsed token (integers normalised as json-c stores
// them), without a trailing newline.
func (h *Header) TokenJSON(id int) ([]byte, error) {
	t := h.md.root.get("tokens").get(strconv.Itoa(id))
	if t == nil {
		return nil, fmt.Errorf("%w: token %d is not in use", ErrInvalidOptions, id)
	}
	return t.appendCompact(nil), nil
}

// appendCompact is appendJSON with json-c's integer printing.
func (v *jval) appendCompact(b []byte) []byte {
	switch v.kind {
	case jNum:
		if v.isInt() {
			return append(b, jsoncInt(v.s)...)
		}
		return append(b, v.s...)
	case jArr:
		b = append(b, '[')
		for i, e := range v.arr {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.appendCompact(b)
		}
		return append(b, ']')
	case jObj:
		b = append(b, '{')
		for i, m := range v.obj {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m.key)
			b = append(b, ':')
			b = m.val.appendCompact(b)
		}
		return append(b, '}')
	}
	return v.appendJSON(b)
}
