package token

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"

	"github.com/blkcrypt/blkcrypt"
)

// LUKS1 has no tokens. clevis luks bind keeps a LUKS1 binding's JWE with
// luksmeta (latchset/luksmeta) in the gap between the keyslot areas and
// the data (blkcrypt.LUKS.LUKS1Gap), in the luksmeta slot of the same
// number as the keyslot it adds, under LUKSMetaClevisUUID.
//
// The on-disk form, all integers big-endian: at the start of the gap a
// 272-byte header, the magic "LUKSMETA", version (1), a CRC-32C of the
// header taken with this field zero, then 8 slots of 32 bytes: a 16-byte
// UUID (all zero: the slot is unused), the data's offset from the start
// of the gap, its length, its CRC-32C and 4 reserved bytes.

// LUKSMetaClevisUUID is the luksmeta slot UUID clevis stores its LUKS1
// bindings under.
const LUKSMetaClevisUUID = "cb6e8904-81ff-40da-a84a-07ab9ab5715e"

// ErrNoLUKSMeta: the LUKS1 gap holds no luksmeta header (luksmeta init
// never ran there), so there are no luksmeta slots.
var ErrNoLUKSMeta = errors.New("no luksmeta header")

const (
	luksmetaSlots      = 8
	luksmetaSlotSize   = 32
	luksmetaHeaderSize = 16 + luksmetaSlots*luksmetaSlotSize
	luksmetaVersion    = 1
	luksmetaMagic      = "LUKSMETA"
	// maxLUKSMetaData bounds what one slot may make ReadLUKSMeta
	// allocate; a clevis JWE is a few KiB.
	maxLUKSMetaData = maxJWE
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// LUKSMetaSlot is one used luksmeta slot.
type LUKSMetaSlot struct {
	// Slot is the slot's number (0-7); clevis uses the keyslot's.
	Slot int
	// UUID says what the data is, in the textual form luksmeta show
	// prints (LUKSMetaClevisUUID for clevis).
	UUID string
	// Data is the slot's data, nil when Err is set.
	Data []byte
	// Err says why the slot's data could not be read (its checksum
	// does not match, or it is larger than this package reads).
	Err error
}

// ReadLUKSMeta reads the luksmeta header at the start of gap (size bytes:
// a LUKS1 gap as blkcrypt.LUKS.LUKS1Gap returns it) and the data of each
// used slot, with luksmeta's checks: no header or no magic is
// ErrNoLUKSMeta; another version is ErrUnsupported; a header whose
// checksum does not match, or a slot whose data does not lie in the gap,
// is ErrBadToken (one-line errors). A slot whose data fails its own
// checksum comes back with Err set, so that it hides no other slot.
func ReadLUKSMeta(gap io.ReaderAt, size int64) ([]LUKSMetaSlot, error) {
	if size < luksmetaHeaderSize {
		return nil, ErrNoLUKSMeta
	}
	var hdr [luksmetaHeaderSize]byte
	if _, err := gap.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("reading the luksmeta header: %w", err)
	}
	if string(hdr[:8]) != luksmetaMagic {
		return nil, ErrNoLUKSMeta
	}
	if v := binary.BigEndian.Uint32(hdr[8:]); v != luksmetaVersion {
		return nil, fmt.Errorf("%w: luksmeta version %d (1 is known)", ErrUnsupported, v)
	}
	sum := binary.BigEndian.Uint32(hdr[12:])
	binary.BigEndian.PutUint32(hdr[12:], 0)
	if got := crc32.Checksum(hdr[:], castagnoli); got != sum {
		return nil, fmt.Errorf("%w: luksmeta header checksum %08x, stored %08x", ErrBadToken, got, sum)
	}
	// luksmeta keeps the first 4096 bytes of the gap for the header.
	maxLen := size - 4096
	type slotHdr struct {
		uuid           []byte
		off, len, csum uint32
	}
	var used []int
	var slots [luksmetaSlots]slotHdr
	for i := range slots {
		b := hdr[16+i*luksmetaSlotSize:][:luksmetaSlotSize]
		s := slotHdr{uuid: b[:16], off: binary.BigEndian.Uint32(b[16:]), len: binary.BigEndian.Uint32(b[20:]), csum: binary.BigEndian.Uint32(b[24:])}
		if isZero(s.uuid) {
			continue
		}
		if s.off <= luksmetaHeaderSize || int64(s.len) > maxLen || int64(s.off)+int64(s.len) > size {
			return nil, fmt.Errorf("%w: luksmeta slot %d: data at %d, %d bytes, outside the %d-byte gap", ErrBadToken, i, s.off, s.len, size)
		}
		slots[i] = s
		used = append(used, i)
	}
	out := make([]LUKSMetaSlot, 0, len(used))
	for _, i := range used {
		s := slots[i]
		ls := LUKSMetaSlot{Slot: i, UUID: uuidString(s.uuid)}
		if s.len > maxLUKSMetaData {
			ls.Err = fmt.Errorf("%w: %d bytes of luksmeta data (at most %d read)", ErrBadToken, s.len, maxLUKSMetaData)
			out = append(out, ls)
			continue
		}
		data := make([]byte, s.len)
		if _, err := gap.ReadAt(data, int64(s.off)); err != nil {
			return nil, fmt.Errorf("reading luksmeta slot %d: %w", i, err)
		}
		if got := crc32.Checksum(data, castagnoli); got != s.csum {
			ls.Err = fmt.Errorf("%w: luksmeta data checksum %08x, stored %08x", ErrBadToken, got, s.csum)
		} else {
			ls.Data = data
		}
		out = append(out, ls)
	}
	return out, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// uuidString is the textual form of a 16-byte UUID, as uuid_unparse
// writes it.
func uuidString(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// luksmetaClevis is a LUKS1 volume's clevis bindings found with luksmeta,
// as clevis tokens naming their slot's keyslot. A volume that is not
// LUKS1, or whose gap holds no luksmeta header, has none. A binding that
// cannot be read or parsed is an error in errs (one line each, naming
// the luksmeta slot) and no token.
func luksmetaClevis(ctx context.Context, h *blkcrypt.LUKS) (toks map[int]*ClevisToken, errs []error, err error) {
	gap, err := h.LUKS1Gap(ctx)
	if err != nil {
		if errors.Is(err, blkcrypt.ErrNotLUKS) && ctx.Err() == nil {
			return nil, nil, nil // LUKS2: its tokens are in its header
		}
		return nil, nil, err
	}
	slots, err := ReadLUKSMeta(gap, gap.Size())
	if errors.Is(err, ErrNoLUKSMeta) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("luksmeta (%s): %w", TypeClevis, err)}, nil
	}
	toks = map[int]*ClevisToken{}
	for _, s := range slots {
		if s.UUID != LUKSMetaClevisUUID {
			continue
		}
		if s.Err != nil {
			errs = append(errs, fmt.Errorf("luksmeta slot %d (%s): %w", s.Slot, TypeClevis, s.Err))
			continue
		}
		t, err := parseCompactClevis(string(s.Data))
		if err != nil {
			errs = append(errs, fmt.Errorf("luksmeta slot %d (%s): %w", s.Slot, TypeClevis, err))
			continue
		}
		t.Keyslots = []int{s.Slot}
		toks[s.Slot] = t
	}
	return toks, errs, nil
}

// parseCompactClevis checks a clevis JWE in the compact serialization (as
// clevis luks bind saves it with luksmeta; clevis luks pass tolerates a
// trailing newline) and names its pin.
func parseCompactClevis(jwe string) (*ClevisToken, error) {
	jwe = strings.TrimRight(jwe, "\n")
	if len(jwe) > maxJWE {
		return nil, fmt.Errorf("%w: a JWE of %d bytes", ErrBadToken, len(jwe))
	}
	parts := strings.Split(jwe, ".")
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: the JWE has %d parts, not 5", ErrBadToken, len(parts))
	}
	for i, p := range parts {
		if !isB64URL(p) {
			return nil, fmt.Errorf("%w: JWE member %q is not base64url", ErrBadToken, []string{"protected", "encrypted_key", "iv", "ciphertext", "tag"}[i])
		}
	}
	ph, err := parseProtected(jwe)
	if err != nil {
		return nil, err
	}
	return &ClevisToken{JWE: jwe, Pin: ph.Clevis.Pin}, nil
}

// unlockLUKSMetaClevis decrypts the JWE of the clevis binding in luksmeta
// slot n and returns the passphrase, as unlockClevis does for a token.
func unlockLUKSMetaClevis(ctx context.Context, n int, tok *ClevisToken, o ClevisOptions) ([]byte, error) {
	pt, err := o.decrypt(ctx, tok.JWE, 0)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return nil, fmt.Errorf("luksmeta slot %d (%s, pin %s): %w", n, TypeClevis, tok.Pin, err)
	}
	pass := ClevisPassphrase(pt)
	if len(pass) == 0 {
		wipe(pt)
		return nil, fmt.Errorf("luksmeta slot %d (%s, pin %s): %w: the decrypted passphrase is empty", n, TypeClevis, tok.Pin, ErrBadToken)
	}
	return pass, nil
}
