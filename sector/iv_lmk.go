package sector

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/blkcrypt/blkcrypt/capi"
)

// lmk is loop-AES compatibility, as dm-crypt's crypt_iv_lmk_* implements it.
//
// The IV of a 512-byte sector is a raw MD5 state: MD5 is started, fed the
// 64-byte seed (version 3 only), cipher blocks 1..31 of the plaintext sector
// (bytes 16..511) and a 16-byte trailer of the sector number cropped to 56
// bits, and its four state words are taken little-endian without MD5's
// padding and length. Those inputs are 512 or 576 bytes, whole MD5 blocks, so
// the state is exactly the compression function's output.
//
// Writing, the IV comes from the plaintext before CBC encryption. Reading,
// the sector is CBC-decrypted with a zero IV; blocks 1..31 do not depend on
// the IV, so the IV is then computed from the decrypted sector and XORed into
// its first block, which is what a CBC decryption with that IV would have
// produced there.
//
// Version 2 ("aes:64-cbc-lmk" with 64 keys) has no seed. Version 3 appends a
// 65th key of the same size; dm-crypt recognises it because the key length
// is then not a multiple of the key count (crypt_ctr_ivmode), and copies the
// first 16 bytes (MD5's digest size) of that part into a zeroed 64-byte seed
// (crypt_iv_lmk_init). The subkeys are the first 64 parts either way, and
// the subkey used for a sector is the one dm-crypt picks by sector number.

const (
	lmkSeedSize   = 64   // LMK_SEED_SIZE: 16 key bytes, then zeros
	lmkSeedCopy   = 16   // MD5 digest size: bytes of the seed key used
	lmkBitsMarker = 4024 // the constant dm-crypt (and loop-AES) put in the trailer
)

func init() {
	dataModes["lmk"] = newLMK
}

type lmkMode struct {
	ivSize int
	seed   *[lmkSeedSize]byte // nil in version 2
}

// lmkExtraKey is the length of the seed key part: zero for version 2, one
// key part for version 3 (key length not a multiple of the key count).
func lmkExtraKey(keyCount, keyLen int) int {
	if keyCount < 1 || keyLen%keyCount == 0 {
		return 0
	}
	return keyLen / (keyCount + 1)
}

func newLMK(c *Cipher, alg *capi.Alg, key []byte) (dataMode, error) {
	s := c.spec
	if c.opts.SectorSize != 512 {
		return nil, fmt.Errorf("%w: %s: lmk works on 512-byte sectors only, not %d", ErrInvalidOptions, s, c.opts.SectorSize)
	}
	if c.ivSize == 0 || c.ivSize > 16 {
		return nil, fmt.Errorf("%w: %s: lmk needs an IV of 1 to 16 bytes, %s has %d", ErrInvalidSpec, s, s.CAPI, c.ivSize)
	}
	m := &lmkMode{ivSize: c.ivSize}
	if extra := lmkExtraKey(s.KeyCount, len(key)); extra > 0 {
		if extra < lmkSeedCopy {
			return nil, fmt.Errorf("%w: %s: lmk seed key part is %d bytes, needs at least %d", ErrInvalidKey, s, extra, lmkSeedCopy)
		}
		// dm-crypt: cc->key + tfms_count * (key_size / key_parts).
		off := s.KeyCount * extra
		m.seed = new([lmkSeedSize]byte)
		copy(m.seed[:lmkSeedCopy], key[off:off+lmkSeedCopy])
	}
	return m, nil
}

func (m *lmkMode) extraKeySize(spec *Spec, keyLen int) int {
	return lmkExtraKey(spec.KeyCount, keyLen)
}

// iv writes the lmk IV of the 512-byte sector data into iv (16 bytes).
func (m *lmkMode) iv(iv *[16]byte, data []byte, sector uint64) {
	st := md5Init
	if m.seed != nil {
		md5Block(&st, m.seed[:])
	}
	// Blocks 1..31 of the sector: bytes 16..511. Seven whole MD5 blocks,
	// then 48 bytes that share the last MD5 block with the trailer.
	for p := 16; p+64 <= 464; p += 64 {
		md5Block(&st, data[p:p+64])
	}
	var last [64]byte
	copy(last[:48], data[464:512])
	binary.LittleEndian.PutUint32(last[48:], uint32(sector))
	binary.LittleEndian.PutUint32(last[52:], uint32(sector>>32)&0x00FFFFFF|0x80000000)
	binary.LittleEndian.PutUint32(last[56:], lmkBitsMarker)
	md5Block(&st, last[:])
	for i, w := range st {
		binary.LittleEndian.PutUint32(iv[4*i:], w)
	}
}

func (m *lmkMode) encrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error {
	s := getDataScratch()
	defer putDataScratch(s)
	iv := (*[16]byte)(s.iv[:16])
	m.iv(iv, src, ivSector) // before dst is written: they may be the same
	return tfm.Encrypt(dst, src, iv[:m.ivSize])
}

func (m *lmkMode) decrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error {
	s := getDataScratch()
	defer putDataScratch(s)
	iv := (*[16]byte)(s.iv[:16])
	if err := tfm.Decrypt(dst, src, s.zero[:m.ivSize]); err != nil {
		return err
	}
	m.iv(iv, dst, ivSector)
	subtle.XORBytes(dst[:m.ivSize], dst[:m.ivSize], iv[:m.ivSize])
	return nil
}

func (m *lmkMode) wipe() {
	if m.seed != nil {
		clear(m.seed[:])
	}
}

// MD5 compression function (RFC 1321), kept here because crypto/md5 does
// not hand out its chaining state, which is what lmk uses as the IV.

var md5Init = [4]uint32{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}

var md5K = [64]uint32{
	0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
	0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
	0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
	0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
	0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
	0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
	0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
	0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
}

var md5S = [16]int{7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21}

// md5Block runs the compression function over one 64-byte block.
func md5Block(st *[4]uint32, p []byte) {
	var x [16]uint32
	for i := range x {
		x[i] = binary.LittleEndian.Uint32(p[4*i:])
	}
	a, b, c, d := st[0], st[1], st[2], st[3]
	for i := 0; i < 16; i++ {
		f := b&c | ^b&d
		a, b, c, d = d, b+bits.RotateLeft32(f+a+md5K[i]+x[i], md5S[i&3]), b, c
	}
	for i := 16; i < 32; i++ {
		f := d&b | ^d&c
		a, b, c, d = d, b+bits.RotateLeft32(f+a+md5K[i]+x[(5*i+1)&15], md5S[4+i&3]), b, c
	}
	for i := 32; i < 48; i++ {
		f := b ^ c ^ d
		a, b, c, d = d, b+bits.RotateLeft32(f+a+md5K[i]+x[(3*i+5)&15], md5S[8+i&3]), b, c
	}
	for i := 48; i < 64; i++ {
		f := c ^ (b | ^d)
		a, b, c, d = d, b+bits.RotateLeft32(f+a+md5K[i]+x[(7*i)&15], md5S[12+i&3]), b, c
	}
	st[0] += a
	st[1] += b
	st[2] += c
	st[3] += d
}
