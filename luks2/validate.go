package luks2

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/kdf"
)

// Keyslot is the decoded view of one keyslot object.
type Keyslot struct {
	ID       int
	Type     string // "luks2" (others, e.g. "reencrypt", are only listed)
	KeySize  int    // size of the stored key
	Priority Priority
	// AF
	AFType    string
	AFStripes int
	AFHash    string
	// Area
	AreaType       string
	AreaOffset     uint64
	AreaSize       uint64
	AreaEncryption string
	AreaKeySize    int
	// KDF
	KDF     kdf.Params // Type may be a legacy or unknown name
	KDFSalt []byte
	// Digest is the digest this keyslot belongs to (-1 if none).
	Digest int
}

// Segment is the decoded view of one segment.
type Segment struct {
	ID         int
	Type       string // "crypt" for the data
	Offset     uint64
	Size       uint64 // 0 when Dynamic
	Dynamic    bool
	IVTweak    uint64
	Encryption string
	SectorSize int
	Flags      []string
	Integrity  bool
	// IntegrityType is the segment's integrity "type" ("aead",
	// "poly1305", "hmac(sha256)", …) when Integrity is set; the journal
	// fields are cryptsetup's "journal_encryption" and
	// "journal_integrity" ("none" for every volume cryptsetup makes).
	IntegrityType, IntegrityJournalEncryption, IntegrityJournalIntegrity string
}

// Digest is the decoded view of one digest.
type Digest struct {
	ID         int
	Type       string
	Keyslots   []int
	Segments   []int
	Hash       string
	Iterations uint32
	Salt       []byte
	Value      []byte
	refs       []string // the keyslot names as stored
	named      bool     // stored under its canonical name ("0", not "00")
}

// Config is the decoded config section.
type Config struct {
	JSONSize     uint64
	KeyslotsSize uint64
	Flags        []string
	Requirements []string
}

// metadata is the validated, decoded JSON.
type metadata struct {
	root     *jval
	keyslots map[int]*Keyslot
	segments map[int]*Segment
	digests  map[int]*Digest
	tokens   []int
	config   Config
	// badToken is a token id of 32 or more (else 0): cryptsetup loads
	// such a header but its open aborts on an assertion
	// (token_is_blocked in luks2_token.c, 2.6.1), so Unlock refuses it.
	badToken int
}

func verr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", luksutil.ErrCorruptHeader, fmt.Sprintf(format, a...))
}

// numbered reports whether s is a decimal number (json-c's "numbered").
func numbered(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// strU64 is json_str_to_uint64: the whole string must be a uint64.
func strU64(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

func contains(obj *jval, key string, k jkind) *jval {
	v := obj.get(key)
	if v == nil || v.kind != k {
		return nil
	}
	return v
}

// containsString is json_contains_string: a non-empty string member.
func containsString(obj *jval, key string) (string, bool) {
	v := contains(obj, key, jStr)
	if v == nil || v.s == "" {
		return "", false
	}
	return v.s, true
}

// containsInt is json_contains(..., json_type_int): an integer number
// member; a fraction such as 4000.5 is a json-c double and does not count.
func containsInt(obj *jval, key string) *jval {
	v := obj.get(key)
	if !v.isInt() {
		return nil
	}
	return v
}

// idOf parses an object key that passed numbered().
func idOf(key string) (int, error) {
	n, err := strconv.Atoi(key)
	if err != nil || n > 1<<30 {
		return 0, verr("id %q out of range", key)
	}
	return n, nil
}

// repairKDFs drops keyslot kdf members that do not belong to the kdf type,
// like cryptsetup's LUKS2_hdr_repair (a pbkdf2 ↔ argon2 switch once left
// them behind).
func repairKDFs(root *jval) {
	ks := contains(root, "keyslots", jObj)
	if ks == nil {
		return
	}
	for _, m := range ks.obj {
		k := m.val.get("kdf")
		if k == nil || k.kind != jObj {
			continue
		}
		t := k.get("type")
		if t == nil || t.kind != jStr {
			continue
		}
		var keep []string
		switch t.s {
		case kdf.PBKDF2:
			keep = []string{"type", "salt", "hash", "iterations"}
		case kdf.Argon2i, kdf.Argon2id:
			keep = []string{"type", "salt", "time", "memory", "cpus"}
		default:
			continue
		}
		for i := 0; i < len(k.obj); {
			if !contains1(keep, k.obj[i].key) {
				k.obj = append(k.obj[:i], k.obj[i+1:]...)
				continue
			}
			i++
		}
	}
}

func contains1(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func validateRefs(arr *jval, section *jval, what string) ([]int, error) {
	var ids []int
	for i, e := range arr.arr {
		if e.kind != jStr {
			return nil, verr("illegal value type in %s array at index %d", what, i)
		}
		if contains(section, e.s, jObj) == nil {
			return nil, verr("%s %q referenced but missing", what, e.s)
		}
		n, err := strconv.Atoi(e.s)
		if err != nil {
			return nil, verr("%s reference %q is not a number", what, e.s)
		}
		ids = append(ids, n)
	}
	return ids, nil
}

func isBackupSegment(seg *jval) bool {
	f := contains(seg, "flags", jArr)
	if f == nil {
		return false
	}
	for _, e := range f.arr {
		if e.kind == jStr && strings.HasPrefix(e.s, "backup-") {
			return true
		}
	}
	return false
}

func reencryptCandidate(flag string) bool {
	if flag == "online-reencrypt" {
		return true
	}
	rest, ok := strings.CutPrefix(flag, "online-reencrypt-v")
	return ok && rest != "" && numbered(rest)
}

// validateMetadata checks the JSON like cryptsetup's LUKS2_hdr_validate
// (after LUKS2_hdr_repair) and decodes it. jsonAreaSize is hdr_size-4096.
func validateMetadata(root *jval, jsonAreaSize uint64) (*metadata, error) {
	return validateMetadataContext(context.Background(), root, jsonAreaSize)
}

// validateMetadataContext is validateMetadata, stopping with ctx's error
// when ctx ends. Every check is linear or n log n in the size of the
// JSON, so a hostile 4 MiB area (tens of thousands of segments or
// keyslots) costs a fraction of a second.
func validateMetadataContext(ctx context.Context, root *jval, jsonAreaSize uint64) (*metadata, error) {
	tick := 0
	stop := func() error {
		if tick++; tick%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("validating the LUKS2 metadata: %w", err)
			}
		}
		return nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("validating the LUKS2 metadata: %w", err)
	}
	if root == nil || root.kind != jObj {
		return nil, verr("metadata is not a JSON object")
	}
	repairKDFs(root)
	md := &metadata{root: root, keyslots: map[int]*Keyslot{}, segments: map[int]*Segment{}, digests: map[int]*Digest{}}

	// Requirements.
	config := contains(root, "config", jObj)
	if config == nil {
		return nil, verr("missing config section")
	}
	if r := config.get("requirements"); r != nil {
		if r.kind != jObj {
			return nil, verr("config requirements is not an object")
		}
		if mand := r.get("mandatory"); mand != nil {
			if mand.kind != jArr {
				return nil, verr("mandatory requirements is not an array")
			}
			online := 0
			for _, e := range mand.arr {
				if e.kind != jStr {
					return nil, verr("mandatory requirement is not a string")
				}
				md.config.Requirements = append(md.config.Requirements, e.s)
				if reencryptCandidate(e.s) {
					online++
				}
			}
			if online > 1 {
				return nil, verr("multiple online reencryption requirement flags")
			}
		}
	}

	keyslots := root.get("keyslots")
	segments := root.get("segments")
	// Tokens.
	tokens := contains(root, "tokens", jObj)
	if tokens == nil {
		return nil, verr("missing tokens section")
	}
	for _, m := range tokens.obj {
		if !numbered(m.key) {
			return nil, verr("token %q is not in numbered form", m.key)
		}
		id, err := idOf(m.key)
		if err != nil {
			return nil, err
		}
		if keyslots == nil {
			return nil, verr("missing keyslots section")
		}
		if _, ok := containsString(m.val, "type"); !ok {
			return nil, verr("token %s has no type", m.key)
		}
		ka := contains(m.val, "keyslots", jArr)
		if ka == nil {
			return nil, verr("token %s has no keyslots array", m.key)
		}
		if _, err := validateRefs(ka, keyslots, "keyslot"); err != nil {
			return nil, fmt.Errorf("token %s: %w", m.key, err)
		}
		if id >= MaxTokens {
			md.badToken = id
		}
		md.tokens = append(md.tokens, id)
	}
	sort.Ints(md.tokens)

	// Digests.
	digests := contains(root, "digests", jObj)
	if digests == nil {
		return nil, verr("missing digests section")
	}
	if contains(root, "keyslots", jObj) == nil {
		return nil, verr("keyslots section is missing or not an object")
	}
	if contains(root, "segments", jObj) == nil {
		return nil, verr("segments section is missing or not an object")
	}
	for _, m := range digests.obj {
		if !numbered(m.key) {
			return nil, verr("digest %q is not in numbered form", m.key)
		}
		id, err := idOf(m.key)
		if err != nil {
			return nil, err
		}
		d := &Digest{ID: id}
		var ok bool
		if d.Type, ok = containsString(m.val, "type"); !ok {
			return nil, verr("digest %s has no type", m.key)
		}
		ka, sa := contains(m.val, "keyslots", jArr), contains(m.val, "segments", jArr)
		if ka == nil || sa == nil {
			return nil, verr("digest %s lacks keyslots or segments arrays", m.key)
		}
		if d.Keyslots, err = validateRefs(ka, keyslots, "keyslot"); err != nil {
			return nil, fmt.Errorf("digest %s: %w", m.key, err)
		}
		for _, e := range ka.arr {
			d.refs = append(d.refs, e.s)
		}
		if d.Segments, err = validateRefs(sa, segments, "segment"); err != nil {
			return nil, fmt.Errorf("digest %s: %w", m.key, err)
		}
		if d.Type == "pbkdf2" {
			d.Hash, _ = containsString(m.val, "hash")
			// cryptsetup reads the count with json_object_get_int64 and
			// no type check, so "1000" (a string) works as 1000.
			if it := m.val.get("iterations").getInt64(); it > 0 && it <= 1<<32-1 {
				d.Iterations = uint32(it)
			}
			if s, ok := containsString(m.val, "salt"); ok {
				d.Salt, _ = base64.StdEncoding.DecodeString(s)
			}
			if s, ok := containsString(m.val, "digest"); ok {
				d.Value, _ = base64.StdEncoding.DecodeString(s)
			}
		}
		// cryptsetup finds a digest by the name it prints for its id, so
		// a digest stored as "00" loads but cannot verify a key.
		d.named = m.key == strconv.Itoa(id)
		if prev := md.digests[id]; prev == nil || !prev.named {
			md.digests[id] = d
		}
	}

	// Segments.
	if len(segments.obj) < 1 {
		return nil, verr("empty segments section")
	}
	digested := map[string]bool{} // segment names some digest lists
	for _, d := range digests.obj {
		if sa := contains(d.val, "segments", jArr); sa != nil {
			for _, e := range sa.arr {
				if e.kind == jStr {
					digested[e.s] = true
				}
			}
		}
	}
	firstBackup := -1
	for _, m := range segments.obj {
		if err := stop(); err != nil {
			return nil, err
		}
		if !numbered(m.key) {
			return nil, verr("segment %q is not in numbered form", m.key)
		}
		id, err := idOf(m.key)
		if err != nil {
			return nil, err
		}
		s := &Segment{ID: id}
		var ok bool
		var off, size string
		if s.Type, ok = containsString(m.val, "type"); !ok {
			return nil, verr("segment %s has no type", m.key)
		}
		if off, ok = containsString(m.val, "offset"); !ok {
			return nil, verr("segment %s has no offset", m.key)
		}
		if size, ok = containsString(m.val, "size"); !ok {
			return nil, verr("segment %s has no size", m.key)
		}
		if !numbered(off) {
			return nil, verr("segment %s offset %q is not a number", m.key, off)
		}
		if s.Offset, ok = strU64(off); !ok {
			return nil, verr("illegal segment %s offset %q", m.key, off)
		}
		if size == "dynamic" {
			s.Dynamic = true
		} else {
			if !numbered(size) {
				return nil, verr("segment %s size %q is not a number", m.key, size)
			}
			if s.Size, ok = strU64(size); !ok || s.Size == 0 {
				return nil, verr("illegal segment %s size %q", m.key, size)
			}
		}
		if s.Offset%512 != 0 || s.Size%512 != 0 {
			return nil, verr("segment %s offset and size must be aligned to 512 bytes", m.key)
		}
		if f := m.val.get("flags"); f != nil {
			if f.kind != jArr {
				return nil, verr("segment %s flags is not an array", m.key)
			}
			for _, e := range f.arr {
				if e.kind != jStr {
					return nil, verr("segment %s flag is not a string", m.key)
				}
				s.Flags = append(s.Flags, e.s)
			}
		}
		if isBackupSegment(m.val) {
			if firstBackup < 0 || id < firstBackup {
				firstBackup = id
			}
		} else if firstBackup >= 0 && id >= firstBackup {
			return nil, verr("regular segment %d is behind backup segment %d", id, firstBackup)
		}
		if s.Type == "crypt" || s.Type == "hw-opal-crypt" {
			if err := validateCryptSegment(m.key, m.val, s, digested); err != nil {
				return nil, err
			}
		}
		if strings.HasPrefix(s.Type, "hw-opal") && s.Dynamic {
			return nil, verr("segment %s of type %s cannot have a dynamic size", m.key, s.Type)
		}
		// Like digests, segments are looked up by their printed id: one
		// stored as "00" leaves a gap at 0, refused below.
		if m.key == strconv.Itoa(id) {
			md.segments[id] = s
		}
	}
	count := len(segments.obj)
	if firstBackup == 0 {
		return nil, verr("no regular segment")
	}
	if firstBackup >= count {
		return nil, verr("gap between the last regular segment and backup segment %d", firstBackup)
	}
	if firstBackup < 0 {
		firstBackup = count
	}
	for i := 0; i < firstBackup; i++ {
		if md.segments[i] == nil {
			return nil, verr("gap at segment %d", i)
		}
	}
	if err := regularSegmentsApart(md.segments, firstBackup); err != nil {
		return nil, err
	}
	for i := firstBackup; i < count; i++ {
		if md.segments[i] == nil {
			return nil, verr("gap at segment %d", i)
		}
	}

	// Keyslots.
	for _, m := range keyslots.obj {
		if !numbered(m.key) {
			return nil, verr("keyslot %q is not in numbered form", m.key)
		}
		id, err := idOf(m.key)
		if err != nil {
			return nil, err
		}
		k := &Keyslot{ID: id, Digest: -1}
		var ok bool
		if k.Type, ok = containsString(m.val, "type"); !ok {
			return nil, verr("keyslot %s has no type", m.key)
		}
		ksz, ok := containsInt(m.val, "key_size").uint32Val()
		if !ok {
			return nil, verr("keyslot %s has an illegal key_size", m.key)
		}
		k.KeySize = int(ksz)
		k.Priority = luksutil.PriorityUnset
		if p := m.val.get("priority"); p != nil {
			// cryptsetup reads it with json_object_get_int, whatever its
			// type, and an AnySlot unlock tries only priorities 2 and 1:
			// any other number means never tried unless named.
			if k.Priority, ok = luksutil.PriorityFromDisk(int(p.getInt())); !ok {
				k.Priority = PriorityInvalid
			}
		}
		md.keyslots[id] = k
	}

	// Config.
	js, ok := containsString(config, "json_size")
	if !ok {
		return nil, verr("config has no json_size")
	}
	if md.config.JSONSize, ok = strU64(js); !ok {
		return nil, verr("illegal config json_size %q", js)
	}
	kss, ok := containsString(config, "keyslots_size")
	if !ok {
		return nil, verr("config has no keyslots_size")
	}
	if md.config.KeyslotsSize, ok = strU64(kss); !ok {
		return nil, verr("illegal config keyslots_size %q", kss)
	}
	mdSize := md.config.JSONSize + BinHeaderSize
	if !contains1u(MetadataSizes, mdSize) {
		return nil, verr("unsupported LUKS2 header size %d", mdSize)
	}
	if md.config.KeyslotsSize%4096 != 0 || md.config.KeyslotsSize > MaxKeyslotsSize {
		return nil, verr("unsupported LUKS2 keyslots size %d", md.config.KeyslotsSize)
	}
	// The lowest data offset, as json_segments_get_minimal_offset finds it:
	// backup segments do not count, and a segment at offset 0 (a detached
	// header) turns the check off, whatever order the segments come in.
	minOff := uint64(0)
	for _, s := range md.segments {
		if isBackupFlags(s.Flags) {
			continue
		}
		if s.Offset == 0 {
			minOff = 0
			break
		}
		if minOff == 0 || s.Offset < minOff {
			minOff = s.Offset
		}
	}
	if minOff != 0 && (minOff < md.config.KeyslotsSize || minOff-md.config.KeyslotsSize < 2*mdSize) {
		return nil, verr("keyslots_size %d is too large for data offset %d", md.config.KeyslotsSize, minOff)
	}
	if f := config.get("flags"); f != nil {
		if f.kind != jArr {
			return nil, verr("config flags is not an array")
		}
		for _, e := range f.arr {
			if e.kind != jStr {
				return nil, verr("config flag is not a string")
			}
			md.config.Flags = append(md.config.Flags, e.s)
		}
	}

	// Keyslot areas.
	end := 2*mdSize + md.config.KeyslotsSize
	type iv struct {
		id       int
		off, len uint64
	}
	var areas []iv
	for _, m := range keyslots.obj {
		id, _ := strconv.Atoi(m.key)
		k := md.keyslots[id]
		area := contains(m.val, "area", jObj)
		if area == nil {
			return nil, verr("keyslot %s has no area", m.key)
		}
		if k.AreaType, ok = containsString(area, "type"); !ok {
			return nil, verr("keyslot %s area has no type", m.key)
		}
		o, ok1 := containsString(area, "offset")
		l, ok2 := containsString(area, "size")
		if !ok1 || !ok2 || !numbered(o) || !numbered(l) {
			return nil, verr("keyslot %s area offset or size missing or not a number", m.key)
		}
		if k.AreaOffset, ok1 = strU64(o); !ok1 {
			return nil, verr("illegal keyslot %s area offset", m.key)
		}
		if k.AreaSize, ok2 = strU64(l); !ok2 {
			return nil, verr("illegal keyslot %s area size", m.key)
		}
		areas = append(areas, iv{id, k.AreaOffset, k.AreaSize})
	}
	for _, a := range areas {
		if a.off < 2*mdSize {
			return nil, verr("keyslot %d area offset %d is inside the metadata", a.id, a.off)
		}
		if a.len == 0 {
			return nil, verr("keyslot %d area length is zero", a.id)
		}
		if a.off > ^uint64(0)-a.len {
			return nil, verr("keyslot %d area offset+length overflows", a.id)
		}
		if a.off+a.len > end {
			return nil, verr("keyslot %d area [%d, %d] overflows the keyslots area (ends at %d)", a.id, a.off, a.off+a.len, end)
		}
	}
	// Two areas overlap when one starts inside the other: in start order,
	// when a start lies below the furthest end seen so far.
	sort.Slice(areas, func(i, j int) bool { return areas[i].off < areas[j].off })
	if err := apart(len(areas), func(i int) (uint64, uint64, bool) { return areas[i].off, areas[i].off + areas[i].len, false }, func(i, j int) error {
		return verr("keyslot %d and %d areas overlap", areas[i].id, areas[j].id)
	}); err != nil {
		return nil, err
	}

	// JSON size.
	if md.config.JSONSize != jsonAreaSize {
		return nil, verr("JSON area size %d does not match the binary header (%d)", md.config.JSONSize, jsonAreaSize)
	}
	if n := uint64(len(marshalMetadata(root))); n > jsonAreaSize {
		return nil, verr("JSON (%d bytes) does not fit in the %d-byte area", n, jsonAreaSize)
	}

	// Keyslot types. cryptsetup finds a keyslot's digest by the name it
	// prints for the id ("%u"), so keyslot "01" has none.
	digestOf := map[string][]int{} // keyslot name -> digests listing it, once per listing
	for _, d := range md.digests {
		for _, r := range d.refs {
			digestOf[r] = append(digestOf[r], d.ID)
		}
	}
	reencrypt := 0
	for _, m := range keyslots.obj {
		if err := stop(); err != nil {
			return nil, err
		}
		id, _ := strconv.Atoi(m.key)
		k := md.keyslots[id]
		switch ds := digestOf[strconv.Itoa(id)]; len(ds) {
		case 0:
		case 1:
			k.Digest = ds[0]
		default:
			k.Digest = -2 // more than one
		}
		switch k.Type {
		case "luks2":
			if err := validateLUKS2Keyslot(m.key, m.val, k); err != nil {
				return nil, err
			}
			if k.Digest < 0 {
				return nil, verr("keyslot %d is not assigned to exactly one digest", id)
			}
		case "reencrypt":
			reencrypt++
		}
	}
	online := false
	for _, r := range md.config.Requirements {
		if reencryptCandidate(r) {
			online = true
		}
	}
	if online && reencrypt == 0 {
		return nil, verr("missing reencryption keyslot")
	}
	if reencrypt > 0 && !online {
		return nil, verr("reencryption keyslot without the reencryption requirement")
	}
	if reencrypt > 1 {
		return nil, verr("too many reencryption keyslots")
	}
	return md, nil
}

func contains1u(list []uint64, v uint64) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func validateCryptSegment(key string, seg *jval, s *Segment, digested map[string]bool) error {
	ivs, ok := containsString(seg, "iv_tweak")
	if !ok {
		return verr("segment %s has no iv_tweak", key)
	}
	if s.Encryption, ok = containsString(seg, "encryption"); !ok {
		return verr("segment %s has no encryption", key)
	}
	ss := containsInt(seg, "sector_size")
	if ss == nil {
		return verr("segment %s has no sector_size", key)
	}
	if ig := seg.get("integrity"); ig != nil {
		if ig.kind != jObj {
			return verr("segment %s integrity is not an object", key)
		}
		var vals [3]string
		for i, f := range []string{"type", "journal_encryption", "journal_integrity"} {
			v, ok := containsString(ig, f)
			if !ok {
				return verr("segment %s integrity has no %s", key, f)
			}
			vals[i] = v
		}
		s.Integrity = true
		s.IntegrityType, s.IntegrityJournalEncryption, s.IntegrityJournalIntegrity = vals[0], vals[1], vals[2]
	}
	n, ok := ss.uint32Val()
	if !ok {
		return verr("segment %s has an illegal sector_size", key)
	}
	if n == 0 || n%512 != 0 {
		return verr("segment %s has an illegal sector size %d", key, n)
	}
	s.SectorSize = int(n)
	if !numbered(ivs) {
		return verr("segment %s has an illegal iv_tweak", key)
	}
	if s.IVTweak, ok = strU64(ivs); !ok {
		return verr("segment %s has an illegal iv_tweak", key)
	}
	if s.Size%uint64(n) != 0 {
		return verr("segment %s size must be aligned to its sector size %d", key, n)
	}
	if digested[key] {
		return nil
	}
	return verr("crypt segment %s is not assigned to a key digest", key)
}

func validateLUKS2Keyslot(key string, ks *jval, k *Keyslot) error {
	kd := contains(ks, "kdf", jObj)
	afo := contains(ks, "af", jObj)
	area := contains(ks, "area", jObj)
	if kd == nil || afo == nil || area == nil {
		return verr("keyslot %s lacks kdf, af or area objects", key)
	}
	t, ok := containsString(kd, "type")
	if !ok {
		return verr("keyslot %s kdf has no type", key)
	}
	k.KDF.Type = t
	switch t {
	case kdf.PBKDF2:
		h, okh := containsString(kd, "hash")
		it := containsInt(kd, "iterations")
		_, oks := containsString(kd, "salt")
		if len(kd.obj) != 4 || !okh || it == nil || !oks {
			return verr("keyslot %s has a malformed pbkdf2 kdf", key)
		}
		k.KDF.Hash = h
		k.KDF.Iterations, _ = it.uint32Val()
	case kdf.Argon2i, kdf.Argon2id:
		tm, mem, cpus := containsInt(kd, "time"), containsInt(kd, "memory"), containsInt(kd, "cpus")
		_, oks := containsString(kd, "salt")
		if len(kd.obj) != 5 || tm == nil || mem == nil || cpus == nil || !oks {
			return verr("keyslot %s has a malformed %s kdf", key, t)
		}
		k.KDF.Iterations, _ = tm.uint32Val()
		k.KDF.MemoryKiB, _ = mem.uint32Val()
		k.KDF.Parallel, _ = cpus.uint32Val()
	}
	if s, ok := containsString(kd, "salt"); ok {
		k.KDFSalt, _ = base64.StdEncoding.DecodeString(s)
	}
	at, ok := containsString(afo, "type")
	if !ok || at != "luks1" {
		return verr("keyslot %s has an unsupported af type", key)
	}
	k.AFType = at
	if k.AFHash, ok = containsString(afo, "hash"); !ok {
		return verr("keyslot %s af has no hash", key)
	}
	st := containsInt(afo, "stripes")
	if st == nil {
		return verr("keyslot %s af has no stripes", key)
	}
	if n, ok := st.uint32Val(); ok {
		k.AFStripes = int(n)
	}
	if k.AreaType != "raw" {
		return verr("keyslot %s has an unsupported area type", key)
	}
	if k.AreaEncryption, ok = containsString(area, "encryption"); !ok {
		return verr("keyslot %s area has no encryption", key)
	}
	ak := containsInt(area, "key_size")
	if ak == nil {
		return verr("keyslot %s area has no key_size", key)
	}
	if n, ok := ak.uint32Val(); ok {
		k.AreaKeySize = int(n)
	}
	return nil
}

// PriorityInvalid is the Priority of a keyslot whose stored priority is a
// number other than 0, 1 or 2: cryptsetup never tries such a keyslot
// unless it is named, and neither does Unlock.
const PriorityInvalid = Priority(-1)

// apart checks that no interval of n starts inside another. interval(i)
// gives start, end and whether it is open-ended (a dynamic segment); the
// intervals must be sorted by start. overlap reports a pair.
func apart(n int, interval func(i int) (start, end uint64, open bool), overlap func(i, j int) error) error {
	far, farOpen, who := uint64(0), false, -1
	for i := 0; i < n; i++ {
		st, en, op := interval(i)
		if who >= 0 && (farOpen || st < far) {
			return overlap(i, who)
		}
		if who < 0 || op || !farOpen && en > far {
			far, farOpen, who = en, op || farOpen, i
		}
	}
	return nil
}

// regularSegmentsApart is the overlap check of hdr_validate_segments over
// segments 0..n-1 (gaps already refused): only the last may be dynamic,
// none may end beyond 2^64, and none may start inside another.
func regularSegmentsApart(segs map[int]*Segment, n int) error {
	order := make([]*Segment, 0, n)
	for i := 0; i < n; i++ {
		a := segs[i]
		if a.Dynamic && i != n-1 {
			return verr("only the last regular segment may have a dynamic size")
		}
		if n > 1 && !a.Dynamic && a.Offset > ^uint64(0)-a.Size {
			return verr("segment %d offset+size overflows", i)
		}
		order = append(order, a)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].Offset < order[j].Offset })
	return apart(len(order), func(i int) (uint64, uint64, bool) {
		s := order[i]
		return s.Offset, s.Offset + s.Size, s.Dynamic
	}, func(i, j int) error {
		return verr("segments %d and %d overlap", order[j].ID, order[i].ID)
	})
}
