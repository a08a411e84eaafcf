package integrity

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"strings"
)

// Algorithms lists the tag algorithms a standalone volume can use, by the
// kernel crypto API's names (integritysetup also takes hmac-sha256 for
// hmac(sha256)).
var Algorithms = []string{"crc32c", "crc32", "sha1", "sha256", "sha512", "hmac(sha1)", "hmac(sha256)", "hmac(sha512)"}

// KernelName turns integritysetup's spelling of an algorithm (hmac-sha256)
// into the kernel's (hmac(sha256)).
func KernelName(alg string) string {
	if h, ok := strings.CutPrefix(alg, "hmac-"); ok {
		return "hmac(" + h + ")"
	}
	return alg
}

// hashSpec makes a hash for an algorithm name and key.
type hashSpec struct {
	name   string
	keyed  bool
	newFn  func(key []byte) hash.Hash
	key    []byte
	digest int
}

func newHashSpec(alg string, key []byte) (*hashSpec, error) {
	name := KernelName(alg)
	var plain func() hash.Hash
	var keyed bool
	inner := name
	if h, ok := strings.CutPrefix(name, "hmac("); ok && strings.HasSuffix(h, ")") {
		keyed, inner = true, strings.TrimSuffix(h, ")")
	}
	switch inner {
	case "crc32c":
		plain = func() hash.Hash { return &crcLE{tab: crc32.MakeTable(crc32.Castagnoli), crc: ^uint32(0), invert: true} }
	case "crc32":
		plain = func() hash.Hash { return &crcLE{tab: crc32.IEEETable} }
	case "sha1":
		plain = sha1.New
	case "sha256":
		plain = sha256.New
	case "sha512":
		plain = sha512.New
	default:
		return nil, fmt.Errorf("%w: tag algorithm %q (known: %s)", ErrUnsupported, alg, strings.Join(Algorithms, ", "))
	}
	if keyed && strings.HasPrefix(inner, "crc") {
		return nil, fmt.Errorf("%w: tag algorithm %q", ErrUnsupported, alg)
	}
	s := &hashSpec{name: name, keyed: keyed}
	if keyed {
		if len(key) == 0 {
			return nil, fmt.Errorf("integrity: %s needs a key", name)
		}
		s.key = append([]byte(nil), key...)
		s.newFn = func(k []byte) hash.Hash { return hmac.New(plain, k) }
	} else {
		if len(key) != 0 {
			return nil, fmt.Errorf("integrity: %s takes no key", name)
		}
		s.newFn = func([]byte) hash.Hash { return plain() }
	}
	s.digest = s.newFn(s.key).Size()
	return s, nil
}

func (s *hashSpec) New() hash.Hash { return s.newFn(s.key) }

// wipe clears the key copy.
func (s *hashSpec) wipe() {
	if s != nil {
		clear(s.key)
	}
}

// crcLE is the kernel's crc32 and crc32c shash: reflected CRC, digest
// little-endian. crc32c starts at ~0 and inverts at the end (the standard
// CRC-32C); the kernel's "crc32" starts at 0 and does not invert.
type crcLE struct {
	tab    *crc32.Table
	crc    uint32
	invert bool
}

func (c *crcLE) Write(p []byte) (int, error) {
	// crc32.Update inverts before and after; undo both to keep the raw
	// register.
	c.crc = ^crc32.Update(^c.crc, c.tab, p)
	return len(p), nil
}

func (c *crcLE) Sum(b []byte) []byte {
	v := c.crc
	if c.invert {
		v = ^v
	}
	return binary.LittleEndian.AppendUint32(b, v)
}

func (c *crcLE) Reset() {
	c.crc = 0
	if c.invert {
		c.crc = ^uint32(0)
	}
}
func (c *crcLE) Size() int      { return 4 }
func (c *crcLE) BlockSize() int { return 1 }

// tagger computes a block's tag as integrity_sector_checksum does: the
// salt (FIXED_HMAC volumes), the little-endian 64-bit logical sector
// number, the block; the digest cut or zero-padded to the tag size.
type tagger struct {
	h       hash.Hash
	salt    []byte
	tagSize int
	sum     []byte
}

func (s *hashSpec) tagger(sb *Superblock) *tagger {
	t := &tagger{h: s.New(), tagSize: int(sb.TagSize)}
	if sb.Flags&FlagFixedHMAC != 0 {
		t.salt = append([]byte(nil), sb.Salt[:]...)
	}
	return t
}

func (t *tagger) tag(dst []byte, sector uint64, block []byte) {
	t.h.Reset()
	if t.salt != nil {
		t.h.Write(t.salt)
	}
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], sector)
	t.h.Write(s[:])
	t.h.Write(block)
	t.sum = t.h.Sum(t.sum[:0])
	n := copy(dst[:t.tagSize], t.sum)
	clear(dst[n:t.tagSize])
}
